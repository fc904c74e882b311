"""Reference implementations of the LM-Nav DP, for tests and ``robot-app bench search``.

Same objective and recursion as :func:`core.search.plan_walk` (LM-Nav Sec. 4.4, Algorithm 1), written
the obvious way so the numba kernel can be checked against them:

- :func:`dp_values_python`: pure Python with ``heapq`` (slow, obviously right);
- :func:`dp_values_scipy`: one ``scipy.sparse.csgraph.dijkstra`` per landmark from a virtual source
  joined to every node v with weight ``M - Q(i-1, v) - G(v, i)`` (M makes the weights >= 0);
- :func:`brute_force_objective`: maximum of J over every choice of landmark nodes joined by
  shortest paths (exponential; tiny graphs only). Any walk visiting the landmarks in order costs at
  least the sum of shortest paths between its visit nodes, so this is the optimum over all walks.

All return values only (Q(K, .) or the optimum J), not walks: ties make walks non-unique.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from core.search import csr_graph, validate_graph


def dp_values_python(indptr, indices, weights, landmark_logp, start, *, alpha) -> list[float]:
    """Q(K, v) for every node, pure Python + heapq. Returns a list of N floats."""
    n = len(indptr) - 1
    adj = [[(int(indices[e]), float(weights[e])) for e in range(indptr[u], indptr[u + 1])] for u in range(n)]
    q = [float("-inf")] * n
    q[start] = 0.0
    q = _relax_python(adj, q, alpha)
    for i in range(np.shape(landmark_logp)[1]):
        q = _relax_python(adj, [q[v] + float(landmark_logp[v][i]) for v in range(n)], alpha)
    return q


def _relax_python(adj, init, alpha):
    value = list(init)
    heap = [(-val, v) for v, val in enumerate(value) if val > float("-inf")]
    heapq.heapify(heap)
    done = [False] * len(value)
    while heap:
        neg, u = heapq.heappop(heap)
        if done[u]:
            continue
        done[u] = True
        for v, w in adj[u]:
            cand = -neg - alpha * w
            if not done[v] and cand > value[v]:
                value[v] = cand
                heapq.heappush(heap, (-cand, v))
    return value


def dp_values_scipy(indptr, indices, weights, landmark_logp, start, *, alpha) -> np.ndarray:
    """Q(K, v) for every node with scipy's Dijkstra, one run per landmark. Returns (N,) float64."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    indptr, indices, weights = validate_graph(indptr, indices, weights)
    n = indptr.shape[0] - 1
    logp = np.asarray(landmark_logp, dtype=np.float64)
    graph = csr_graph(indptr, indices, weights).tocoo() if alpha > 0 else None
    q = np.full(n, -np.inf)
    q[start] = 0.0
    for i in range(-1, logp.shape[1]):
        init = q if i < 0 else q + logp[:, i]
        finite = np.isfinite(init)
        if not finite.any():
            return np.full(n, -np.inf)
        if graph is None:  # alpha = 0: every reachable node gets the best reachable initial value
            q = _alpha_zero(indptr, indices, init)
            continue
        top = init[finite].max()
        src_w = np.where(finite, top - init, 0.0)
        src_w = np.where(src_w == 0.0, np.finfo(np.float64).tiny, src_w)
        # node 0 is the virtual source, map node v is v + 1
        rows = np.concatenate([np.zeros(finite.sum(), dtype=np.int64), graph.row + 1])
        cols = np.concatenate([np.flatnonzero(finite) + 1, graph.col + 1])
        data = np.concatenate([src_w[finite], graph.data * alpha])
        full = csr_matrix((data, (rows, cols)), shape=(n + 1, n + 1))
        dist = dijkstra(full, directed=True, indices=0)[1:]
        q = top - dist
    return q


def _alpha_zero(indptr, indices, init):
    n = len(init)
    out = np.array(init, dtype=np.float64)
    order = np.argsort(-out)
    seen = np.zeros(n, dtype=bool)
    for s in order:
        if not np.isfinite(out[s]) or seen[s]:
            continue
        stack = [s]
        seen[s] = True
        while stack:
            u = stack.pop()
            out[u] = max(out[u], init[s])
            for v in indices[indptr[u]:indptr[u + 1]]:
                if not seen[v]:
                    seen[v] = True
                    stack.append(v)
    return out


def brute_force_objective(indptr, indices, weights, landmark_logp, start, *, alpha) -> float:
    """max J over all walks (landmark nodes x shortest paths), by exhaustive enumeration."""
    from scipy.sparse.csgraph import dijkstra

    indptr, indices, weights = validate_graph(indptr, indices, weights)
    n = indptr.shape[0] - 1
    logp = np.asarray(landmark_logp, dtype=np.float64)
    dist = dijkstra(csr_graph(indptr, indices, weights), directed=True)
    best = float("-inf")
    for choice in itertools.product(range(n), repeat=logp.shape[1]):
        prev, total = start, 0.0
        for i, v in enumerate(choice):
            if not np.isfinite(dist[prev, v]):
                total = float("-inf")
                break
            total += logp[v, i] - alpha * dist[prev, v]
            prev = v
        best = max(best, total)
    return best
