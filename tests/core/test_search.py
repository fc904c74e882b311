"""Walk search: numba kernel vs. brute force, pure-Python and scipy references; degenerate graphs; bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.search import PlanStatus, plan_max_likelihood, plan_walk, walk_length
from core.search_reference import brute_force_objective, dp_values_python, dp_values_scipy
from core.synthetic import random_geometric_graph


def csr_from_edges(n, edges):
    """CSR (indptr, indices, weights float32) from a list of directed (u, v, w)."""
    edges = sorted(edges, key=lambda e: e[0])
    indptr = np.zeros(n + 1, dtype=np.int64)
    for u, _, _ in edges:
        indptr[u + 1] += 1
    indptr = np.cumsum(indptr)
    indices = np.array([v for _, v, _ in edges], dtype=np.int64)
    weights = np.array([w for _, _, w in edges], dtype=np.float32)
    return indptr, indices, weights


def objective_of(result, logp, indptr, indices, weights, alpha):
    """J recomputed from the returned walk (checks the result is self-consistent)."""
    g = sum(logp[v, i] for i, v in enumerate(result.landmark_nodes))
    return g - alpha * walk_length(result.nodes, indptr, indices, weights)


@st.composite
def small_problem(draw):
    n = draw(st.integers(1, 6))
    k = draw(st.integers(0, 3))
    n_edges = draw(st.integers(0, 14))
    edges = [(draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)),
              float(draw(st.sampled_from([0.0, 1.0, 2.0, 3.5, 7.0, 20.0])))) for _ in range(n_edges)]
    values = st.one_of(st.just(-np.inf), st.floats(-8.0, 0.0, allow_nan=False), st.sampled_from([-1.0, -2.0]))
    logp = np.array([[draw(values) for _ in range(k)] for _ in range(n)], dtype=np.float64).reshape(n, k)
    start = draw(st.integers(0, n - 1))
    alpha = draw(st.sampled_from([0.0, 0.01, 0.1, 0.5, 2.0]))
    return n, edges, logp, start, alpha


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problem())
def test_kernel_matches_brute_force_over_all_walks(problem):
    n, edges, logp, start, alpha = problem
    indptr, indices, weights = csr_from_edges(n, edges)
    result = plan_walk(indptr, indices, weights, logp, start, alpha=alpha)
    best = brute_force_objective(indptr, indices, weights, logp, start, alpha=alpha)
    if np.isinf(best):
        assert result.status is PlanStatus.UNREACHABLE and result.objective == -np.inf
        return
    assert result.status is PlanStatus.OK
    assert result.objective == pytest.approx(best, rel=1e-6, abs=1e-9)
    assert result.nodes[0] == start
    assert np.all(np.diff(result.landmark_positions) >= 0)
    assert len(result.landmark_positions) == logp.shape[1]
    assert objective_of(result, logp, indptr, indices, weights, alpha) == pytest.approx(best, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.005, 0.3])
def test_numba_python_and_scipy_agree_on_random_graphs(seed, alpha):
    rng = np.random.default_rng(seed)
    indptr, indices, weights, _xy = random_geometric_graph(300, degree=6, seed=seed)
    logp = np.log(rng.dirichlet(np.ones(300), size=4).T)
    start = int(rng.integers(300))
    result = plan_walk(indptr, indices, weights, logp, start, alpha=alpha)
    q_py = dp_values_python(indptr, indices, weights, logp, start, alpha=alpha)
    q_sp = dp_values_scipy(indptr, indices, weights, logp, start, alpha=alpha)
    finite = np.isfinite(q_py)
    np.testing.assert_allclose(np.asarray(q_py)[finite], q_sp[finite], rtol=1e-9, atol=1e-9)
    assert np.array_equal(np.isfinite(q_sp), finite)
    assert result.objective == pytest.approx(max(q_py), rel=1e-9)
    assert objective_of(result, logp, indptr, indices, weights, alpha) == pytest.approx(result.objective, rel=1e-9)


def test_single_node_graph():
    r = plan_walk(np.array([0, 0]), np.array([], np.int64), np.array([], np.float32), np.array([[-1.0, -2.0]]), 0)
    assert r.nodes.tolist() == [0] and r.landmark_positions.tolist() == [0, 0]
    assert r.objective == pytest.approx(-3.0) and r.length == 0.0


def test_no_landmarks_returns_start():
    indptr, indices, weights = csr_from_edges(3, [(0, 1, 1.0), (1, 2, 1.0)])
    r = plan_walk(indptr, indices, weights, np.zeros((3, 0)), 1)
    assert r.nodes.tolist() == [1] and r.landmark_positions.size == 0 and r.objective == 0.0


def test_disconnected_landmark_is_unreachable_not_an_exception():
    indptr, indices, weights = csr_from_edges(4, [(0, 1, 1.0), (1, 0, 1.0), (2, 3, 1.0), (3, 2, 1.0)])
    logp = np.full((4, 2), -np.inf)
    logp[1, 0] = -1.0
    logp[3, 1] = -1.0  # only in the other component
    r = plan_walk(indptr, indices, weights, logp, 0)
    assert r.status is PlanStatus.UNREACHABLE and r.objective == -np.inf and r.nodes.tolist() == [0]
    assert plan_max_likelihood(indptr, indices, weights, logp, 0).status is PlanStatus.UNREACHABLE


def test_edges_are_directed():
    indptr, indices, weights = csr_from_edges(3, [(0, 1, 1.0), (2, 1, 1.0)])
    logp = np.array([[-5.0], [-5.0], [0.0]])
    r = plan_walk(indptr, indices, weights, logp, 0, alpha=0.1)
    assert r.landmark_nodes.tolist() in ([0], [1])  # node 2 cannot be reached against the edge


def test_self_loops_and_parallel_edges_use_the_cheapest():
    indptr, indices, weights = csr_from_edges(2, [(0, 0, 0.0), (0, 1, 9.0), (0, 1, 2.0), (1, 1, 3.0)])
    r = plan_walk(indptr, indices, weights, np.array([[-9.0], [0.0]]), 0, alpha=1.0)
    assert r.nodes.tolist() == [0, 1] and r.length == 2.0 and r.objective == pytest.approx(-2.0)


def test_trade_off_between_detour_and_likelihood():
    # 0 - 1 - 2 - 3 (each edge 10 steps): landmark likelier at 3 (far) than at 1 (near)
    edges = [(0, 1, 10.0), (1, 2, 10.0), (2, 3, 10.0)]
    edges += [(v, u, w) for u, v, w in edges]
    indptr, indices, weights = csr_from_edges(4, edges)
    logp = np.array([[-30.0], [-2.0], [-30.0], [0.0]])
    assert plan_walk(indptr, indices, weights, logp, 0, alpha=0.01).landmark_nodes.tolist() == [3]
    assert plan_walk(indptr, indices, weights, logp, 0, alpha=1.0).landmark_nodes.tolist() == [1]


def test_landmarks_in_order_may_share_a_node():
    indptr, indices, weights = csr_from_edges(2, [(0, 1, 1.0), (1, 0, 1.0)])
    logp = np.array([[-9.0, -9.0], [0.0, 0.0]])
    r = plan_walk(indptr, indices, weights, logp, 0, alpha=0.1)
    assert r.nodes.tolist() == [0, 1] and r.landmark_positions.tolist() == [1, 1]


def test_ties_give_a_valid_optimal_walk():
    edges = [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)]
    indptr, indices, weights = csr_from_edges(4, edges)
    logp = np.array([[-1.0], [-1.0], [-1.0], [0.0]])
    r = plan_walk(indptr, indices, weights, logp, 0, alpha=0.1)
    assert r.objective == pytest.approx(-0.2) and r.nodes[0] == 0 and r.nodes[-1] == 3 and len(r.nodes) == 3


def test_max_likelihood_baseline_goes_to_argmax_nodes():
    edges = [(0, 1, 10.0), (1, 2, 10.0), (2, 3, 10.0)]
    edges += [(v, u, w) for u, v, w in edges]
    indptr, indices, weights = csr_from_edges(4, edges)
    logp = np.array([[-9.0, -3.0], [-2.0, -9.0], [-9.0, -9.0], [0.0, -5.0]])
    r = plan_max_likelihood(indptr, indices, weights, logp, 0, alpha=1.0)
    assert r.nodes.tolist() == [0, 1, 2, 3, 2, 1, 0] and r.landmark_nodes.tolist() == [3, 0]
    assert r.length == 60.0 and r.objective == pytest.approx(-3.0 - 60.0)
    lm = plan_walk(indptr, indices, weights, logp, 0, alpha=1.0)
    assert lm.objective >= r.objective  # LM-Nav never does worse on its own objective


BAD_INPUTS = [
    (dict(landmark_logp=np.full((3, 1), np.nan)), "landmark_logp: contains NaN"),
    (dict(landmark_logp=np.zeros((2, 1))), "landmark_logp: expected shape (N=3, K)"),
    (dict(landmark_logp=np.zeros(3)), "landmark_logp: expected shape"),
    (dict(landmark_logp=np.full((3, 1), np.inf)), "+inf"),
    (dict(start=3), "start: node index 3 out of range"),
    (dict(start=-1), "start: node index -1 out of range"),
    (dict(start=1.5), "start: expected an integer"),
    (dict(weights=np.array([1.0, -1.0], np.float32)), "weights: negative edge weight"),
    (dict(weights=np.array([1.0, np.nan], np.float32)), "weights: NaN"),
    (dict(indices=np.array([0, 7])), "indices: node index out of range"),
    (dict(indptr=np.array([0, 1, 1])), "indptr: must start at 0"),
    (dict(alpha=-0.1), "alpha: expected a finite value >= 0"),
    (dict(alpha=float("nan")), "alpha"),
]


@pytest.mark.parametrize("planner", [plan_walk, plan_max_likelihood])
@pytest.mark.parametrize("override, message", BAD_INPUTS)
def test_bad_input_raises_value_error_naming_the_argument(planner, override, message):
    args = dict(indptr=np.array([0, 1, 2, 2]), indices=np.array([1, 2]), weights=np.array([1.0, 1.0], np.float32),
                landmark_logp=np.zeros((3, 1)), start=0, alpha=0.1)
    args.update(override)
    alpha = args.pop("alpha")
    with pytest.raises(ValueError) as exc:
        planner(*args.values(), alpha=alpha)
    assert message in str(exc.value)


def test_minus_inf_everywhere_but_one_node_forces_that_node():
    indptr, indices, weights, _ = random_geometric_graph(50, degree=6, seed=3)
    logp = np.full((50, 1), -np.inf)
    logp[17, 0] = -4.0
    r = plan_walk(indptr, indices, weights, logp, 0)
    if r.ok:
        assert r.landmark_nodes.tolist() == [17]


@pytest.mark.parametrize("seed", range(4))
def test_bucket_and_heap_kernels_agree(seed):
    from core import _search_kernels as kern
    from core.search import _bucket_width

    indptr, indices, weights, _ = random_geometric_graph(500, degree=6, seed=seed)
    rng = np.random.default_rng(seed)
    logp = np.ascontiguousarray(np.log(rng.dirichlet(np.ones(500), size=3).T))
    delta, n_circ = _bucket_width(indices, weights, 0.01, indptr)
    assert delta > 0  # this graph takes the bucket kernel
    q_b, _ = kern.lmnav_dp(indptr, indices, weights, logp, np.int64(7), 0.01, delta, n_circ, True)
    q_h, _ = kern.lmnav_dp(indptr, indices, weights, logp, np.int64(7), 0.01, 0.0, 0, True)
    np.testing.assert_allclose(q_b, q_h, rtol=1e-12)


def test_bucket_kernel_gives_up_cleanly_on_a_huge_value_range():
    # one node far more likely than the rest: (range / delta) exceeds the static bucket budget
    from core import _search_kernels as kern

    indptr, indices, weights, _ = random_geometric_graph(50, degree=6, seed=1)
    logp = np.full((50, 1), -1e6)
    logp[3, 0] = 0.0
    q_b, _ = kern.lmnav_dp(indptr, indices, weights, logp, np.int64(0), 0.01, 1e-6, 10, True)
    q_h, _ = kern.lmnav_dp(indptr, indices, weights, logp, np.int64(0), 0.01, 0.0, 0, True)
    np.testing.assert_allclose(q_b, q_h)


@pytest.mark.parametrize("alpha, floor", [(1e-20, -1.0), (1e-300, -1.0), (0.005, -1e30), (0.005, -np.finfo(float).max),
                                          (1e-12, -1e18)])
def test_extreme_alpha_and_scores_give_the_reference_answer(alpha, floor):
    """Tiny alpha or huge negative log-likelihoods ("impossible here") must not break the bucket kernel."""
    indptr, indices, weights, _ = random_geometric_graph(200, degree=6, seed=4)
    rng = np.random.default_rng(4)
    logp = np.log(rng.dirichlet(np.ones(200), size=3).T)
    logp[logp < -6.0] = floor
    r = plan_walk(indptr, indices, weights, logp, 0, alpha=alpha)
    q_py = dp_values_python(indptr, indices, weights, logp, 0, alpha=alpha)
    assert r.objective == pytest.approx(max(q_py), rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("zero_weights", [False, True])
def test_layered_search_matches_the_level_by_level_dp(seed, zero_weights):
    """lmnav_search (one Dijkstra over (landmark, node) states, early stop) = max of lmnav_dp's Q(K, .)."""
    from core import _search_kernels as kern
    from core.search import _bucket_width, _search

    indptr, indices, weights, _ = random_geometric_graph(400, degree=6, seed=seed)
    if zero_weights:
        weights = weights.copy()
        weights[::7] = 0.0
    rng = np.random.default_rng(seed)
    logp = np.ascontiguousarray(np.log(rng.dirichlet(np.ones(400), size=4).T))
    logp[rng.random(logp.shape) < 0.3] = -np.inf  # landmarks impossible at some nodes
    delta, n_circ = _bucket_width(indices, weights, 0.01, indptr)
    assert delta > 0
    end, pred, status = _search(kern, indptr, indices, weights, logp, 5, 0.01, delta, n_circ)
    assert status == 0
    q, _ = kern.lmnav_dp(indptr, indices, weights, logp, np.int64(5), 0.01, 0.0, 0, True)
    nodes, positions = kern.reconstruct_walk(pred, np.int64(end), np.int64(5))
    assert nodes[-1] == end and positions[-1] == len(nodes) - 1  # the best walk ends at its last landmark
    r = plan_walk(indptr, indices, weights, logp, 5, alpha=0.01)
    assert r.objective == pytest.approx(q.max(), rel=1e-12)
    assert objective_of(r, logp, indptr, indices, weights, 0.01) == pytest.approx(r.objective, rel=1e-12)
    assert nodes[0] == 5 and len(positions) == 4


def test_layered_search_reports_unreachable_and_gives_way_to_the_dp_on_huge_score_ranges():
    from core import _search_kernels as kern
    from core.search import _bucket_width, _search

    indptr, indices, weights, _ = random_geometric_graph(100, degree=6, seed=2)
    delta, n_circ = _bucket_width(indices, weights, 0.01, indptr)
    logp = np.full((100, 2), -1.0)
    logp[:, 1] = -np.inf  # the second landmark is nowhere
    assert _search(kern, indptr, indices, weights, logp, 0, 0.01, delta, n_circ)[2] == 1
    logp = np.full((100, 2), -1e12)
    logp[9, 1] = 0.0  # visit costs need far more ring buckets than allowed: status -1, plan_walk uses the DP
    assert _search(kern, indptr, indices, weights, logp, 0, 0.01, delta, n_circ)[2] == -1
    r = plan_walk(indptr, indices, weights, logp, 0, alpha=0.01)
    q = dp_values_python(indptr, indices, weights, logp, 0, alpha=0.01)
    assert r.ok and r.objective == pytest.approx(max(q), rel=1e-12)


def test_search_scratch_grows_and_is_reused_across_map_sizes():
    """The thread's scratch arrays grow for a bigger map or a longer queue and give the same answers."""
    import core.search as search

    search._SCRATCH.__dict__.pop("arrays", None)
    for n, k in ((50, 2), (600, 4), (80, 1), (600, 6)):
        indptr, indices, weights, _ = random_geometric_graph(n, degree=6, seed=n + k)
        logp = np.log(np.random.default_rng(k).dirichlet(np.ones(n), size=k).T)  # a transposed (F-order) array
        r = plan_walk(indptr, indices, weights, logp, 0, alpha=0.01)
        assert r.objective == pytest.approx(max(dp_values_python(indptr, indices, weights, logp, 0, alpha=0.01)),
                                            rel=1e-12)
    search._SCRATCH.arrays = search._SCRATCH.arrays[:2] + search._entries(4)  # a queue far too small: it grows
    r2 = plan_walk(indptr, indices, weights, logp, 0, alpha=0.01)
    assert r2.objective == pytest.approx(r.objective, rel=1e-15) and search._SCRATCH.arrays[2].shape[0] > 4


def _random_csr(n=300, e=1800, seed=3):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    order = np.argsort(src, kind="stable")
    indptr = np.searchsorted(src[order], np.arange(n + 1))
    return indptr, dst[order], (rng.random(e) + 0.1).astype(np.float32), rng


def test_a_checked_graph_plans_the_same_walk_and_is_validated_once(monkeypatch):
    from core import search

    indptr, indices, weights, rng = _random_csr()
    logp = np.log(rng.dirichlet(np.ones(len(indptr) - 1), size=3).T)
    raw = search.plan_walk(indptr, indices, weights, logp, 0)
    g = search.check_graph(indptr, indices, weights)
    assert [a.dtype for a in g] == [np.int64, np.int64, np.float32] and not any(a.flags.writeable for a in g)
    calls = []
    real = search.kern.csr_check
    monkeypatch.setattr(search.kern, "csr_check", lambda *a: calls.append(1) or real(*a))
    for _ in range(3):
        r = search.plan_walk(*g, logp, 0)
        assert np.array_equal(r.nodes, raw.nodes) and r.objective == pytest.approx(raw.objective)
    assert calls == []  # the check ran once, in check_graph
    search.plan_max_likelihood(*g, logp, 0)
    assert calls == []
    search.plan_walk(indptr, indices, weights, logp, 0)  # other (raw) arrays: checked as before
    assert calls == [1]
    with pytest.raises(ValueError, match="read-only"):
        g[2][0] = -1.0


def test_a_checked_graph_cannot_be_changed_behind_the_check_and_a_changed_copy_is_checked_again():
    from core import search

    indptr, indices, weights, rng = _random_csr()
    logp = np.log(rng.dirichlet(np.ones(len(indptr) - 1), size=2).T)
    g = search.check_graph(indptr, indices, weights)
    with pytest.raises(ValueError, match="WRITEABLE"):  # a changed index would crash the kernels
        g[1].flags.writeable = True
    with pytest.raises(TypeError, match="read-only"):
        g[1].base[:] = 10**9
    w = g[2].copy()
    w[0] = -1.0
    with pytest.raises(ValueError, match="negative edge weight"):
        search.plan_walk(g[0], g[1], w, logp, 0)
    assert search.plan_walk(*g, logp, 0).ok


def test_check_graph_refuses_a_bad_graph_with_the_same_message():
    from core import search

    indptr, indices, weights, _ = _random_csr()
    indices = indices.copy()
    indices[5] = len(indptr) + 10
    with pytest.raises(ValueError, match=r"indices: node index out of range"):
        search.check_graph(indptr, indices, weights)


def test_validate_graph_of_a_checked_graph_hands_back_its_read_only_arrays():
    from core import search

    indptr, indices, weights, _ = _random_csr()
    g = search.check_graph(indptr, indices, weights)
    out = search.validate_graph(*g)
    assert all(a is b for a, b in zip(out, g)) and not any(a.flags.writeable for a in out)


def test_a_checked_graph_collected_while_the_registry_lock_is_held_does_not_deadlock():
    """A view's weakref callback takes the registry lock; the cyclic collector can run it inside a locked
    section on the same thread, so the lock is re-entrant."""
    import gc

    from core import search

    with search._CHECKED_LOCK:
        reentrant = search._CHECKED_LOCK.acquire(timeout=1.0)  # a plain Lock: False after 1 s, not a hang
        if reentrant:
            search._CHECKED_LOCK.release()
    assert reentrant

    indptr, indices, weights, _ = _random_csr()

    class Cycle:
        pass

    c = Cycle()
    c.self, c.graph = c, search.check_graph(indptr, indices, weights)
    key = id(c.graph[0])
    del c  # only the cyclic collector frees it
    with search._CHECKED_LOCK:
        gc.collect()  # the views die here and their callbacks take the lock again on this thread
    assert key not in search._CHECKED
