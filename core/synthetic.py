"""Seeded synthetic topological graphs for tests, benchmarks and the example map.

Not a substitute for a recorded map: nodes are random points, edges join k nearest neighbours.
"""

from __future__ import annotations

import numpy as np

#: metres travelled per VNM time step assumed when turning metres into D (GNM: 4 Hz at ~1 m/s)
METRES_PER_STEP = 0.25


def random_geometric_graph(n: int, *, degree: int = 6, spacing_m: float = 3.0, seed: int = 0):
    """Random geometric graph with about ``degree`` undirected neighbours per node.

    Nodes are uniform in a square of side ``spacing_m * sqrt(n)`` metres (about one node per
    ``spacing_m`` of travel, as the map builder's default subsampling); each node is joined to its
    ``degree - 1`` nearest neighbours, both directions; after removing duplicates the mean degree
    is about ``degree`` (5.96 for ``degree=6`` at 10k nodes).

    Returns
    -------
    indptr : (n+1,) int64; indices : (E,) int64; weights : (E,) float32 D in time steps
    (distance / METRES_PER_STEP); xy : (n, 2) float64 positions in metres (east, north).

    Raises
    ------
    ValueError
        If ``n < 1`` or ``degree < 0``.
    """
    from scipy.spatial import cKDTree

    if n < 1 or degree < 0:
        raise ValueError(f"random_geometric_graph: need n >= 1 and degree >= 0, got n={n}, degree={degree}")
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0.0, spacing_m * np.sqrt(n), size=(n, 2))
    k = min(max(degree - 1, 1), n - 1)
    if k == 0:
        return np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), xy
    dist, nbr = cKDTree(xy).query(xy, k=k + 1)
    src = np.repeat(np.arange(n), k)
    dst = nbr[:, 1:].ravel()
    d = dist[:, 1:].ravel()
    src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    d = np.concatenate([d, d])
    pairs = np.unique(np.stack([src, dst, np.round(d * 1e6).astype(np.int64)], axis=1), axis=0)
    src, dst = pairs[:, 0], pairs[:, 1]
    w = (pairs[:, 2] / 1e6 / METRES_PER_STEP).astype(np.float32)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, src + 1, 1)
    return np.cumsum(indptr), dst.astype(np.int64), w, xy
