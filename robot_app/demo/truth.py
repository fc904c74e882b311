"""Ground truth in world terms: which map nodes show a landmark, the intended walk, the paper's metrics.

LM-Nav (Shah et al., CoRL 2022, Sec. 5) scores a plan against the nodes where each landmark is truly
visible (hand-labelled there). In the simulated world the labels come from geometry, with the same
rules as ``robot-app eval sim`` (:func:`robot_app.sim.eval_truth.landmark_nodes`: near it, or within its
viewing range, inside the camera's field of view and not hidden behind a building). Each map node's
true pose is the recorded pose at its frame (the exploration log's odometry is the plant's true pose).
A demo instruction is free text, so its landmarks are categories: a node shows one when it shows ANY
instance of the category.

The intended walk is the shortest walk from the start through the ground-truth sets in order (the
same LM-Nav search with G = 0 on true nodes and -inf elsewhere), so planning efficiency
(:func:`core.metrics.planning_efficiency`) compares equal units (VNM time steps of the map's edges).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from core.metrics import planning_efficiency, planning_success
from core.search import plan_walk
from robot_app.demo.scenario import DemoInputError, phrase_categories
from robot_app.sim.eval_truth import TruthParams, landmark_nodes
from robot_app.sim.eval_truth import node_true_poses as poses_xy_yaw

__all__ = ["node_true_poses", "visible_nodes", "LandmarkTruth", "landmark_truth", "building_outline",
           "intended_walk", "plan_metrics", "path_length_m"]


def node_true_poses(node_t_s: np.ndarray, odom: dict) -> np.ndarray:
    """(N, 3) float64 true (x_m, y_m, yaw_rad) ENU of nodes taken at log times ``node_t_s`` (s).

    ``odom`` is a traversal log's odometry (:attr:`core.tlog.TraversalLog.odom`), which in a recorded
    simulated exploration is the plant's true pose (interpolated at the node times,
    :func:`robot_app.sim.eval_truth.node_true_poses`).

    Raises
    ------
    ValueError
        If the log has no odometry.
    """
    if np.asarray(odom.get("t_s", ())).size == 0:
        raise ValueError("the exploration log has no odometry: no true poses for the ground truth")
    xy, yaw = poses_xy_yaw(np.asarray(node_t_s, dtype=np.float64), odom)
    return np.concatenate([xy, yaw[:, None]], axis=1).astype(np.float64)


def building_outline(b, step_m: float = 2.0) -> np.ndarray:
    """(P, 2) points along a building's footprint outline, m ENU (for drawing)."""
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
    """Sorted (M,) int64 node ids that show an instance of any of ``categories`` (module docstring).

    Parameters
    ----------
    world : robot_app.sim.world.World
    poses : (N, 3) float64 true node poses (x_m, y_m, yaw_rad)
    categories : iterable of str, world categories
    hfov_deg : the camera's horizontal field of view, degrees
    """
    cats = set(categories)
    poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
    params = dataclasses.replace(TruthParams(), hfov_deg=float(hfov_deg))
    seen = np.zeros(len(poses), dtype=bool)
    for name, cat, _, _ in world.landmarks():
        if cat in cats:
            seen |= landmark_nodes(world, name, poses[:, :2], poses[:, 2], params=params)
    return np.flatnonzero(seen).astype(np.int64)


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
