"""Microstrain MIP binary protocol (3DM-GX5 class IMUs): pure packet codec.

Packet (MIP DCP, "Data Communications Protocol" manuals of the 3DM-GX4/GX5)::

    0x75 0x65 descriptor_set payload_len  field... ck1 ck2
    field = field_len field_desc data[field_len - 2]
    (ck1, ck2) = Fletcher-16 over every byte before them (sync bytes included)

Numbers are big-endian. Used here: command set 0x01 (ping 0x01, set-to-idle 0x02, resume 0x06),
3DM command set 0x0C ("IMU message format" 0x08: which IMU fields to stream at which decimation of
the base rate); every reply carries an ACK/NACK field 0xF1 = echoed command descriptor + error
code. IMU data set 0x80
(scaled accelerometer 0x04 in g, scaled gyro 0x05 in rad/s, scaled magnetometer 0x06 in gauss, each
3 x float32). The device's sensor frame is x forward, y right, z down; :func:`packet_to_reading`
converts to REP-103 (x forward, y left, z up) and SI units (m/s^2, rad/s, tesla).

:func:`decode_packet` never raises on wire bytes; it resynchronises on the next 0x75 0x65.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import NamedTuple

from firmware_bridge.readings import ImuReading

__all__ = [
    "SYNC", "SET_BASE", "SET_IMU_DATA", "CMD_PING", "CMD_IDLE", "CMD_RESUME", "FIELD_ACK",
    "IMU_ACCEL", "IMU_GYRO", "IMU_MAG", "MipPacket", "fletcher16", "encode_packet", "decode_packet",
    "PacketDecoder", "command", "ack", "imu_data", "packet_to_reading", "ack_of", "SET_3DM",
    "CMD_IMU_FORMAT", "imu_format", "parse_imu_format",
]

SYNC = b"\x75\x65"
SET_BASE = 0x01
SET_3DM = 0x0C
CMD_IMU_FORMAT = 0x08
SET_IMU_DATA = 0x80
CMD_PING, CMD_IDLE, CMD_RESUME = 0x01, 0x02, 0x06
FIELD_ACK = 0xF1
IMU_ACCEL, IMU_GYRO, IMU_MAG = 0x04, 0x05, 0x06
STANDARD_GRAVITY_MPS2 = 9.80665  # the device's "g" (CODATA standard gravity)
GAUSS_T = 1e-4

_V3 = struct.Struct(">3f")


class MipPacket(NamedTuple):
    """A MIP packet: descriptor set and its fields as ``(field_desc, data)`` pairs."""

    descriptor_set: int
    fields: tuple


def fletcher16(data: bytes) -> tuple[int, int]:
    """MIP checksum: ``ck1 = sum(bytes) mod 256``, ``ck2 = sum of the running ck1 values mod 256``."""
    a = b = 0
    for x in data:
        a = (a + x) & 0xFF
        b = (b + a) & 0xFF
    return a, b


def encode_packet(descriptor_set: int, fields) -> bytes:
    """Build a packet from ``(field_desc, data)`` pairs.

    Raises
    ------
    ValueError
        If a field is longer than 253 bytes or the payload longer than 255 bytes.
    """
    payload = bytearray()
    for desc, data in fields:
        if len(data) > 253:
            raise ValueError(f"MIP field 0x{desc:02X} too long: {len(data)} bytes")
        payload += bytes((len(data) + 2, desc)) + bytes(data)
    if len(payload) > 255:
        raise ValueError(f"MIP payload too long: {len(payload)} bytes")
    body = SYNC + bytes((descriptor_set, len(payload))) + bytes(payload)
    return body + bytes(fletcher16(body))


def _scan(buf, start: int, end: int):
    avail = end - start
    if avail <= 0:
        return 0, None, None
    if buf[start] != 0x75:
        i = buf.find(b"\x75", start, end)
        return (avail if i < 0 else i - start), None, "garbage"
    if avail < 2:
        return 0, None, None
    if buf[start + 1] != 0x65:
        return 1, None, "garbage"
    if avail < 4:
        return 0, None, None
    n = buf[start + 3]
    total = 4 + n + 2
    if avail < total:
        return 0, None, None
    body = bytes(buf[start:start + 4 + n])
    if fletcher16(body) != (buf[start + 4 + n], buf[start + 5 + n]):
        return 1, None, "checksum"
    fields, i = [], 4
    while i < len(body):
        flen = body[i]
        if flen < 2 or i + flen > len(body):
            return total, None, "field_structure"
        fields.append((body[i + 1], body[i + 2:i + flen]))
        i += flen
    return total, MipPacket(body[2], tuple(fields)), None


def decode_packet(buf: bytes | bytearray) -> tuple[int, MipPacket | None]:
    """Same contract as :func:`firmware_bridge.rosserial.decode_frame`: ``(0, None)`` need more bytes,
    ``(k, None)`` drop ``k`` bytes, ``(k, packet)``. Never raises on the content of ``buf``."""
    consumed, pkt, _ = _scan(buf, 0, len(buf))
    return consumed, pkt


@dataclasses.dataclass
class PacketStats:
    packets: int = 0
    dropped_bytes: int = 0
    errors: dict = dataclasses.field(default_factory=dict)


class PacketDecoder:
    """Stateful MIP deframer (bounded buffer: at most one maximal packet of 261 bytes plus a chunk)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.stats = PacketStats()

    def feed(self, data: bytes) -> list[MipPacket]:
        buf = self._buf
        buf += data
        out, pos, end = [], 0, len(buf)
        while pos < end:
            consumed, pkt, reason = _scan(buf, pos, end)
            if consumed == 0:
                break
            pos += consumed
            if pkt is not None:
                out.append(pkt)
            else:
                self.stats.dropped_bytes += consumed
                self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1
        del buf[:pos]
        self.stats.packets += len(out)
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def clear(self) -> None:
        self._buf.clear()


def command(cmd_desc: int, data: bytes = b"", *, descriptor_set: int = SET_BASE) -> bytes:
    """A command packet (default: a base-set command without arguments: ping, set-to-idle, resume)."""
    return encode_packet(descriptor_set, [(cmd_desc, data)])


def ack(cmd_desc: int, error_code: int = 0, *, descriptor_set: int = SET_BASE) -> bytes:
    """The device's reply to a command (0 = ACK, else NACK with that error code)."""
    return encode_packet(descriptor_set, [(FIELD_ACK, bytes((cmd_desc, error_code)))])


def ack_of(pkt: MipPacket) -> tuple[int, int, int] | None:
    """``(descriptor set, echoed command, error code)`` if ``pkt`` is an ACK/NACK reply, else None."""
    if pkt.descriptor_set >= 0x80:  # data sets carry no replies
        return None
    for desc, data in pkt.fields:
        if desc == FIELD_ACK and len(data) == 2:
            return pkt.descriptor_set, data[0], data[1]
    return None


def imu_format(decimation: int, fields=(IMU_ACCEL, IMU_GYRO, IMU_MAG)) -> bytes:
    """"IMU message format" command (3DM set 0x0C, 0x08, function 1 = use new settings): stream
    ``fields`` at the IMU base rate divided by ``decimation``.

    Raises
    ------
    ValueError
        If ``decimation`` is not in 1..65535 or ``fields`` is empty.
    """
    if not 1 <= decimation <= 0xFFFF or not fields:
        raise ValueError(f"IMU format needs fields and a decimation in 1..65535, got {fields}, {decimation}")
    data = bytes((1, len(fields))) + b"".join(struct.pack(">BH", d, decimation) for d in fields)
    return command(CMD_IMU_FORMAT, data, descriptor_set=SET_3DM)


def parse_imu_format(data: bytes) -> tuple[int, list]:
    """Inverse of :func:`imu_format`'s field data: ``(function, [(field, decimation), ...])``.

    Raises
    ------
    ValueError
        If the length does not match the descriptor count.
    """
    if len(data) < 2 or len(data) != 2 + 3 * data[1]:
        raise ValueError(f"IMU message format: {len(data)} bytes do not match its descriptor count")
    return data[0], [struct.unpack_from(">BH", data, 2 + 3 * i) for i in range(data[1])]


def imu_data(accel_g=None, gyro_radps=None, mag_gauss=None) -> bytes:
    """An IMU data packet (sensor frame: x forward, y right, z down) with the given fields."""
    fields = [(d, _V3.pack(*v)) for d, v in ((IMU_ACCEL, accel_g), (IMU_GYRO, gyro_radps), (IMU_MAG, mag_gauss))
              if v is not None]
    return encode_packet(SET_IMU_DATA, fields)


def _flu(v: tuple, scale: float) -> tuple:
    return (v[0] * scale, -v[1] * scale, -v[2] * scale)  # FRD sensor frame -> FLU (REP-103)


def packet_to_reading(pkt: MipPacket, t_mono_s: float, *, frame_id: str = "imu_link") -> ImuReading | None:
    """IMU data packet -> :class:`ImuReading` in REP-103 axes and SI units; None for other packets or
    packets whose fields have the wrong size (no exception: wire data). A field holding a NaN or an infinity
    is left out (None), as if the device had not sent it."""
    if pkt.descriptor_set != SET_IMU_DATA:
        return None
    vals = {}
    for desc, data in pkt.fields:
        if desc in (IMU_ACCEL, IMU_GYRO, IMU_MAG) and len(data) == 12:
            v = _V3.unpack(data)
            if all(math.isfinite(x) for x in v):
                vals[desc] = v
    if not vals:
        return None
    return ImuReading(
        t_mono_s, frame_id,
        angular_velocity_radps=_flu(vals[IMU_GYRO], 1.0) if IMU_GYRO in vals else None,
        linear_acceleration_mps2=_flu(vals[IMU_ACCEL], STANDARD_GRAVITY_MPS2) if IMU_ACCEL in vals else None,
        magnetic_field_t=_flu(vals[IMU_MAG], GAUSS_T) if IMU_MAG in vals else None,
        source="mip")
