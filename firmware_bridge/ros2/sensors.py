"""GPS, IMU and camera over ROS 2: ``sensor_msgs/NavSatFix``, ``Imu``, ``CompressedImage`` / ``Image``.

Each driver subscribes one topic with the sensor-data QoS (best effort, keep last 5) and publishes the
readings the serial drivers publish (:mod:`firmware_bridge.readings`), stamped with the host's monotonic
receive time; ``connected`` is true while a publisher is matched.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math

from firmware_bridge.readings import CameraImage, GpsFix, GpsNoFix, ImuReading
from firmware_bridge.ros2.dds import SENSOR_DATA
from firmware_bridge.ros2.driver import Ros2Driver

log = logging.getLogger(__name__)

__all__ = ["Ros2Gps", "Ros2Imu", "Ros2Camera", "navsatfix_to_reading", "imu_to_reading", "IMAGE_TYPES"]

#: NavSatStatus.status -> GGA fix quality, the inverse of nmea_navsat_driver's table
#: (GGA 1 -> FIX, 2 -> SBAS_FIX, 4/5 RTK -> GBAS_FIX)
_QUALITY = {0: 1, 1: 2, 2: 4}
IMAGE_TYPES = ("compressed", "raw")


def _stamp_utc(stamp) -> _dt.datetime | None:
    if stamp.sec <= 0:
        return None
    try:
        return _dt.datetime.fromtimestamp(stamp.sec + stamp.nanosec * 1e-9, _dt.timezone.utc)
    except (ValueError, OverflowError, OSError):  # a stamp past year 9999: no usable time
        return None


def navsatfix_to_reading(msg, t_mono_s: float):
    """``sensor_msgs/NavSatFix`` -> :class:`GpsFix`, or :class:`GpsNoFix` for ``status`` -1 (no fix) or a
    non-finite position. ``quality`` is the GGA equivalent of ``status.status`` (0 -> 1 GPS, 1 -> 2 SBAS /
    DGPS, 2 -> 4 GBAS / RTK); the covariance is the diagonal of ``position_covariance`` (ENU, m^2) with
    its ``position_covariance_type``; ``utc`` is the header stamp (the publisher's clock, UTC); NaN altitude
    -> None; satellites and HDOP are not in the message (None)."""
    utc = _stamp_utc(msg.header.stamp)
    if msg.status.status < 0 or not (math.isfinite(msg.latitude) and math.isfinite(msg.longitude)):
        return GpsNoFix(t_mono_s, utc.time() if utc else None, "NavSatFix")
    pc = msg.position_covariance
    return GpsFix(t_mono_s, msg.latitude, msg.longitude, msg.altitude if math.isfinite(msg.altitude) else None,
                  _QUALITY.get(msg.status.status, 1), None, None, (pc[0], pc[4], pc[8]),
                  int(msg.position_covariance_type), utc, utc.time() if utc else None, source="NavSatFix", talker="")


def imu_to_reading(msg, t_mono_s: float, *, source: str = "ros2") -> ImuReading:
    """``sensor_msgs/Imu`` -> :class:`ImuReading` in ``header.frame_id``; a quantity whose covariance starts
    with -1 ("not provided", sensor_msgs/Imu) is None."""
    def vec(v, cov):
        return None if cov[0] == -1.0 else (v.x, v.y, v.z)

    q = msg.orientation
    orient = None if msg.orientation_covariance[0] == -1.0 else (q.x, q.y, q.z, q.w)
    return ImuReading(t_mono_s, msg.header.frame_id, vec(msg.angular_velocity, msg.angular_velocity_covariance),
                      vec(msg.linear_acceleration, msg.linear_acceleration_covariance), orient, source=source)


class Ros2Gps(Ros2Driver):
    """GPS fixes from ``sensor_msgs/NavSatFix`` (Clearpath: ``sensors/gps_0/fix``), see
    :func:`navsatfix_to_reading`. Parameters as :class:`~firmware_bridge.ros2.driver.Ros2Driver` plus
    ``topic``."""

    name = "ros2-gps"

    def __init__(self, node, *, topic: str = "sensors/gps_0/fix", **kwargs) -> None:
        super().__init__(node, **kwargs)
        self.topic(topic)
        self.fix_topic = topic

    def _open_endpoints(self) -> None:
        from firmware_bridge.ros2 import msgs

        self._reader(self.fix_topic, msgs.NavSatFix, lambda m, t: self._publish(navsatfix_to_reading(m, t)),
                     qos=SENSOR_DATA)


class Ros2Imu(Ros2Driver):
    """IMU readings from ``sensor_msgs/Imu`` (Clearpath: ``sensors/imu_0/data``), see
    :func:`imu_to_reading`."""

    name = "ros2-imu"

    def __init__(self, node, *, topic: str = "sensors/imu_0/data", **kwargs) -> None:
        super().__init__(node, **kwargs)
        self.topic(topic)
        self.imu_topic = topic

    def _open_endpoints(self) -> None:
        from firmware_bridge.ros2 import msgs

        self._reader(self.imu_topic, msgs.Imu, lambda m, t: self._publish(imu_to_reading(m, t)), qos=SENSOR_DATA)


class Ros2Camera(Ros2Driver):
    """Camera frames as :class:`CameraImage` (JPEG) from ``sensor_msgs/CompressedImage`` (``image_type =
    "compressed"``: JPEG passed through, PNG re-encoded) or a raw ``sensor_msgs/Image`` (``"raw"``:
    rgb8, bgr8, mono8, rgba8, bgra8 encoded to JPEG with OpenCV at ``jpeg_quality``). Frames it cannot
    convert are counted in ``dropped_frames`` and logged once per format.

    Raises
    ------
    ValueError
        For an unknown ``image_type`` or a JPEG quality outside 1..100.
    """

    name = "ros2-camera"

    def __init__(self, node, *, topic: str = "sensors/camera_0/color/compressed", image_type: str = "compressed",
                 jpeg_quality: int = 90, **kwargs) -> None:
        super().__init__(node, **kwargs)
        if image_type not in IMAGE_TYPES:
            raise ValueError(f"image_type must be one of {', '.join(IMAGE_TYPES)}, got {image_type!r}")
        if not 1 <= jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in 1..100, got {jpeg_quality}")
        self.topic(topic)
        self.image_topic, self.image_type, self.jpeg_quality = topic, image_type, jpeg_quality
        self.dropped_frames = 0
        self._warned: set = set()

    def _open_endpoints(self) -> None:
        from firmware_bridge.ros2 import msgs

        if self.image_type == "compressed":
            self._reader(self.image_topic, msgs.CompressedImage, self._on_compressed, qos=SENSOR_DATA)
        else:
            self._reader(self.image_topic, msgs.Image, self._on_raw, qos=SENSOR_DATA)

    def _drop(self, what: str) -> None:
        self.dropped_frames += 1
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s: cannot use %s frames from %s; dropping them", self.name, what, self.image_topic)

    def _on_compressed(self, msg, t: float) -> None:
        fmt = msg.format.lower()
        data = bytes(msg.data)
        if "png" in fmt:
            data = self._reencode_png(data)
        elif not data.startswith(b"\xff\xd8"):
            return self._drop(f"format {msg.format!r}")
        if data:
            self._publish(CameraImage(t, data, msg.header.frame_id, msg.header.stamp.to_seconds()))

    def _reencode_png(self, data: bytes) -> bytes:
        import cv2
        import numpy as np

        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            self._drop("undecodable PNG")
            return b""
        return bytes(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])[1])

    def _on_raw(self, msg, t: float) -> None:
        import cv2
        import numpy as np

        channels = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}.get(msg.encoding)
        if channels is None or msg.step < msg.width * channels or len(msg.data) < msg.step * msg.height:
            return self._drop(f"encoding {msg.encoding!r} ({msg.width} x {msg.height}, step {msg.step})")
        rows = np.frombuffer(msg.data, np.uint8, count=msg.step * msg.height).reshape(msg.height, msg.step)
        img = rows[:, :msg.width * channels].reshape(msg.height, msg.width, channels)
        if msg.encoding.startswith("rgb"):
            img = cv2.cvtColor(img, cv2.COLOR_RGBA2BGR if channels == 4 else cv2.COLOR_RGB2BGR)
        elif msg.encoding == "bgra8":
            img = cv2.cvtColor(img, cv2.COLOR_BGRA2BGR)
        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img), [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
        if not ok:
            return self._drop("unencodable")
        self._publish(CameraImage(t, bytes(buf), msg.header.frame_id, msg.header.stamp.to_seconds(),
                                  int(msg.width), int(msg.height)))
