"""GPS receiver on its own serial port (e.g. Novatel Smart6/7, NMEA at 57600 baud).

Usage from a plain asyncio program::

    async with NmeaGps("/dev/clearpath/gps", baud=57600) as gps:
        fix = await gps.recv(timeout_s=2.0)          # GpsFix or GpsNoFix, in order
        now = gps.latest(GpsFix, max_age_s=1.0)      # None when the fix is stale (dropout)
"""

from __future__ import annotations

from firmware_bridge.driver import SerialDriver
from firmware_bridge.nmea import NmeaDecoder

__all__ = ["NmeaGps"]


class NmeaGps(SerialDriver):
    """NMEA GPS driver publishing :class:`~firmware_bridge.readings.GpsFix` and
    :class:`~firmware_bridge.readings.GpsNoFix` (bad sentences are counted in ``decoder.stats`` and
    logged at a limited rate, never raised).

    Parameters
    ----------
    port : str
        Serial device.
    baud : int
        Default 57600 (Novatel Smart6/7; docs/protocols.md, "Devices and ports").
    decoder : NmeaDecoder, optional
        A configured decoder (checksum tolerances, max age); default ``NmeaDecoder()``.
    **kwargs
        Passed to :class:`~firmware_bridge.driver.SerialDriver` (reconnect bounds, queue size).
    """

    name = "gps"

    def __init__(self, port: str, *, baud: int = 57600, decoder: NmeaDecoder | None = None, **kwargs) -> None:
        super().__init__(port, baud=baud, **kwargs)
        self.decoder = decoder or NmeaDecoder()

    def _on_bytes(self, data: bytes, t_mono_s: float) -> None:
        for reading in self.decoder.feed(data, t_mono_s):
            self._publish(reading)

    def _on_disconnect(self) -> None:
        self.decoder.reset_stream()
