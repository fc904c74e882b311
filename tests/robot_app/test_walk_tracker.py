"""WalkTracker: the GNM deployment loop's localisation and subgoal rules, on given distances (no model)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from robot_app.config import nav_options
from robot_app.interfaces import Sensors
from robot_app.nav.walk_following import GNM_RULES, WalkTracker


def WalkRules(**changes):  # noqa: N802 - GNM's deployment rules with changes
    return dataclasses.replace(GNM_RULES, **changes)


def _step(tr: WalkTracker, dist_of):
    lo, hi = tr.window()
    return tr.update(np.array([dist_of(i) for i in range(lo, hi)], dtype=np.float32))


def test_gnm_defaults_localise_on_the_smallest_distance_and_aim_at_the_next_node_when_close():
    tr = WalkTracker(10, GNM_RULES, lost_steps=20.0)
    assert tr.window() == (0, 5)  # GNM radius 4 around the start
    dec = tr.update(np.array([9.0, 6.0, 2.0, 8.0, 12.0]))
    assert (dec.status, dec.index, dec.subgoal) == ("drive", 2, 3)  # close (< 3): the next node
    dec = _step(tr, lambda i: abs(i - 4) * 4.0 + 5.0)  # node 4 closest but not close: aim at it
    assert (dec.status, dec.index, dec.subgoal) == ("drive", 4, 4)
    assert tr.window() == (0, 9)


def test_goal_reached_when_localised_on_the_last_node_unless_goal_close():
    far = lambda i: 30.0 - 3.0 * i  # noqa: E731 - the last node is the closest, 3 steps away
    tr = WalkTracker(5, GNM_RULES, lost_steps=40.0)
    assert _step(tr, far).status == "reached"
    tr = WalkTracker(5, WalkRules(goal_close=True), lost_steps=40.0)
    dec = _step(tr, far)
    assert (dec.status, dec.index, dec.subgoal) == ("drive", 4, 4)
    assert _step(tr, lambda i: 1.0 if i == 4 else 10.0).status == "reached"


def test_goal_confirm_steps_drive_on_towards_the_last_node_before_reaching_it():
    tr = WalkTracker(5, WalkRules(goal_confirm_steps=3), lost_steps=40.0)
    last = lambda i: 20.0 - 4.0 * i  # noqa: E731 - the last node is the closest
    decs = [_step(tr, last) for _ in range(3)]
    assert [d.status for d in decs] == ["drive", "drive", "reached"] and decs[0].subgoal == 4
    tr.reset(2)
    _step(tr, last)
    dec = _step(tr, lambda i: 1.0 if i == 3 else 9.0)  # localised before the goal again: the count restarts
    assert (dec.status, dec.index) == ("drive", 3)
    assert _step(tr, last).status == "drive"
    assert _step(tr, lambda i: 50.0).status == "wait"  # a step without a node does not count
    assert [_step(tr, last).status for _ in range(2)] == ["drive", "reached"]


def test_lost_after_max_lost_steps_without_a_node_and_the_localisation_kept():
    tr = WalkTracker(10, WalkRules(max_lost_steps=3), lost_steps=20.0)
    _step(tr, lambda i: abs(i - 3) + 5.0)
    assert tr.index == 3
    statuses = [_step(tr, lambda i: 25.0).status for _ in range(3)]
    assert statuses == ["wait", "wait", "lost"] and tr.index == 3
    tr.reset(6)
    assert tr.index == 6 and tr.lost == 0


def test_recover_window_widens_the_search_after_a_step_without_a_node():
    tr = WalkTracker(30, WalkRules(recover_window=10), lost_steps=20.0)
    tr.reset(10)
    assert tr.window() == (6, 15)
    assert tr.update(np.full(9, 25.0)).status == "wait"
    assert tr.window() == (0, 21)  # widened while lost
    dec = _step(tr, lambda i: 2.0 if i == 18 else 25.0)
    assert (dec.status, dec.index) == ("drive", 18) and tr.window() == (14, 23)


@pytest.mark.parametrize("kwargs, match", [({"window": -1}, "must be >= 0"), ({"recover_window": -2}, "must be >= 0"),
                                           ({"goal_confirm_steps": 0}, "goal_confirm_steps must be >= 1")])
def test_bad_rules_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WalkTracker(5, WalkRules(**kwargs), lost_steps=20.0)
    with pytest.raises(ValueError, match="at least one node"):
        WalkTracker(0, GNM_RULES, lost_steps=20.0)


def test_distances_must_match_the_window():
    tr = WalkTracker(10, GNM_RULES, lost_steps=20.0)
    tr.window()
    with pytest.raises(ValueError, match=r"expected 5 distances \(walk slice \[0, 5\)\), got 3"):
        tr.update(np.zeros(3))


def test_vnm_nav_config_defaults_are_gnms_and_bad_values_are_named(tmp_path):
    from robot_app.config import ConfigError, VnmNavConfig, load_config

    c = VnmNavConfig()
    assert (c.window, c.close_steps, c.waypoint_index, c.goal_close) == (4, 3.0, 2, False)
    assert (c.gps_where_facing_away, c.min_vnm_nodes, c.gps_goal_check_m, c.max_off_walk_m) == (True, 3, 3.0, 10.0)
    assert c.gps_at_turns_deg == 0.0  # off for real models; the sim demo sets eval sim's value
    assert (c.gps_approach_m, c.gps_after_lost_m) == (5.0, 10.0)
    for line, message in [
        ("window = -1", r"\[vnm_nav\] window: -1 is below the minimum 0"),
        ("goal_confirm_steps = 0", r"\[vnm_nav\] goal_confirm_steps: 0 is below the minimum 1"),
        ('close_steps = "near"', r"\[vnm_nav\] close_steps: expected a number"),
        ("goal_close = 1", r"\[vnm_nav\] goal_close: expected true or false"),
        ("gps_goal_check_m = -1.0", r"\[vnm_nav\] gps_goal_check_m: -1.0 is below the minimum 0"),
        ("gps_at_turns_deg = 200", r"\[vnm_nav\] gps_at_turns_deg: 200(\.0)? is above the maximum 180"),
        ("max_off_walk_m = -5", r"\[vnm_nav\] max_off_walk_m: -5(\.0)? is below the minimum 0"),
        ("gps_after_lost_m = -1", r"\[vnm_nav\] gps_after_lost_m: -1(\.0)? is below the minimum 0"),
        ("gps_approach_m = 200", r"\[vnm_nav\] gps_approach_m: 200(\.0)? is above the maximum 100"),
        ("min_vnm_nodes = 0", r"\[vnm_nav\] min_vnm_nodes: 0 is below the minimum 1"),
        ('gps_where_facing_away = "yes"', r"\[vnm_nav\] gps_where_facing_away: expected true or false"),
        ("radius = 4", r"\[vnm_nav\] radius: unknown key"),
    ]:
        p = tmp_path / "c.toml"
        p.write_text(f"[vnm_nav]\n{line}\n")
        with pytest.raises(ConfigError, match=message) as exc:
            load_config(p)
        assert str(p) in str(exc.value)


def test_vnm_navigator_takes_its_rules_from_the_config(tmp_path):
    from models.vnm import open_vnm
    from robot_app.config import load_config
    from robot_app.nav.vnm import VnmNavigator
    from robot_app.sim import shipped_models_dir

    p = tmp_path / "c.toml"
    p.write_text("[vnm_nav]\nwindow = 6\ngoal_confirm_steps = 3\nrecover_window = 12\nwaypoint_index = 9\n")
    vnm = open_vnm(shipped_models_dir(), warm_up=False)
    nav = VnmNavigator(Sensors(), None, vnm, nav_options(load_config(p)), close_steps=5.0)
    rules = nav.options.rules
    assert (rules.window, rules.close_steps, rules.goal_confirm_steps, rules.recover_window) == (6, 5.0, 3, 12)
    assert rules.lost_steps is None and nav.options.waypoint_index == 9  # the shell clips it to the model's last


@pytest.mark.parametrize("facing, kw, want", [
    ([1, 1, 1, 1, 1], {}, [("vnm", 0, 4)]),
    ([0, 0, 0], {}, [("gps", 0, 2)]),
    ([1, 1, 1, 0, 0, 1, 1, 1, 1], {}, [("vnm", 0, 2), ("gps", 2, 5), ("vnm", 5, 8)]),
    ([0, 1, 1, 1, 1, 0], {}, [("gps", 0, 1), ("vnm", 1, 4), ("gps", 4, 5)]),
    ([1, 1, 1, 0, 1, 0, 1, 1, 1], {}, [("vnm", 0, 2), ("gps", 2, 6), ("vnm", 6, 8)]),  # a 1-node run: GPS
    ([1, 1, 1, 0, 1, 0, 1, 1, 1], {"min_vnm_nodes": 1}, [("vnm", 0, 2), ("gps", 2, 4), ("vnm", 4, 4),
                                                         ("gps", 4, 6), ("vnm", 6, 8)]),
    ([1], {}, [("vnm", 0, 0)]),
    ([1, 1], {}, [("vnm", 0, 1)]),
])
def test_walk_stretches_drive_facing_runs_with_the_vnm_and_the_rest_by_gps(facing, kw, want):
    from robot_app.nav.walk_following import walk_stretches

    got = walk_stretches(np.asarray(facing, dtype=bool), **kw)
    assert got == want
    assert got[0][1] == 0 and got[-1][2] == len(facing) - 1
    assert all(a[2] == b[1] for a, b in zip(got, got[1:]))  # stretches share their boundary node


def test_walk_stretches_refuse_bad_input():
    from robot_app.nav.walk_following import walk_stretches

    with pytest.raises(ValueError, match="non-empty"):
        walk_stretches([])
    with pytest.raises(ValueError, match="min_vnm_nodes"):
        walk_stretches([True], min_vnm_nodes=0)


def test_route_jobs_use_map_headings_only_from_maps_that_smooth_them(caplog):
    """Maps built before the smoothed GPS-track headings carry headings too noisy to pick GPS stretches:
    the route job then passes none (the VNM drives the whole walk) and says to rebuild the map."""
    from types import SimpleNamespace

    from robot_app.jobs.mission import MissionExecutive
    from robot_app.mapping.map_build import HEADINGS_METHOD

    nodes = SimpleNamespace(heading_rad=np.array([0.0, 0.5, 1.0, 1.5]))
    new = SimpleNamespace(metadata={"build": {"node_headings": HEADINGS_METHOD}}, nodes=nodes)
    old = SimpleNamespace(metadata={"build": {}}, nodes=nodes)
    assert MissionExecutive._headings(new, [3, 1]).tolist() == [1.5, 0.5]
    with caplog.at_level("WARNING"):
        assert MissionExecutive._headings(old, [3, 1]) is None
    assert "rebuild the map" in caplog.text


def test_stretch_yaw_faces_the_way_the_stretch_goes():
    import math

    from robot_app.nav.walk_following import stretch_yaw

    xy = np.array([[0.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.0, 2.5], [0.0, 4.0]])  # a corner node, then north
    heading = np.array([math.pi / 4, 1.0, 1.2, math.pi / 2, math.pi / 2])
    assert abs(stretch_yaw(xy, heading, 0, 4) - math.pi / 2) < 1e-9       # first node >= 2 m on: (0, 2.5)
    assert stretch_yaw(xy, heading, 0, 1) == math.pi / 4                   # nothing 2 m on: the node's heading
    assert stretch_yaw(xy, None, 0, 1) is None and stretch_yaw(xy, [np.nan] * 5, 4, 4) is None


def test_vnm_navigator_sends_sharp_turns_to_gps_when_configured():
    """[vnm_nav] gps_at_turns_deg: the walk around a 90-degree corner goes to GPS, the legs to the VNM."""
    import dataclasses
    from types import SimpleNamespace

    from robot_app.config import Config
    from robot_app.mapping.synthetic_logs import enu_to_latlon
    from robot_app.nav.gps import PoseEstimator
    from robot_app.nav.vnm import VnmNavigator

    xy = np.array([[0.0, 2.5 * k] for k in range(9)] + [[2.5 * k, 20.0] for k in range(1, 9)])
    heading = np.array([math.pi / 2] * 9 + [0.0] * 8)  # the images face the way the walk goes
    lat, lon = enu_to_latlon(xy, anchor=(52.5148, 13.4643))

    def stretches(deg):
        base = Config()
        cfg = dataclasses.replace(base, vnm_nav=dataclasses.replace(base.vnm_nav, gps_at_turns_deg=deg))
        nav = VnmNavigator(
            Sensors(),
            None,
            SimpleNamespace(len_traj_pred=5, frame_rate_hz=4.0, dist_range_steps=(0.0, 20.0)),
            nav_options(cfg),
            gps_navigator=SimpleNamespace(estimator=PoseEstimator()),
        )
        return nav.plan_stretches(len(xy), (lat, lon), heading)

    assert stretches(0.0) == [("vnm", 0, 16)]
    # nodes 6-9 lie from 6 m before to 3 m after the corner (0, 20); stretches share their boundary nodes
    assert stretches(50.0) == [("vnm", 0, 5), ("gps", 5, 10), ("vnm", 10, 16)]


def test_vnm_navigator_gives_the_start_of_a_walk_to_gps_after_a_loss():
    """``gps_first_m`` (a route re-planned after the VNM lost the walk, [vnm_nav] gps_after_lost_m): the
    nodes within that many metres of the walk's start go to GPS, with or without headings; a walk shorter
    than that is all GPS; a heading array of the wrong length only switches the facing rule off."""
    from types import SimpleNamespace

    from robot_app.config import Config
    from robot_app.mapping.synthetic_logs import enu_to_latlon
    from robot_app.nav.gps import PoseEstimator
    from robot_app.nav.vnm import VnmNavigator

    xy = np.array([[0.0, 2.5 * k] for k in range(9)])  # 20 m north, a node every 2.5 m
    lat, lon = enu_to_latlon(xy, anchor=(52.5148, 13.4643))
    nav = VnmNavigator(
        Sensors(),
        None,
        SimpleNamespace(len_traj_pred=5, frame_rate_hz=4.0, dist_range_steps=(0.0, 20.0)),
        nav_options(Config()),
        gps_navigator=SimpleNamespace(estimator=PoseEstimator()),
    )
    north = np.full(9, math.pi / 2)
    assert Config().vnm_nav.gps_after_lost_m == 10.0
    assert nav.plan_stretches(9, (lat, lon), north) == [("vnm", 0, 8)]
    # nodes 0-4 lie within 11 m of the start: GPS to node 5, where the VNM takes over
    assert nav.plan_stretches(9, (lat, lon), north, gps_first_m=11.0) == [("gps", 0, 5), ("vnm", 5, 8)]
    assert nav.plan_stretches(9, (lat, lon), None, gps_first_m=11.0) == [("gps", 0, 5), ("vnm", 5, 8)]
    assert nav.plan_stretches(9, (lat, lon), north[:4], gps_first_m=11.0) == [("gps", 0, 5), ("vnm", 5, 8)]
    assert nav.plan_stretches(9, (lat, lon), north, gps_first_m=25.0) == [("gps", 0, 8)]
    assert nav.plan_stretches(9, None, north, gps_first_m=11.0) == [("vnm", 0, 8)]  # no positions: no GPS
    # with the facing rule: nodes 7-8, recorded facing south (away), go to GPS as well; the VNM keeps 5-6
    away = np.where(np.arange(9) >= 7, -math.pi / 2, math.pi / 2)
    assert nav.plan_stretches(9, (lat, lon), away) == [("vnm", 0, 6), ("gps", 6, 8)]
    assert nav.plan_stretches(9, (lat, lon), away, gps_first_m=11.0) == [("gps", 0, 8)]  # 5-6: under 3 nodes
