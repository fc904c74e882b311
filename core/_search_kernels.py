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
              _I64[::1], _I64[::1], _I64[::1], _I64[::1], _F64[::1]),
         cache=True, nogil=True)
def max_plus_buckets(indptr, indices, weights, alpha, delta, n_circ, value, pred,
                     order, counts, circ_head, ent, expanded):  # pragma: no cover - compiled
    """Same result as :func:`max_plus_dijkstra`, with bucket queues instead of a heap (delta-stepping).

    Keys ``top - value`` go into buckets of width ``delta`` (Meyer & Sanders, "Delta-stepping: a
    parallelizable shortest path algorithm", J. Algorithms 49(1), 2003). A bucket is emptied
    label-correcting: a node improved by a node of the same bucket is queued there again and expanded
    again, so the result is exact for any ``delta > 0``; with ``delta <= alpha * min(D)`` (Dial's /
    Dinitz's rule) every node is expanded exactly once. Wider buckets scan far fewer (mostly empty)
    buckets for a few repeated expansions. Sources are counting-sorted into static buckets; improved
    nodes go to a ring of ``n_circ`` buckets (a power of two, ``> alpha * max(D) / delta + 1``), each a
    linked list in ``ent`` (pairs node, next).

    Scratch: ``order`` (N,), ``counts`` (>= static buckets + 1,), ``circ_head`` (n_circ,), ``ent``
    (2 x capacity,), ``expanded`` (N,) float64 (the value a node was last expanded with). Returns the
    number of expansions, or -1 when the value range needs more static buckets than ``counts`` holds,
    the queue outgrows ``ent`` or the scan exceeds its work limit (``value``/``pred`` are then partly
    updated: the caller reruns the heap version on a copy of the initial values).
    """
    n = value.shape[0]
    top = -np.inf
    bottom = np.inf
    for v in range(n):
        expanded[v] = -np.inf
        x = value[v]
        if x > -np.inf:
            if x > top:
                top = x
            if x < bottom:
                bottom = x
    if top == -np.inf:
        return 0
    inv_delta = 1.0 / delta
    span = (top - bottom) * inv_delta  # compared as a float first: a huge span must not overflow int64
    if not span < counts.shape[0] - 2:
        return -1
    n_static = np.int64(span) + 1
    for b in range(n_static + 1):
        counts[b] = 0
    for v in range(n):
        if value[v] > -np.inf:
            counts[np.int64((top - value[v]) * inv_delta) + 1] += 1
    for b in range(n_static):
        counts[b + 1] += counts[b]
    for v in range(n):
        if value[v] > -np.inf:
            b = np.int64((top - value[v]) * inv_delta)
            order[counts[b]] = v
            counts[b] += 1
    # counts[b] is now the end of static bucket b; its start is counts[b - 1] (0 for b = 0)
    mask = n_circ - 1
    for c in range(n_circ):
        circ_head[c] = -1
    cap = ent.shape[0] // 2
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
        slot = b & mask
        j = lo
        while True:
            if j < hi:
                u = order[j]
                j += 1
            else:
                head = circ_head[slot]
                if head == -1:
                    break
                u = ent[2 * head]
                circ_head[slot] = ent[2 * head + 1]
                pending -= 1
            key = value[u]
            if key <= expanded[u]:  # queued with a value it no longer has, or already expanded with it
                continue
            expanded[u] = key
            done += 1
            for e in range(indptr[u], indptr[u + 1]):
                v = indices[e]
                cand = key - alpha * np.float64(weights[e])
                if cand > value[v]:
                    value[v] = cand
                    pred[v] = u
                    bb = np.int64((top - cand) * inv_delta)
                    if bb < b:  # rounding at a bucket edge
                        bb = b
                    if n_ent >= cap:
                        return -1
                    s2 = bb & mask
                    ent[2 * n_ent] = v
                    ent[2 * n_ent + 1] = circ_head[s2]
                    circ_head[s2] = n_ent
                    n_ent += 1
                    pending += 1
        b += 1
    return done


@nb.njit(nb.types.Tuple((_F64[::1], _I64[:, ::1]))(
    _I64[::1], _I64[::1], nb.float32[::1], _F64[:, ::1], _I64, _F64, _F64, _I64, nb.boolean),
    cache=True, nogil=True)
def lmnav_dp(indptr, indices, weights, logp, start, alpha, delta, n_circ, relax_last):  # pragma: no cover - compiled
    """LM-Nav Algorithm 1 dynamic programme over K landmarks.

    ``Q(0, v) = -alpha * dist(start, v)``;
    ``Q(i, v) = max(Q(i-1, v) + logp[v, i-1], max_u Q(i, u) - alpha * D(u, v))``.

    Each relaxation uses :func:`max_plus_buckets` when ``delta > 0`` (bucket width; ``n_circ``: at
    least ``alpha * max(D) / delta + 2`` ring buckets, rounded up here to a power of two) and falls back
    to :func:`max_plus_dijkstra` when ``delta == 0`` or the buckets give up.

    ``relax_last=False`` skips the relaxation of the last level: it only lowers values (every relaxed
    value is some node's initial value minus a cost >= 0), so ``max_v Q(K, v)`` and its node are
    already those of the initial values Q(K-1, v) + logp[v, K-1] - the best walk ends where it visits
    the last landmark. ``q_last`` is then exact at its maximum only (what :func:`core.search.plan_walk`
    needs); ``True`` gives Q(K, .) at every node.

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
    ring = 1
    while ring < n_circ:
        ring *= 2
    circ_head = np.empty(ring if delta > 0 else 1, dtype=np.int64)
    ent = np.empty(2 * (2 * n_edges + n + 16) if delta > 0 else 2, dtype=np.int64)
    expanded = np.empty(n, dtype=np.float64)
    init = np.empty(n, dtype=np.float64)
    q = np.full(n, -np.inf, dtype=np.float64)
    q[start] = 0.0
    for i in range(k + 1):
        if i > 0:
            for v in range(n):
                q[v] = q[v] + logp[v, i - 1]  # -inf stays -inf; a NaN was rejected by the wrapper
        if i == k and not relax_last:
            break
        done = -1
        if delta > 0:
            init[:] = q
            done = max_plus_buckets(indptr, indices, weights, alpha, delta, ring, q, pred[i],
                                    heap, counts, circ_head, ent, expanded)
            if done < 0:
                q[:] = init
                pred[i, :] = -1
        if done < 0:
            max_plus_dijkstra(indptr, indices, weights, alpha, q, pred[i], heap, pos)
    return q, pred


_I32 = nb.int32


@nb.njit(nb.types.Tuple((_F64, _I64, _I64))(
    _I64[::1], _I64[::1], nb.float32[::1], _F64[:, :], _I64, _F64, _F64, _I64,
    _F64[::1], _I32[:, ::1], _I32[::1], _I32[::1], _I32[::1], _F64[::1]),
    cache=True, nogil=True)
def lmnav_search(indptr, indices, weights, logp, start, alpha, delta, n_circ,
                 cost, pred, ent_node, ent_next, ent_layer, ent_cost):  # pragma: no cover - compiled
    """LM-Nav Algorithm 1 as one shortest-path search over the layered graph, stopping at the optimum.

    States (i, v): node v after visiting landmarks 1..i (i = 0..K). Moving along an edge u -> v costs
    ``alpha * D(u, v)``; visiting landmark i+1 at v moves (i, v) -> (i+1, v) at cost
    ``m_i - logp[v, i]`` where ``m_i = max_v logp[v, i]`` (>= 0; ``-inf`` = no move). For every walk
    this total cost is ``sum_i m_i - J``, so the cheapest path from (0, start) to layer K is the walk of
    largest J, and the DP of :func:`lmnav_dp` is Dijkstra's algorithm on this graph. Unlike the
    level-by-level DP, the search stops once the cheapest layer-K state is final: states costlier than
    the optimum are never expanded (on 10k-node random maps about half of the (K+1) x N states, on
    100k-node maps over 90 %).

    Queue: the bucket queue of :func:`max_plus_buckets` over costs (width ``delta``; a ring of at least
    ``n_circ`` buckets, the edge costs' need, grown to cover the widest visit cost and rounded up to a
    power of two), label-correcting within a bucket, so exact for any ``delta > 0``. Layer-K states
    are not queued: the cheapest one reached so far is a bound, moves costing at least the bound are
    dropped (costs only grow along a walk), and the search ends after the bucket holding the bound.

    Scratch, reused across calls by the caller (allocating and first-touching fresh pages costs about
    15 % of a search on a 10k-node map): ``cost`` (>= (K+1) N,) float64; ``pred`` (K+1, N) int32, filled
    as in :func:`lmnav_dp` (valid along the optimal walk only); the queue entries ``ent_node``,
    ``ent_next``, ``ent_layer`` int32 and ``ent_cost`` float64, all of one length (the capacity).
    ``logp`` may be any 2-D layout (no copy of a transposed array).

    Returns ``(cost, end, status)``: the optimal cost, the walk's last node and status 0 = found, 1 = no walk
    reaches layer K, -1 = the visit costs would need over 2**24 ring buckets or N (K+1) >= 2**31 (the
    caller then uses :func:`lmnav_dp`), -2 = the queue outgrew the entry arrays (the caller grows them
    and searches again).
    """
    n = indptr.shape[0] - 1
    k = logp.shape[1]
    if k == 0:
        pred[0, start] = -1
        return 0.0, start, 0
    m = np.empty(k, dtype=np.float64)
    inv_delta = 1.0 / delta
    span = 0.0
    for i in range(k):
        best = -np.inf
        worst = np.inf
        for v in range(n):
            x = logp[v, i]
            if x > best:
                best = x
            if x > -np.inf and x < worst:
                worst = x
        if best == -np.inf:
            return np.inf, -1, 1
        m[i] = best
        span = max(span, (best - worst) * inv_delta)
    if not span < 16777216.0:  # 2**24 ring buckets: visit costs far wider than the edge costs
        return np.inf, -1, -1
    need = max(n_circ, np.int64(span) + 3)
    ring = 1
    while ring < need:
        ring *= 2
    mask = ring - 1
    total = (k + 1) * n
    cap = ent_node.shape[0]
    if total >= 2147483647 or cap >= 2147483647:  # entries and pred are int32 (a compact queue stays in cache)
        return np.inf, -1, -1
    cost[:total] = np.inf
    circ_head = np.full(ring, -1, dtype=np.int32)
    cost[start] = 0.0
    pred[0, start] = -1
    ent_node[0] = np.int32(start)
    ent_layer[0] = 0
    ent_next[0] = -1
    ent_cost[0] = 0.0
    circ_head[0] = 0
    n_ent = 1
    pending = 1
    bound = np.inf  # cost of the cheapest layer-K state reached so far; layer-K states are never queued
    best_end = -1
    b = 0
    # every queued cost < bound lies in a bucket <= floor(bound / delta): past it nothing can improve
    while pending > 0 and (best_end < 0 or b <= np.int64(bound * inv_delta)):
        slot = b & mask
        while circ_head[slot] != -1:
            h = circ_head[slot]
            circ_head[slot] = ent_next[h]
            pending -= 1
            u = np.int64(ent_node[h])
            layer = np.int64(ent_layer[h])
            st = layer * n + u
            c = ent_cost[h]
            if c > cost[st] or c >= bound:  # improved since it was queued, or no better than the best walk
                continue
            # the visit of landmark layer+1 at u, then every out-edge within this layer
            x = logp[u, layer]
            for e in range(indptr[u] - 1, indptr[u + 1]):
                if e < indptr[u]:
                    if x == -np.inf:
                        continue
                    v = u
                    t = st + n
                    to = layer + 1
                    cand = c + (m[layer] - x)
                else:
                    v = indices[e]
                    t = st - u + v
                    to = layer
                    cand = c + alpha * np.float64(weights[e])
                if cand < cost[t] and cand < bound:  # costs only grow along a walk: >= bound is useless
                    cost[t] = cand
                    if to == k:  # a complete walk, the best so far
                        pred[to, v] = np.int32(-1)
                        bound = cand
                        best_end = v
                        continue
                    pred[to, v] = np.int32(u) if to == layer else np.int32(-1)
                    if n_ent == cap:  # the entry arrays are full: the caller grows them
                        return np.inf, -1, -2
                    bb = np.int64(cand * inv_delta)
                    if bb < b:  # rounding at a bucket edge
                        bb = b
                    s2 = bb & mask
                    ent_node[n_ent] = np.int32(v)
                    ent_layer[n_ent] = np.int32(to)
                    ent_cost[n_ent] = cand
                    ent_next[n_ent] = circ_head[s2]
                    circ_head[s2] = np.int32(n_ent)
                    n_ent += 1
                    pending += 1
        b += 1
    if best_end >= 0:
        return bound, best_end, 0
    return np.inf, -1, 1


_CSR_CHECK = nb.types.Tuple((_I64, _F64, _F64, _F64))


@nb.njit([_CSR_CHECK(_I64[::1], _I64[::1], nb.float32[::1]), _CSR_CHECK(_I64[::1], _I64[::1], _F64[::1])],
         cache=True, nogil=True)
def csr_check(indptr, indices, weights):  # pragma: no cover - compiled
    """One pass over a CSR graph: ``(problem, min, max, mean)``; problem 0 = valid, 1 = ``indptr`` not
    starting at 0 / decreasing / not ending at E, 2 = an index out of [0, N), 3 = a NaN or infinite
    weight, 4 = a negative weight; min / max / mean of D over the non-loop edges (``inf, 0, 0`` when
    there are none)."""
    n = indptr.shape[0] - 1
    if indptr[0] != 0 or indptr[n] != indices.shape[0]:
        return 1, np.inf, 0.0, 0.0
    lo = np.inf
    hi = 0.0
    total = 0.0
    count = 0
    for u in range(n):
        if indptr[u + 1] < indptr[u]:
            return 1, np.inf, 0.0, 0.0
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if v < 0 or v >= n:
                return 2, np.inf, 0.0, 0.0
            w = np.float64(weights[e])
            if not np.isfinite(w):
                return 3, np.inf, 0.0, 0.0
            if w < 0:
                return 4, np.inf, 0.0, 0.0
            if v != u:
                if w < lo:
                    lo = w
                if w > hi:
                    hi = w
                total += w
                count += 1
    return 0, lo, hi, total / count if count > 0 else 0.0


@nb.njit([_F64(_I64[::1], _I64[::1], _I64[::1], nb.float32[::1]),
          _F64(_I64[::1], _I64[::1], _I64[::1], _F64[::1])], cache=True, nogil=True)
def walk_length_kernel(nodes, indptr, indices, weights):  # pragma: no cover - compiled
    """Sum of D (cheapest parallel edge) along ``nodes``, float64; NaN when two consecutive nodes have no
    edge (the caller names them)."""
    total = 0.0
    for j in range(nodes.shape[0] - 1):
        a = nodes[j]
        b = nodes[j + 1]
        best = np.inf
        for e in range(indptr[a], indptr[a + 1]):
            if indices[e] == b and np.float64(weights[e]) < best:
                best = np.float64(weights[e])
        if best == np.inf:
            return np.nan
        total += best
    return total


@nb.njit([nb.types.Tuple((_I64[::1], _I64[::1]))(_I64[:, ::1], _I64, _I64),
          nb.types.Tuple((_I64[::1], _I64[::1]))(_I32[:, ::1], _I64, _I64)],
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
