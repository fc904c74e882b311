"""Serial protocols and drivers (base MCU, GPS NMEA, IMU) and their device simulators.

Pure codecs (no I/O): :mod:`.rosserial` (framing), :mod:`.ros1` (Jackal messages), :mod:`.nmea`
(GPS sentences over pynmea2), :mod:`.mip` (Microstrain IMU), :mod:`.kinematics`.
asyncio drivers: :class:`firmware_bridge.base.JackalBase`, :class:`firmware_bridge.gps.NmeaGps`,
:class:`firmware_bridge.imu.MipImu`, built from config by :func:`firmware_bridge.factory.drivers_from_config`.
Simulators on virtual serial ports: :mod:`firmware_bridge.sim`. Errors: :mod:`.errors` (one tree under
:class:`BridgeError`). Readings: :mod:`.readings`.
"""

from firmware_bridge.errors import (
    BridgeError,
    BridgeTimeout,
    DeviceNotFound,
    EStopLatched,
    FrameError,
    LinkLost,
    ProtocolMismatch,
)

__all__ = ["BridgeError", "BridgeTimeout", "DeviceNotFound", "EStopLatched", "FrameError", "LinkLost",
           "ProtocolMismatch"]
