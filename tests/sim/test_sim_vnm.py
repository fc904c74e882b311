"""The sim-only stand-in VNM: shipped files through the production runtime, training, closed-loop driving."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import robot_app
from models.vnm import check_reference, open_vnm
from robot_app.sim.world import load_world

pytest.importorskip("pybullet")

SHIPPED = Path(robot_app.__file__).resolve().parent / "data" / "models" / "sim"


@pytest.fixture(scope="module")
def vnm():
    return open_vnm(SHIPPED)


@pytest.fixture(scope="module")
def heldout_pair():
    """One route of the campus driven twice with a seed the shipped model never saw (reference, query)."""
    from robot_app.sim.render import WorldRenderer
    from robot_app.sim.train_vnm import RoutePlan, simulate_drive

    world = load_world("campus")
    pts = np.array([[0.0, -85.0], [0.0, -40.0], [25.0, -40.0]])
    plan = RoutePlan(pts, np.full(3, 1.5))
    rng = np.random.default_rng(424242)
    with WorldRenderer(world, seed=424242) as ren:
        ref = simulate_drive(world, plan, ren, rng, speed_mps=1.0)
        query = simulate_drive(world, plan, ren, rng, speed_mps=0.9, frame_index0=len(ref.pose))
    assert not ref.collided and not query.collided
    return [ref, query]


def test_shipped_files_load_through_the_production_runtime(vnm):
    side = json.loads((SHIPPED / "vnm.onnx.json").read_text())
    assert side["kind"] == "vnm" and side["architecture"] == "sim-vnm-cnn" and side["params"]["sim_only"] is True
    assert not side["random_init"] and side["params"]["quick"] is False
    assert vnm.context_size == 5 and vnm.len_traj_pred == 5 and vnm.frame_rate_hz == 4.0
    assert vnm.dist_range_steps == (0.0, 20.0)
    diff = check_reference(vnm, SHIPPED / "vnm-reference.npz")
    assert diff["dist_max_abs"] < 1e-3 and diff["waypoints_max_abs"] < 1e-3
    q = json.loads((SHIPPED / "sim-vnm-quality.json").read_text())
    assert q["localisation_acc"] > 1.6 * q["localisation_chance"] and q["negative_rejection"] > 0.6
    assert (SHIPPED / "vnm.onnx").stat().st_size < 5e6


def test_shipped_model_beats_chance_on_heldout_renders(vnm, heldout_pair):
    from robot_app.sim.train_vnm import evaluate_vnm

    q = evaluate_vnm(vnm, heldout_pair, stride=3, seed=5)
    assert q["localisation_queries"] > 50 and q["dist_pairs"] > 100 and q["negatives"] > 50
    # chance: about 5 of 41 candidates lie within +-2 frames of the truth
    assert q["localisation_acc"] > 1.6 * q["localisation_chance"]
    assert q["negative_rejection"] > 0.6
    assert q["dist_order_acc"] > 0.6  # of two goals ahead, the nearer predicted nearer (chance 0.5)
    # waypoint 2 (0.75 s ahead) within a few cm of where the drive went
    assert q["waypoint2_err_m"] < 0.25


def test_predicted_distance_ranks_goals_along_the_drive(vnm, heldout_pair):
    """Goals 0-30 frames ahead, from the same drive and from the other drive of the route: the predicted
    distance grows with the true one (Spearman rank correlation; chance 0)."""
    from scipy.stats import spearmanr

    ref, query = heldout_pair
    same, cross = [], []
    for i in range(12, len(query.pose) - 32, 12):
        ctx = vnm.preprocess_many(list(query.frames[i - 5:i + 1])).reshape(1, 18, 64, 85)
        goals = vnm.preprocess_many([query.frames[i + u] for u in range(0, 31, 3)])
        same.append(spearmanr(np.arange(11), vnm.predict(ctx, goals).dist_steps)[0])
        t = int(np.argmin(np.hypot(*(ref.pose[:, :2] - query.pose[i, :2]).T)))
        if t + 31 <= len(ref.pose):
            goals = vnm.preprocess_many([ref.frames[t + u] for u in range(0, 31, 3)])
            cross.append(spearmanr(np.arange(11), vnm.predict(ctx, goals).dist_steps)[0])
    assert len(same) > 5 and len(cross) > 5
    assert np.median(same) > 0.6 and np.median(cross) > 0.3


def test_quick_training_writes_loadable_files(tmp_path):
    from robot_app.sim.train_vnm import train_sim_vnm

    rep = train_sim_vnm("campus", tmp_path, seed=3, quick=True, progress=False, threads=1)
    for name in ("vnm.onnx", "vnm.onnx.json", "vnm-reference.npz", "sim-vnm-quality.json"):
        assert (tmp_path / name).is_file()
    m = open_vnm(tmp_path)
    assert check_reference(m, tmp_path / "vnm-reference.npz")["dist_max_abs"] < 1e-3
    q = json.loads((tmp_path / "sim-vnm-quality.json").read_text())
    assert q["quick"] is True and q["worlds"] == ["campus"] and q["train_frames"] == rep["train_frames"] > 50
    for key in ("dist_mae_steps", "dist_mae_const_steps", "dist_order_acc", "negative_rejection", "localisation_acc",
                "localisation_wide_acc", "waypoint_err_m", "timing_s"):
        assert key in q
    side = json.loads((tmp_path / "vnm.onnx.json").read_text())
    assert side["params"]["sim_only"] is True and side["params"]["quick"] is True


def test_training_refuses_no_world(tmp_path):
    from robot_app.sim.train_vnm import train_sim_vnm

    with pytest.raises(ValueError, match="no world"):
        train_sim_vnm([], tmp_path, quick=True, progress=False)


def _off_route_m(traj: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Distance of each trajectory point from the route polyline (its last segment extended), m."""
    best = np.full(len(traj), np.inf)
    for k, (a, b) in enumerate(zip(pts[:-1], pts[1:])):
        ab = b - a
        t = np.clip(((traj - a) @ ab) / (ab @ ab), 0.0, np.inf if k == len(pts) - 2 else 1.0)
        best = np.minimum(best, np.linalg.norm(traj - (a + t[:, None] * ab), axis=1))
    return best


def _drive_images(vnm, pts, seed, **changes):
    """The navigation policy with the sim VNM alone (no positions: no GPS stretches or checks) along the node
    images of a centreline drive of ``pts`` (eval sim's driver)."""
    from robot_app.sim.eval_drive import DriveParams, SimWalk, drive_walk
    from robot_app.sim.vnm_devdrive import sim_options
    from robot_app.sim.vnm_follow import route_nodes
    from robot_app.sim.world import load_world

    images, poses = route_nodes("campus", pts, seed=seed)
    res = drive_walk(load_world("campus"), SimWalk(poses[:, :2], images=images), mode="vnm", vnm=vnm,
                     options=sim_options().replace(vnm_max_v_mps=0.8, **changes),
                     camera={"width": 160, "height": 120, "hfov_deg": 90.0},
                     params=DriveParams(max_disengagements=1), seed=seed + 1)
    return res, len(images)


def test_vnm_follows_a_short_stretch(vnm):
    pts = np.array([[0.0, -85.0], [0.0, -70.0]])
    res, _n = _drive_images(vnm, pts, 11)
    assert res.outcomes == ["reached"] and res.contacts == 0 and res.total_disengagements == 0
    assert res.final_error_m < 2.0 and res.driven_m > 12.0
    assert _off_route_m(res.track_xy_m, pts).max() < 1.2


@pytest.mark.slow
@pytest.mark.parametrize("pts", [[[0.0, -85.0], [0.0, -30.0]], [[0.0, -85.0], [0.0, -40.0], [30.0, -40.0]]],
                         ids=["straight-55m", "turn-75m"])
def test_vnm_follows_a_long_stretch(vnm, pts):
    pts = np.asarray(pts)
    res, n = _drive_images(vnm, pts, 21)
    assert res.contacts == 0
    if res.outcomes != ["reached"]:  # the shipped stand-in is not good enough for this yet (docs/experiments.md):
        # alone it leaves the path at a right-angle turn, which the robot's policy gives to GPS
        # ([vnm_nav] gps_at_turns_deg; this drive has no positions, so no GPS stretch)
        pytest.xfail(f"sim VNM {res.outcomes}, events {res.events} ({res.final_error_m:.1f} m from the end)")
    assert _off_route_m(res.track_xy_m, pts).max() < 1.5
    if res.final_error_m >= 3.5:  # the model localises on the last node ~4 m early; goal_confirm_steps drives on
        pytest.xfail(f"sim VNM reached the last node {res.final_error_m:.1f} m before it")
    assert res.final_error_m < 3.5  # localised on the last node (nodes 3 m apart): within about one spacing


@pytest.mark.slow
def test_map_built_from_sim_explorations_with_the_vnm(tmp_path, capsys):
    """`robot-app map build` with the sim VNM: one connected map, VNM edges joining the two drives where
    they share the main path, mostly short VNM edges, and no edge with a building between its nodes."""
    import utm

    from core.mapstore import open_map
    from robot_app.cli import main
    from robot_app.sim import record_exploration
    from robot_app.sim.plant import obstacle_at

    world = load_world("campus")
    routes = {"a": [(0.0, -85.0), (0.0, 10.0)], "b": [(45.0, -40.0), (0.0, -40.0), (0.0, -5.0)]}
    for k, (name, route) in enumerate(routes.items()):
        rep = record_exploration(world, route, tmp_path / name, speed_mps=1.0, seed=30 + k, gps_noise_m=0.3,
                                 t0_s=1000.0 * k)
        assert rep.reached_end and not rep.collisions
    (tmp_path / "config.toml").write_text("")
    out = tmp_path / "map.sqlite"
    assert main(["--config", str(tmp_path / "config.toml"), "map", "build", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--out", str(out), "--models", str(SHIPPED), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["distance_source"].startswith("vnm") and report["components"] == 1
    with open_map(out) as m:
        e0, n0, _, _ = utm.from_latlon(*world.anchor_latlon)
        xy = np.stack([m.nodes.easting_m - e0, m.nodes.northing_m - n0], axis=1)
        src, dst, source = m.edges.src, m.edges.dst, m.edges.source
        second = m.nodes.timestamp_s >= 1000.0  # nodes of drive b
    vnm_edges = source == "vnm"
    assert vnm_edges.sum() // 2 >= 2  # stored both ways
    gap = np.linalg.norm(xy[src[vnm_edges]] - xy[dst[vnm_edges]], axis=1)
    assert (
        np.mean(gap < 10.0) > 0.6
    )  # the stand-in also adds a few false shortcuts of up to ~25 m (docs/experiments.md)
    for a, b in zip(xy[src], xy[dst]):  # no edge crosses a building
        for t in np.linspace(0.0, 1.0, 12):
            hit = obstacle_at(world, *(a + t * (b - a)), 0.0)
            assert hit is None or hit[1] not in {bld.category for bld in world.buildings}
    # VNM edges join the two drives where they share the main path (x = 0, y in -40..-5)
    joins = vnm_edges & (second[src] != second[dst])
    assert joins.any() and np.median(np.linalg.norm(xy[src[joins]] - xy[dst[joins]], axis=1)) < 6.0
