"""Controller and localisation math for following a walk (pure functions, no I/O).

Frames and units: ENU/UTM metres with yaw counter-clockwise from east (REP-103); robot frame x forward,
y left; v in m/s, omega in rad/s.

- :func:`waypoint_to_velocity`: GNM / ViNT deployment's PD rule (visualnav-transformer
  ``pd_controller.py``, re-derived): a waypoint (dx, dy) in the robot frame reached in one control
  period ``dt``: ``v = dx / dt``, ``omega = atan(dy / dx) / dt``; pure rotation of ``+-pi / (2 dt)``
  when dx is ~0; then clipped to the limits.
- :func:`line_follow_velocity`: the GPS straight-line controller of LM-Nav's GPS ablation: turn
  towards the target proportionally to the heading error, slow down when the error is large or the
  target is near.
- :func:`faces_travel`: whether each node image of a walk looks the way the walk travels there. A VNM
  drives towards goal images taken AHEAD of it on a drive (GNM / ViNG training: goals are later
  frames of the same traversal), so a stretch walked against the direction it was recorded in has
  goal images that face away from the robot and cannot be followed visually.
- :func:`advance_along`: progress along a walk polyline that only moves forward (pure pursuit's
  projection, limited to a window ahead so that a walk folding back over itself is followed in order).
- :func:`near_sharp_turns`: the walk nodes around its sharp turns (the VNM navigator drives those by GPS
  when ``[vnm_nav] gps_at_turns_deg`` is set: at a junction the node after the turn shows a view the robot
  cannot see yet, and a weak VNM loses the walk there).
- :func:`passed_end`: whether a position is at or past a walk's last node (within a radius of it, on or
  beyond the line through it square to the last leg): the VNM navigator's GPS arrival check.
- :func:`polyline_distance`: the distance of a point from a walk's polyline (the VNM navigator's GPS
  off-walk guard, the simulated evaluation's off-path judge).
- :class:`WindowLocaliser`: localisation of the robot on the planned walk within a window of walk
  indices around the last localised one (GNM's radius, default +-4), gated by GPS distance, with
  hysteresis so the localised node does not flicker while standing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def wrap_angle(a: float) -> float:
    """Angle wrapped to [-pi, pi)."""
    return (a + math.pi) % (2.0 * math.pi) - math.pi


def faces_travel(walk_xy_m, heading_rad, *, span: int = 2, max_angle_rad: float = math.pi / 2) -> np.ndarray:
    """Which node images of a walk face the direction the walk travels at that node.

    The travel direction at walk index k is that of the displacement from node ``k - span`` to node
    ``k + span`` (clamped to the walk; smoothing over a few nodes keeps GPS noise of about 1 m from
    flipping it at node spacings of 1 m, the sim's, to 3 m, ``[mapping] min_travel_m``'s default). A node faces
    the travel when its recorded heading is within
    ``max_angle_rad`` of that direction. Nodes with an unknown heading (NaN) and walks of one node count
    as facing it; so does a node whose displacement is under 0.3 m (standing still: no direction).

    Parameters
    ----------
    walk_xy_m : (K, 2) float, node positions in walk order, ENU / UTM metres.
    heading_rad : (K,) float, each node's recorded heading (yaw CCW from east, REP-103, the heading
        its image was taken with); NaN where unknown.
    span : int >= 1, nodes on each side for the travel direction.
    max_angle_rad : float in (0, pi], the largest heading difference that still counts as facing.

    Returns
    -------
    (K,) bool

    Raises
    ------
    ValueError
        Shapes that do not match, a non-finite position, ``span < 1`` or ``max_angle_rad`` out of range.
    """
    xy = np.asarray(walk_xy_m, dtype=np.float64)
    hd = np.asarray(heading_rad, dtype=np.float64).reshape(-1)
    if xy.ndim != 2 or xy.shape[1] != 2 or hd.shape[0] != xy.shape[0]:
        raise ValueError(f"faces_travel: walk_xy_m (K, 2) and heading_rad (K,) expected, got {xy.shape} and {hd.shape}")
    if not np.isfinite(xy).all():
        raise ValueError("faces_travel: walk_xy_m has a non-finite position")
    if span < 1 or not 0.0 < max_angle_rad <= math.pi:
        raise ValueError(f"faces_travel: span >= 1 and 0 < max_angle_rad <= pi expected, got {span}, {max_angle_rad}")
    k = xy.shape[0]
    out = np.ones(k, dtype=bool)
    if k < 2:
        return out
    idx = np.arange(k)
    d = xy[np.minimum(idx + span, k - 1)] - xy[np.maximum(idx - span, 0)]
    moving = np.hypot(d[:, 0], d[:, 1]) >= 0.3
    diff = np.abs((np.arctan2(d[:, 1], d[:, 0]) - hd + math.pi) % (2.0 * math.pi) - math.pi)
    known = np.isfinite(hd) & moving
    out[known] = diff[known] <= max_angle_rad
    return out


def advance_along(walk_xy_m: np.ndarray, arc_m: np.ndarray, progress_m: float, x_m: float, y_m: float, *,
                  span_m: float, samples: int = 40, tolerance_m: float = 0.0) -> float:
    """Progress (m along the walk) of the point of the walk nearest (x, y) within
    ``[progress_m, progress_m + span_m]``, sampled at ``samples`` points: it never moves back. With
    ``tolerance_m`` > 0, the EARLIEST sample within that of the nearest distance (where the walk folds back
    onto itself both legs pass the position, and the earlier is the one being driven).

    Parameters
    ----------
    walk_xy_m : (K, 2) float, the walk's polyline, ENU / UTM metres; arc_m : (K,) its cumulative length
        from the first node (0 first).
    progress_m : float, the progress so far; x_m, y_m : the position now.

    Returns
    -------
    float in [progress_m, arc_m[-1]] (0 for a walk of one node).
    """
    if walk_xy_m.shape[0] < 2:
        return 0.0
    s = np.linspace(progress_m, min(progress_m + span_m, arc_m[-1]), samples)
    px, py = np.interp(s, arc_m, walk_xy_m[:, 0]), np.interp(s, arc_m, walk_xy_m[:, 1])
    d = np.hypot(px - x_m, py - y_m)
    return max(progress_m, float(s[int(np.flatnonzero(d <= d.min() + tolerance_m)[0])]))


def near_sharp_turns(walk_xy_m, *, min_turn_rad: float, span_m: float = 4.0, before_m: float = 6.0,
                     after_m: float = 3.0) -> np.ndarray:
    """Which nodes of a walk lie near a sharp turn.

    The turn at node k is the angle between the walk's direction over the ``span_m`` metres before it and
    over the ``span_m`` metres after it (points interpolated along the walk; none at the walk's first and
    last ``span_m / 2`` metres). Nodes from ``before_m`` before a node turning more than ``min_turn_rad``
    to ``after_m`` after it (along the walk) are marked.

    Parameters
    ----------
    walk_xy_m : (K, 2) float, node positions in walk order, ENU / UTM metres.
    min_turn_rad : float in (0, pi]; span_m > 0, before_m >= 0, after_m >= 0: metres.

    Returns
    -------
    (K,) bool

    Raises
    ------
    ValueError
        A shape other than (K, 2), a non-finite position or a parameter out of range.
    """
    xy = np.asarray(walk_xy_m, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise ValueError(f"near_sharp_turns: walk_xy_m (K, 2) expected, got {xy.shape}")
    if not np.isfinite(xy).all():
        raise ValueError("near_sharp_turns: walk_xy_m has a non-finite position")
    if not (0.0 < min_turn_rad <= math.pi and span_m > 0 and before_m >= 0 and after_m >= 0):
        raise ValueError(f"near_sharp_turns: 0 < min_turn_rad <= pi, span_m > 0, before_m, after_m >= 0 "
                         f"expected, got {min_turn_rad}, {span_m}, {before_m}, {after_m}")
    k = xy.shape[0]
    out = np.zeros(k, dtype=bool)
    if k < 3:
        return out
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
    back = np.stack([np.interp(np.maximum(arc - span_m, 0.0), arc, xy[:, j]) for j in (0, 1)], axis=1)
    ahead = np.stack([np.interp(np.minimum(arc + span_m, arc[-1]), arc, xy[:, j]) for j in (0, 1)], axis=1)
    u, v = xy - back, ahead - xy
    ok = (np.hypot(u[:, 0], u[:, 1]) >= 0.5 * span_m) & (np.hypot(v[:, 0], v[:, 1]) >= 0.5 * span_m)
    turn = np.abs((np.arctan2(v[:, 1], v[:, 0]) - np.arctan2(u[:, 1], u[:, 0]) + math.pi) % (2.0 * math.pi) - math.pi)
    for i in np.flatnonzero(ok & (turn > min_turn_rad)):
        out |= (arc >= arc[i] - before_m) & (arc <= arc[i] + after_m)
    return out


def passed_end(walk_xy_m: np.ndarray, x_m: float, y_m: float, *, radius_m: float) -> bool:
    """Whether (x, y) is within ``radius_m`` of the walk's last node and on or beyond the line through it
    square to the walk's last leg (the leg from the last node at least 1 m before it; a walk whose nodes
    all lie within 1 m of the last: within the radius is enough).

    ``walk_xy_m`` : (K >= 1, 2) float metres (same frame as x, y).
    """
    xy = np.asarray(walk_xy_m, dtype=np.float64).reshape(-1, 2)
    end = xy[-1]
    dx, dy = x_m - end[0], y_m - end[1]
    if not math.hypot(dx, dy) <= radius_m:
        return False
    far = np.flatnonzero(np.hypot(xy[:, 0] - end[0], xy[:, 1] - end[1]) >= 1.0)
    if far.size == 0:
        return True
    leg = end - xy[far[-1]]
    return bool(dx * leg[0] + dy * leg[1] >= 0.0)


def polyline_distance(xy_m: np.ndarray, x_m: float, y_m: float) -> float:
    """Distance (m) from (x, y) to the polyline ``xy_m`` (K, 2) float metres (same frame); to the point when
    K = 1.

    Raises
    ------
    ValueError
        ``xy_m`` is not (K, 2) with K >= 1.
    """
    xy = np.asarray(xy_m, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] < 1:
        raise ValueError(f"polyline_distance: expected (K >= 1, 2) points, got shape {xy.shape}")
    if xy.shape[0] == 1:
        return float(math.hypot(x_m - xy[0, 0], y_m - xy[0, 1]))
    a, b = xy[:-1], xy[1:]
    ab = b - a
    L2 = np.maximum((ab ** 2).sum(axis=1), 1e-12)
    t = np.clip(((x_m - a[:, 0]) * ab[:, 0] + (y_m - a[:, 1]) * ab[:, 1]) / L2, 0.0, 1.0)
    px, py = a[:, 0] + t * ab[:, 0], a[:, 1] + t * ab[:, 1]
    return float(np.hypot(px - x_m, py - y_m).min())


def clip_velocity(v: float, omega: float, *, max_v_mps: float, max_omega_radps: float,
                  allow_reverse: bool = False) -> tuple[float, float]:
    """Clip to the limits; no reversing unless allowed (GNM never drives backwards)."""
    lo = -max_v_mps if allow_reverse else 0.0
    return float(min(max(v, lo), max_v_mps)), float(min(max(omega, -max_omega_radps), max_omega_radps))


def waypoint_to_velocity(dx_m: float, dy_m: float, *, dt_s: float, max_v_mps: float, max_omega_radps: float,
                         eps_m: float = 1e-8) -> tuple[float, float]:
    """(v, omega) that reaches the robot-frame waypoint (dx, dy) in ``dt_s`` (GNM PD rule).

    Raises
    ------
    ValueError
        For a non-finite waypoint or ``dt_s <= 0``.
    """
    if not (math.isfinite(dx_m) and math.isfinite(dy_m)):
        raise ValueError(f"waypoint must be finite, got ({dx_m}, {dy_m})")
    if dt_s <= 0:
        raise ValueError(f"dt_s must be > 0, got {dt_s}")
    if abs(dx_m) < eps_m:
        v, omega = 0.0, math.copysign(math.pi / (2.0 * dt_s), dy_m) if abs(dy_m) >= eps_m else 0.0
    else:
        v, omega = dx_m / dt_s, math.atan(dy_m / dx_m) / dt_s
    return clip_velocity(v, omega, max_v_mps=max_v_mps, max_omega_radps=max_omega_radps)


def line_follow_velocity(
    x_m: float,
    y_m: float,
    yaw_rad: float,
    target_x_m: float,
    target_y_m: float,
    *,
    max_v_mps: float,
    max_omega_radps: float,
    k_heading: float = 1.5,
    slow_radius_m: float = 2.0,
    turn_in_place_rad: float = math.radians(60),
) -> tuple[float, float]:
    """(v, omega) that drives from pose (x, y, yaw) straight towards the target (ENU metres).

    ``omega = k_heading * heading_error``; ``v = max_v * cos(error)`` scaled down linearly inside
    ``slow_radius_m`` of the target, and 0 (turn in place) when the error exceeds ``turn_in_place_rad``.
    """
    for name, val in (("x_m", x_m), ("y_m", y_m), ("yaw_rad", yaw_rad), ("target_x_m", target_x_m),
                      ("target_y_m", target_y_m)):
        if not math.isfinite(val):
            raise ValueError(f"{name} must be finite, got {val}")
    dx, dy = target_x_m - x_m, target_y_m - y_m
    dist = math.hypot(dx, dy)
    err = wrap_angle(math.atan2(dy, dx) - yaw_rad) if dist > 1e-9 else 0.0
    omega = k_heading * err
    v = 0.0 if abs(err) > turn_in_place_rad else max_v_mps * math.cos(err) * min(1.0, dist / slow_radius_m)
    return clip_velocity(v, omega, max_v_mps=max_v_mps, max_omega_radps=max_omega_radps)


@dataclass
class Localisation:
    """Result of one localisation step: ``index`` into the walk, distance to it (m), whether it moved."""

    index: int
    distance_m: float
    changed: bool


class WindowLocaliser:
    """Localise on a walk by position, within ``window`` walk indices of the last localisation.

    Parameters
    ----------
    walk_xy_m : (m, 2) float, walk node positions (ENU/UTM metres), in walk order.
    window : int, indices before/after the last localised index that are considered (GNM radius: 4).
    hysteresis_m : float, a new node must be this much closer than the current one to take over.
    max_distance_m : float, beyond this the robot counts as lost for the step (index kept).

    Raises
    ------
    ValueError
        Empty or non-finite walk, window < 0.
    """

    def __init__(self, walk_xy_m, *, window: int = 4, hysteresis_m: float = 0.5, max_distance_m: float = 10.0,
                 start_index: int = 0):
        xy = np.asarray(walk_xy_m, dtype=np.float64)
        if xy.ndim != 2 or xy.shape[0] == 0 or xy.shape[1] != 2 or not np.all(np.isfinite(xy)):
            raise ValueError(f"walk_xy_m: expected finite (m, 2) positions, got shape {xy.shape}")
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self.xy = xy
        self.window = window
        self.hysteresis_m = hysteresis_m
        self.max_distance_m = max_distance_m
        self.index = int(start_index)
        self.lost_steps = 0

    def update(self, x_m: float, y_m: float) -> Localisation:
        lo = max(0, self.index - self.window)
        hi = min(self.xy.shape[0], self.index + self.window + 1)
        d = np.hypot(self.xy[lo:hi, 0] - x_m, self.xy[lo:hi, 1] - y_m)
        best = lo + int(np.argmin(d))
        cur_d = float(np.hypot(*(self.xy[self.index] - (x_m, y_m))))
        best_d = float(d[best - lo])
        if best_d > self.max_distance_m:
            self.lost_steps += 1
            return Localisation(self.index, cur_d, False)
        self.lost_steps = 0
        if best != self.index and best_d < cur_d - self.hysteresis_m:
            self.index = best
            return Localisation(best, best_d, True)
        return Localisation(self.index, cur_d, False)
