"""numba kernels of the LM-Nav walk search (LM-Nav, Shah et al. CoRL 2022, Sec. 4.4 and Algorithm 1).

Module-level kernels with explicit signatures, ``cache=True`` (compiled once, cached on disk under
``NUMBA_CACHE_DIR`` or ``__pycache__``) and ``nogil=True`` (the app runs a search in a worker thread
while the 50 Hz drive loop keeps running). Call them only through :mod:`core.search`, which validates
dtypes, shapes and contiguity once.

Graph layout: CSR by source node, ``indptr`` (N+1,) int64, ``indices`` (E,) int64, ``weights`` (E,)
float32 >= 0 (D, VNM time steps). All sums are accumulated in float64.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_I64 = nb.int64
_F64 = nb.float64


@nb.njit(nb.void(_F64[::1], _I64[::1], _I64, _F64, _I64), cache=True, nogil=True, inline="always")
def _heap_push(keys, nodes, size, key, node):  # pragma: no cover - compiled
    """Push (key, node) onto the max-heap of ``size`` entries held in ``keys``/``nodes``."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] >= key:
            break
        keys[i] = keys[parent]
        nodes[i] = nodes[parent]
        i = parent
    keys[i] = key
    nodes[i] = node


@nb.njit(nb.void(_F64[::1], _I64[::1], _I64), cache=True, nogil=True, inline="always")
def _heap_pop_into_root(keys, nodes, size):  # pragma: no cover - compiled
    """Remove the root of a max-heap that held ``size + 1`` entries (the new size is ``size``)."""
    key = keys[size]
    node = nodes[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] > keys[child]:
            child += 1
        if keys[child] <= key:
            break
        keys[i] = keys[child]
        nodes[i] = nodes[child]
        i = child
    keys[i] = key
    nodes[i] = node


@nb.njit(_I64(_I64[::1], _I64[::1], nb.float32[::1], _F64, _F64[::1], _I64[::1],
              _F64[::1], _I64[::1], nb.boolean[::1]),
         cache=True, nogil=True)
def max_plus_dijkstra(indptr, indices, weights, alpha, value, pred,
                      heap_keys, heap_nodes, settled):  # pragma: no cover - compiled
    """In place: ``value[v] <- max(value[v], max_u value[u] - alpha * D(u, v))`` to the fixed point.

    ``value`` holds the initial scores (-inf where a node is no source); on return it holds
    ``max_w value0[w] - alpha * dist(w, v)``. ``pred[v]`` is set to the node it was reached from, and
    left untouched (the caller's -1) where the initial score won. Dijkstra is exact because
    ``alpha * D >= 0``. Returns the number of heap pops (work counter for benchmarks).
    """
    n = value.shape[0]
    size = 0
    for v in range(n):
        settled[v] = False
        if value[v] > -np.inf:
            _heap_push(heap_keys, heap_nodes, size, value[v], v)
            size += 1
    pops = 0
    while size > 0:
        key = heap_keys[0]
        u = heap_nodes[0]
        size -= 1
        _heap_pop_into_root(heap_keys, heap_nodes, size)
        pops += 1
        if settled[u] or key < value[u]:
            continue
        settled[u] = True
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if settled[v]:
                continue
            cand = key - alpha * np.float64(weights[e])
            if cand > value[v]:
                value[v] = cand
                pred[v] = u
                _heap_push(heap_keys, heap_nodes, size, cand, v)
                size += 1
    return pops


@nb.njit(nb.types.Tuple((_F64[::1], _I64[:, ::1]))(
    _I64[::1], _I64[::1], nb.float32[::1], _F64[:, ::1], _I64, _F64),
    cache=True, nogil=True)
def lmnav_dp(indptr, indices, weights, logp, start, alpha):  # pragma: no cover - compiled
    """LM-Nav Algorithm 1 dynamic programme over K landmarks.

    ``Q(0, v) = -alpha * dist(start, v)``;
    ``Q(i, v) = max(Q(i-1, v) + logp[v, i-1], max_u Q(i, u) - alpha * D(u, v))``.

    Returns ``(q_last, pred)``: ``q_last`` (N,) = Q(K, .), and ``pred`` (K+1, N) int64 where
    ``pred[i, v] = u`` means Q(i, v) was reached over the edge u -> v, and ``-1`` means Q(i, v) came
    from Q(i-1, v) + logp[v, i-1] (landmark i visited at v), or, for i = 0, that v is the start.
    """
    n = indptr.shape[0] - 1
    k = logp.shape[1]
    e = indices.shape[0]
    pred = np.full((k + 1, n), -1, dtype=np.int64)
    heap_keys = np.empty(n + e + 1, dtype=np.float64)
    heap_nodes = np.empty(n + e + 1, dtype=np.int64)
    settled = np.empty(n, dtype=np.bool_)
    q = np.full(n, -np.inf, dtype=np.float64)
    q[start] = 0.0
    max_plus_dijkstra(indptr, indices, weights, alpha, q, pred[0], heap_keys, heap_nodes, settled)
    for i in range(1, k + 1):
        for v in range(n):
            q[v] = q[v] + logp[v, i - 1]  # -inf stays -inf; a NaN was rejected by the wrapper
        max_plus_dijkstra(indptr, indices, weights, alpha, q, pred[i], heap_keys, heap_nodes, settled)
    return q, pred


@nb.njit(nb.types.Tuple((_I64[::1], _I64[::1]))(_I64[:, ::1], _I64, _I64),
         cache=True, nogil=True)
def reconstruct_walk(pred, end, start):  # pragma: no cover - compiled
    """Follow ``pred`` back from (K, end) to (0, start).

    Returns ``(nodes, landmark_positions)``: the walk from ``start`` to ``end`` and, for each
    landmark i, the index into ``nodes`` where it is visited (non-decreasing).
    """
    k = pred.shape[0] - 1
    n = pred.shape[1]
    rev = np.empty(n * (k + 1) + 1, dtype=np.int64)  # a walk settles each (level, node) at most once
    rev_landmark = np.empty(k, dtype=np.int64)        # positions counted from the end, fixed below
    m = 0
    level = k
    v = end
    rev[m] = v
    m += 1
    while True:
        u = pred[level, v]
        if u == -1:
            if level == 0:
                break
            rev_landmark[level - 1] = m - 1
            level -= 1
        else:
            rev[m] = u
            m += 1
            v = u
    nodes = np.empty(m, dtype=np.int64)
    for j in range(m):
        nodes[j] = rev[m - 1 - j]
    positions = np.empty(k, dtype=np.int64)
    for i in range(k):
        positions[i] = m - 1 - rev_landmark[i]
    return nodes, positions
