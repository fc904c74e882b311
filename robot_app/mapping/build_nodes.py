"""Node selection of the map build: traversal logs -> the frames that become map nodes (LM-Nav App. B).

One log at a time (:func:`select_log_nodes`, so an engine can run the logs in parallel), all projected into
the UTM zone of the first fix (:func:`first_fix_zone`); :func:`nodes_from_parts` joins them in log order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from core import graph_build as gb
from core.gps_gaps import bridge_gps_gaps
from core.tlog import TraversalLog, frame_positions

log = logging.getLogger(__name__)


@dataclass
class BuildNodes:
    """Selected nodes of all logs, in log then time order."""

    log_index: np.ndarray        # (M,) int64, which log
    frame_index: np.ndarray      # (M,) int64, index into that log's frame arrays
    t_s: np.ndarray              # (M,) float64 log time
    lat_deg: np.ndarray
    lon_deg: np.ndarray
    xy_m: np.ndarray             # (M, 2) UTM easting/northing in one zone (the first log's)
    heading_rad: np.ndarray      # (M,) yaw CCW from east from the smoothed GPS track (gb.track_headings), NaN unknown
    gap_before: np.ndarray       # (M,) bool: recording gap > epsilon since the previous node of the log
    dead_reckoned: np.ndarray    # (M,) bool: position dead-reckoned through a GPS dropout (core.gps_gaps)


def _utm_xy(lat: np.ndarray, lon: np.ndarray, zone: tuple[int, str] | None):
    import utm

    if zone is None:
        _, _, z, letter = utm.from_latlon(float(lat[0]), float(lon[0]))
        zone = (z, letter)
    e, n, _, _ = utm.from_latlon(lat, lon, force_zone_number=zone[0], force_zone_letter=zone[1])
    return np.stack([np.asarray(e, float), np.asarray(n, float)], axis=1), zone


def _odometer_at(tl: TraversalLog) -> np.ndarray | None:
    """Distance driven (m) up to each frame from the log's wheel odometry, or None without it.

    Used for node spacing because GPS noise lengthens a track measured from fixes (2 m of noise can
    triple the node count, and the VNM work with it).
    """
    o = tl.odom
    if o["t_s"].size < 2 or tl.frame_t_s.size == 0:
        return None
    step = np.hypot(np.diff(o["x_m"]), np.diff(o["y_m"]))
    if not np.all(np.isfinite(step)):
        return None
    cum = np.concatenate([[0.0], np.cumsum(step)])
    return np.interp(tl.frame_t_s, o["t_s"], cum)


def first_fix_zone(logs: Sequence[TraversalLog]) -> tuple[int, str] | None:
    """UTM zone (number, band letter) of the first frame with a GPS position in the first log that has one.

    Every log's nodes are projected in this one zone (None: no log has a frame with a fix).
    """
    for tl in logs:
        lat, lon, valid = frame_positions(tl)
        if valid.any():
            return _utm_xy(lat[valid][:1], lon[valid][:1], None)[1]
    return None


def _bridge(tl: TraversalLog, xy: np.ndarray, valid: np.ndarray, lat, lon, zone, max_gap_s: float):
    """Fill the log's GPS dropouts of at most ``max_gap_s`` from its wheel odometry (core.gps_gaps).

    Returns ``(xy, valid, lat, lon, dead_reckoned)`` with the bridged frames filled in.
    """
    dead = np.zeros(valid.shape, dtype=bool)
    if max_gap_s <= 0 or valid.all():
        return xy, valid, lat, lon, dead
    o = tl.odom
    xy2, dead, gaps = bridge_gps_gaps(tl.frame_t_s, xy, valid, o["t_s"], np.stack([o["x_m"], o["y_m"]], axis=1),
                                      max_gap_s=max_gap_s)
    for g in gaps:
        if g.bridged:
            log.info("%s: GPS dropout of %.1f s (%.1f m driven) dead-reckoned from odometry, closure %.1f m",
                     tl.folder, g.duration_s, g.driven_m, g.closure_m)
        elif not np.isnan(g.duration_s):
            log.warning("%s: GPS dropout of %.1f s left open (%s): the drive's temporal chain breaks there",
                        tl.folder, g.duration_s, g.reason)
    if dead.any():
        import utm

        la, lo = utm.to_latlon(xy2[dead, 0], xy2[dead, 1], zone[0], zone[1], strict=False)
        lat, lon = lat.copy(), lon.copy()
        lat[dead], lon[dead] = la, lo
    return xy2, valid | dead, lat, lon, dead


def select_log_nodes(tl: TraversalLog, li: int, *, zone: tuple[int, str] | None, min_travel_m: float,
                     min_dt_s: float, epsilon_s: float,
                     bridge_gap_s: float = 0.0) -> tuple[tuple | None, tuple[int, str] | None]:
    """Nodes of one log (frames with a GPS position, subsampled by travel), projected into UTM ``zone``.

    ``bridge_gap_s``: GPS dropouts up to this long (s) get dead-reckoned positions from the wheel odometry
    (:func:`core.gps_gaps.bridge_gps_gaps`), so their frames can be nodes and the temporal chain goes on;
    0 leaves every dropout open.

    Returns ``(part, zone)``: ``part`` the 9 arrays of :class:`BuildNodes` for this log (log index ``li``),
    or None when no frame has a fix; ``zone`` the one used (the log's own first fix when ``zone`` is None).
    """
    lat, lon, valid = frame_positions(tl)
    if not valid.any():
        log.warning("%s: no frame has a GPS fix; the log adds no node", tl.folder)
        return None, zone
    xy = np.full((lat.size, 2), np.nan)
    xy_valid, zone = _utm_xy(lat[valid], lon[valid], zone)
    xy[valid] = xy_valid
    xy, valid, lat, lon, dead = _bridge(tl, xy, valid, lat, lon, zone, bridge_gap_s)
    idx = gb.select_nodes(tl.frame_t_s, xy, min_travel_m=min_travel_m, min_dt_s=min_dt_s,
                          odometer_m=_odometer_at(tl))
    ft = tl.frame_t_s
    frame_gaps = np.concatenate([[0.0], np.diff(ft)]) > epsilon_s
    gap_count = np.cumsum(frame_gaps)
    gap_before = np.zeros(idx.size, dtype=bool)
    gap_before[1:] = gap_count[idx[1:]] != gap_count[idx[:-1]]
    # GPS fixes missing between two nodes also break the temporal chain
    invalid_count = np.cumsum(~valid)
    gap_before[1:] |= invalid_count[idx[1:]] != invalid_count[idx[:-1]]
    heading = gb.track_headings(xy[idx], gap_before)
    return (np.full(idx.size, li), idx, ft[idx], lat[idx], lon[idx], xy[idx], heading, gap_before, dead[idx]), zone


def nodes_from_parts(parts: Sequence[tuple | None]) -> BuildNodes:
    """Concatenate the per-log parts of :func:`select_log_nodes` (in log order) into :class:`BuildNodes`.

    Raises
    ------
    ValueError
        No log has frames with GPS fixes.
    """
    parts = [p for p in parts if p is not None]
    if not parts:
        raise ValueError("no log has frames with GPS fixes: nothing to build a map from")
    cat = [np.concatenate([p[j] for p in parts]) for j in range(9)]
    return BuildNodes(cat[0].astype(np.int64), cat[1].astype(np.int64), *cat[2:5], cat[5].reshape(-1, 2), *cat[6:])


def select_build_nodes(logs: Sequence[TraversalLog], *, min_travel_m: float, min_dt_s: float,
                       epsilon_s: float, bridge_gap_s: float = 0.0) -> BuildNodes:
    """Nodes of every log (frames with a GPS position, subsampled by travel), in one UTM zone (the first fix's);
    ``bridge_gap_s`` as in :func:`select_log_nodes`."""
    parts = []
    zone = None
    for li, tl in enumerate(logs):
        part, zone = select_log_nodes(tl, li, zone=zone, min_travel_m=min_travel_m, min_dt_s=min_dt_s,
                                      epsilon_s=epsilon_s, bridge_gap_s=bridge_gap_s)
        parts.append(part)
    return nodes_from_parts(parts)
