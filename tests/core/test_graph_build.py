"""core.graph_build: node selection, temporal edges, candidate pairs, thresholds, redundant-edge removal."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from core import graph_build as gb
from core.graph_build import candidate_pairs, decide_pairs, reduce_edges, select_nodes, temporal_edges


def test_select_nodes_every_3_m_and_1_s():
    t = np.arange(100) * 0.25                     # 4 Hz
    xy = np.stack([np.arange(100) * 0.5, np.zeros(100)], axis=1)   # 2 m/s
    idx = select_nodes(t, xy, min_travel_m=3.0, min_dt_s=1.0)
    assert idx[0] == 0
    assert np.all(np.diff(xy[idx, 0]) >= 3.0 - 1e-9) and np.all(np.diff(t[idx]) >= 1.0 - 1e-9)
    slow = select_nodes(t, xy / 10, min_travel_m=3.0, min_dt_s=1.0)   # 0.2 m/s: travel-limited
    assert np.all(np.diff(xy[slow, 0] / 10) >= 3.0 - 1e-9)


def test_select_nodes_skips_frames_without_position_and_standing_still():
    t = np.arange(10.0)
    xy = np.zeros((10, 2))
    xy[3] = np.nan
    assert select_nodes(t, xy).tolist() == [0]   # never moved: one node
    with pytest.raises(ValueError, match="xy_m"):
        select_nodes(t, xy[:5])


def test_temporal_edges_follow_each_log_and_break_at_gaps():
    t = np.array([0.0, 3.0, 6.0, 0.0, 2.0, 10.0])
    log = np.array([0, 0, 0, 1, 1, 1])
    gap = np.array([False, False, False, False, False, True])
    s, d, w = temporal_edges(t, log, gap, frame_rate_hz=4.0)
    assert list(zip(s.tolist(), d.tolist())) == [(0, 1), (1, 2), (3, 4)]
    np.testing.assert_allclose(w, [12.0, 12.0, 8.0])


def test_candidate_pairs_are_local_and_bounded():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 500, (400, 2))
    pairs = candidate_pairs(xy, k=5, radius_m=40.0)
    d = np.linalg.norm(xy[pairs[:, 0]] - xy[pairs[:, 1]], axis=1)
    assert np.all(d <= 40.0) and np.all(pairs[:, 0] < pairs[:, 1])
    assert len(pairs) <= 400 * 5
    excl = candidate_pairs(xy, k=5, radius_m=40.0, exclude={tuple(pairs[0])})
    assert len(excl) == len(pairs) - 1


def test_decide_pairs_rejects_wormholes_and_far_pairs():
    dec = decide_pairs(np.array([3.0, 3.0, 30.0, np.nan]), np.array([10.0, 300.0, 10.0, 5.0]), tau_steps=15.0,
                       eta_m=100.0)
    assert dec.keep.tolist() == [True, False, False, False]
    assert dec.wormholes == 1 and dec.too_far == 2


def test_reduce_edges_triangle():
    keep = reduce_edges(3, np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1.0, 1.0, 2.0]))
    assert keep.tolist() == [True, True, False]
    # the direct edge (1.9) is shorter than the detour (2.0): kept unless the tolerance allows 5 % more
    keep = reduce_edges(3, np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1.0, 1.0, 1.9]))
    assert keep.tolist() == [True, True, True]
    keep = reduce_edges(3, np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1.0, 1.0, 1.9]), tolerance=0.06)
    assert keep.tolist() == [True, True, False]


def test_reduce_edges_parallel_edges_and_self_loops():
    keep = reduce_edges(2, np.array([0, 0, 1]), np.array([1, 1, 1]), np.array([2.0, 2.0, 0.5]))
    assert keep.sum() == 1 and not keep[2]


@pytest.mark.parametrize("seed", range(5))
def test_reduction_keeps_shortest_paths_and_connectivity(seed):
    rng = np.random.default_rng(seed)
    n = 60
    xy = rng.uniform(0, 100, (n, 2))
    pairs = candidate_pairs(xy, k=8, radius_m=40.0)
    # coarse, VNM-like distances (whole time steps): detours of equal length exist
    w = np.ceil(np.linalg.norm(xy[pairs[:, 0]] - xy[pairs[:, 1]], axis=1) / 8.0)
    keep = reduce_edges(n, pairs[:, 0], pairs[:, 1], w)
    assert (~keep).sum() > 0

    def graph(mask):
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_weighted_edges_from((int(a), int(b), float(c)) for (a, b), c in zip(pairs[mask], w[mask]))
        return g

    before, after = graph(np.ones_like(keep)), graph(keep)
    assert nx.number_connected_components(before) == nx.number_connected_components(after)
    d0 = dict(nx.all_pairs_dijkstra_path_length(before))
    d1 = dict(nx.all_pairs_dijkstra_path_length(after))
    for a in d0:
        for b, v in d0[a].items():
            assert d1[a][b] == pytest.approx(v, rel=1e-9)


def test_gps_floor_raises_only_weights_below_the_straight_line():
    d = np.array([12.0, 12.0, 40.0, 3.0])
    g = np.array([20.0, 3.0, 5.0, 2.5])  # metres between the fixes
    out = gb.gps_floor(d, g, m_per_step=0.25, tolerance_m=2.0)
    # 20 m - 2 m at 0.25 m per step = 72 steps > 12; 3 m -> 4 steps < 12 stays; 40 stays; 2.5 m -> 2 < 3
    np.testing.assert_allclose(out, [72.0, 12.0, 40.0, 3.0])
    np.testing.assert_allclose(gb.gps_floor(d, g, m_per_step=0.25, tolerance_m=0.0), [80.0, 12.0, 40.0, 10.0])
    assert gb.gps_floor(np.zeros(0), np.zeros(0), m_per_step=0.25).shape == (0,)


@pytest.mark.parametrize("kw, match", [({"m_per_step": 0.0}, "m_per_step"), ({"m_per_step": 0.25, "tolerance_m": -1.0},
                                                                           "tolerance_m")])
def test_gps_floor_refuses_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        gb.gps_floor(np.ones(2), np.ones(2), **kw)


def test_gps_floor_refuses_mismatched_or_nan_distances():
    with pytest.raises(ValueError, match="shape"):
        gb.gps_floor(np.ones(2), np.ones(3), m_per_step=0.25)
    with pytest.raises(ValueError, match="NaN"):
        gb.gps_floor(np.ones(2), np.array([1.0, np.nan]), m_per_step=0.25)


def test_track_headings_smooth_gps_noise_and_stop_at_track_breaks():
    rng = np.random.default_rng(1)
    x = np.arange(40.0)
    xy = np.stack([x, np.zeros(40)], axis=1) + rng.normal(0.0, 1.0 / np.sqrt(2), (40, 2))  # 1 m fixes, 1 m noise
    xy[20:, 0] = 60.0 - x[20:]                                                           # then back west
    xy[20:, 1] += 5.0
    brk = np.zeros(40, dtype=bool)
    brk[20] = True
    h = gb.track_headings(xy, brk)
    assert np.all(np.abs(np.angle(np.exp(1j * h[:20]))) < np.radians(35))                # east
    assert np.all(np.abs(np.angle(np.exp(1j * (h[20:] - np.pi)))) < np.radians(35))       # west, not mixed with east
    # consecutive-fix headings on the same track: some are off by more than 90 degrees
    raw = np.arctan2(*np.diff(xy[:20], axis=0).T[::-1])
    assert np.any(np.abs(raw) > np.radians(90))
    # one-node stretches and standing still have no heading
    one = gb.track_headings(np.array([[0.0, 0.0], [5.0, 0.0], [5.0, 0.1]]), np.array([False, True, False]))
    assert np.isnan(one[0]) and np.isnan(one[1]) and np.isnan(one[2])
    with pytest.raises(ValueError, match="span"):
        gb.track_headings(xy, brk, span=0)
    with pytest.raises(ValueError, match="break_before"):
        gb.track_headings(xy, brk[:5])
