"""Topological graph building from traversal logs (LM-Nav Sec. 3, Algorithm 2 and App. B).

Pure array algorithms; the job that reads logs, runs the VNM and writes the map is
:mod:`robot_app.mapping.map_build`.

Steps and constants:

- Node selection: frames subsampled by travel, one node per ``min_travel_m`` (default 3 m) driven and
  at least ``min_dt_s`` (1 s) apart.
- Node headings (stored with each node; the VNM navigator uses them to tell which node images face
  the way a walk goes, :func:`core.control.faces_travel`): the direction of the GPS track from
  ``span`` nodes before to ``span`` nodes after the node within the same unbroken stretch of one log
  (:func:`track_headings`). Consecutive fixes 1 m apart (the sim's node spacing) with 1 m of receiver
  noise give headings off by tens of degrees, some reversed; over +-3 nodes the error is ~15 degrees
  there, less at the robot's default 3 m spacing, where the span covers +-9 m (a corner node's heading
  is then the mean of the two legs, up to ~45 degrees off either).
- Temporal edges (App. B, "timestamps differ < epsilon"): the paper gives epsilon both as 1 s and as
  "< 2 s". After subsampling, consecutive nodes of one log are several seconds apart, so we apply
  epsilon to the *recording*: consecutive nodes of one log are joined unless the log has a gap of
  more than ``epsilon_s = 2.0`` s between frames (a stop of the recorder, a dropped camera) between
  them. D of a temporal edge = elapsed time x the VNM frame rate (4 Hz for GNM), in time steps.
- VNM edges: candidate pairs from a k-d tree (at most ``k`` nearest nodes, default 32, within
  ``candidate_radius_m``, default 25 m) instead of all pairs, so VNM evaluations grow linearly with
  the log; kept when the predicted distance is below ``tau`` (from the VNM sidecar: it must lie in the
  range the VNM was trained on) and the GPS distance is at most ``eta_m`` (100 m: no "wormholes").
- GPS floor on VNM edge weights (optional, ``[mapping] gps_floor``): a VNM edge's D is raised to at
  least ``(GPS distance - tolerance) / (speed / frame rate)`` time steps, the time the drive's nominal
  speed needs for the straight line between the two fixes (no walk between two places is shorter than
  that line; the tolerance absorbs the receiver's noise). It changes weights only, never which pairs
  become edges. The released LM-Nav code weighs its edges by GPS metres outright (docs/design.md, "Sources"); the floor
  keeps the VNM's distance where it is larger, so a VNM that under-estimates far pairs (the sim
  stand-in compresses its distances to ~9-16 steps) cannot make a 20 m edge as cheap as a 3 m one.
- Redundant-edge removal ("transitive reduction"): an edge is dropped when another path between its
  ends is no longer than it (x ``1 + tolerance``); edges are visited longest first and each removal
  is checked against the graph as it is then, so connectivity and shortest-path lengths (within the
  tolerance) are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_EPSILON_S = 2.0


def select_nodes(t_s: np.ndarray, xy_m: np.ndarray, *, min_travel_m: float = 3.0, min_dt_s: float = 1.0,
                 odometer_m: np.ndarray | None = None) -> np.ndarray:
    """Indices of the frames that become nodes (one log, frames in time order).

    Parameters
    ----------
    t_s : (F,) float seconds; xy_m : (F, 2) float metres (UTM), NaN rows are skipped.
    odometer_m : optional (F,) float, distance driven up to each frame (wheel odometry). Without it the
        distance is measured along the GPS track, which receiver noise lengthens.

    Returns
    -------
    (M,) int64 indices into the frames; the first valid frame is always a node.
    """
    t_s = np.asarray(t_s, dtype=np.float64)
    xy = np.asarray(xy_m, dtype=np.float64)
    if xy.shape != (t_s.shape[0], 2):
        raise ValueError(f"xy_m: expected shape ({t_s.shape[0]}, 2), got {xy.shape}")
    if min_travel_m < 0 or min_dt_s < 0:
        raise ValueError("min_travel_m and min_dt_s must be >= 0")
    out = []
    travelled = 0.0
    last_xy = None
    last_t = -np.inf
    for i in range(t_s.shape[0]):
        if not np.all(np.isfinite(xy[i])):
            continue
        if last_xy is None:
            out.append(i)
            last_xy, last_t, prev = xy[i], t_s[i], xy[i]
            prev_odo = odometer_m[i] if odometer_m is not None else 0.0
            continue
        if odometer_m is not None:
            travelled += float(odometer_m[i] - prev_odo)
            prev_odo = odometer_m[i]
        else:
            travelled += float(np.hypot(*(xy[i] - prev)))
        prev = xy[i]
        if travelled >= min_travel_m - 1e-9 and t_s[i] - last_t >= min_dt_s - 1e-9:
            out.append(i)
            travelled, last_xy, last_t = 0.0, xy[i], t_s[i]
    return np.asarray(out, dtype=np.int64)


def track_headings(xy_m: np.ndarray, break_before: np.ndarray, *, span: int = 3,
                   min_displacement_m: float = 0.5) -> np.ndarray:
    """Heading of each node of one log from its smoothed GPS track (module docstring).

    Parameters
    ----------
    xy_m : (M,) x 2 float, node positions in recording order, UTM / ENU metres.
    break_before : (M,) bool, True where the track is broken before the node (a recorder gap, missing
        fixes): the stretches on either side do not share headings.
    span : int >= 1, nodes on each side.
    min_displacement_m : float, below this displacement (standing) the heading is unknown.

    Returns
    -------
    (M,) float64 yaw CCW from east (REP-103) in radians, NaN where unknown (a stretch of one node,
    standing, or a non-finite position).

    Raises
    ------
    ValueError
        Shapes that do not match or ``span < 1``.
    """
    xy = np.asarray(xy_m, dtype=np.float64)
    brk = np.asarray(break_before, dtype=bool).reshape(-1)
    if xy.ndim != 2 or xy.shape[1] != 2 or brk.shape[0] != xy.shape[0] or span < 1:
        raise ValueError(f"track_headings: xy_m (M, 2), break_before (M,) and span >= 1 expected, got {xy.shape}, "
                         f"{brk.shape}, span={span}")
    m = xy.shape[0]
    out = np.full(m, np.nan)
    if m == 0:
        return out
    seg = np.cumsum(np.concatenate([[0], brk[1:].astype(np.int64)]))
    starts = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))
    ends = np.concatenate([starts[1:], [m]]) - 1
    idx = np.arange(m)
    first, last = starts[seg], ends[seg]
    d = xy[np.minimum(idx + span, last)] - xy[np.maximum(idx - span, first)]
    ok = np.isfinite(d).all(axis=1) & (np.hypot(d[:, 0], d[:, 1]) >= min_displacement_m)
    out[ok] = np.arctan2(d[ok, 1], d[ok, 0])
    return out


def temporal_edges(node_t_s: np.ndarray, node_log: np.ndarray, frame_gap_break: np.ndarray, *,
                   frame_rate_hz: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges between consecutive nodes of the same log, D = elapsed time x ``frame_rate_hz`` (steps).

    ``frame_gap_break`` (M,) bool: True when the recording has a gap > epsilon between node j-1 and
    node j (no edge then). Nodes must be ordered by log, then time.
    """
    t = np.asarray(node_t_s, dtype=np.float64)
    same = (node_log[1:] == node_log[:-1]) & ~np.asarray(frame_gap_break[1:], dtype=bool)
    src = np.flatnonzero(same).astype(np.int64)
    dst = src + 1
    return src, dst, ((t[dst] - t[src]) * frame_rate_hz).astype(np.float64)


def candidate_pairs(xy_m: np.ndarray, *, k: int = 32, radius_m: float = 25.0,
                    exclude: set[tuple[int, int]] | None = None) -> np.ndarray:
    """Unordered node pairs (i < j) to test with the VNM: each node's ``k`` nearest within ``radius_m``.

    Returns (P, 2) int64, sorted; pairs in ``exclude`` (e.g. temporal neighbours) left out.
    """
    from scipy.spatial import cKDTree

    xy = np.asarray(xy_m, dtype=np.float64)
    n = xy.shape[0]
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    kk = min(k + 1, n)
    dist, nbr = cKDTree(xy).query(xy, k=kk, distance_upper_bound=radius_m)
    i = np.repeat(np.arange(n), kk)
    j = nbr.ravel()
    ok = (j < n) & (j != i)
    a, b = np.minimum(i[ok], j[ok]), np.maximum(i[ok], j[ok])
    pairs = np.unique(np.stack([a, b], axis=1), axis=0).astype(np.int64)
    if exclude:
        keep = np.array([(int(p), int(q)) not in exclude for p, q in pairs], dtype=bool)
        pairs = pairs[keep]
    return pairs.reshape(-1, 2)


@dataclass(frozen=True)
class PairDecision:
    """Which candidate pairs became VNM edges: ``keep`` (P,) bool; ``wormholes`` = pairs the VNM
    called close (< tau) but GPS puts farther than eta; ``too_far`` = pairs with D >= tau."""

    keep: np.ndarray
    wormholes: int
    too_far: int


def gps_floor(distance_steps: np.ndarray, gps_distance_m: np.ndarray, *, m_per_step: float,
              tolerance_m: float = 2.0) -> np.ndarray:
    """VNM edge weights floored by the GPS straight line (module docstring, "GPS floor").

    Parameters
    ----------
    distance_steps : (P,) float, the VNM's D of each pair in time steps.
    gps_distance_m : (P,) float, the GPS (UTM) distance between the pair's nodes in metres.
    m_per_step : float > 0, metres driven per time step at the nominal speed (speed / frame rate).
    tolerance_m : float >= 0, metres of GPS noise forgiven before the floor applies.

    Returns
    -------
    (P,) float64 ``max(D, (gps - tolerance) / m_per_step)``.

    Raises
    ------
    ValueError
        Mismatched shapes, NaN in ``gps_distance_m``, ``m_per_step <= 0`` or a negative tolerance.
    """
    d = np.asarray(distance_steps, dtype=np.float64)
    g = np.asarray(gps_distance_m, dtype=np.float64)
    if d.shape != g.shape:
        raise ValueError(f"gps_floor: distance_steps {d.shape} and gps_distance_m {g.shape} differ in shape")
    if not np.all(np.isfinite(g)):
        raise ValueError("gps_floor: gps_distance_m holds NaN or inf")
    if not (m_per_step > 0 and np.isfinite(m_per_step)):
        raise ValueError(f"gps_floor: m_per_step must be > 0, got {m_per_step}")
    if not tolerance_m >= 0:
        raise ValueError(f"gps_floor: tolerance_m must be >= 0, got {tolerance_m}")
    return np.maximum(d, (g - tolerance_m) / m_per_step)


def decide_pairs(distance_steps: np.ndarray, gps_distance_m: np.ndarray, *, tau_steps: float,
                 eta_m: float = 100.0) -> PairDecision:
    """Apply App. B's thresholds: keep D < tau and GPS distance <= eta."""
    d = np.asarray(distance_steps, dtype=np.float64)
    g = np.asarray(gps_distance_m, dtype=np.float64)
    close = np.isfinite(d) & (d < tau_steps)
    wormhole = close & (g > eta_m)
    return PairDecision(close & ~wormhole, int(wormhole.sum()), int((~close).sum()))


def reduce_edges(n_nodes: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, *,
                 tolerance: float = 0.0) -> np.ndarray:
    """Redundant-edge removal on an undirected graph; returns ``keep`` (E,) bool.

    Edge (u, v, w) is removed when another path u..v of length <= w x (1 + tolerance) remains in the
    graph at that moment. Longest edges are visited first. Connectivity is never lost.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    e = src.shape[0]
    if e == 0:
        return np.zeros(0, dtype=bool)
    # undirected CSR carrying the edge id of every half-edge
    ends = np.concatenate([src, dst])
    other = np.concatenate([dst, src])
    eid = np.concatenate([np.arange(e), np.arange(e)])
    order = np.argsort(ends, kind="stable")
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.add.at(indptr, ends + 1, 1)
    indptr = np.cumsum(indptr)
    nbr = np.ascontiguousarray(other[order])
    half_w = np.ascontiguousarray(np.concatenate([w, w])[order])
    half_id = np.ascontiguousarray(eid[order])
    from core._graph_kernels import has_path_within  # numba: loaded by map building, not by every importer

    alive = np.ones(e, dtype=bool)
    dist = np.full(n_nodes, np.inf)
    touched = np.empty(n_nodes, dtype=np.int64)
    for k in np.argsort(-w, kind="stable"):
        if src[k] == dst[k] or has_path_within(indptr, nbr, half_w, alive, int(k), int(src[k]), int(dst[k]),
                                                float(w[k]) * (1.0 + tolerance), dist, touched, half_id):
            alive[k] = False
    return alive
