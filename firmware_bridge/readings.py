"""Typed readings that drivers publish. Every reading carries ``t_mono_s``: the host's
:func:`time.monotonic` when its bytes were received (control uses it; docs/design.md, "Time").

Units are SI and frames follow REP-103 (x forward, y left, z up) unless a field name says otherwise.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

__all__ = ["WheelState", "WheelFeedback", "BaseStatus", "ImuReading", "GpsFix", "GpsNoFix", "CameraImage"]


@dataclass(frozen=True)
class WheelState:
    """One drive channel of jackal_msgs/Feedback."""

    velocity_radps: float
    travel_rad: float
    current_a: float
    duty_cycle: float
    bridge_temp_c: float
    motor_temp_c: float
    fault: bool


@dataclass(frozen=True)
class WheelFeedback:
    """Base MCU feedback (~50 Hz): left and right wheel state, board temperatures (degC), drive modes
    (jackal_msgs/Drive MODE_* values)."""

    t_mono_s: float
    left: WheelState
    right: WheelState
    pcb_temp_c: float
    mcu_temp_c: float
    commanded_mode: int
    actual_mode: int


@dataclass(frozen=True)
class BaseStatus:
    """Base MCU status (~1 Hz). ``estop_stopped`` is True while the external stop loop is open
    (the robot cannot drive)."""

    t_mono_s: float
    hardware_id: str
    mcu_uptime_s: float
    battery_v: float
    rail_12v_v: float
    rail_5v_v: float
    drive_current_a: float
    total_current_a: float
    drivers_active: bool
    estop_present: bool
    estop_stopped: bool


@dataclass(frozen=True)
class ImuReading:
    """Inertial sample in the sensor frame ``frame_id``.

    ``angular_velocity_radps`` and ``linear_acceleration_mps2`` are (x, y, z) tuples;
    ``orientation_xyzw`` is a unit quaternion or None when the source gives none;
    ``magnetic_field_t`` (tesla) is None when the sample carries no magnetometer data.
    ``source`` names the device: ``"mcu"``, ``"mip"``.
    """

    t_mono_s: float
    frame_id: str
    angular_velocity_radps: tuple | None = None
    linear_acceleration_mps2: tuple | None = None
    orientation_xyzw: tuple | None = None
    magnetic_field_t: tuple | None = None
    source: str = "mcu"


@dataclass(frozen=True)
class GpsFix:
    """A position fix (WGS-84, degrees; altitude above mean sea level in m), one per receiver epoch.

    ``covariance_enu_m2`` is the diagonal (east, north, up) variance in m^2: from GST when the receiver
    sends it (``covariance_type`` 2, "diagonal known" as in sensor_msgs/NavSatFix), else from HDOP
    times a per-quality error (type 1, "approximated", nmea_navsat_driver's table).
    ``utc`` is the receiver's UTC time (date from RMC/ZDA when seen, else None); ``speed_mps`` and
    ``course_deg`` (true, clockwise from north) come from RMC/VTG, ``heading_deg`` from HDT.
    """

    t_mono_s: float
    latitude_deg: float
    longitude_deg: float
    altitude_m: float | None
    quality: int
    satellites: int | None
    hdop: float | None
    covariance_enu_m2: tuple
    covariance_type: int
    utc: _dt.datetime | None
    utc_time: _dt.time | None
    speed_mps: float | None = None
    course_deg: float | None = None
    heading_deg: float | None = None
    source: str = "GGA"
    talker: str = "GP"


@dataclass(frozen=True)
class GpsNoFix:
    """The receiver reports no position for one epoch (GGA quality 0, RMC / GLL status V, every GSA in
    mode 1, fewer than 3 satellites, dead reckoning, ...). ``source`` is the sentence type that decided
    it, ``reason`` why (e.g. ``"rmc_void"``, ``"gsa_no_fix"``, ``"few_satellites"``,
    ``"dead_reckoning"``; see :mod:`firmware_bridge.nmea`; empty from sources that give none)."""

    t_mono_s: float
    utc_time: _dt.time | None
    source: str
    satellites: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class CameraImage:
    """A camera frame received as a ROS 2 image: ``jpeg`` bytes (a ``sensor_msgs/CompressedImage`` in
    JPEG as sent, or a raw ``sensor_msgs/Image`` encoded here), ``width`` x ``height`` pixels (0 when
    not decoded), the publisher's ``frame_id`` and header ``stamp_s`` (its clock, seconds)."""

    t_mono_s: float
    jpeg: bytes
    frame_id: str = ""
    stamp_s: float = 0.0
    width: int = 0
    height: int = 0
