"""Walk search over a topological map: the LM-Nav objective and the max-likelihood baseline.

Objective (LM-Nav, Shah et al., CoRL 2022, Sec. 4.4; docs/design.md, "Walk-search objective"): for a walk
``v_1 .. v_m`` from the start S with landmark i visited at position ``t_i`` (``t_1 <= ... <= t_K``),

    J = sum_i G(v_{t_i}, i)  -  alpha * sum_j D(v_j, v_{j+1})

where ``G(v, i)`` is the log-likelihood of landmark i at node v (:mod:`core.grounding`) and D the
edge weight in VNM time steps. :func:`plan_walk` maximises J exactly with the dynamic programme of
Algorithm 1 (numba kernels, :mod:`core._search_kernels`, or the same compiled ahead of time,
:mod:`core._search_aot`), run as one bucket-queue Dijkstra over
(landmarks visited, node) states that stops as soon as the best complete walk is final
(``lmnav_search``; states costlier than the optimum are never expanded), with the level-by-level DP
(``lmnav_dp``) as the fallback for alpha = 0, maps without positive D, or score ranges too wide for the
buckets. :func:`plan_max_likelihood` is the paper's baseline (App. C).

Default alpha (``DEFAULT_ALPHA = 0.005`` per VNM time step). The released LM-Nav code weighs raw CLIP
cosine similarity against GPS distance with alpha = 2e-4 per metre. Our G is cosine x logit scale
(100 for CLIP), so the same trade-off is 2e-4 x 100 = 0.02 per metre, and with the VNM's ~0.25 m per
time step (GNM: 4 Hz at ~1 m/s) 0.005 per time step: a 100-step (~25 m) detour costs 0.5 nats, i.e.
a cosine-similarity gain of 0.005. Objective values are only comparable within one map and one set of
landmarks (the softmax normaliser depends on both).
"""

from __future__ import annotations

import enum
import logging
import threading
import weakref
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)


class _Kernels:
    """The walk-search kernels in use: compiled ahead of time (:mod:`core._search_aot`, after
    :func:`use_compiled_kernels`) or else numba's JIT kernels (:mod:`core._search_kernels`), imported at the
    first plan or :func:`warm_up` so that a process that never plans, or plans with the compiled kernels,
    never loads numba and LLVM (about 100 MiB of the service's RSS)."""

    def __init__(self):
        self.backend = None  # "compiled" or "jit" once chosen
        self.detail = ""

    def use(self, impl, backend: str, detail: str) -> None:
        from core._search_aot import KERNELS

        for name in KERNELS:
            setattr(self, name, getattr(impl, name))
        self.backend, self.detail = backend, detail

    def __getattr__(self, name):  # only for names not set yet: the first kernel call picks the JIT kernels
        if name.startswith("_") or self.backend is not None:
            raise AttributeError(name)
        with _KERNELS_LOCK:
            if self.backend is None:
                from core import _search_kernels

                self.use(_search_kernels, "jit", self.detail or "numba JIT kernels (no compiled kernels asked for)")
        return getattr(self, name)


_KERNELS_LOCK = threading.Lock()
kern = _Kernels()


def use_compiled_kernels(directory) -> dict:
    """Plan with the ahead-of-time compiled kernels in ``directory`` (``robot-app kernels build``) when
    they are there and current, else with numba's JIT kernels; call it before the first plan.

    Returns ``{"backend": "compiled" | "jit", "detail": str}``: where the compiled kernels came from, or
    why they could not be used (missing, stale after an upgrade, another CPU). Never raises for a missing
    or stale build: the JIT kernels compute the same walks. Once a plan has run, the choice stays.
    """
    from core import _search_aot

    with _KERNELS_LOCK:
        if kern.backend is None:
            try:
                kern.use(_search_aot.load(directory), "compiled", f"compiled kernels in {directory}")
            except (OSError, ValueError) as exc:
                log.info("walk search: numba JIT kernels (%s)", exc)
                kern.detail = f"numba JIT kernels: {exc}"
                return {"backend": "jit", "detail": kern.detail}
        return kernels_info()


def kernels_info() -> dict:
    """``{"backend": "compiled" | "jit" | None, "detail": str}``; None: not chosen yet (no plan so far)."""
    return {"backend": kern.backend, "detail": kern.detail}

DEFAULT_ALPHA = 0.005


class PlanStatus(enum.Enum):
    """Outcome of a walk search."""

    OK = "ok"
    #: some landmark has no node reachable from the start (in order) with finite log-likelihood
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class WalkResult:
    """A planned walk.

    Attributes
    ----------
    nodes : np.ndarray
        (m,) int64 node indices of the walk, ``nodes[0] == start``; ``[start]`` when unreachable.
    landmark_positions : np.ndarray
        (K,) int64, index into ``nodes`` where landmark i is visited; non-decreasing. Empty when
        unreachable.
    objective : float
        J of the walk (float64 sums); ``-inf`` when unreachable.
    length : float
        sum of D along the walk, VNM time steps (float64 sum).
    status : PlanStatus
    """

    nodes: np.ndarray
    landmark_positions: np.ndarray
    objective: float
    length: float
    status: PlanStatus = PlanStatus.OK

    @property
    def landmark_nodes(self) -> np.ndarray:
        """(K,) int64: the node at which each landmark is visited."""
        return self.nodes[self.landmark_positions]

    @property
    def ok(self) -> bool:
        return self.status is PlanStatus.OK


def validate_graph(indptr, indices, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check a CSR graph and return contiguous ``(int64, int64, float32)`` copies/views (the arrays of
    :func:`check_graph`, read-only, are returned as they are without a second check).

    Raises
    ------
    ValueError
        Naming the argument: wrong dimensions, ``indptr`` not starting at 0 / not non-decreasing /
        not ending at ``len(indices)``, an index out of range, NaN/inf or negative weights.
    """
    if _already_checked(indptr, indices, weights) is not None:
        return indptr, indices, weights  # check_graph's read-only arrays, not the writeable ones behind them
    return _checked_graph(indptr, indices, weights)[0]


#: Graphs :func:`check_graph` validated: id(indptr view) -> (weakrefs to the three read-only views it
#: returned, the private arrays behind them, edge stats).
_CHECKED: dict = {}
#: re-entrant: a view can die (and its weakref callback take the lock) while this thread holds it, when
#: an allocation in the locked section runs the cyclic garbage collector
_CHECKED_LOCK = threading.RLock()


def check_graph(indptr, indices, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a CSR graph once, for many plans: read-only ``(int64, int64, float32)`` copies.

    The planners (:func:`plan_walk`, :func:`plan_max_likelihood`) given exactly these three array objects,
    still read-only, skip the graph check (a full pass over the edges: about 40 % of a 1M-node plan) and
    reuse its edge statistics. A map opened for planning checks its graph this way once
    (``core.mapstore.TopoMap.csr``). The arrays cannot be made writeable again (their buffer is read-only);
    copies of them are checked as any other arrays.

    Raises
    ------
    ValueError
        As :func:`validate_graph`.
    """
    (ip, ix, w), stats = _checked_graph(indptr, indices, weights)
    private = tuple(np.array(a, copy=True) for a in (ip, ix, w))  # what the kernels read (numba: writeable)
    # what the caller holds: arrays over a read-only buffer of the private ones, so neither ``view.base``
    # nor setting ``writeable`` again can change what the kernels read after the check
    views = tuple(np.frombuffer(memoryview(a).toreadonly(), dtype=a.dtype) for a in private)
    key = id(views[0])

    def forget(_ref, key=key):
        with _CHECKED_LOCK:
            _CHECKED.pop(key, None)

    with _CHECKED_LOCK:
        _CHECKED[key] = (tuple(weakref.ref(v, forget) for v in views), private, stats)
    return views


def _already_checked(indptr, indices, weights) -> tuple | None:
    """``(arrays, stats)`` of a graph :func:`check_graph` returned, if these are its unchanged arrays."""
    with _CHECKED_LOCK:
        entry = _CHECKED.get(id(indptr))
    if entry is None:
        return None
    refs, private, stats = entry
    given = (indptr, indices, weights)
    if any(r() is not a for r, a in zip(refs, given)) or any(a.flags.writeable for a in given):
        return None
    return private, stats


def _checked_graph(indptr, indices, weights) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple]:
    """:func:`validate_graph`'s arrays and ``(min, max, mean)`` of D over the non-loop edges, in one pass
    (none for the arrays of :func:`check_graph`)."""
    hit = _already_checked(indptr, indices, weights)
    if hit is not None:
        return hit
    # read-only arrays are copied: the numba kernels' signatures take writeable arrays
    indptr, indices, weights = (a if a.flags.writeable else a.copy()
                                for a in map(np.ascontiguousarray, (indptr, indices, weights)))
    if indptr.ndim != 1 or indptr.shape[0] < 2:
        raise ValueError(f"indptr: expected shape (N+1,) with N >= 1, got {indptr.shape}")
    if indices.ndim != 1 or weights.ndim != 1 or indices.shape != weights.shape:
        raise ValueError(f"indices/weights: expected equal shapes (E,), got {indices.shape} and {weights.shape}")
    for name, arr in (("indptr", indptr), ("indices", indices)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name}: expected an integer dtype, got {arr.dtype}")
    if not np.issubdtype(weights.dtype, np.floating) and not np.issubdtype(weights.dtype, np.integer):
        raise ValueError(f"weights: expected a numeric dtype, got {weights.dtype}")

    indptr = indptr.astype(np.int64, copy=False)
    indices = indices.astype(np.int64, copy=False)
    n = indptr.shape[0] - 1
    # float32 maps are checked as they are; other dtypes in float64, before the float32 conversion
    problem, w_min, w_max, w_mean = kern.csr_check(
        indptr, indices, weights if weights.dtype == np.float32 else weights.astype(np.float64))
    if problem == 1:
        raise ValueError("indptr: must start at 0, be non-decreasing and end at len(indices)")
    if problem == 2:
        raise ValueError(f"indices: node index out of range [0, {n})")
    if problem == 3:
        raise ValueError("weights: NaN or infinite edge weight")
    if problem == 4:
        raise ValueError("weights: negative edge weight (D is a temporal distance, >= 0)")
    return (indptr, indices, weights.astype(np.float32, copy=False)), (w_min, w_max, w_mean)


def _validate_logp(landmark_logp, n: int) -> np.ndarray:
    logp = np.asarray(landmark_logp)
    if logp.ndim != 2 or logp.shape[0] != n:
        raise ValueError(f"landmark_logp: expected shape (N={n}, K), got {logp.shape}")
    if not np.issubdtype(logp.dtype, np.floating) and not np.issubdtype(logp.dtype, np.integer):
        raise ValueError(f"landmark_logp: expected a float dtype, got {logp.dtype}")
    logp = logp.astype(np.float64, copy=False)  # any layout: the search kernel reads it strided
    if not logp.flags.writeable:  # a memory map or broadcast view: the kernels take writeable arrays
        logp = logp.copy()
    if np.isnan(logp).any():
        raise ValueError("landmark_logp: contains NaN")
    if np.isposinf(logp).any():
        raise ValueError("landmark_logp: contains +inf (log-likelihoods are <= 0 or finite)")
    return logp


def _validate_start(start, n: int) -> int:
    if isinstance(start, (bool, np.bool_)) or not isinstance(start, (int, np.integer)):
        raise ValueError(f"start: expected an integer node index, got {start!r}")
    if not 0 <= int(start) < n:
        raise ValueError(f"start: node index {start} out of range [0, {n})")
    return int(start)


def _validate_alpha(alpha) -> float:
    alpha = float(alpha)
    if not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha: expected a finite value >= 0, got {alpha}")
    return alpha


def walk_length(nodes: np.ndarray, indptr, indices, weights) -> float:
    """Sum of D over consecutive nodes of a walk (the cheapest parallel edge), float64 time steps.

    ``indptr, indices, weights`` is a CSR graph (as :func:`plan_walk` takes; the read-only arrays of
    :func:`check_graph` are read without a copy); ``nodes`` (m,) integer node indices.

    Raises
    ------
    ValueError
        If two consecutive nodes are not joined by an edge, a node is outside [0, N) or not an integer,
        or the arrays are not a CSR graph (dtypes, dimensions, lengths, NaN / infinite / negative D).
    """
    hit = _already_checked(indptr, indices, weights)
    if hit is not None:
        indptr, indices, weights = hit[0]
    else:  # the kernel reads writeable contiguous arrays and checks no bounds: checked here
        indptr, indices, weights = (np.asarray(a) for a in (indptr, indices, weights))
        for name, a in (("indptr", indptr), ("indices", indices)):
            if not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"walk_length: {name}: expected an integer dtype, got {a.dtype}")
        if not (np.issubdtype(weights.dtype, np.floating) or np.issubdtype(weights.dtype, np.integer)):
            raise ValueError(f"walk_length: weights: expected a real dtype, got {weights.dtype}")
        indptr, indices = (np.ascontiguousarray(a, dtype=np.int64) for a in (indptr, indices))
        weights = np.ascontiguousarray(weights if weights.dtype == np.float32 else weights.astype(np.float64))
        indptr, indices, weights = (a if a.flags.writeable else a.copy() for a in (indptr, indices, weights))
        if indptr.ndim != 1 or indptr.shape[0] < 1 or indices.ndim != 1 or indices.shape != weights.shape:
            raise ValueError(f"walk_length: not a CSR graph (indptr {indptr.shape}, indices {indices.shape}, "
                             f"weights {weights.shape})")
        if indptr[0] != 0 or indptr[-1] != indices.shape[0] or (np.diff(indptr) < 0).any():
            raise ValueError("walk_length: indptr must start at 0, be non-decreasing and end at len(indices)")
        if not np.isfinite(weights).all() or (weights < 0).any():
            raise ValueError("walk_length: weights: NaN, infinite or negative edge weight")
    return _walk_length(nodes, indptr, indices, weights)


def _walk_length(nodes, indptr, indices, weights) -> float:
    """:func:`walk_length` on a graph already checked (the planners' arrays): only the nodes are checked."""
    raw = np.asarray(nodes)
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(f"walk: nodes: expected integer node indices, got {raw.dtype}")
    n = indptr.shape[0] - 1
    raw = raw.reshape(-1)
    if raw.size and (raw.min() < 0 or raw.max() >= n):  # compared in the given dtype: no wrap-around
        bad = raw[(raw < 0) | (raw >= n)][0]
        raise ValueError(f"walk: node {int(bad)} is outside [0, {n})")
    nodes = raw.astype(np.int64)
    total = float(kern.walk_length_kernel(nodes, indptr, indices, weights))
    if np.isnan(total):
        for a, b in zip(nodes[:-1], nodes[1:]):
            if not np.any(indices[indptr[a]:indptr[a + 1]] == b):
                raise ValueError(f"walk: no edge {a} -> {b}")
    return total


def _validate_request(indptr, indices, weights, landmark_logp, start, alpha):
    """All of a planner's arguments checked and converted (see :func:`plan_walk` for the errors)."""
    return _validate_request_stats(indptr, indices, weights, landmark_logp, start, alpha)[0]


def _validate_request_stats(indptr, indices, weights, landmark_logp, start, alpha):
    """:func:`_validate_request` and the edge statistics of :func:`_checked_graph`."""
    (indptr, indices, weights), stats = _checked_graph(indptr, indices, weights)
    n = indptr.shape[0] - 1
    return (indptr, indices, weights, _validate_logp(landmark_logp, n), _validate_start(start, n),
            _validate_alpha(alpha)), stats


def _start_only(start: int) -> WalkResult:
    return WalkResult(np.array([start], dtype=np.int64), np.zeros(0, dtype=np.int64), 0.0, 0.0)


def _unreachable(start: int) -> WalkResult:
    return WalkResult(np.array([start], dtype=np.int64), np.zeros(0, dtype=np.int64),
                      float("-inf"), 0.0, PlanStatus.UNREACHABLE)


def plan_walk(indptr, indices, weights, landmark_logp, start, *, alpha: float = DEFAULT_ALPHA) -> WalkResult:
    """Best walk from ``start`` visiting the landmarks in order (LM-Nav Algorithm 1).

    Parameters
    ----------
    indptr, indices, weights : array_like
        CSR adjacency by source: (N+1,) int, (E,) int, (E,) float D >= 0 in VNM time steps. An
        undirected map lists each edge in both directions. Self-loops and parallel edges are allowed.
    landmark_logp : array_like
        (N, K) float, G(v, i) = log-likelihood of landmark i at node v; ``-inf`` = impossible there.
    start : int
        Start node index S.
    alpha : float
        Weight per VNM time step (>= 0); see the module docstring for the default's derivation.

    Returns
    -------
    WalkResult
        ``status`` UNREACHABLE (objective -inf) when no walk reaches all landmarks with finite G.
        K = 0 returns the walk ``[start]`` with objective 0.

    Raises
    ------
    ValueError
        Naming the argument: bad shapes or dtypes, NaN, +inf, negative weights, start out of range,
        alpha negative or not finite.
    """
    (indptr, indices, weights, logp, start, alpha), stats = _validate_request_stats(
        indptr, indices, weights, landmark_logp, start, alpha)
    k = logp.shape[1]
    if k == 0:
        return _start_only(start)
    delta, n_circ = _bucket_width(indices, weights, alpha, indptr, stats)
    status = -1
    if delta > 0:
        end, pred, status = _search(kern, indptr, indices, weights, logp, start, alpha, delta, n_circ)
        if status == 1:
            log.info("plan_walk: no walk from node %d reaches all %d landmarks", start, k)
            return _unreachable(start)
        objective = None  # from the walk below: sum_i G(v_{t_i}, i) - alpha * length, the objective's definition
    if status != 0:  # alpha = 0, zero-weight map, or extreme score ranges: the level-by-level DP
        q_last, pred = kern.lmnav_dp(indptr, indices, weights, np.ascontiguousarray(logp), np.int64(start), alpha,
                                     delta, n_circ, False)
        end = int(np.argmax(q_last))
        objective = float(q_last[end])
        if not np.isfinite(objective):
            log.info("plan_walk: no walk from node %d reaches all %d landmarks", start, k)
            return _unreachable(start)
    nodes, positions = kern.reconstruct_walk(pred, np.int64(end), np.int64(start))
    length = _walk_length(nodes, indptr, indices, weights)
    if objective is None:
        objective = float(logp[nodes[positions], np.arange(k)].sum()) - alpha * length
    return WalkResult(nodes, positions, objective, length)


_SCRATCH = threading.local()


def _search(kern, indptr, indices, weights, logp, start, alpha, delta, n_circ):
    """Run ``lmnav_search`` with this thread's scratch arrays (grown as needed, then reused: fresh pages
    for every plan cost about 15 % of a search). Returns ``(end, pred, status)``."""
    n, k = logp.shape
    total = (k + 1) * n
    sc = getattr(_SCRATCH, "arrays", None)
    if sc is None or sc[0].shape[0] < total:
        cap = max(n + indices.shape[0] + 16, sc[2].shape[0] if sc else 0)
        sc = _SCRATCH.arrays = (np.empty(total), np.empty(total, np.int32), *_entries(cap))
    while True:
        cost, pred_buf, *entries = sc
        pred = pred_buf[:total].reshape(k + 1, n)
        _, end, status = kern.lmnav_search(indptr, indices, weights, logp, np.int64(start), alpha, delta, n_circ,
                                           cost, pred, *entries)
        if status != -2:
            return end, pred, status
        sc = _SCRATCH.arrays = (cost, pred_buf, *_entries(2 * entries[0].shape[0]))  # the queue outgrew them


def _entries(cap: int) -> tuple:
    return (np.empty(cap, np.int32), np.empty(cap, np.int32), np.empty(cap, np.int32), np.empty(cap))


def _bucket_width(indices, weights, alpha, indptr, stats=None) -> tuple[float, int]:
    """Bucket width and ring size for the bucket kernels; ``(0.0, 0)`` selects the heap kernel
    (no edge with D > 0, alpha = 0, or a D range too wide). Zero-weight edges are fine: the buckets
    are label-correcting.

    The width is alpha x max(smallest non-loop D, mean D / 4): a quarter of a typical edge keeps
    repeated expansions rare (a few per cent on random geometric graphs) while scanning 10-50x fewer
    buckets than Dial's width alpha x min(D) on maps with a few very short edges (measured with
    ``robot-app bench search``).
    """
    if stats is None:
        stats = _checked_graph(indptr, indices, weights)[1]
    w_min, w_max, w_mean = stats
    if not np.isfinite(w_min) or alpha == 0.0 or w_mean == 0.0:
        return 0.0, 0
    width = max(w_min, w_mean / 4.0)
    if w_max / width > 4 * (indptr.shape[0] - 1) + 1024 or not alpha * width > 1e-200:  # too many buckets, underflow
        return 0.0, 0
    return alpha * width, int(w_max / width) + 3


def plan_max_likelihood(indptr, indices, weights, landmark_logp, start, *,
                        alpha: float = DEFAULT_ALPHA) -> WalkResult:
    """The paper's max-likelihood baseline (LM-Nav App. C).

    Each landmark goes to its single most likely node (ties: lowest index); consecutive targets are
    joined by shortest paths in D (``scipy.sparse.csgraph.dijkstra``). ``objective`` is J of the
    resulting walk with the same ``alpha`` so both planners can be compared on one map.

    Returns / Raises: as :func:`plan_walk`; UNREACHABLE when a target node cannot be reached.
    """
    indptr, indices, weights, logp, start, alpha = _validate_request(indptr, indices, weights, landmark_logp,
                                                                     start, alpha)
    k = logp.shape[1]
    if k == 0:
        return _start_only(start)
    targets = np.argmax(logp, axis=0)
    if not np.all(np.isfinite(logp[targets, np.arange(k)])):
        return _unreachable(start)
    graph = csr_graph(indptr, indices, weights)
    from scipy.sparse.csgraph import dijkstra

    sources = np.concatenate([[start], targets[:-1]])
    uniq, inverse = np.unique(sources, return_inverse=True)
    dist, preds = dijkstra(graph, directed=True, indices=uniq, return_predecessors=True)
    nodes = [start]
    positions = []
    for i in range(k):
        row, target = inverse[i], targets[i]
        if not np.isfinite(dist[row, target]):
            return _unreachable(start)
        leg = []
        v = target
        while v != sources[i]:
            leg.append(v)
            v = preds[row, v]
        nodes.extend(reversed(leg))
        positions.append(len(nodes) - 1)
    nodes_arr = np.asarray(nodes, dtype=np.int64)
    length = _walk_length(nodes_arr, indptr, indices, weights)
    objective = float(logp[targets, np.arange(k)].sum()) - alpha * length
    return WalkResult(nodes_arr, np.asarray(positions, dtype=np.int64), objective, length)


def csr_graph(indptr, indices, weights):
    """scipy CSR matrix of the graph, keeping zero-weight edges and the cheapest of parallel edges.

    scipy's csgraph drops explicitly stored zeros, so zero weights become the smallest positive
    float64 (a change far below any D the VNM produces).
    """
    from scipy.sparse import csr_matrix

    n = indptr.shape[0] - 1
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    w = weights.astype(np.float64)
    order = np.lexsort((w, indices, src))  # cheapest first within each (src, dst)
    src, dst, w = src[order], indices[order], w[order]
    keep = np.ones(src.shape[0], dtype=bool)
    keep[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    w = np.where(w[keep] == 0.0, np.finfo(np.float64).tiny, w[keep])
    return csr_matrix((w, (src[keep], dst[keep])), shape=(n, n))


def warm_up() -> None:
    """Load the kernels now (the compiled ones or numba's, which may compile), so the first plan does not."""
    plan_walk(np.array([0, 1, 1]), np.array([1]), np.array([1.0], np.float32),
              np.zeros((2, 1)), 0)
