"""A small synthetic campus map with landmark scores, for the quick start and CLI tests.

The nodes follow a street grid (one node every ~3 m, as the map builder's default) around a GPS anchor;
a few landmark categories stand at chosen street corners, some twice (distractors). Instead of CLIP
scores, :func:`example_scores` gives log-likelihoods that fall off with distance to each instance of
a landmark plus seeded noise, so the planner faces the same trade-offs as with a real map. Labelled
synthetic everywhere: no image or model is involved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.grounding import log_likelihoods
from core.synthetic import METRES_PER_STEP

#: WGS-84 anchor of the example (an open field; any location works)
ANCHOR_LAT_DEG = 37.8719
ANCHOR_LON_DEG = -122.2585
#: landmark category -> grid corners (column, row) where an instance stands
LANDMARKS = {
    "a stop sign": [(1, 0), (3, 3)],
    "a white car": [(3, 1)],
    "a glass building": [(0, 3), (4, 4)],
    "a fire hydrant": [(2, 2)],
    "a blue dumpster": [(4, 1)],
}
BLOCK_M = 30.0
SPACING_M = 3.0


@dataclass(frozen=True)
class ExampleMap:
    """Positions (N, 2) metres east/north of the anchor, lat/lon (N,), undirected edges (E, 2) with
    D (E,) in time steps, and the corner (column, row) of each grid corner node."""

    xy_m: np.ndarray
    lat_deg: np.ndarray
    lon_deg: np.ndarray
    edges: np.ndarray
    weights_steps: np.ndarray
    corner_node: dict


def build_example(grid: int = 5) -> ExampleMap:
    """Street grid of ``grid x grid`` corners, ``BLOCK_M`` apart, nodes every ``SPACING_M``."""
    index: dict[tuple[int, int], int] = {}
    xy: list[tuple[float, float]] = []

    def node(p):
        key = (round(p[0] * 10), round(p[1] * 10))
        if key not in index:
            index[key] = len(xy)
            xy.append(p)
        return index[key]

    steps = int(round(BLOCK_M / SPACING_M))
    edges = set()
    for a in range(grid):
        for b in range(grid - 1):
            for horizontal in (True, False):
                prev = None
                for s in range(steps + 1):
                    along = b * BLOCK_M + s * SPACING_M
                    p = (along, a * BLOCK_M) if horizontal else (a * BLOCK_M, along)
                    cur = node(p)
                    if prev is not None:
                        edges.add((min(prev, cur), max(prev, cur)))
                    prev = cur
    xy_m = np.array(xy, dtype=np.float64)
    e = np.array(sorted(edges), dtype=np.int64)
    w = (np.linalg.norm(xy_m[e[:, 0]] - xy_m[e[:, 1]], axis=1) / METRES_PER_STEP).astype(np.float32)
    lat = ANCHOR_LAT_DEG + xy_m[:, 1] / 111_320.0
    lon = ANCHOR_LON_DEG + xy_m[:, 0] / (111_320.0 * np.cos(np.radians(ANCHOR_LAT_DEG)))
    corners = {(c, r): index[(round(c * BLOCK_M * 10), round(r * BLOCK_M * 10))]
               for c in range(grid) for r in range(grid)}
    return ExampleMap(xy_m, lat, lon, e, w, corners)


def example_scores(example: ExampleMap, landmarks: list[str], *, seed: int = 0) -> tuple[np.ndarray, list[set[int]]]:
    """Synthetic (N, K) log-likelihoods and the ground-truth node sets (nodes within 4 m).

    Similarity ~ 0.30 at an instance, falling to 0.18 at 20 m, plus noise (sd 0.01), times a logit
    scale of 100, log-softmax over nodes (as :mod:`core.grounding`).

    Raises
    ------
    KeyError
        For a landmark that the example does not contain (names the ones it has).
    """
    rng = np.random.default_rng(seed)
    n = example.xy_m.shape[0]
    sim = np.empty((n, len(landmarks)))
    truth = []
    for i, name in enumerate(landmarks):
        if name not in LANDMARKS:
            raise KeyError(f"{name!r} is not in the example map (it has: {', '.join(LANDMARKS)})")
        pts = np.array([example.xy_m[example.corner_node[c]] for c in LANDMARKS[name]])
        d = np.min(np.linalg.norm(example.xy_m[:, None, :] - pts[None], axis=2), axis=1)
        sim[:, i] = 0.18 + 0.12 * np.exp(-d / 8.0) + rng.normal(0.0, 0.01, n)
        truth.append(set(np.flatnonzero(d <= 4.0).tolist()))
    return log_likelihoods(sim, logit_scale=100.0), truth
