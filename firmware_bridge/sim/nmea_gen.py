"""NMEA sentences from a simulated position (what a receiver would print), for the simulators."""

from __future__ import annotations

import datetime as _dt
import math

from firmware_bridge.nmea import KNOT_MPS, nmea_checksum

__all__ = ["enu_to_latlon", "format_gga", "format_rmc", "with_checksum"]

EARTH_RADIUS_M = 6_378_137.0  # WGS-84 semi-major axis; the local tangent-plane approximation is
                              # good to centimetres over the few hundred metres a test drives.


def enu_to_latlon(x_east_m: float, y_north_m: float, origin_lat_deg: float, origin_lon_deg: float) -> tuple:
    """Local ENU offset (m) -> (lat, lon) degrees, equirectangular approximation around the origin."""
    lat = origin_lat_deg + math.degrees(y_north_m / EARTH_RADIUS_M)
    lon = origin_lon_deg + math.degrees(x_east_m / (EARTH_RADIUS_M * math.cos(math.radians(origin_lat_deg))))
    return lat, lon


def with_checksum(body: str) -> str:
    """``$...`` -> ``$...*hh``."""
    return f"{body}*{nmea_checksum(body[1:]):02X}"


def _dm(value: float, lat: bool) -> tuple[str, str]:
    hemi = ("N" if value >= 0 else "S") if lat else ("E" if value >= 0 else "W")
    v = abs(value)
    deg = int(v)
    minutes = (v - deg) * 60.0
    if round(minutes, 5) >= 60.0:
        deg, minutes = deg + 1, 0.0
    return (f"{deg:02d}{minutes:08.5f}" if lat else f"{deg:03d}{minutes:08.5f}"), hemi


def _hms(utc: _dt.datetime) -> str:
    return utc.strftime("%H%M%S") + f".{utc.microsecond // 10000:02d}"


def format_gga(utc: _dt.datetime, lat: float, lon: float, *, quality: int = 1, sats: int = 10,
               hdop: float = 0.9, alt_m: float = 50.0, talker: str = "GP") -> str:
    """A GGA sentence with checksum (no CR LF); ``quality`` 0 gives the empty no-fix form."""
    if quality == 0:
        return with_checksum(f"${talker}GGA,{_hms(utc)},,,,,0,00,99.99,,,,,,")
    la, ns = _dm(lat, True)
    lo, ew = _dm(lon, False)
    return with_checksum(f"${talker}GGA,{_hms(utc)},{la},{ns},{lo},{ew},{quality},{sats:02d},{hdop:.2f},"
                         f"{alt_m:.1f},M,0.0,M,,")


def format_rmc(utc: _dt.datetime, lat: float | None, lon: float | None, *, speed_mps: float = 0.0,
               course_deg: float = 0.0, talker: str = "GP") -> str:
    """An RMC sentence; ``lat``/``lon`` None gives a void (status V) sentence."""
    date = utc.strftime("%d%m%y")
    if lat is None or lon is None:
        return with_checksum(f"${talker}RMC,{_hms(utc)},V,,,,,,,{date},,,N")
    la, ns = _dm(lat, True)
    lo, ew = _dm(lon, False)
    return with_checksum(f"${talker}RMC,{_hms(utc)},A,{la},{ns},{lo},{ew},{speed_mps / KNOT_MPS:.3f},"
                         f"{course_deg % 360.0:.1f},{date},,,A")
