"""numba kernel of the map builder's redundant-edge removal (:func:`core.graph_build.reduce_edges`).

Apart from :mod:`core.graph_build` so that importing the graph-building module (the service does, for its
constants and helpers) loads no numba or LLVM; ``reduce_edges`` imports this on its first call.
Explicit signature, ``cache=True`` (on disk under ``NUMBA_CACHE_DIR``), ``nogil=True``.
"""

from __future__ import annotations

import heapq

import numba as nb
import numpy as np


@nb.njit(nb.boolean(nb.int64[::1], nb.int64[::1], nb.float64[::1], nb.boolean[::1], nb.int64, nb.int64,
                    nb.int64, nb.float64, nb.float64[::1], nb.int64[::1], nb.int64[::1]),
         cache=True, nogil=True)
def has_path_within(indptr, nbr, w, alive, edge_id_skip, s, t, limit, dist, touched, half_id):  # pragma: no cover
    """Bounded Dijkstra from s (undirected CSR with edge ids in ``nbr`` order): is dist(s, t) <= limit
    without edge ``edge_id_skip``? ``dist`` must be +inf everywhere on entry and is restored."""
    n_touched = 0
    dist[s] = 0.0
    touched[n_touched] = s
    n_touched += 1
    heap = [(0.0, s)]
    found = False
    while len(heap) > 0:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        if u == t:
            found = True
            break
        for e in range(indptr[u], indptr[u + 1]):
            eid = half_id[e]
            if eid == edge_id_skip or not alive[eid]:
                continue
            v = nbr[e]
            nd = d + w[e]
            if nd <= limit and nd < dist[v]:
                if dist[v] == np.inf:
                    touched[n_touched] = v
                    n_touched += 1
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    for j in range(n_touched):
        dist[touched[j]] = np.inf
    return found
