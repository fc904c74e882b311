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


@nb.njit(nb.void(_F64[::1], _I64[::1], _I64[::1], _I64), cache=True, nogil=True)
def _sift_up(value, heap, pos, i):  # pragma: no cover - compiled
    """Move entry ``i`` of the indexed 4-ary max-heap towards the root while its value is larger."""
    node = heap[i]
    key = value[node]
    while i > 0:
        parent = (i - 1) >> 2
        pnode = heap[parent]
        if value[pnode] >= key:
            break
        heap[i] = pnode
        pos[pnode] = i
        i = parent
    heap[i] = node
    pos[node] = i


@nb.njit(nb.void(_F64[::1], _I64[::1], _I64[::1], _I64, _I64), cache=True, nogil=True)
def _sift_down(value, heap, pos, size, i):  # pragma: no cover - compiled
    """Move entry ``i`` of the indexed 4-ary max-heap of ``size`` entries towards the leaves."""
    node = heap[i]
    key = value[node]
    while True:
        first = 4 * i + 1
        if first >= size:
            break
        best = first
        best_key = value[heap[first]]
        last = min(first + 4, size)
        for c in range(first + 1, last):
            ck = value[heap[c]]
            if ck > best_key:
                best = c
                best_key = ck
        if best_key <= key:
            break
        heap[i] = heap[best]
        pos[heap[i]] = i
        i = best
    heap[i] = node
    pos[node] = i


@nb.njit(_I64(_I64[::1], _I64[::1], nb.float32[::1], _F64, _F64[::1], _I64[::1], _I64[::1], _I64[::1]),
         cache=True, nogil=True)
def max_plus_dijkstra(indptr, indices, weights, alpha, value, pred, heap, pos):  # pragma: no cover - compiled
    """In place: ``value[v] <- max_w value[w] - alpha * dist(w, v)`` (max-plus Dijkstra).

    ``value`` holds the initial scores (-inf where a node is no source); every finite one is a
    source. ``pred[v]`` is set to the node v was last improved from and left untouched (the caller's
    -1) where the initial score won. Exact because ``alpha * D >= 0``. An indexed 4-ary max-heap
    with increase-key keeps at most one entry per node (``heap`` and ``pos`` are (N,) scratch
    arrays; ``pos[v] = -1`` not queued, ``-2`` settled). Returns the number of nodes settled.
    """
    n = value.shape[0]
    size = 0
    for v in range(n):
        if value[v] > -np.inf:
            heap[size] = v
            pos[v] = size
            size += 1
        else:
            pos[v] = -1
    for i in range((size - 2) // 4, -1, -1):  # Floyd's bottom-up heap construction, O(N)
        _sift_down(value, heap, pos, size, i)
    settled = 0
    while size > 0:
        u = heap[0]
        size -= 1
        if size > 0:
            heap[0] = heap[size]
            pos[heap[0]] = 0
            _sift_down(value, heap, pos, size, 0)
        pos[u] = -2
        settled += 1
        key = value[u]
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            p = pos[v]
            if p == -2:
                continue
            cand = key - alpha * np.float64(weights[e])
            if cand > value[v]:
                value[v] = cand
                pred[v] = u
                if p == -1:
                    heap[size] = v
                    p = size
                    size += 1
                _sift_up(value, heap, pos, p)
    return settled


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
    pred = np.full((k + 1, n), -1, dtype=np.int64)
    heap = np.empty(n, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    q = np.full(n, -np.inf, dtype=np.float64)
    q[start] = 0.0
    max_plus_dijkstra(indptr, indices, weights, alpha, q, pred[0], heap, pos)
    for i in range(1, k + 1):
        for v in range(n):
            q[v] = q[v] + logp[v, i - 1]  # -inf stays -inf; a NaN was rejected by the wrapper
        max_plus_dijkstra(indptr, indices, weights, alpha, q, pred[i], heap, pos)
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
