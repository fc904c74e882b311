"""Build the drivers the configuration asks for (the app's one entry point into this package).

``serial`` is the ``[serial]`` config section, ``robot`` the ``[robot]`` one and ``ros2`` the ``[ros2]`` one
(any objects with those attributes; this package does not import the app). ``robot.backend`` names the
backend: ``serial`` (default: the rosserial MCU and serial devices) or ``ros2`` (a ROS 2 robot's topics
over DDS, :mod:`firmware_bridge.ros2`; cyclonedds is imported only when its drivers start). Drivers are
returned unstarted::

    drivers = drivers_from_config(config.serial, config.robot)
    async with contextlib.AsyncExitStack() as stack:
        for d in drivers.values():
            await stack.enter_async_context(d)
"""

from __future__ import annotations

from firmware_bridge.base import JackalBase
from firmware_bridge.driver import SerialDriver
from firmware_bridge.gps import NmeaGps
from firmware_bridge.imu import MipImu
from firmware_bridge.nmea import NmeaDecoder

__all__ = ["drivers_from_config", "BACKENDS"]

BACKENDS = ("serial", "ros2")


def drivers_from_config(serial, robot, ros2=None, *, camera: bool = False,
                        dds_config: str | None = None) -> dict[str, SerialDriver]:
    """``{"base": JackalBase, "gps": NmeaGps (gps_source = serial), "imu": MipImu (imu_source = mip)}``
    for the serial backend; for ``robot.backend = "ros2"`` see :func:`ros2_drivers`.

    GPS fixes come from the base's ``navsat/nmea_sentence`` topic when ``gps_source = "mcu"``; IMU
    readings from ``imu/data_raw`` when ``imu_source = "mcu"``.

    Raises
    ------
    ValueError
        For an unknown backend, ``gps_source`` or ``imu_source``, or (ros2) a bad topic name.
    """
    backend = getattr(robot, "backend", "serial")
    if backend not in BACKENDS:
        raise ValueError(f"[robot] backend: unknown backend {backend!r} ({', '.join(BACKENDS)})")
    if backend == "ros2":
        if ros2 is None:
            raise ValueError("[robot] backend = 'ros2' needs the [ros2] section")
        return ros2_drivers(ros2, robot, serial=serial, camera=camera, dds_config=dds_config)

    def nmea() -> NmeaDecoder:
        return NmeaDecoder(ignore_checksum_for=serial.gps_ignore_checksum_for, max_age_s=serial.gps_max_age_s,
                           log_interval_s=serial.bad_log_interval_s,
                           allow_dead_reckoning=serial.gps_allow_dead_reckoning,
                           max_sentence_chars=serial.gps_max_sentence_chars)

    if serial.gps_source not in ("mcu", "serial", "none"):
        raise ValueError(f"[serial] gps_source: unknown source {serial.gps_source!r} (mcu, serial, none)")
    if serial.imu_source not in ("mcu", "mip", "none"):
        raise ValueError(f"[serial] imu_source: unknown source {serial.imu_source!r} (mcu, mip, none)")
    backoff = dict(reconnect_min_s=serial.reconnect_min_s, reconnect_max_s=serial.reconnect_max_s)
    out: dict[str, SerialDriver] = {
        "base": JackalBase(serial.base_port, robot=robot, baud=serial.base_baud,
                           handshake_timeout_s=serial.handshake_timeout_s, nmea=nmea(), **backoff)}
    if serial.gps_source == "serial":
        out["gps"] = NmeaGps(serial.gps_port, baud=serial.gps_baud, decoder=nmea(), **backoff)
    if serial.imu_source == "mip":
        out["imu"] = MipImu(serial.imu_port, baud=serial.imu_baud, rate_hz=serial.imu_rate_hz, **backoff)
    return out


def ros2_drivers(ros2, robot, *, serial=None, camera: bool = False, dds_config: str | None = None) -> dict:
    """The ``ros2`` backend's drivers, sharing one DDS participant: ``"base"``
    (:class:`~firmware_bridge.ros2.base.Ros2Base`), ``"gps"`` / ``"imu"`` when their topics are set (and
    ``[serial] gps_source`` / ``imu_source`` is not "none"), ``"ros2_camera"`` when ``camera`` is true (a
    driver: the app's camera component reads it).

    ``ros2`` is the ``[ros2]`` section (``namespace``, ``domain_id``, ``cyclonedds_config``, the topics,
    ``cmd_type``, ``camera_type``); ``dds_config`` overrides ``cyclonedds_config`` (tests: loopback only).

    Raises
    ------
    ValueError
        For a bad namespace, topic name, ``cmd_type`` or domain id.
    """
    from firmware_bridge.ros2.base import Ros2Base
    from firmware_bridge.ros2.dds import DdsNode
    from firmware_bridge.ros2.sensors import Ros2Camera, Ros2Gps, Ros2Imu

    node = DdsNode(ros2.domain_id, config=ros2.cyclonedds_config if dds_config is None else dds_config)
    ns = ros2.namespace
    out: dict = {"base": Ros2Base(node, robot=robot, namespace=ns, cmd_topic=ros2.cmd_topic, cmd_type=ros2.cmd_type,
                                  odom_topic=ros2.odom_topic, estop_topic=ros2.estop_topic,
                                  battery_topic=ros2.battery_topic)}
    if ros2.gps_topic and getattr(serial, "gps_source", "mcu") != "none":
        out["gps"] = Ros2Gps(node, namespace=ns, topic=ros2.gps_topic)
    if ros2.imu_topic and getattr(serial, "imu_source", "mcu") != "none":
        out["imu"] = Ros2Imu(node, namespace=ns, topic=ros2.imu_topic)
    if camera:
        out["ros2_camera"] = Ros2Camera(node, namespace=ns, topic=ros2.camera_topic, image_type=ros2.camera_type)
    return out
