"""Mutation fuzzing of every decoder that reads bytes or samples from a device.

``robot-app bench fuzz`` runs it at length; the test suite runs it with a fixed seed and a bounded count.
Each target starts from well-formed input (sentences and frames as the devices send them), mutates it
(bit flips, cut, repeated and inserted bytes, field values replaced by extreme numbers with the checksum
recomputed so that the value reaches the handlers, frames spliced together) and feeds it to the same code
the drivers run on received bytes:

- ``nmea``: :meth:`firmware_bridge.nmea.NmeaDecoder.feed` (serial GPS, the MCU's ``navsat/nmea_sentence``).
- ``rosserial``: :meth:`firmware_bridge.base.JackalBase._on_bytes` after a handshake; every input ends with
  a jackal_msgs/Status frame reporting the hardware e-stop pressed, and the e-stop must be latched after
  the chunk, whatever came before it.
- ``mip``: :meth:`firmware_bridge.imu.MipImu._on_bytes` (Microstrain IMU packets).
- ``dds``: the ROS 2 drivers' sample handlers (NavSatFix, Imu, Odometry, BatteryState, e-stop) on
  samples with NaN, infinite and huge field values.

A report counts inputs, exceptions that escaped the decoder (must be 0), decoder failures that were caught
but counted as ``internal`` (a bug; must be 0) and, for ``rosserial``, e-stop frames that did not latch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
import types
from typing import Callable

__all__ = ["FuzzReport", "TARGETS", "fuzz"]

EXTREME_NUMBERS = ("1e200", "-1e200", "1e308", "1e400", "nan", "inf", "-inf", "99999999999999999999999",
                   "-0", "0", "", "1.5.3", "4294967296", "-2147483649", "0x10", "1e-320", "360.0001", "9" * 400)

# Well-formed sentences as receivers send them (bodies without checksum; several talkers and firmware).
_NMEA_BODIES = (
    "$GPGGA,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,",
    "$GNGGA,001043.00,4404.14036,N,12118.85961,W,2,12,0.98,1113.0,M,-21.3,M,,",
    "$GPGGA,235959.999,3751.6500,S,14507.3600,E,4,20,0.6,12.0,M,,M,1.0,0000",
    "$GPGGA,,,,,,0,00,99.99,,,,,,",
    "$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W",
    "$GNRMC,001031.00,A,4404.13993,N,12118.86023,W,0.146,,100117,,,A",
    "$GPRMC,235959.50,V,,,,,,,311299,,,N",
    "$GNGNS,014035.00,4332.69262,S,17235.48549,E,RR,13,0.9,25.63,11.24,,",
    "$GPGST,172814.0,0.006,0.023,0.020,273.6,0.023,0.020,0.031",
    "$GPVTG,054.7,T,034.4,M,005.5,N,010.2,K,A",
    "$HEHDT,274.07,T",
    "$GPZDA,201530.00,04,07,2002,00,00",
    "$GPGSA,A,3,04,05,,09,12,,,24,,,,,2.5,1.3,2.1",
    "$GPGSV,2,1,08,01,40,083,46,02,17,308,41,12,07,344,39,14,22,228,45",
    "$GPGLL,4916.45,N,12311.12,W,225444,A,A",
)


@dataclasses.dataclass
class FuzzReport:
    """What one target did with ``inputs`` fuzzed inputs (see the module docstring)."""

    target: str
    seed: int
    inputs: int
    escaped: int = 0
    internal: int = 0
    estop_checked: int = 0
    estop_missed: int = 0
    seconds: float = 0.0
    examples: list = dataclasses.field(default_factory=list)  # up to 5 failing inputs, repr'd

    @property
    def ok(self) -> bool:
        return self.escaped == 0 and self.internal == 0 and self.estop_missed == 0

    def _fail(self, what: str, data) -> None:
        if len(self.examples) < 5:
            self.examples.append(f"{what}: {data!r}"[:400])

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        d["inputs_per_s"] = round(self.inputs / self.seconds) if self.seconds > 0 else None
        return d


# -- mutations --------------------------------------------------------------------------------------
def _mutate_bytes(rng: random.Random, data: bytes, n_ops: int = 3) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, n_ops)):
        op = rng.randrange(7)
        i = rng.randrange(len(b) + 1) if b else 0
        if op == 0 and b:                          # flip a bit
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
        elif op == 1 and b:                        # replace a byte
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2:                              # insert random bytes
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3 and b:                        # cut
            del b[i:i + rng.randint(1, 16)]
        elif op == 4 and b:                        # repeat a slice
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 32)]
        elif op == 5:                              # interesting bytes
            b[i:i] = bytes(rng.choice((b"\x00", b"\xff", b"\xff\xfe", b"$", b"*", b",", b"\r\n", b"\x75\x65")))
        elif op == 6 and b:                        # truncate
            del b[rng.randrange(len(b)):]
    return bytes(b)


def _mutate_sentence(rng: random.Random, body: str) -> str:
    """Replace fields of a sentence body with extreme or random values; the checksum is recomputed."""
    from firmware_bridge.nmea import nmea_checksum

    fields = body.split(",")
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(1, len(fields)) if len(fields) > 1 else 0
        r = rng.random()
        if r < 0.6:
            fields[k] = rng.choice(EXTREME_NUMBERS)
        elif r < 0.8:
            fields[k] = "".join(rng.choice("0123456789.-+eENSWAV,") for _ in range(rng.randint(0, 12)))
        else:
            fields[k] = fields[k].lower()
    body = ",".join(fields)
    try:
        return f"{body}*{nmea_checksum(body[1:]):02X}"
    except UnicodeEncodeError:  # pragma: no cover - the alphabet above is ASCII
        return body


def _nmea_input(rng: random.Random) -> bytes:
    from firmware_bridge.nmea import nmea_checksum

    lines = []
    for _ in range(rng.randint(1, 4)):
        body = rng.choice(_NMEA_BODIES)
        if rng.random() < 0.6:
            line = _mutate_sentence(rng, body)
        else:
            line = f"{body}*{nmea_checksum(body[1:]):02X}"
        raw = (line + rng.choice(("\r\n", "\n", "\r", ""))).encode("ascii", "replace")
        if rng.random() < 0.4:
            raw = _mutate_bytes(rng, raw)
        lines.append(raw)
    return b"".join(lines)


# -- targets ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet(*names: str):
    """Raise the level of the decoders' loggers while fuzzing (their rate-limited warnings are counted
    anyway); restored afterwards."""
    loggers = [logging.getLogger(n) for n in names]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, old):
            lg.setLevel(lv)


def _fuzz_nmea(rng: random.Random, rep: FuzzReport, count: int) -> None:
    from firmware_bridge.nmea import NmeaDecoder

    dec = NmeaDecoder()
    t = 0.0
    for _ in range(count):
        data = _nmea_input(rng)
        t += 0.1
        try:
            dec.feed(data, t)
            dec.finish(t)
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            rep.escaped += 1
            rep._fail(type(exc).__name__, data)
            dec = NmeaDecoder()
        rep.inputs += 1
    rep.internal += dec.stats.bad.get("internal", 0)


def _robot():
    return types.SimpleNamespace(wheel_radius_m=0.098, wheel_separation_m=0.37, max_v_mps=2.0, max_accel_mps2=2.0,
                                 max_omega_radps=4.0, max_alpha_radps2=8.0, control_rate_hz=50.0, cmd_timeout_s=0.25)


def _handshaken_base():
    from firmware_bridge import ros1
    from firmware_bridge.base import DEVICE_PUBLISHERS, DEVICE_SUBSCRIBERS, JackalBase
    from firmware_bridge.rosserial import TOPIC_PUBLISHER, TOPIC_SUBSCRIBER, encode_frame

    base = JackalBase("fuzz://no-port", robot=_robot())
    ids = {}
    chunk = b""
    for k, (name, cls) in enumerate(DEVICE_PUBLISHERS.items()):
        ids[name] = 100 + k
        chunk += encode_frame(TOPIC_PUBLISHER, ros1.TopicInfo(100 + k, name, cls.TYPE, cls.MD5, 512).serialize())
    for k, (name, cls) in enumerate(DEVICE_SUBSCRIBERS.items()):
        chunk += encode_frame(TOPIC_SUBSCRIBER, ros1.TopicInfo(150 + k, name, cls.TYPE, cls.MD5, 512).serialize())
    base._on_bytes(chunk, 0.0)
    return base, ids


def _device_payloads(rng: random.Random) -> dict:
    """One well-formed payload per device topic, with random (sometimes extreme) values."""
    from firmware_bridge import ros1

    def num():
        return rng.choice((0.0, 1.5, -3.0, 1e38, -1e38, float("nan"), float("inf"), 3.4e38))

    hdr = ros1.Header(rng.randrange(2 ** 32), rng.randrange(2 ** 31), 0, rng.choice(("", "base_link", "imu_link")))
    drv = tuple(ros1.DriveFeedback(num(), num(), num(), num(), num(), num(), rng.random() < 0.5)
                for _ in range(rng.choice((2, 2, 2, 0, 1, 3))))
    line = _mutate_sentence(rng, rng.choice(_NMEA_BODIES)) if rng.random() < 0.7 else rng.choice(_NMEA_BODIES)
    return {
        "feedback": ros1.Feedback(hdr, drv, num(), num(), rng.randrange(-128, 128), rng.randrange(-128, 128)),
        "imu/data_raw": ros1.Imu(hdr, (num(), num(), num(), num()), (rng.choice((-1.0, 0.0)),) + (0.0,) * 8,
                                 (num(), num(), num()), (0.0,) * 9, (num(), num(), num()), (0.0,) * 9),
        "imu/mag": ros1.MagneticField(hdr, (num(), num(), num())),
        "navsat/nmea_sentence": ros1.Sentence(hdr, line),
        "status": ros1.Status(hdr, "x" * rng.randrange(40), (rng.randrange(2 ** 31), 0), (0, 0), rng.random() < 0.5,
                              rng.random() < 0.5, False, num(), num(), num(), num(), num(), num(), num(), num(), num()),
    }


def _fuzz_rosserial(rng: random.Random, rep: FuzzReport, count: int) -> None:
    from firmware_bridge import ros1
    from firmware_bridge.readings import BaseStatus
    from firmware_bridge.rosserial import TOPIC_LOG, TOPIC_TIME, encode_frame

    base, ids = _handshaken_base()
    stop = ros1.Status(ros1.Header(1, 1, 0, ""), "fuzz", (1, 0), (1, 0), True, True, True,
                       26.0, 12.0, 5.0, 1.0, 0.2, 1.5, 2.7, 5.0, 10.0)
    stop_frame = encode_frame(ids["status"], stop.serialize())
    good = _device_payloads(random.Random(0))
    flush = encode_frame(ids["feedback"], good["feedback"].serialize()) * 8  # > MAX_PAYLOAD: ends a false header
    names = list(ids)
    t = 1.0
    for _ in range(count):
        payloads = _device_payloads(rng)
        frames = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            name = rng.choice(names)
            payload = payloads[name].serialize()
            if r < 0.35:                      # valid frame, values as generated (extreme numbers included)
                frames.append(encode_frame(ids[name], payload))
            elif r < 0.6:                     # payload mutated, checksums recomputed: reaches the deserializer
                frames.append(encode_frame(rng.choice((ids[name], TOPIC_TIME, TOPIC_LOG)),
                                           _mutate_bytes(rng, payload, 4)[:512]))
            else:                             # wire-level damage
                frames.append(_mutate_bytes(rng, encode_frame(ids[name], payload), 4))
        data = b"".join(frames) + stop_frame
        t += 0.02
        base._estop_reason = None
        base._latest.pop(BaseStatus, None)
        try:
            base._on_bytes(data, t)
            base._on_bytes(flush, t)
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            rep.escaped += 1
            rep._fail(type(exc).__name__, data)
        rep.estop_checked += 1
        if not base.estop_latched:
            rep.estop_missed += 1
            rep._fail("e-stop not latched", data)
        rep.inputs += 1
    rep.internal += base.nmea.stats.bad.get("internal", 0)


def _fuzz_mip(rng: random.Random, rep: FuzzReport, count: int) -> None:
    import struct

    from firmware_bridge import mip
    from firmware_bridge.imu import MipImu

    imu = MipImu("fuzz://no-port")
    t = 0.0
    for _ in range(count):
        packets = []
        for _ in range(rng.randint(1, 4)):
            vals = [rng.choice((0.0, 1.0, -9.8, 1e38, float("nan"), float("inf"))) for _ in range(9)]
            fields = [(d, struct.pack(">3f", *vals[3 * k:3 * k + 3]))
                      for k, d in enumerate((mip.IMU_ACCEL, mip.IMU_GYRO, mip.IMU_MAG)) if rng.random() < 0.8]
            r = rng.random()
            if r < 0.2:
                ack = bytes((rng.randrange(256), rng.randrange(256)))
                pkt = mip.encode_packet(mip.SET_BASE, [(mip.FIELD_ACK, ack)])
            elif r < 0.5:
                fields = [(d, _mutate_bytes(rng, v, 2)[:250]) for d, v in fields]
                pkt = mip.encode_packet(mip.SET_IMU_DATA, fields)
            else:
                pkt = mip.encode_packet(mip.SET_IMU_DATA, fields)
            packets.append(_mutate_bytes(rng, pkt, 3) if rng.random() < 0.4 else pkt)
        data = b"".join(packets)
        t += 0.01
        try:
            imu._on_bytes(data, t)
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            rep.escaped += 1
            rep._fail(type(exc).__name__, data)
        rep.inputs += 1
    rep.internal += imu.faults.total


def _ns(**kw):
    return types.SimpleNamespace(**kw)


def _fuzz_dds(rng: random.Random, rep: FuzzReport, count: int) -> None:
    """The ROS 2 handlers on samples with any values (the CDR itself is Cyclone DDS's, checked by its
    own deserialiser before a sample reaches us)."""
    from firmware_bridge.ros2.base import Ros2Base
    from firmware_bridge.ros2.dds import DdsNode
    from firmware_bridge.ros2.sensors import imu_to_reading, navsatfix_to_reading

    def num():
        return rng.choice((0.0, 1.0, -1.0, 1e308, -1e308, float("nan"), float("inf"), -float("inf"), 5e-324))

    def stamp():
        return _ns(sec=rng.choice((0, 1, -1, 2 ** 31 - 1, 1_700_000_000, 253402300800)), nanosec=rng.randrange(2 ** 32))

    base = Ros2Base(DdsNode(0), robot=_robot())  # never started: the node joins no domain
    t = 0.0
    for _ in range(count):
        t += 0.02
        kind = rng.randrange(5)
        try:
            if kind == 0:
                navsatfix_to_reading(_ns(header=_ns(stamp=stamp()), status=_ns(status=rng.randrange(-2, 4)),
                                         latitude=num(), longitude=num(), altitude=num(),
                                         position_covariance=[num() for _ in range(9)],
                                         position_covariance_type=rng.randrange(256)), t)
            elif kind == 1:
                v = _ns(x=num(), y=num(), z=num())
                imu_to_reading(_ns(header=_ns(frame_id="imu"), orientation=_ns(x=num(), y=num(), z=num(), w=num()),
                                   orientation_covariance=[rng.choice((-1.0, 0.0))] + [0.0] * 8,
                                   angular_velocity=v, angular_velocity_covariance=[0.0] * 9,
                                   linear_acceleration=v, linear_acceleration_covariance=[num()] * 9), t)
            elif kind == 2:
                base._on_odom(_ns(twist=_ns(twist=_ns(linear=_ns(x=num(), y=num(), z=num()),
                                                      angular=_ns(x=num(), y=num(), z=num())))), t)
            elif kind == 3:
                base._on_battery(_ns(voltage=num(), current=num()), t)
            else:
                base._on_estop(_ns(data=rng.random() < 0.5), t)
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            rep.escaped += 1
            rep._fail(f"{type(exc).__name__} (sample kind {kind})", exc)
        rep.inputs += 1


TARGETS: dict[str, Callable] = {"nmea": _fuzz_nmea, "rosserial": _fuzz_rosserial, "mip": _fuzz_mip, "dds": _fuzz_dds}


def fuzz(target: str, *, count: int, seed: int = 0) -> FuzzReport:
    """Feed ``count`` fuzzed inputs to ``target`` (one of :data:`TARGETS`) from ``random.Random(seed)``.

    Raises
    ------
    ValueError
        For an unknown target or a count below 1.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown fuzz target {target!r}: one of {', '.join(TARGETS)}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    rep = FuzzReport(target, seed, 0)
    t0 = time.perf_counter()
    with _quiet("firmware_bridge"):
        TARGETS[target](random.Random(seed), rep, count)
    rep.seconds = round(time.perf_counter() - t0, 3)
    return rep
