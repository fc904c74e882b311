"""Frame isolation where bytes come in: a malformed or overflowing frame is counted and skipped, and the
frames after it in the same chunk are handled (the hardware e-stop always latches); the fuzz harness of
every decoder with a fixed seed and a bounded count (``robot-app bench fuzz`` runs it at length)."""

from __future__ import annotations

import logging
import math
import types

import pytest

from firmware_bridge import ros1
from firmware_bridge.faults import InputFaults
from firmware_bridge.fuzz import TARGETS, _handshaken_base, fuzz
from firmware_bridge.mip import IMU_ACCEL, IMU_GYRO, SET_IMU_DATA, MipPacket, packet_to_reading
from firmware_bridge.nmea import NmeaDecoder, nmea_checksum
from firmware_bridge.readings import BaseStatus, GpsFix
from firmware_bridge.ros2.sensors import navsatfix_to_reading
from firmware_bridge.rosserial import FrameDecoder, encode_frame


def _sentence(body: str) -> str:
    return f"{body}*{nmea_checksum(body[1:]):02X}"


GST_HUGE = _sentence("$GPGST,172814.0,0.006,0.023,0.020,273.6,1e200,1e200,0.031")
GGA = _sentence("$GPGGA,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,")
GGA_NEXT = _sentence("$GPGGA,123520.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,")  # the next epoch
STOP = ros1.Status(ros1.Header(1, 1, 0, ""), "mcu", (1, 0), (1, 0), True, True, True,
                   26.0, 12.0, 5.0, 1.0, 0.2, 1.5, 2.7, 5.0, 10.0)


def test_a_gst_with_huge_sigmas_is_counted_and_the_gga_after_it_is_a_fix():
    dec = NmeaDecoder()
    out = dec.feed(f"{GST_HUGE}\r\n{GGA}\r\n".encode(), 10.0) + dec.finish(10.0)  # finish: end of the epoch
    assert [type(r) for r in out] == [GpsFix]
    assert math.isfinite(out[0].covariance_enu_m2[0]) and out[0].hdop == 0.9
    assert dec.stats.bad == {"field": 1}


@pytest.mark.parametrize("field,value", [("hdop", "1e200"), ("hdop", "100.5"), ("altitude", "1e300"),
                                         ("satellites", "1e300")])
def test_out_of_range_numbers_make_the_sentence_bad_not_an_exception(field, value):
    fields = "$GPGGA,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,".split(",")
    fields[{"hdop": 8, "altitude": 9, "satellites": 7}[field]] = value
    dec = NmeaDecoder()
    assert dec.feed((_sentence(",".join(fields)) + "\r\n").encode(), 1.0) == []
    assert dec.stats.bad == {"field": 1}


def test_an_absurd_rmc_speed_is_dropped_and_the_position_kept():
    dec = NmeaDecoder()
    rmc = _sentence("$GPRMC,123519,A,4807.038,N,01131.000,E,1e300,999.0,230394,003.1,W")
    out = dec.feed((rmc + "\r\n").encode(), 1.0) + dec.finish(1.0)  # an RMC-only epoch
    assert len(out) == 1 and out[0].speed_mps is None and out[0].course_deg is None
    assert out[0].latitude_deg == pytest.approx(48.1173)


def test_mcu_chunk_gst_gga_status_latches_the_estop_and_publishes_the_fix():
    """The break-it finding: [GST 1e200, GGA, Status(stop)] in one read left the e-stop unlatched."""
    base, ids = _handshaken_base()
    hdr = ros1.Header(1, 1, 0, "gps")
    chunk = (encode_frame(ids["navsat/nmea_sentence"], ros1.Sentence(hdr, GST_HUGE).serialize())
             + encode_frame(ids["navsat/nmea_sentence"], ros1.Sentence(hdr, GGA).serialize())
             + encode_frame(ids["navsat/nmea_sentence"], ros1.Sentence(hdr, GGA_NEXT).serialize())  # closes GGA's epoch
             + encode_frame(ids["status"], STOP.serialize()))
    base._on_bytes(chunk, 5.0)
    assert base.estop_latched
    assert base.latest(BaseStatus).estop_stopped
    assert base.latest(GpsFix) is not None


def test_a_frame_whose_handler_fails_is_skipped_and_the_next_frame_is_handled():
    base, ids = _handshaken_base()
    no_drivers = ros1.Feedback(ros1.Header(1, 1, 0, "base_link"), (), 35.0, 40.0, 1, 1)  # handler indexes 2 drivers
    chunk = encode_frame(ids["feedback"], no_drivers.serialize()) + encode_frame(ids["status"], STOP.serialize())
    base._on_bytes(chunk, 1.0)
    assert base.estop_latched
    assert base.frame_errors == {"feedback": 1}


def test_a_damaged_frame_whose_checksum_matches_by_chance_does_not_swallow_the_estop():
    """A frame that lost bytes on the wire claims a length that covers the Status frame after it; its 8-bit
    checksum is made to match (what happens 1 time in 256). The Status frame inside it must still latch."""
    base, ids = _handshaken_base()
    imu = ros1.Imu(ros1.Header(1, 1, 0, "imu_link"))
    payload = imu.serialize()
    stop = encode_frame(ids["status"], STOP.serialize())
    n = len(payload)
    kept = payload[: n - len(stop) - 10]         # the payload lost its tail; the Status frame follows it
    filler = bytes(n - len(kept) - len(stop))   # the bytes after the Status frame that the length claims
    tid = ids["imu/data_raw"]
    body_sum = (tid & 0xFF) + (tid >> 8) + sum(kept) + sum(stop) + sum(filler[:-1])
    filler = filler[:-1] + bytes(((255 - body_sum) % 256,))  # last claimed byte: payload sum made to match
    chk = 255 - ((tid & 0xFF) + (tid >> 8) + sum(kept + stop + filler)) % 256
    header = bytes((0xFF, 0xFE, n & 0xFF, n >> 8, 255 - ((n & 0xFF) + (n >> 8)) % 256, tid & 0xFF, tid >> 8))
    false_frame = header + kept + stop + filler + bytes((chk,))
    assert FrameDecoder().feed(false_frame)[0].topic_id == tid  # without the host's checks it is a frame
    base._on_bytes(false_frame, 1.0)
    assert base.estop_latched


def test_input_faults_count_everything_and_log_once_per_interval(caplog):
    now = [0.0]
    faults = InputFaults("dev", logging.getLogger("test.faults"), interval_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.faults"):
        for k in range(50):
            now[0] = k * 0.1
            faults.record("status", "bad")
        faults.record("feedback", "bad")
        now[0] = 10.5
        faults.record("status", "again")
    assert faults.counts == {"status": 51, "feedback": 1} and faults.total == 52
    assert faults.logged == 3
    assert "skipped 50 malformed status frame(s)" in caplog.text  # the second warning sums the quiet ones


def test_mip_fields_with_nan_or_inf_are_left_out():
    import struct

    pkt = MipPacket(SET_IMU_DATA, ((IMU_ACCEL, struct.pack(">3f", math.nan, 0.0, 1.0)),
                                   (IMU_GYRO, struct.pack(">3f", 0.1, 0.2, 0.3))))
    r = packet_to_reading(pkt, 1.0)
    assert r.linear_acceleration_mps2 is None and r.angular_velocity_radps == pytest.approx((0.1, -0.2, -0.3))


def test_navsatfix_stamp_past_year_9999_has_no_utc():
    ns = types.SimpleNamespace
    msg = ns(header=ns(stamp=ns(sec=253402300800, nanosec=0)), status=ns(status=0), latitude=1.0, longitude=2.0,
             altitude=3.0, position_covariance=[1.0] * 9, position_covariance_type=2)
    fix = navsatfix_to_reading(msg, 1.0)
    assert fix.utc is None and fix.latitude_deg == 1.0


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzzed_input_never_escapes_a_decoder(target):
    rep = fuzz(target, count=4000, seed=20261204)
    assert rep.inputs == 4000
    assert rep.ok, rep.as_dict()
    if target == "rosserial":
        assert rep.estop_checked == 4000 and rep.estop_missed == 0


def test_bench_fuzz_cli(capsys):
    from robot_app.cli import main

    assert main(["bench", "fuzz", "--targets", "nmea,mip", "--count", "200", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert [r["target"] for r in out] == ["nmea", "mip"] and all(r["ok"] and r["inputs"] == 200 for r in out)
    assert main(["bench", "fuzz", "--targets", "nmea,bogus"]) == 2
    assert "bogus" in capsys.readouterr().err
