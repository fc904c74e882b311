"""Synthetic traversal logs with known geometry, for tests and ``robot-app bench map-build``.

The robot drives a polyline (metres east/north of an anchor) at constant speed; frames are tiny JPEGs
whose colour follows the position (so look-alike places can be made on purpose), GPS fixes come at
the frame rate with optional noise. Labelled synthetic: no camera or receiver is involved.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from core.tlog import TraversalLogWriter

ANCHOR = (37.8719, -122.2585)  # WGS-84 degrees


def enu_to_latlon(xy_m: np.ndarray, anchor=ANCHOR) -> tuple[np.ndarray, np.ndarray]:
    """Metres east/north of ``anchor`` in its UTM zone -> lat/lon degrees (so UTM distances are exact)."""
    import utm

    xy = np.asarray(xy_m, dtype=np.float64)
    e0, n0, zone, letter = utm.from_latlon(*anchor)
    lat, lon = utm.to_latlon(e0 + xy[:, 0], n0 + xy[:, 1], zone, letter)
    return np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)


def sample_polyline(waypoints_m, *, speed_mps: float, rate_hz: float) -> np.ndarray:
    """Positions (F, 2) along the polyline every ``speed_mps / rate_hz`` metres."""
    wp = np.asarray(waypoints_m, dtype=np.float64)
    seg = np.linalg.norm(np.diff(wp, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    ds = speed_mps / rate_hz
    q = np.arange(0.0, s[-1] + 1e-9, ds)
    return np.stack([np.interp(q, s, wp[:, 0]), np.interp(q, s, wp[:, 1])], axis=1)


def tiny_jpeg(rgb, *, size=(32, 24), seed: int = 0) -> bytes:
    """A small JPEG of colour ``rgb`` (0-255 triple) with a little seeded texture."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    img = np.clip(np.asarray(rgb, float)[None, None, :] + rng.normal(0, 8, (size[1], size[0], 3)), 0, 255)
    buf = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(buf, format="JPEG", quality=80)
    return buf.getvalue()


def write_synthetic_log(folder: str | Path, waypoints_m, *, speed_mps: float = 1.0, rate_hz: float = 4.0,
                        t0_s: float = 0.0, gps_noise_m: float = 0.0, seed: int = 0,
                        gps_dropout: tuple[float, float] | None = None, colour_fn=None,
                        anchor: tuple[float, float] = ANCHOR, odometry: bool = False) -> np.ndarray:
    """Write a drive along ``waypoints_m`` to a traversal log; returns the true positions (F, 2) m.

    ``anchor`` is the WGS-84 origin of the local frame; ``odometry`` adds true wheel-odometry samples.
    ``gps_dropout`` = (t_start, t_end) seconds of the drive with quality-0 fixes. ``colour_fn(xy)`` gives
    the frame colour (default: a smooth function of position).
    """
    rng = np.random.default_rng(seed)
    xy = sample_polyline(waypoints_m, speed_mps=speed_mps, rate_hz=rate_hz)
    noisy = xy + rng.normal(0.0, gps_noise_m, xy.shape) if gps_noise_m > 0 else xy
    lat, lon = enu_to_latlon(noisy, anchor=anchor)
    colour_fn = colour_fn or (lambda p: (128 + 100 * np.sin(p[0] / 20), 128 + 100 * np.cos(p[1] / 20), 128))
    with TraversalLogWriter(folder, metadata={"source": "synthetic", "frame_rate_hz": rate_hz}) as w:
        for i, p in enumerate(xy):
            t = t0_s + i / rate_hz
            w.add_frame(t, tiny_jpeg(colour_fn(p), seed=seed * 100_003 + i))
            dropped = gps_dropout is not None and gps_dropout[0] <= t - t0_s <= gps_dropout[1]
            w.add_gps(t, None if dropped else float(lat[i]), None if dropped else float(lon[i]),
                      quality=0 if dropped else 1, hacc_m=None if dropped else max(gps_noise_m, 0.5))
            w.add_cmd(t, speed_mps, 0.0)
            if odometry:
                d = xy[min(i + 1, len(xy) - 1)] - xy[max(i - 1, 0)]
                w.add_odom(t, float(p[0]), float(p[1]), float(np.arctan2(d[1], d[0])), speed_mps, 0.0)
    return xy
