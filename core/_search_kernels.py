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


@nb.njit(_I64(_I64[::1], _I64[::1], nb.float32[::1], _F64, _F64, _I64, _F64[::1], _I64[::1],
              _I64[::1], _I64[::1], _I64[::1], _I64[::1], _I64[::1], nb.boolean[::1]),
         cache=True, nogil=True)
def max_plus_buckets(indptr, indices, weights, alpha, delta, n_circ, value, pred,
                     order, counts, circ_head, ent_node, ent_next, settled):  # pragma: no cover - compiled
    """Same result as :func:`max_plus_dijkstra`, with bucket queues instead of a heap.

    Buckets of width ``delta <= alpha * min(D)`` over non-loop edges (Dial's / Dinitz's rule): two
    keys in one bucket differ by less than any edge cost, so a bucket's nodes settle in any order and
    the result stays exact. Sources are counting-sorted into static buckets; improved nodes go to a
    circular array of ``n_circ > alpha * max(D) / delta + 1`` buckets. O(N + E + buckets scanned).

    Scratch: ``order`` (N,), ``counts`` (>= static buckets + 1,), ``circ_head`` (n_circ,),
    ``ent_node``/``ent_next`` (E + 1,), ``settled`` (N,). Returns the number of nodes settled, or
    -1 when the value range needs more static buckets than ``counts`` holds or the scan would exceed
    its work limit (``value``/``pred`` are then partly updated: the caller reruns the heap version on
    a copy of the initial values).
    """
    n = value.shape[0]
    top = -np.inf
    bottom = np.inf
    for v in range(n):
        settled[v] = False
        x = value[v]
        if x > -np.inf:
            if x > top:
                top = x
            if x < bottom:
                bottom = x
    if top == -np.inf:
        return 0
    span = (top - bottom) / delta  # compared as a float first: a huge span must not overflow int64
    if not span < counts.shape[0] - 2:
        return -1
    n_static = np.int64(span) + 1
    for b in range(n_static + 1):
        counts[b] = 0
    for v in range(n):
        if value[v] > -np.inf:
            counts[np.int64((top - value[v]) / delta) + 1] += 1
    for b in range(n_static):
        counts[b + 1] += counts[b]
    for v in range(n):
        if value[v] > -np.inf:
            b = np.int64((top - value[v]) / delta)
            order[counts[b]] = v
            counts[b] += 1
    # counts[b] is now the end of static bucket b; its start is counts[b - 1] (0 for b = 0)
    for c in range(n_circ):
        circ_head[c] = -1
    n_ent = 0
    pending = 0
    done = 0
    limit = 64 * (n + indices.shape[0]) + n_static
    b = 0
    while b < n_static or pending > 0:
        if b > limit:
            return -1
        lo = counts[b - 1] if b > 0 else 0
        hi = counts[b] if b < n_static else lo
        slot = b % n_circ
        e_head = circ_head[slot]
        circ_head[slot] = -1
        j = lo
        while j < hi or e_head != -1:
            if j < hi:
                u = order[j]
                j += 1
            else:
                u = ent_node[e_head]
                e_head = ent_next[e_head]
                pending -= 1
            if settled[u]:
                continue
            settled[u] = True
            done += 1
            key = value[u]
            for e in range(indptr[u], indptr[u + 1]):
                v = indices[e]
                if settled[v]:
                    continue
                cand = key - alpha * np.float64(weights[e])
                if cand > value[v]:
                    value[v] = cand
                    pred[v] = u
                    bb = np.int64((top - cand) / delta)
                    if bb <= b:  # rounding at a bucket edge; never the current bucket
                        bb = b + 1
                    s2 = bb % n_circ
                    ent_node[n_ent] = v
                    ent_next[n_ent] = circ_head[s2]
                    circ_head[s2] = n_ent
                    n_ent += 1
                    pending += 1
        b += 1
    return done


@nb.njit(nb.types.Tuple((_F64[::1], _I64[:, ::1]))(
    _I64[::1], _I64[::1], nb.float32[::1], _F64[:, ::1], _I64, _F64, _F64, _I64),
    cache=True, nogil=True)
def lmnav_dp(indptr, indices, weights, logp, start, alpha, delta, n_circ):  # pragma: no cover - compiled
    """LM-Nav Algorithm 1 dynamic programme over K landmarks.

    ``Q(0, v) = -alpha * dist(start, v)``;
    ``Q(i, v) = max(Q(i-1, v) + logp[v, i-1], max_u Q(i, u) - alpha * D(u, v))``.

    Each relaxation uses :func:`max_plus_buckets` when ``delta > 0`` (bucket width, at most alpha x
    the smallest non-loop D; ``n_circ`` circular buckets) and falls back to :func:`max_plus_dijkstra`
    when ``delta == 0`` or the buckets give up.

    Returns ``(q_last, pred)``: ``q_last`` (N,) = Q(K, .), and ``pred`` (K+1, N) int64 where
    ``pred[i, v] = u`` means Q(i, v) was reached over the edge u -> v, and ``-1`` means Q(i, v) came
    from Q(i-1, v) + logp[v, i-1] (landmark i visited at v), or, for i = 0, that v is the start.
    """
    n = indptr.shape[0] - 1
    k = logp.shape[1]
    n_edges = indices.shape[0]
    pred = np.full((k + 1, n), -1, dtype=np.int64)
    heap = np.empty(n, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    counts = np.empty(8 * n + 1024 if delta > 0 else 1, dtype=np.int64)
    circ_head = np.empty(max(n_circ, 1), dtype=np.int64)
    ent_node = np.empty(n_edges + 1, dtype=np.int64)
    ent_next = np.empty(n_edges + 1, dtype=np.int64)
    settled = np.empty(n, dtype=np.bool_)
    init = np.empty(n, dtype=np.float64)
    q = np.full(n, -np.inf, dtype=np.float64)
    q[start] = 0.0
    for i in range(k + 1):
        if i > 0:
            for v in range(n):
                q[v] = q[v] + logp[v, i - 1]  # -inf stays -inf; a NaN was rejected by the wrapper
        done = -1
        if delta > 0:
            init[:] = q
            done = max_plus_buckets(indptr, indices, weights, alpha, delta, n_circ, q, pred[i],
                                    heap, counts, circ_head, ent_node, ent_next, settled)
            if done < 0:
                q[:] = init
                pred[i, :] = -1
        if done < 0:
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
