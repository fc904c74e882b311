"""ROS 2 message types as Cyclone DDS IDL structs, wire-compatible with stock ROS 2 nodes.

Each class is the DDS type that ``rosidl_generator_dds_idl`` makes of a ROS 2 message: the IDL module
``pkg::msg::dds_`` and the struct name with a trailing underscore (``geometry_msgs::msg::dds_::Twist_``),
fields in the ``.msg`` order with the same IDL types, final extensibility, so the payload is plain
XCDR1 (``CDR_LE``, encapsulation ``00 01 00 00``), the representation rmw_cyclonedds_cpp and
rmw_fastrtps_cpp put on the wire. Field definitions follow the ROS 2 Humble ``.msg`` files
(common_interfaces, rcl_interfaces); tests check every type byte for byte against the ``rosbags``
serialiser (tests/firmware_bridge/test_fb_ros2_cdr.py).

``uint8[]`` payloads (image data) are ``sequence<uint8>``: they read back as a list of ints (one
``struct.unpack``) and may be written from ``bytes``. (A ``bytes`` field would give the same wire bytes,
but cyclonedds cannot build the XTypes type object of one, which discovery needs.)

Importing this module imports ``cyclonedds`` (the ``ros2`` extra); :mod:`firmware_bridge.ros2`
imports it only when the ``ros2`` backend starts.
"""

# No ``from __future__ import annotations`` here: cyclonedds resolves the field annotations at runtime.
import math
from dataclasses import dataclass, field

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float32, float64, int8, int32, sequence, uint8, uint16, uint32

__all__ = ["Time", "Header", "Bool", "Vector3", "Quaternion", "Point", "Pose", "PoseWithCovariance", "Twist",
           "TwistWithCovariance", "TwistStamped", "Odometry", "NavSatStatus", "NavSatFix", "Imu",
           "CompressedImage", "Image", "BatteryState", "MESSAGE_TYPES", "dds_type_name"]


def dds_type_name(ros_type: str) -> str:
    """``"geometry_msgs/msg/Twist"`` -> ``"geometry_msgs::msg::dds_::Twist_"`` (the ROS 2 DDS type name).

    Raises
    ------
    ValueError
        If ``ros_type`` is not ``package/msg/Name``.
    """
    parts = ros_type.split("/")
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise ValueError(f"not a ROS 2 message type name (package/msg/Name): {ros_type!r}")
    return f"{parts[0]}::msg::dds_::{parts[2]}_"


def _zeros(n: int):
    return field(default_factory=lambda: [0.0] * n)


@dataclass
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    """builtin_interfaces/msg/Time: seconds and nanoseconds since the publisher's epoch (ROS time)."""

    sec: int32 = 0
    nanosec: uint32 = 0

    @classmethod
    def from_seconds(cls, t_s: float) -> "Time":
        """The stamp of ``t_s`` seconds (e.g. ``time.time()``), nanoseconds rounded to the nearest."""
        sec = math.floor(t_s)
        ns = round((t_s - sec) * 1e9)
        if ns >= 1_000_000_000:
            sec, ns = sec + 1, ns - 1_000_000_000
        return cls(int(sec), int(ns))

    def to_seconds(self) -> float:
        return self.sec + self.nanosec * 1e-9


@dataclass
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    """std_msgs/msg/Header (ROS 2: no ``seq``)."""

    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
class Bool(IdlStruct, typename="std_msgs::msg::dds_::Bool_"):
    """std_msgs/msg/Bool."""

    data: bool = False


@dataclass
class Vector3(IdlStruct, typename="geometry_msgs::msg::dds_::Vector3_"):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
class Quaternion(IdlStruct, typename="geometry_msgs::msg::dds_::Quaternion_"):
    """geometry_msgs/msg/Quaternion (x, y, z, w; ROS 2's default is the identity, w = 1)."""

    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0
    w: float64 = 1.0


@dataclass
class Point(IdlStruct, typename="geometry_msgs::msg::dds_::Point_"):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
class Pose(IdlStruct, typename="geometry_msgs::msg::dds_::Pose_"):
    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
class PoseWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::PoseWithCovariance_"):
    """Pose and its 6 x 6 row-major covariance (x, y, z, rot x, rot y, rot z)."""

    pose: Pose = field(default_factory=Pose)
    covariance: array[float64, 36] = _zeros(36)


@dataclass
class Twist(IdlStruct, typename="geometry_msgs::msg::dds_::Twist_"):
    """geometry_msgs/msg/Twist: ``linear`` m/s and ``angular`` rad/s in the body frame (REP-103)."""

    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


@dataclass
class TwistWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::TwistWithCovariance_"):
    twist: Twist = field(default_factory=Twist)
    covariance: array[float64, 36] = _zeros(36)


@dataclass
class TwistStamped(IdlStruct, typename="geometry_msgs::msg::dds_::TwistStamped_"):
    """geometry_msgs/msg/TwistStamped (what ROS 2 Jazzy's diff_drive_controller takes)."""

    header: Header = field(default_factory=Header)
    twist: Twist = field(default_factory=Twist)


@dataclass
class Odometry(IdlStruct, typename="nav_msgs::msg::dds_::Odometry_"):
    """nav_msgs/msg/Odometry: pose in ``header.frame_id`` (odom), twist in ``child_frame_id`` (base_link)."""

    header: Header = field(default_factory=Header)
    child_frame_id: str = ""
    pose: PoseWithCovariance = field(default_factory=PoseWithCovariance)
    twist: TwistWithCovariance = field(default_factory=TwistWithCovariance)


@dataclass
class NavSatStatus(IdlStruct, typename="sensor_msgs::msg::dds_::NavSatStatus_"):
    """sensor_msgs/msg/NavSatStatus: ``status`` -1 no fix, 0 fix, 1 SBAS, 2 GBAS (RTK);
    ``service`` bit mask 1 GPS, 2 GLONASS, 4 COMPASS, 8 GALILEO."""

    STATUS_NO_FIX = -1
    STATUS_FIX = 0
    STATUS_SBAS_FIX = 1
    STATUS_GBAS_FIX = 2

    status: int8 = 0
    service: uint16 = 0


@dataclass
class NavSatFix(IdlStruct, typename="sensor_msgs::msg::dds_::NavSatFix_"):
    """sensor_msgs/msg/NavSatFix: WGS-84 degrees, altitude m above the ellipsoid (NaN: unknown),
    ``position_covariance`` 3 x 3 row-major ENU m^2, ``position_covariance_type`` 0 unknown,
    1 approximated, 2 diagonal known, 3 known."""

    header: Header = field(default_factory=Header)
    status: NavSatStatus = field(default_factory=NavSatStatus)
    latitude: float64 = 0.0
    longitude: float64 = 0.0
    altitude: float64 = 0.0
    position_covariance: array[float64, 9] = _zeros(9)
    position_covariance_type: uint8 = 0


@dataclass
class Imu(IdlStruct, typename="sensor_msgs::msg::dds_::Imu_"):
    """sensor_msgs/msg/Imu: orientation quaternion, rad/s, m/s^2 in ``header.frame_id``; a covariance whose
    first element is -1 means the quantity is not provided."""

    header: Header = field(default_factory=Header)
    orientation: Quaternion = field(default_factory=Quaternion)
    orientation_covariance: array[float64, 9] = _zeros(9)
    angular_velocity: Vector3 = field(default_factory=Vector3)
    angular_velocity_covariance: array[float64, 9] = _zeros(9)
    linear_acceleration: Vector3 = field(default_factory=Vector3)
    linear_acceleration_covariance: array[float64, 9] = _zeros(9)


@dataclass
class CompressedImage(IdlStruct, typename="sensor_msgs::msg::dds_::CompressedImage_"):
    """sensor_msgs/msg/CompressedImage: ``format`` e.g. "jpeg" or "bgr8; jpeg compressed bgr8"."""

    header: Header = field(default_factory=Header)
    format: str = ""
    data: sequence[uint8] = field(default_factory=list)


@dataclass
class Image(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    """sensor_msgs/msg/Image: raw pixels, ``step`` bytes per row, ``encoding`` e.g. "rgb8", "bgr8", "mono8"."""

    header: Header = field(default_factory=Header)
    height: uint32 = 0
    width: uint32 = 0
    encoding: str = ""
    is_bigendian: uint8 = 0
    step: uint32 = 0
    data: sequence[uint8] = field(default_factory=list)


@dataclass
class BatteryState(IdlStruct, typename="sensor_msgs::msg::dds_::BatteryState_"):
    """sensor_msgs/msg/BatteryState: V, degC, A (negative while discharging), Ah, Ah, Ah, fraction 0-1
    (NaN: unmeasured); status/health/technology enums as in the .msg file."""

    header: Header = field(default_factory=Header)
    voltage: float32 = 0.0
    temperature: float32 = 0.0
    current: float32 = 0.0
    charge: float32 = 0.0
    capacity: float32 = 0.0
    design_capacity: float32 = 0.0
    percentage: float32 = 0.0
    power_supply_status: uint8 = 0
    power_supply_health: uint8 = 0
    power_supply_technology: uint8 = 0
    present: bool = False
    cell_voltage: sequence[float32] = field(default_factory=list)
    cell_temperature: sequence[float32] = field(default_factory=list)
    location: str = ""
    serial_number: str = ""


#: ROS 2 type name -> class, for every message the ``ros2`` backend and its simulator use
MESSAGE_TYPES = {
    "builtin_interfaces/msg/Time": Time, "std_msgs/msg/Header": Header, "std_msgs/msg/Bool": Bool,
    "geometry_msgs/msg/Vector3": Vector3, "geometry_msgs/msg/Quaternion": Quaternion,
    "geometry_msgs/msg/Point": Point, "geometry_msgs/msg/Pose": Pose,
    "geometry_msgs/msg/PoseWithCovariance": PoseWithCovariance, "geometry_msgs/msg/Twist": Twist,
    "geometry_msgs/msg/TwistWithCovariance": TwistWithCovariance, "geometry_msgs/msg/TwistStamped": TwistStamped,
    "nav_msgs/msg/Odometry": Odometry, "sensor_msgs/msg/NavSatStatus": NavSatStatus,
    "sensor_msgs/msg/NavSatFix": NavSatFix, "sensor_msgs/msg/Imu": Imu,
    "sensor_msgs/msg/CompressedImage": CompressedImage, "sensor_msgs/msg/Image": Image,
    "sensor_msgs/msg/BatteryState": BatteryState,
}
