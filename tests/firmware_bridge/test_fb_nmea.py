"""NMEA decoder: the three real receiver logs, the receiver quirks of docs/protocols.md ("NMEA GPS"), and fuzzing.

Readings come one per receiver epoch: a test that feeds one epoch calls ``finish()`` (the end of the
stream) or feeds the next epoch's first sentence to get its reading."""

from __future__ import annotations

import math

import pynmea2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_bridge.nmea import MAX_LINE, NmeaDecoder, nmea_checksum
from firmware_bridge.readings import GpsFix, GpsNoFix

LOGS = ("garmin15x.log", "gr8013-w.log", "ublox-lea-5q.log")


def _lines(path):
    return [ln for ln in path.read_bytes().splitlines() if ln.strip() and not ln.startswith(b"#")]


def _with_cs(body: str) -> str:
    return f"{body}*{nmea_checksum(body[1:]):02X}"


def _decode_all(dec, lines, t=0.0):
    """Every reading of ``lines``, the last epoch closed by ``finish()``."""
    return [r for ln in lines for r in dec.decode(ln, t)] + dec.finish(t)


def _one(line, t=0.0):
    """The reading of a one-sentence epoch (None when the sentence is rejected or carries no fix data)."""
    out = _decode_all(NmeaDecoder(), [line], t)
    assert len(out) <= 1
    return out[0] if out else None


@pytest.mark.parametrize("name", LOGS)
def test_real_logs_every_line_accounted_and_fixes_match(dev_data, name):
    lines = _lines(dev_data / "nmea" / name)
    dec = NmeaDecoder()
    out = _decode_all(dec, lines)
    s = dec.stats
    assert s.lines == len(lines)
    assert s.used + s.ignored + s.bad_total == s.lines
    fixes = [o for o in out if isinstance(o, GpsFix)]
    assert len(fixes) == s.fixes and s.fixes + s.no_fix == len(out)
    # Independent expectation: each epoch's GGA with quality > 0 is a fix at pynmea2's own position.
    expected = []
    for ln in lines:
        msg = pynmea2.parse(ln.decode())
        if isinstance(msg, pynmea2.GGA) and msg.gps_qual and int(msg.gps_qual) > 0:
            expected.append((msg.latitude, msg.longitude, int(msg.gps_qual)))
    gga_fixes = [f for f in fixes if f.source == "GGA"]
    assert [(round(f.latitude_deg, 9), round(f.longitude_deg, 9), f.quality) for f in gga_fixes] == \
        [(round(a, 9), round(b, 9), q) for a, b, q in expected]
    for f in fixes:
        assert not (f.latitude_deg == 0.0 and f.longitude_deg == 0.0)
        assert f.quality > 0


def test_real_log_details(dev_data):
    dec = NmeaDecoder()
    out = _decode_all(dec, _lines(dev_data / "nmea" / "gr8013-w.log"))
    fix = [o for o in out if isinstance(o, GpsFix) and o.source == "GGA"][0]
    assert fix.talker == "GN" and fix.satellites == 12 and fix.hdop == pytest.approx(0.93)
    assert fix.altitude_m == pytest.approx(62.6)
    assert fix.utc.isoformat() == "2015-06-19T18:11:41+00:00"
    # The receiver sends GST after GGA in the same epoch: every fix, the first too, has its epoch's GST.
    assert fix.covariance_type == 2 and fix.covariance_enu_m2 == pytest.approx((1.9 ** 2, 4.7 ** 2, 5.3 ** 2))
    later = [o for o in out if isinstance(o, GpsFix) and o.source == "GGA"][1]
    assert later.covariance_type == 2
    # Speed from this epoch's RMC then VTG (0.049 km/h), both sent before the GGA.
    assert later.speed_mps == pytest.approx(0.049 / 3.6)

    dec = NmeaDecoder()
    out = _decode_all(dec, _lines(dev_data / "nmea" / "ublox-lea-5q.log"))
    assert dec.stats.fixes == 0 and dec.stats.no_fix > 0
    assert all(not isinstance(o, GpsFix) for o in out)


GGA = "$GPGGA,113258,3238.9148,N,10822.4466,W,2,08,1.1,1577.4,M,-24.6,M,,*4D"


def test_quirk_all_empty_no_sky_sentence_is_no_fix():
    dec = NmeaDecoder()
    r = dec.decode_line("$GPGGA,,,,,,0,,,,,,,,*66", 1.0)  # a no-fix is reported at once
    assert isinstance(r, GpsNoFix) and dec.stats.no_fix == 1 and r.reason == "gga_invalid"


def test_quirk_stream_starting_mid_sentence_and_cold_boot_garbage():
    dec = NmeaDecoder()
    data = b"3.4,M,-24.6,M,,*4D\r\n\x00\x00\xff\xfe garbage\r\n\x00\x00" + GGA.encode() + b"\r\n"
    out = dec.feed(data, 2.0) + dec.finish(3.0)
    assert len(out) == 1 and isinstance(out[0], GpsFix) and out[0].t_mono_s == 2.0
    assert dec.stats.bad_total == 2


def test_quirk_six_digit_time_one_digit_and_zero_checksums():
    r = _one(GGA)
    assert r.utc_time.isoformat() == "11:32:58+00:00"
    # Find bodies whose checksum is < 16 (one digit) and exactly 0 ("*00" that is valid).
    base = "$GPGGA,113258,3238.9148,N,10822.4466,W,1,08,1.1,1577.4,M,-24.6,M,,"
    found = {}
    alnum = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in "*$,!"]
    for extra in (a + b for a in alnum for b in alnum):
        body = base + extra  # the (unchecked) reference station id field
        cs = nmea_checksum(body[1:])
        if cs < 16 and "one" not in found:
            found["one"] = f"{body}*{cs:X}"
        if cs == 0 and "zero" not in found:
            found["zero"] = f"{body}*00"
    assert len(found) == 2
    for line in found.values():
        assert isinstance(_one(line), GpsFix), line


def test_quirk_truncated_sentence_with_valid_checksum():
    r = _one(_with_cs("$GPGGA,113258,3238.9148,N,10822.4466,W,2,08,1.1"))
    assert isinstance(r, GpsFix) and r.altitude_m is None and r.hdop == pytest.approx(1.1)
    dec = NmeaDecoder()
    assert _decode_all(dec, [_with_cs("$GPGGA,113258,3238.9148,N")]) == []
    assert dec.stats.bad == {"field": 1}


def test_quirk_wrong_checksum_counted_or_tolerated_by_type():
    bad = GGA[:-2] + "00"
    dec = NmeaDecoder()
    assert dec.decode_line(bad, 0.0) is None and dec.stats.bad == {"checksum": 1}
    tolerant = NmeaDecoder(ignore_checksum_for=["GGA"])
    assert [type(r) for r in _decode_all(tolerant, [bad])] == [GpsFix]


def test_void_rmc_and_zero_position_never_reported():
    dec = NmeaDecoder()
    assert isinstance(dec.decode_line("$GPRMC,001902.00,V,,,,,,,020211,,,N*77", 0.0), GpsNoFix)
    r = dec.decode_line(_with_cs("$GPGGA,113258,,,,,1,08,1.1,,,,,,"), 0.0)
    assert r.__class__ is GpsNoFix and r.reason == "no_position"


def test_bad_fields_and_talkers_are_counted_not_raised():
    dec = NmeaDecoder()
    for body in ("$GPGGA,113258,9938.9148,N,10822.4466,W,1,08,1.1,,,,,,",   # latitude > 90
                 "$GPGGA,113258,3238.9148,X,10822.4466,W,1,08,1.1,,,,,,",   # bad hemisphere
                 "$GPGGA,256199,3238.9148,N,10822.4466,W,1,08,1.1,,,,,,",   # bad time
                 "$GPGGA,113258,3238.9148,N,10822.4466,W,one,08,1.1,,,,,,",
                 "$XXGGA,113258,3238.9148,N,10822.4466,W,1,08,1.1,,,,,,",
                 "$GPRMC,113258,A,3238.9148,N,10822.4466,W,005.3,247.1,181399,009.3,E"):
        assert dec.decode_line(_with_cs(body), 0.0) is None, body
    assert dec.decode_line("$GPGGA,113258*zz", 0.0) is None
    assert dec.decode_line(GGA[:-3], 0.0) is None  # no checksum
    assert dec.stats.bad_total == 8
    assert set(dec.stats.bad) >= {"field", "checksum_format", "no_checksum"}


def test_rmc_only_stream_gives_fixes_with_date_speed_course():
    dec = NmeaDecoder()
    rmc = "$GPRMC,113258,A,3238.9148,N,10822.4466,W,005.3,247.1,181022,009.3,E*6B"
    assert dec.decode(rmc, 4.0) == []  # the first epoch: whether a GGA of the same time follows is unknown
    out = dec.decode(rmc.replace("113258", "113259")[:-3] + "*6A", 5.0)
    # the next epoch's RMC closes the first one; the receiver's cycle (one RMC) is learned, so the
    # second epoch is complete at once
    assert [type(o) for o in out] == [GpsFix, GpsFix] and [o.t_mono_s for o in out] == [4.0, 5.0]
    r = out[0]
    assert isinstance(r, GpsFix) and r.source == "RMC"
    assert r.speed_mps == pytest.approx(5.3 * 1852 / 3600) and r.course_deg == pytest.approx(247.1)
    assert r.utc.isoformat() == "2022-10-18T11:32:58+00:00"
    assert r.latitude_deg == pytest.approx(32 + 38.9148 / 60) and r.longitude_deg == pytest.approx(
        -(108 + 22.4466 / 60)
    )


def test_gst_becomes_enu_covariance_and_expires():
    dec = NmeaDecoder(max_age_s=1.0)
    dec.decode_line(_with_cs("$GNGST,181141.00,46,,,,4.7,1.9,5.3"), 0.0)
    assert dec.decode_line(GGA, 0.5) is None  # the epoch is open
    f = dec.finish(0.6)[0]
    assert f.covariance_type == 2 and f.covariance_enu_m2 == pytest.approx((1.9 ** 2, 4.7 ** 2, 5.3 ** 2))
    # a later epoch without GST: the last one is attached while it is fresh (max_age_s), then HDOP is used
    def gga(hhmmss):
        return _with_cs(f"$GPGGA,{hhmmss},3238.9148,N,10822.4466,W,2,08,1.1,1577.4,M,-24.6,M,,")

    f = _decode_all(dec, [gga("113259")], 0.9)[0]
    assert f.covariance_type == 2
    f = _decode_all(dec, [gga("113300")], 3.0)[0]
    assert f.covariance_type == 1 and f.covariance_enu_m2[0] == pytest.approx((1.1 * 0.1) ** 2)
    assert dec.stats.bad_total == 0


def test_overlong_line_without_newline_is_dropped():
    dec = NmeaDecoder()
    dec.feed(b"$" + b"A" * (MAX_LINE * 3), 0.0)
    assert dec._splitter.overlong == 1
    out = dec.feed(b"\r\n" + GGA.encode() + b"\r\n", 0.0) + dec.finish(0.0)
    assert [type(r) for r in out] == [GpsFix]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=120),
                          st.sampled_from([GGA.encode(), b"\r\n", b"$GPGGA,,,,,,0,,,,,,,,*66\r\n",
                                           b"$GPRMC,1,A,1,N,1,E,,,,,,*00\r\n", b"*", b"$GP"])), max_size=30))
def test_fuzz_no_exception_bounded_buffer(chunks):
    dec = NmeaDecoder()
    for c in chunks + [None]:
        for r in (dec.feed(c, 0.0) if c is not None else dec.finish(0.0)):
            assert isinstance(r, (GpsFix, GpsNoFix))
            if isinstance(r, GpsFix):
                assert -90 <= r.latitude_deg <= 90 and -180 <= r.longitude_deg <= 180
                assert all(math.isfinite(v) for v in r.covariance_enu_m2)
        assert len(dec._splitter._tail) <= MAX_LINE


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80))
def test_fuzz_valid_checksum_arbitrary_fields(fields):
    for kind in ("GPGGA", "GPRMC", "GNGST", "GPVTG", "GPHDT", "GNZDA", "GNGNS", "GPGLL", "GNGSA"):
        dec = NmeaDecoder()
        out = _decode_all(dec, [_with_cs(f"${kind},{fields}".replace("*", ""))])
        assert len(out) <= 1 and all(isinstance(r, (GpsFix, GpsNoFix)) for r in out)
        assert dec.stats.bad.get("internal", 0) == 0


def test_utc_date_rolls_over_at_midnight_before_the_next_rmc():
    dec = NmeaDecoder()
    dec.decode_line(_with_cs("$GPRMC,235959.50,A,3238.9148,N,10822.4466,W,0.0,0.0,311225,,,A"), 0.0)
    dec.decode_line(_with_cs("$GPGGA,235959.50,3238.9148,N,10822.4466,W,1,08,1.1,1.0,M,0.0,M,,"), 0.0)
    # the GGA after midnight closes the first epoch (no RMC of its own follows before the end)
    f = dec.decode_line(_with_cs("$GPGGA,000000.50,3238.9148,N,10822.4466,W,1,08,1.1,1.0,M,0.0,M,,"), 0.5)
    assert f.utc.isoformat() == "2025-12-31T23:59:59.500000+00:00" and f.source == "GGA"
    f = dec.finish(0.6)[0]
    assert f.utc.isoformat() == "2026-01-01T00:00:00.500000+00:00"
