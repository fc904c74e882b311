"""Scripted exploration on the simulation clock -> traversal log -> map (GPS fallback, no models)."""

from __future__ import annotations

import dataclasses
import sqlite3

import numpy as np
import pytest
import utm

from core.mapstore import open_map
from core.tlog import LOG_FILE, read_log
from robot_app.config import Config
from robot_app.mapping.map_build import build_map, decode_jpeg
from robot_app.sim import record_exploration
from robot_app.sim.world import load_world

pytest.importorskip("pybullet")


def test_exploration_log_builds_a_map_in_the_world_frame(tmp_path):
    world = load_world("campus")
    route = [(0.0, -85.0), (0.0, -40.0), (20.0, -40.0)]  # north on the main path, then east on the loop
    rep = record_exploration(world, route, tmp_path / "log", rate_hz=4, speed_mps=2.0, seed=1,
                             width=48, height=36, gps_noise_m=0.5)
    assert rep.reached_end and rep.collisions == []
    assert 60 <= rep.distance_m <= 70 and rep.sim_time_s > 30
    assert rep.frames == pytest.approx(rep.sim_time_s * 4, abs=2)

    log = read_log(tmp_path / "log")
    assert log.meta["source"] == "simulated" and log.meta["world"] == "campus"
    assert len(log.frame_t_s) == rep.frames
    img = decode_jpeg(log.frame_jpeg([log.frame_id[0]])[0])
    assert img.shape[:2] == (36, 48)
    assert (log.gps["quality"] > 0).all()  # no dropout zone on this route

    cfg = dataclasses.replace(Config(), paths=dataclasses.replace(Config().paths, models_dir=str(tmp_path / "none")))
    out = tmp_path / "sim.map"
    mrep = build_map([tmp_path / "log"], out, config=cfg)
    assert mrep.distance_source.startswith("gps fallback") and mrep.components == 1
    with open_map(out) as m:
        n = m.nodes
        assert 18 <= len(n.lat_deg) <= 26  # one node per 3 m over ~65 m
        e0, n0, _, _ = utm.from_latlon(*world.anchor_latlon)
        xy = np.stack([n.easting_m - e0, n.northing_m - n0], axis=1)
    # every node lies on the driven route (GPS noise 0.5 m)
    on_main = (np.abs(xy[:, 0]) < 2.0) & (xy[:, 1] > -88) & (xy[:, 1] < -38)
    on_loop = (np.abs(xy[:, 1] + 40.0) < 2.0) & (xy[:, 0] > -2) & (xy[:, 0] < 22)
    assert (on_main | on_loop).all()


def test_exploration_stops_at_a_collision_and_logs_it(tmp_path):
    rep = record_exploration("campus", [(-4.0, -40.0), (-30.0, -40.0)], tmp_path / "log", speed_mps=1.5,
                             width=32, height=24)
    assert not rep.reached_end and rep.collisions and rep.collisions[0].name == "library"
    with sqlite3.connect(tmp_path / "log" / LOG_FILE) as db:
        kinds = [k for (k,) in db.execute("SELECT kind FROM events")]
    assert kinds == ["collision"]


def test_dropout_zone_gives_quality_zero_fixes(tmp_path):
    rep = record_exploration("campus", "west spur", tmp_path / "log", speed_mps=3.0, width=32, height=24,
                             rate_hz=2)
    assert rep.reached_end
    q = read_log(tmp_path / "log").gps["quality"]
    assert (q == 0).any() and (q > 0).any()


def test_bad_routes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no path 'nowhere'"):
        record_exploration("campus", "nowhere", tmp_path / "log")
    with pytest.raises(ValueError, match="at least 2 distinct points"):
        record_exploration("campus", [(0.0, -85.0), (0.0, -85.0)], tmp_path / "log")
    with pytest.raises(ValueError, match="touches 'library'"):
        record_exploration("campus", [(-20.0, -40.0), (0.0, -40.0)], tmp_path / "log")


def test_same_seed_same_log(tmp_path):
    def run(folder, seed):
        record_exploration("industrial", [(-80.0, -70.0), (-80.0, -60.0)], folder, seed=seed, width=32, height=24,
                           speed_mps=2.0)
        log = read_log(folder)
        return log.frame_jpeg(log.frame_id), log.gps["lat_deg"]

    a, b, c = run(tmp_path / "a", 5), run(tmp_path / "b", 5), run(tmp_path / "c", 6)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    assert a[0] != c[0] and not np.array_equal(a[1], c[1])


def test_a_route_that_turns_back_is_driven_to_its_end(tmp_path):
    rep = record_exploration("campus", [(0.0, -85.0), (0.0, -78.0), (0.0, -83.0)], tmp_path / "log",
                             speed_mps=1.5, width=16, height=12, rate_hz=1)
    assert rep.reached_end and rep.collisions == []
    assert rep.true_xy_m[:, 1].max() > -80.0  # went most of the way out before turning back
    assert 9.0 < rep.distance_m < 14.0


@pytest.mark.slow
def test_two_explorations_of_the_campus_make_one_map(tmp_path):
    """Longer drives (the demo's scale): main path and the east loop, two logs, one connected map."""
    world = load_world("campus")
    a = record_exploration(world, "main", tmp_path / "a", speed_mps=1.5, width=85, height=64, seed=1)
    b = record_exploration(world, "east loop", tmp_path / "b", speed_mps=1.5, width=85, height=64, seed=2,
                           t0_s=10_000.0)
    assert a.reached_end and b.reached_end and not a.collisions and not b.collisions
    cfg = dataclasses.replace(Config(), paths=dataclasses.replace(Config().paths, models_dir=str(tmp_path / "none")))
    rep = build_map([tmp_path / "a", tmp_path / "b"], tmp_path / "campus.map", config=cfg)
    assert rep.components == 1 and rep.nodes > 100
