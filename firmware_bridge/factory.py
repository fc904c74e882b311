"""Build the drivers the configuration asks for (the app's one entry point into this package).

``serial`` is the ``[serial]`` config section and ``robot`` the ``[robot]`` one (any objects with
those attributes; this package does not import the app). Drivers are returned unstarted::

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

__all__ = ["drivers_from_config"]


def drivers_from_config(serial, robot) -> dict[str, SerialDriver]:
    """``{"base": JackalBase, "gps": NmeaGps (gps_source = serial), "imu": MipImu (imu_source = mip)}``.

    GPS fixes come from the base's ``navsat/nmea_sentence`` topic when ``gps_source = "mcu"``; IMU
    readings from ``imu/data_raw`` when ``imu_source = "mcu"``.

    Raises
    ------
    ValueError
        For an unknown ``gps_source`` or ``imu_source``.
    """
    def nmea() -> NmeaDecoder:
        return NmeaDecoder(ignore_checksum_for=serial.gps_ignore_checksum_for, max_age_s=serial.gps_max_age_s,
                           log_interval_s=serial.bad_log_interval_s)

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
