"""Planning a walk on a map file: what ``robot-app plan`` and the mission executive share.

Loads the map, takes (N, K) landmark log-likelihoods (from a file or from grounding), runs the chosen
planner (:mod:`core.search`) and describes the result in map terms (node ids, lat/lon, metres).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from core.search import WalkResult, plan_max_likelihood, plan_walk
from robot_app.errors import RequestError

log = logging.getLogger(__name__)

PLANNERS = {"lmnav": plan_walk, "max-likelihood": plan_max_likelihood}


class PlanningError(RequestError):
    """The request cannot be planned as given (bad scores, unknown start, missing model...);
    ``bad_input`` marks one whose text or values are at fault (no landmark in the instruction)."""


@dataclass(frozen=True)
class PlannedWalk:
    """A walk with the names of its landmarks and the map it was planned on."""

    result: WalkResult
    landmarks: list[str]
    planner: str
    alpha: float
    landmark_logp: np.ndarray

    def describe(self, topomap) -> dict[str, Any]:
        """JSON-ready summary: status, walk node ids, per-landmark node/lat/lon/G, J, length (steps, m)."""
        r = self.result
        nodes = topomap.nodes
        xy = np.stack([nodes.easting_m, nodes.northing_m], axis=1)
        walk = r.nodes
        length_m = float(np.linalg.norm(np.diff(xy[walk], axis=0), axis=1).sum()) if len(walk) > 1 else 0.0
        out = {"status": r.status.value, "planner": self.planner, "alpha": self.alpha,
               "objective": r.objective if np.isfinite(r.objective) else None,
               "length_steps": r.length, "length_m": length_m, "nodes": walk.tolist(), "landmarks": []}
        if r.ok:
            for i, (name, pos) in enumerate(zip(self.landmarks, r.landmark_positions.tolist())):
                v = int(walk[pos])
                out["landmarks"].append({"name": name, "node": v, "position": pos,
                                         "lat_deg": float(nodes.lat_deg[v]), "lon_deg": float(nodes.lon_deg[v]),
                                         "logp": float(self.landmark_logp[v, i])})
        return out


def load_scores(path: str, *, n_nodes: int, n_landmarks: int) -> np.ndarray:
    """Read an (N, K) float ``.npy`` of log-likelihoods and check it against the map and landmark list.

    Raises
    ------
    PlanningError
        Unreadable file, wrong shape (names the expected one), NaN.
    """
    try:
        scores = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise PlanningError(f"--scores {path}: cannot read a .npy array ({exc})") from exc
    if scores.ndim != 2 or scores.shape != (n_nodes, n_landmarks):
        raise PlanningError(f"--scores {path}: shape {scores.shape} does not match the map's {n_nodes} nodes "
                            f"x {n_landmarks} landmark(s): expected ({n_nodes}, {n_landmarks})")
    if not np.issubdtype(scores.dtype, np.floating):
        raise PlanningError(f"--scores {path}: expected floats, got {scores.dtype}")
    if np.isnan(scores).any():
        raise PlanningError(f"--scores {path}: contains NaN")
    if np.isposinf(scores).any():
        raise PlanningError(f"--scores {path}: contains +inf (log-likelihoods are finite or -inf)")
    return scores.astype(np.float64)


def plan_on_map(topomap, landmarks: Sequence[str], landmark_logp: np.ndarray, *, start: int,
                alpha: float, planner: str = "lmnav", csr: tuple | None = None) -> PlannedWalk:
    """Plan a walk from node ``start`` of ``topomap`` (a :class:`core.mapstore.TopoMap`).

    ``landmark_logp`` (N, K) float log-likelihoods; ``csr``: the map's checked CSR arrays
    (:func:`core.search.check_graph`: (N+1,) int64, (E,) int64, (E,) float32, read-only), for a caller
    that keeps them across opens of the same map (:meth:`core.mapstore.TopoMap.graph_key`); default
    ``topomap.csr()``, checked once per opened map.

    Raises
    ------
    PlanningError
        Unknown planner, start not a node of the map, or scores rejected by the search.
    ValueError
        ``csr`` is not a graph of the map's N nodes.
    """
    if planner not in PLANNERS:
        raise PlanningError(f"planner {planner!r} is not one of {', '.join(PLANNERS)}")
    n = len(topomap.nodes)
    if not 0 <= start < n:
        raise PlanningError(f"--start {start}: the map has nodes 0..{n - 1}")
    indptr, indices, weights = topomap.csr() if csr is None else csr
    if indptr.shape[0] != n + 1:
        raise ValueError(f"csr: a graph of {indptr.shape[0] - 1} nodes for a map of {n}")
    try:
        result = PLANNERS[planner](indptr, indices, weights, landmark_logp, start, alpha=alpha)
    except ValueError as exc:
        raise PlanningError(str(exc)) from exc
    log.info("planned %s walk of %d nodes (J=%.3f)", planner, len(result.nodes), result.objective)
    return PlannedWalk(result, list(landmarks), planner, alpha, landmark_logp)
