"""Positions through a GPS dropout from wheel odometry, tied to the fixes on either side.

A drive that passes under trees or beside tall buildings loses its fix for a few seconds to a minute.
The frames recorded there are real images on a real, continuous drive; without a position they cannot
become map nodes, the drive's temporal chain breaks there, and the map falls apart into pieces that only
the VNM can rejoin (it rarely does across a 15 m hole). :func:`bridge_gps_gaps` fills such a gap by dead
reckoning: the wheel odometry's track between the last fix before the gap (frame ``a``) and the first
after it (frame ``b``), rotated into the UTM frame and closed onto both fixes:

1. Heading of the odometry frame in UTM: the 2-D rotation that best maps the odometry track onto the GPS
   track over the valid frames within ``window_s`` of the gap (least squares on centred points, the 2-D
   case of Umeyama 1991 / Kabsch, rotation only: wheel odometry has metric scale).
2. ``p_k = g_a + R (o_k - o_a)`` for every frame ``k`` in the gap (``g``: GPS xy, ``o``: odometry xy).
3. The closure error ``e = g_b - (g_a + R (o_b - o_a))`` is spread along the gap in proportion to the
   distance driven (the usual linear loop-closure correction of a dead-reckoned traverse), so that the
   track meets both fixes exactly.

A gap is left open (no position invented) when it lasts longer than ``max_gap_s``, when it is not bounded
by fixes on both sides, when the odometry does not cover it, when the rotation cannot be observed (less
than :data:`MIN_SPREAD_M` of travel in the fit and the robot moved across the gap), or when the closure
error is larger than ``max(MIN_CLOSURE_M, max_closure_fraction x distance driven)``: odometry and GPS then
disagree (wheel slip, a GPS jump) and a guessed position would do more harm than a hole.

Frames: ``xy`` in metres in one UTM zone (easting, northing), odometry ``x, y`` in metres in the
odometry frame (REP-105 ``odom``), times in seconds of the log's clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["GapBridge", "bridge_gps_gaps", "MIN_SPREAD_M", "MIN_CLOSURE_M"]

#: Travel (RMS distance from the centroid, m) the rotation fit needs to observe the heading.
MIN_SPREAD_M = 2.0
#: Closure error always accepted (m): a few times the fixes' own noise (1-3 m CEP for a standalone receiver).
MIN_CLOSURE_M = 4.0


@dataclass(frozen=True)
class GapBridge:
    """One dropout: frames ``first``..``last`` (inclusive) without a fix, and what was done about it.

    ``bridged`` True when positions were dead-reckoned; ``reason`` says why not otherwise.
    ``duration_s`` from the fix before to the fix after; ``driven_m`` the odometry distance over it (NaN
    without odometry); ``closure_m`` the dead-reckoning error at the fix after, before correction (NaN when
    not computed).
    """

    first: int
    last: int
    duration_s: float
    driven_m: float
    closure_m: float
    bridged: bool
    reason: str = ""

    def as_dict(self) -> dict:
        return {"frames": [self.first, self.last], "duration_s": round(self.duration_s, 2),
                "driven_m": None if math.isnan(self.driven_m) else round(self.driven_m, 2),
                "closure_m": None if math.isnan(self.closure_m) else round(self.closure_m, 2),
                "bridged": self.bridged, **({"reason": self.reason} if self.reason else {})}


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Inclusive (first, last) index of each run of True."""
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    d = np.diff(m)
    return list(zip(np.flatnonzero(d == 1).tolist(), (np.flatnonzero(d == -1) - 1).tolist()))


def _rotation(o: np.ndarray, g: np.ndarray) -> tuple[float, float]:
    """Angle (rad) of the rotation R minimising sum |R (o - mean o) - (g - mean g)|^2, and the spread (m)."""
    oc, gc = o - o.mean(axis=0), g - g.mean(axis=0)
    spread = float(math.sqrt(np.mean(np.sum(oc * oc, axis=1)))) if len(o) else 0.0
    dot = float(np.sum(oc[:, 0] * gc[:, 0] + oc[:, 1] * gc[:, 1]))
    cross = float(np.sum(oc[:, 0] * gc[:, 1] - oc[:, 1] * gc[:, 0]))
    return math.atan2(cross, dot), spread


def bridge_gps_gaps(frame_t_s: np.ndarray, xy_m: np.ndarray, valid: np.ndarray, odom_t_s: np.ndarray,
                    odom_xy_m: np.ndarray, *, max_gap_s: float, window_s: float = 20.0,
                    max_closure_fraction: float = 0.25) -> tuple[np.ndarray, np.ndarray, list[GapBridge]]:
    """Dead-reckon the frames of each GPS dropout from wheel odometry (module docstring).

    Parameters
    ----------
    frame_t_s : (F,) float64, frame times (s), increasing.
    xy_m : (F, 2) float64, UTM easting/northing (m) of each frame; rows where ``valid`` is False are ignored.
    valid : (F,) bool, the frame has a GPS position.
    odom_t_s : (K,) float64, odometry times (s), increasing; ``odom_xy_m`` (K, 2) float64 positions (m).
    max_gap_s : gaps longer than this (fix before to fix after) stay open; 0 leaves every gap open.
    window_s : valid frames within this time before and after the gap fit the odometry heading.
    max_closure_fraction : a closure error above this fraction of the distance driven (and above
        :data:`MIN_CLOSURE_M`) leaves the gap open.

    Returns
    -------
    (xy, bridged, gaps)
        ``xy`` (F, 2) float64: the input with the bridged frames filled; ``bridged`` (F,) bool, the frames
        given a dead-reckoned position; ``gaps`` one :class:`GapBridge` per run of invalid frames.

    Raises
    ------
    ValueError
        Arrays of mismatched shapes, or ``max_gap_s`` / ``window_s`` negative.
    """
    t = np.asarray(frame_t_s, dtype=np.float64)
    xy = np.array(xy_m, dtype=np.float64, copy=True)
    ok = np.asarray(valid, dtype=bool)
    ot = np.asarray(odom_t_s, dtype=np.float64)
    oxy = np.asarray(odom_xy_m, dtype=np.float64)
    if xy.shape != (t.size, 2) or ok.shape != t.shape:
        raise ValueError(f"xy_m {xy.shape} and valid {ok.shape} must be ({t.size}, 2) and ({t.size},)")
    if oxy.shape != (ot.size, 2):
        raise ValueError(f"odom_xy_m: expected shape ({ot.size}, 2), got {oxy.shape}")
    if max_gap_s < 0 or window_s < 0:
        raise ValueError(f"max_gap_s ({max_gap_s}) and window_s ({window_s}) must be >= 0")
    bridged = np.zeros(t.size, dtype=bool)
    gaps: list[GapBridge] = []
    usable_odom = ot.size >= 2 and bool(np.all(np.isfinite(oxy))) and bool(np.all(np.diff(ot) > 0))
    if usable_odom:
        o = np.stack([np.interp(t, ot, oxy[:, 0]), np.interp(t, ot, oxy[:, 1])], axis=1)
        cum = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(o, axis=0).T))])
    for first, last in _runs(~ok):
        a, b = first - 1, last + 1
        if a < 0 or b >= t.size:
            gaps.append(GapBridge(first, last, math.nan, math.nan, math.nan, False, "not bounded by fixes"))
            continue
        dur = float(t[b] - t[a])

        def open_gap(reason, driven=math.nan, closure=math.nan, _f=first, _l=last, _d=dur):
            gaps.append(GapBridge(_f, _l, _d, driven, closure, False, reason))

        if dur > max_gap_s:
            open_gap(f"longer than {max_gap_s:g} s")
            continue
        if not usable_odom or t[a] < ot[0] or t[b] > ot[-1]:
            open_gap("no odometry over the gap")
            continue
        driven = float(cum[b] - cum[a])
        before = (t <= t[a]) & (t >= t[a] - window_s)
        after = (t >= t[b]) & (t <= t[b] + window_s)
        win = ok & (before | after)
        theta, spread = _rotation(o[win], xy[win])
        moved = float(np.hypot(*(o[b] - o[a])))
        if spread < MIN_SPREAD_M and moved > 1.0:
            open_gap(f"heading not observable ({spread:.1f} m of travel around the gap)", driven)
            continue
        c, s = math.cos(theta), math.sin(theta)
        rot = np.array([[c, -s], [s, c]])
        seg = slice(a, b + 1)
        dead = xy[a] + (o[seg] - o[a]) @ rot.T
        err = xy[b] - dead[-1]
        closure = float(np.hypot(*err))
        if closure > max(MIN_CLOSURE_M, max_closure_fraction * driven):
            open_gap(f"odometry and GPS disagree by {closure:.1f} m over {driven:.1f} m driven", driven, closure)
            continue
        frac = (cum[seg] - cum[a]) / driven if driven > 1e-6 else (t[seg] - t[a]) / max(dur, 1e-9)
        dead = dead + frac[:, None] * err
        xy[first:last + 1] = dead[1:-1]
        bridged[first:last + 1] = True
        gaps.append(GapBridge(first, last, dur, driven, closure, True))
    return xy, bridged, gaps
