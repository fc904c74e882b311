"""ROS 1 serialisation of the messages the Jackal MCU exchanges over rosserial.

Wire rules (ROS 1 serialisation, wiki.ros.org/msg and roscpp_serialization): little-endian, no
padding; ``string`` and variable arrays are prefixed with a uint32 length; fixed arrays (``T[n]``)
have no prefix; ``time``/``duration`` are two 32-bit integers (sec, nsec). Message definitions and
md5 sums are those of jackal_msgs, rosserial_msgs, sensor_msgs, nmea_msgs and std_msgs (see
docs/protocols.md, "Messages and topics"); the tests check every codec against the independent ``rosbags`` serialiser.

Each message class has ``TYPE`` (``pkg/Name``), ``MD5``, ``serialize() -> bytes`` and
``deserialize(data) -> msg``; :func:`deserialize` raises :class:`~firmware_bridge.errors.FrameError`
for a payload that is too short, too long or not UTF-8 where a string is expected.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from firmware_bridge.errors import FrameError

__all__ = [
    "Header", "Time", "TopicInfo", "Drive", "DriveFeedback", "Feedback", "Status", "Imu",
    "MagneticField", "Sentence", "Bool", "MESSAGE_TYPES",
]


class _Reader:
    __slots__ = ("data", "pos", "type")

    def __init__(self, data: bytes, type_name: str) -> None:
        self.data, self.pos, self.type = data, 0, type_name

    def unpack(self, st: struct.Struct) -> tuple:
        end = self.pos + st.size
        if end > len(self.data):
            raise FrameError(f"{self.type}: payload truncated at byte {self.pos} "
                             f"(need {st.size} more, have {len(self.data) - self.pos})")
        vals = st.unpack_from(self.data, self.pos)
        self.pos = end
        return vals

    def string(self) -> str:
        (n,) = self.unpack(_U32)
        end = self.pos + n
        if end > len(self.data):
            raise FrameError(f"{self.type}: string of {n} bytes at byte {self.pos} runs past the "
                             f"{len(self.data)}-byte payload")
        raw = self.data[self.pos:end]
        self.pos = end
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"{self.type}: string at byte {self.pos - n} is not UTF-8") from exc

    def header(self) -> "Header":
        seq, sec, nsec = self.unpack(_HDR)
        return Header(seq, sec, nsec, self.string())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise FrameError(f"{self.type}: {len(self.data) - self.pos} unexpected trailing bytes "
                             f"after a {self.pos}-byte message")


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _U32.pack(len(raw)) + raw


_U32 = struct.Struct("<I")
_HDR = struct.Struct("<III")
_TIME = struct.Struct("<II")


@dataclass(frozen=True)
class Header:
    """std_msgs/Header: ``seq``, ``stamp`` as (``sec``, ``nsec``) of the sender's clock, ``frame_id``."""

    seq: int = 0
    sec: int = 0
    nsec: int = 0
    frame_id: str = ""

    def serialize(self) -> bytes:
        return _HDR.pack(self.seq & 0xFFFFFFFF, self.sec, self.nsec) + _string(self.frame_id)


_EMPTY_HEADER = Header()


@dataclass(frozen=True)
class Time:
    """std_msgs/Time (rosserial time sync, topic 10): ``sec``, ``nsec`` (uint32)."""

    TYPE: ClassVar[str] = "std_msgs/Time"
    MD5: ClassVar[str] = "cd7166c74c552c311fbcc2fe5a7bc289"
    sec: int = 0
    nsec: int = 0

    def serialize(self) -> bytes:
        return _TIME.pack(self.sec, self.nsec)

    @classmethod
    def deserialize(cls, data: bytes) -> "Time":
        r = _Reader(data, cls.TYPE)
        msg = cls(*r.unpack(_TIME))
        r.done()
        return msg

    @classmethod
    def from_seconds(cls, t_s: float) -> "Time":
        sec = int(t_s)
        return cls(sec, min(int(round((t_s - sec) * 1e9)), 999_999_999))


_TOPICINFO = struct.Struct("<H")
_I32 = struct.Struct("<i")


@dataclass(frozen=True)
class TopicInfo:
    """rosserial_msgs/TopicInfo: one endpoint announced by the device during negotiation."""

    TYPE: ClassVar[str] = "rosserial_msgs/TopicInfo"
    MD5: ClassVar[str] = "0ad51f88fc44892f8c10684077646005"
    topic_id: int = 0
    topic_name: str = ""
    message_type: str = ""
    md5sum: str = ""
    buffer_size: int = 0

    def serialize(self) -> bytes:
        return (_TOPICINFO.pack(self.topic_id) + _string(self.topic_name) + _string(self.message_type)
                + _string(self.md5sum) + _I32.pack(self.buffer_size))

    @classmethod
    def deserialize(cls, data: bytes) -> "TopicInfo":
        r = _Reader(data, cls.TYPE)
        (tid,) = r.unpack(_TOPICINFO)
        name, mtype, md5 = r.string(), r.string(), r.string()
        (size,) = r.unpack(_I32)
        r.done()
        return cls(tid, name, mtype, md5, size)


_DRIVE = struct.Struct("<b2f")


@dataclass(frozen=True)
class Drive:
    """jackal_msgs/Drive: ``mode`` and ``drivers`` = (left, right); in MODE_VELOCITY wheel rad/s."""

    TYPE: ClassVar[str] = "jackal_msgs/Drive"
    MD5: ClassVar[str] = "601cf097cd47c174590c366c6ddd5fb3"
    MODE_VELOCITY: ClassVar[int] = 0
    MODE_PWM: ClassVar[int] = 1
    MODE_EFFORT: ClassVar[int] = 2
    MODE_NONE: ClassVar[int] = -1
    mode: int = -1
    left: float = 0.0
    right: float = 0.0

    def serialize(self) -> bytes:
        return _DRIVE.pack(self.mode, self.left, self.right)

    @classmethod
    def deserialize(cls, data: bytes) -> "Drive":
        r = _Reader(data, cls.TYPE)
        msg = cls(*r.unpack(_DRIVE))
        r.done()
        return msg


_DFB = struct.Struct("<6f?")


@dataclass(frozen=True)
class DriveFeedback:
    """jackal_msgs/DriveFeedback: current (A), duty cycle, bridge and motor temperature (degC),
    measured velocity (rad/s), measured travel (rad), driver fault."""

    TYPE: ClassVar[str] = "jackal_msgs/DriveFeedback"
    MD5: ClassVar[str] = "8dd0b7a3cfa20cfc5c054ddd9763609b"
    current: float = 0.0
    duty_cycle: float = 0.0
    bridge_temperature: float = 0.0
    motor_temperature: float = 0.0
    measured_velocity: float = 0.0
    measured_travel: float = 0.0
    driver_fault: bool = False

    def serialize(self) -> bytes:
        return _DFB.pack(self.current, self.duty_cycle, self.bridge_temperature, self.motor_temperature,
                         self.measured_velocity, self.measured_travel, self.driver_fault)


_FB_TAIL = struct.Struct("<2f2b")


@dataclass(frozen=True)
class Feedback:
    """jackal_msgs/Feedback (50 Hz): header, ``drivers`` (left, right), PCB and MCU temperature (degC),
    commanded and actual drive mode."""

    TYPE: ClassVar[str] = "jackal_msgs/Feedback"
    MD5: ClassVar[str] = "3bdabb0ef46338ee5672d1b82220ab49"
    header: Header = _EMPTY_HEADER
    drivers: tuple = (DriveFeedback(), DriveFeedback())
    pcb_temperature: float = 0.0
    mcu_temperature: float = 0.0
    commanded_mode: int = -1
    actual_mode: int = -1

    def serialize(self) -> bytes:
        return (self.header.serialize() + b"".join(d.serialize() for d in self.drivers)
                + _FB_TAIL.pack(self.pcb_temperature, self.mcu_temperature, self.commanded_mode,
                                self.actual_mode))

    @classmethod
    def deserialize(cls, data: bytes) -> "Feedback":
        r = _Reader(data, cls.TYPE)
        hdr = r.header()
        drivers = (DriveFeedback(*r.unpack(_DFB)), DriveFeedback(*r.unpack(_DFB)))
        msg = cls(hdr, drivers, *r.unpack(_FB_TAIL))
        r.done()
        return msg


_ST_A = struct.Struct("<4i")
_ST_B = struct.Struct("<3?8fd")


@dataclass(frozen=True)
class Status:
    """jackal_msgs/Status (1 Hz): uptimes as (sec, nsec) durations, e-stop flags, battery / rail
    voltages (V), currents (A), energy consumed (W h per the firmware; reported as sent)."""

    TYPE: ClassVar[str] = "jackal_msgs/Status"
    MD5: ClassVar[str] = "c851ebcf9a6e20b196bc7894e285b4f6"
    header: Header = _EMPTY_HEADER
    hardware_id: str = ""
    mcu_uptime: tuple = (0, 0)
    connection_uptime: tuple = (0, 0)
    drivers_active: bool = False
    driver_external_stop_present: bool = False
    driver_external_stop_stopped: bool = False
    measured_battery: float = 0.0
    measured_12v: float = 0.0
    measured_5v: float = 0.0
    drive_current: float = 0.0
    user_current: float = 0.0
    computer_current: float = 0.0
    total_current: float = 0.0
    total_current_peak: float = 0.0
    total_power_consumed: float = 0.0

    def serialize(self) -> bytes:
        return (self.header.serialize() + _string(self.hardware_id)
                + _ST_A.pack(*self.mcu_uptime, *self.connection_uptime)
                + _ST_B.pack(self.drivers_active, self.driver_external_stop_present,
                             self.driver_external_stop_stopped, self.measured_battery, self.measured_12v,
                             self.measured_5v, self.drive_current, self.user_current,
                             self.computer_current, self.total_current, self.total_current_peak,
                             self.total_power_consumed))

    @classmethod
    def deserialize(cls, data: bytes) -> "Status":
        r = _Reader(data, cls.TYPE)
        hdr, hwid = r.header(), r.string()
        a = r.unpack(_ST_A)
        msg = cls(hdr, hwid, a[0:2], a[2:4], *r.unpack(_ST_B))
        r.done()
        return msg


_V3 = struct.Struct("<3d")
_Q4 = struct.Struct("<4d")
_COV = struct.Struct("<9d")
_ZERO9 = (0.0,) * 9


@dataclass(frozen=True)
class Imu:
    """sensor_msgs/Imu: orientation quaternion (x, y, z, w), angular velocity (rad/s), linear
    acceleration (m/s^2), each with a row-major 3x3 covariance (REP-145: -1 in [0] = unknown)."""

    TYPE: ClassVar[str] = "sensor_msgs/Imu"
    MD5: ClassVar[str] = "6a62c6daae103f4ff57a132d6f95cec2"
    header: Header = _EMPTY_HEADER
    orientation: tuple = (0.0, 0.0, 0.0, 1.0)
    orientation_covariance: tuple = _ZERO9
    angular_velocity: tuple = (0.0, 0.0, 0.0)
    angular_velocity_covariance: tuple = _ZERO9
    linear_acceleration: tuple = (0.0, 0.0, 0.0)
    linear_acceleration_covariance: tuple = _ZERO9

    def serialize(self) -> bytes:
        return (self.header.serialize() + _Q4.pack(*self.orientation) + _COV.pack(*self.orientation_covariance)
                + _V3.pack(*self.angular_velocity) + _COV.pack(*self.angular_velocity_covariance)
                + _V3.pack(*self.linear_acceleration) + _COV.pack(*self.linear_acceleration_covariance))

    @classmethod
    def deserialize(cls, data: bytes) -> "Imu":
        r = _Reader(data, cls.TYPE)
        msg = cls(r.header(), r.unpack(_Q4), r.unpack(_COV), r.unpack(_V3), r.unpack(_COV),
                  r.unpack(_V3), r.unpack(_COV))
        r.done()
        return msg


@dataclass(frozen=True)
class MagneticField:
    """sensor_msgs/MagneticField: field (T) in the sensor frame and its 3x3 covariance."""

    TYPE: ClassVar[str] = "sensor_msgs/MagneticField"
    MD5: ClassVar[str] = "2f3b0b43eed0c9501de0fa3ff89a45aa"
    header: Header = _EMPTY_HEADER
    magnetic_field: tuple = (0.0, 0.0, 0.0)
    magnetic_field_covariance: tuple = _ZERO9

    def serialize(self) -> bytes:
        return self.header.serialize() + _V3.pack(*self.magnetic_field) + _COV.pack(*self.magnetic_field_covariance)

    @classmethod
    def deserialize(cls, data: bytes) -> "MagneticField":
        r = _Reader(data, cls.TYPE)
        msg = cls(r.header(), r.unpack(_V3), r.unpack(_COV))
        r.done()
        return msg


@dataclass(frozen=True)
class Sentence:
    """nmea_msgs/Sentence: one NMEA line (without CR LF) in ``sentence``."""

    TYPE: ClassVar[str] = "nmea_msgs/Sentence"
    MD5: ClassVar[str] = "9f221efc5f4b3bac7ce4af102b32308b"
    header: Header = _EMPTY_HEADER
    sentence: str = ""

    def serialize(self) -> bytes:
        return self.header.serialize() + _string(self.sentence)

    @classmethod
    def deserialize(cls, data: bytes) -> "Sentence":
        r = _Reader(data, cls.TYPE)
        msg = cls(r.header(), r.string())
        r.done()
        return msg


_BOOL = struct.Struct("<?")


@dataclass(frozen=True)
class Bool:
    """std_msgs/Bool."""

    TYPE: ClassVar[str] = "std_msgs/Bool"
    MD5: ClassVar[str] = "8b94c1b53db61fb6aed406028ad6332a"
    data: bool = False

    def serialize(self) -> bytes:
        return _BOOL.pack(self.data)

    @classmethod
    def deserialize(cls, data: bytes) -> "Bool":
        r = _Reader(data, cls.TYPE)
        msg = cls(*r.unpack(_BOOL))
        r.done()
        return msg


MESSAGE_TYPES: dict = {cls.TYPE: cls for cls in (Time, TopicInfo, Drive, Feedback, Status, Imu,
                                                  MagneticField, Sentence, Bool)}
"""Message classes by ROS type name, for per-topic decoding by the announced type."""
