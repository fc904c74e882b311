"""Ground truth in world terms: which map nodes show a landmark, the intended walk, the paper's metrics.

LM-Nav (Shah et al., CoRL 2022, Sec. 5) scores a plan against the nodes where each landmark is truly
visible (hand-labelled there). In the simulated world the labels come from geometry: each map node's
true pose is the recorded pose at its frame (the exploration log's odometry is the plant's true pose),
and a node shows a landmark of category c when an instance of c is

- within ``NEAR_M`` of the node (being passed), or
- within the category's visibility range and inside the camera's horizontal field of view (plus a
  margin) from the node's heading; for a building, any point of its footprint outline counts.

The intended walk is the shortest walk from the start through the ground-truth sets in order (the
same LM-Nav search with G = 0 on true nodes and -inf elsewhere), so planning efficiency
(:func:`core.metrics.planning_efficiency`) compares equal units (VNM time steps of the map's edges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.metrics import planning_efficiency, planning_success

__all__ = ["NEAR_M", "RANGE_M", "node_true_poses", "visible_nodes", "LandmarkTruth", "landmark_truth",
           "intended_walk", "plan_metrics", "path_length_m"]

NEAR_M = 4.0
#: visibility range (m) by size: where the object still spans about 4 deg (6 px of a 160 px wide, 90 deg
#: frame): a 0.7 m hydrant to ~10 m, a 2-4 m sign, dumpster or tree to ~15 m, a 7 m truck or trailer to 25 m
RANGE_M = {"white truck": 25.0, "trailer": 25.0, "blue dumpster": 15.0, "picnic table": 15.0, "tree": 15.0,
           "street lamp": 15.0, "stop sign": 15.0}
SMALL_RANGE_M = 10.0
BUILDING_RANGE_M = 30.0
FOV_MARGIN_DEG = 15.0


def node_true_poses(node_t_s: np.ndarray, odom: dict) -> np.ndarray:
    """(N, 3) float64 true (x_m, y_m, yaw_rad) ENU of nodes taken at log times ``node_t_s`` (s).

    ``odom`` is a traversal log's odometry (:attr:`core.tlog.TraversalLog.odom`), which in a recorded
    simulated exploration is the plant's true pose; each node takes the nearest sample in time.

    Raises
    ------
    ValueError
        If the log has no odometry.
    """
    t = np.asarray(odom["t_s"], dtype=np.float64)
    if t.size == 0:
        raise ValueError("the exploration log has no odometry: no true poses for the ground truth")
    node_t_s = np.asarray(node_t_s, dtype=np.float64)
    idx = np.clip(np.searchsorted(t, node_t_s), 0, t.size - 1)
    prev = np.clip(idx - 1, 0, None)
    idx = np.where(np.abs(t[prev] - node_t_s) < np.abs(t[idx] - node_t_s), prev, idx)
    return np.stack([odom["x_m"][idx], odom["y_m"][idx], odom["yaw_rad"][idx]], axis=1).astype(np.float64)


def _outline(b, step_m: float = 2.0) -> np.ndarray:
    """(P, 2) points along a building's footprint outline, m ENU."""
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    hx, hy = b.size_m[0] / 2, b.size_m[1] / 2
    corners = np.array([(-hx, -hy), (hx, -hy), (hx, hy), (-hx, hy), (-hx, -hy)])
    pts = []
    for a, e in zip(corners[:-1], corners[1:]):
        n = max(2, int(np.linalg.norm(e - a) / step_m) + 1)
        pts.append(a + np.linspace(0.0, 1.0, n)[:, None] * (e - a))
    local = np.concatenate(pts)
    rot = np.array([[c, -s], [s, c]])
    return local @ rot.T + np.asarray(b.center)


def visible_nodes(world, poses: np.ndarray, categories, *, hfov_deg: float) -> np.ndarray:
    """Sorted node ids that show an instance of any of ``categories`` (module docstring's rule).

    Parameters
    ----------
    world : robot_app.sim.world.World
    poses : (N, 3) float64 true node poses (x_m, y_m, yaw_rad)
    categories : iterable of str, world categories
    hfov_deg : the camera's horizontal field of view, degrees
    """
    cats = set(categories)
    half = math.radians(hfov_deg / 2 + FOV_MARGIN_DEG)
    xy, yaw = poses[:, :2], poses[:, 2]
    seen = np.zeros(len(poses), dtype=bool)
    targets = [(_outline(b), BUILDING_RANGE_M) for b in world.buildings if b.category in cats]
    targets += [(np.asarray([o.at]), RANGE_M.get(o.category, SMALL_RANGE_M)) for o in world.objects
                if o.category in cats]
    for pts, rng in targets:
        d = pts[None, :, :] - xy[:, None, :]                      # (N, P, 2)
        dist = np.hypot(d[..., 0], d[..., 1])
        bearing = np.arctan2(d[..., 1], d[..., 0]) - yaw[:, None]
        off = np.abs(np.arctan2(np.sin(bearing), np.cos(bearing)))
        seen |= ((dist <= rng) & (off <= half)).any(axis=1) | (dist.min(axis=1) <= NEAR_M)
    return np.flatnonzero(seen)


@dataclass(frozen=True)
class LandmarkTruth:
    """One instruction landmark: its phrase, the world categories it names, the nodes that show it."""

    phrase: str
    categories: list
    nodes: np.ndarray


def landmark_truth(world, poses: np.ndarray, landmarks, *, hfov_deg: float) -> list[LandmarkTruth]:
    """Ground truth of each landmark phrase (``robot_app.demo.scenario.phrase_categories``).

    Raises
    ------
    robot_app.demo.scenario.DemoInputError
        A phrase names no category of the world, or nothing of it is seen from the explored route.
    """
    from robot_app.demo.scenario import DemoInputError, phrase_categories

    all_cats = sorted({c for _, c, _, _ in world.landmarks()})
    out = []
    for phrase in landmarks:
        cats = phrase_categories(phrase, all_cats)
        if not cats:
            raise DemoInputError(f"landmark {phrase!r} names nothing in world {world.name!r} "
                                 f"(it has: {', '.join(all_cats)})")
        nodes = visible_nodes(world, poses, cats, hfov_deg=hfov_deg)
        if nodes.size == 0:
            raise DemoInputError(f"landmark {phrase!r} ({', '.join(cats)}) is in world {world.name!r} but never "
                                 "seen from the explored route")
        out.append(LandmarkTruth(phrase, cats, nodes))
    return out


def intended_walk(csr: tuple, truth: list[LandmarkTruth], start: int):
    """The shortest walk (map edge weights, VNM time steps) from ``start`` through the truth sets in order:
    :func:`core.search.plan_walk` with G = 0 on true nodes, -inf elsewhere, alpha = 1."""
    from core.search import plan_walk

    n = len(csr[0]) - 1
    logp = np.full((n, len(truth)), -np.inf)
    for i, t in enumerate(truth):
        logp[t.nodes, i] = 0.0
    return plan_walk(*csr, logp, start, alpha=1.0)


def path_length_m(xy: np.ndarray) -> float:
    """Length (m) of a polyline (M, 2)."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    return float(np.linalg.norm(np.diff(xy, axis=0), axis=1).sum()) if len(xy) > 1 else 0.0


def plan_metrics(planned, intended, truth: list[LandmarkTruth], poses: np.ndarray) -> dict:
    """LM-Nav planning metrics of a planned walk (``core.search.WalkResult``) against the truth.

    Returns a JSON-ready dict: ``planning_success`` (bool), ``planning_efficiency`` (min(1, intended /
    planned), VNM steps), the lengths in steps and in true metres, and per landmark the chosen node,
    whether it is true, and the distance (m) from it to the nearest true node.
    """
    ok = bool(planned.ok and intended.ok)
    chosen = [int(v) for v in planned.landmark_nodes] if planned.ok else []
    success = ok and planning_success(chosen, [t.nodes for t in truth])
    eff = planning_efficiency(intended.length, planned.length) if ok else 0.0
    per = []
    for i, t in enumerate(truth):
        v = chosen[i] if i < len(chosen) else None
        d = None if v is None else float(np.min(np.hypot(*(poses[t.nodes, :2] - poses[v, :2]).T)))
        per.append({"phrase": t.phrase, "categories": t.categories, "node": v,
                    "true": v is not None and v in set(t.nodes.tolist()),
                    "m_from_truth": None if d is None else round(d, 2), "truth_nodes": t.nodes.tolist()})
    return {"planning_success": bool(success), "planning_efficiency": round(float(eff), 4),
            "planned_steps": float(planned.length) if planned.ok else None,
            "intended_steps": float(intended.length) if intended.ok else None,
            "planned_m": path_length_m(poses[planned.nodes, :2]) if planned.ok else None,
            "intended_m": path_length_m(poses[intended.nodes, :2]) if intended.ok else None,
            "intended_nodes": intended.nodes.tolist() if intended.ok else [], "landmarks": per}
