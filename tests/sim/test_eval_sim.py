"""``robot-app eval sim``: instruction files, ground-truth node sets, simulated drives, a tiny end-to-end run."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.landmarks import parse_landmarks
from robot_app.sim.eval_drive import DriveParams, SimWalk, drive_walk, polyline_distance
from robot_app.sim.eval_instructions import (
    InstructionFileError,
    instructions_from_mapping,
    load_instructions,
    shipped_instructions,
)
from robot_app.sim.eval_truth import TruthParams, landmark_nodes, node_true_poses, truth_node_sets
from robot_app.sim.world import load_world, world_from_mapping

GOOD = {
    "format": "robot-app-sim-instructions", "version": 1, "world": "campus",
    "exploration": {"route": [[0.0, -88.0], [0.0, -30.0]], "speed_mps": 1.0},
    "instructions": [
        {"id": "a", "text": "Go past the fire hydrant and stop at the stop sign.", "start": [0.0, -85.0, 90.0],
         "landmarks": [{"phrase": "fire hydrant", "targets": ["fire hydrant 6"]},
                       {"phrase": "stop sign", "targets": ["stop sign 0"]}]},
        {"id": "b", "text": "Drive past the blue dumpster and stop at the mailbox.", "start": [0.0, -85.0, 90.0],
         "landmarks": [{"phrase": "blue dumpster", "targets": ["blue dumpster 11"]},
                       {"phrase": "mailbox", "targets": ["mailbox 35"]}]},
    ],
}


@pytest.fixture(scope="module")
def campus():
    return load_world("campus")


def _broken(path, value):
    data = copy.deepcopy(GOOD)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize("path, value, message", [
    (("format",), "something-else", r"format: expected 'robot-app-sim-instructions'"),
    (("version",), 2, r"version: expected 1"),
    (("world",), "industrial", r"world: the file is for world 'industrial', not 'campus'"),
    (("exploration", "route"), [[0.0, 0.0]], r"exploration: route: expected a list of at least 2"),
    (("exploration", "route"), [[0.0, 0.0], [500.0, 0.0]], r"exploration: route\[1\]: .* outside the world"),
    (("exploration", "speed_mps"), 0.0, r"exploration: speed_mps: expected 0.1-5 m/s"),
    (("instructions",), [], r"instructions: expected a non-empty list"),
    (("instructions", 0, "text"), "  ", r"instructions\[0\] \(a\): text: expected the instruction"),
    (("instructions", 1, "id"), "a", r"instructions\[1\] \(a\): id: duplicate"),
    (("instructions", 0, "start"), [0.0, -85.0], r"instructions\[0\] \(a\): start: expected \[x_m, y_m, yaw_deg\]"),
    (("instructions", 0, "start"), [-20.0, -40.0, 0.0], r"instructions\[0\] \(a\): start: .* touches 'library'"),
    (("instructions", 0, "landmarks"), [], r"instructions\[0\] \(a\): landmarks: expected a list of 1-8"),
    (("instructions", 1, "landmarks", 1, "targets"), ["mailbox 99"],
     r"instructions\[1\] \(b\): landmarks\[1\]: targets: 'mailbox 99' is not a building or object"),
    (("instructions", 1, "landmarks", 0, "targets"), [], r"landmarks\[0\]: targets: expected a non-empty list"),
    (("instructions", 0, "landmarks", 0, "colour"), "red", r"landmarks\[0\]: unknown key 'colour'"),
    (("instructions", 0, "extra"), 1, r"instructions\[0\] \(a\): unknown key 'extra'"),
])
def test_bad_instruction_files_name_the_file_and_the_entry(campus, tmp_path, path, value, message):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(_broken(path, value)))
    with pytest.raises(InstructionFileError, match=rf"^{f}: .*{message}"):
        load_instructions(f, world=campus)


def test_unreadable_and_invalid_json_files(tmp_path):
    with pytest.raises(InstructionFileError, match="cannot read the instruction file"):
        load_instructions(tmp_path / "missing.json")
    f = tmp_path / "x.json"
    f.write_text('{"format": "robot-app-sim-instructions",\n  "version": 1,,}')
    with pytest.raises(InstructionFileError, match=r"not valid JSON: .*line 2"):
        load_instructions(f)
    f.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InstructionFileError, match="not UTF-8"):
        load_instructions(f)
    with pytest.raises(InstructionFileError, match="no shipped instruction set for world 'nowhere'"):
        shipped_instructions("nowhere")


def test_good_file_loads_with_radians_and_tuples(campus):
    s = instructions_from_mapping(GOOD, origin="mem", world=campus)
    assert s.world == "campus" and len(s.instructions) == 2 and s.route[0] == (0.0, -88.0)
    a = s.instructions[0]
    assert a.start[2] == pytest.approx(math.pi / 2) and a.landmarks[1].targets == ("stop sign 0",)


@pytest.mark.parametrize("world_name", ["campus", "industrial"])
def test_shipped_sets_are_valid_and_parse_to_their_landmark_count(world_name):
    world = load_world(world_name)
    s = load_instructions(shipped_instructions(world_name), world=world)
    assert len(s.instructions) == 20
    for ins in s.instructions:
        assert 2 <= len(ins.landmarks) <= 4, ins.id
        assert len(parse_landmarks(ins.text)) == len(ins.landmarks), ins.id
    categories = [c for _, c, _, _ in world.landmarks()]
    targets = {t for ins in s.instructions for lm in ins.landmarks for t in lm.targets}
    cat_of = {n: c for n, c, _, _ in world.landmarks()}
    # distractors: most landmark categories used have another instance in the world
    with_distractor = [t for t in targets if categories.count(cat_of[t]) > 1]
    assert len(with_distractor) >= 0.8 * len(targets)


# --- ground truth ----------------------------------------------------------------------------------------
def _tiny_world():
    return world_from_mapping(
        {
            "world": {
                "name": "tiny",
                "extent_m": [100.0, 100.0],
                "anchor_latlon": [37.0, -122.0],
                "start": [0, -40, 90],
            },
            "paths": [{"name": "p", "points": [[0.0, -45.0], [0.0, 45.0]]}],
            "buildings": [
                {"name": "wall", "category": "grey building", "center": [10.0, 20.0], "size_m": [4.0, 10.0, 5.0]},
                {"name": "hall", "category": "red building", "center": [-20.0, -20.0], "size_m": [10.0, 10.0, 8.0]},
            ],
            "objects": [
                {"category": "stop sign", "at": [3.0, 0.0], "name": "sign"},
                {"category": "traffic cone", "at": [20.0, 20.0], "name": "hidden cone"},
            ],
        },
        origin="tiny",
    )


def test_truth_nodes_near_in_view_and_occluded():
    w = _tiny_world()
    north = math.pi / 2
    xy = np.array([[0.0, -35.0], [0.0, -10.0], [0.0, -4.0], [0.0, 5.0], [0.0, 20.0], [-8.0, 20.0]])
    yaw = np.array([north, north, north, north, 0.0, 0.0])
    p = TruthParams(object_near_m=7.0, object_view_m=15.0)
    sign = landmark_nodes(w, "sign", xy, yaw, params=p)
    # 35 m away: no; 10 m ahead in view: yes; 5 m: near; 5 m past it facing away: near; far: no
    assert sign.tolist() == [False, True, True, True, False, False]
    # the cone at (20, 20) is 20 m east of node 4 and 28 m of node 5, behind the wall (x 8-12)
    cone = landmark_nodes(w, "hidden cone", xy, yaw, params=TruthParams(object_view_m=30.0))
    assert not cone.any()
    assert landmark_nodes(w, "hidden cone", xy[4:5], yaw[4:5], params=TruthParams(object_view_m=30.0))[0] == False  # noqa: E712
    no_wall = world_from_mapping({
        "world": {"name": "t2", "extent_m": [100.0, 100.0], "anchor_latlon": [37.0, -122.0]},
        "objects": [{"category": "traffic cone", "at": [20.0, 20.0], "name": "hidden cone"}]}, origin="t2")
    assert landmark_nodes(no_wall, "hidden cone", xy[4:5], yaw[4:5], params=TruthParams(object_view_m=30.0))[0]
    # the hall (x -25..-15, y -25..-15): node 1 at (0, -10) is 15 m from it but looks north (hall behind-left)
    hall = landmark_nodes(w, "hall", xy, yaw, params=TruthParams(building_near_m=10.0, building_view_m=30.0))
    assert hall.tolist() == [True, False, False, False, False, False]  # node 0 sees its corner (-15, -15) ahead-left
    assert not landmark_nodes(w, "hall", xy[:1], np.array([0.0]), params=TruthParams(building_near_m=10.0)).any()
    sets = truth_node_sets(w, [["sign"], ["hall", "wall"]], xy, yaw)
    assert sets[0].dtype == np.int64 and sets[0].tolist() == [1, 2, 3]
    assert 0 in sets[1].tolist() and 5 in sets[1].tolist()  # node 5 at (-8, 20) faces the wall 16 m east
    with pytest.raises(KeyError, match="no building or object 'nothing'"):
        landmark_nodes(w, "nothing", xy, yaw)


def test_node_true_poses_interpolate_the_odometry():
    odom = {"t_s": np.array([0.0, 1.0, 2.0]), "x_m": np.array([0.0, 1.0, 2.0]), "y_m": np.zeros(3),
            "yaw_rad": np.array([3.1, -3.1, -3.0])}
    xy, yaw = node_true_poses(np.array([0.5, 2.0]), odom)
    assert xy[0].tolist() == [0.5, 0.0] and abs(abs(yaw[0]) - math.pi) < 0.05  # no wrap-around jump
    with pytest.raises(ValueError, match="outside the log's odometry"):
        node_true_poses(np.array([10.0]), odom)


# --- drives --------------------------------------------------------------------------------------------
CAMERA = {"width": 160, "height": 120, "hfov_deg": 90.0}


def _opts(**changes):
    from robot_app.sim.vnm_devdrive import sim_options

    return sim_options().replace(**changes)


def test_gps_drive_reaches_a_straight_walk_and_counts_off_path():
    w = _tiny_world()
    walk = np.stack([np.zeros(11), np.linspace(-40.0, -10.0, 11)], axis=1)
    res = drive_walk(w, SimWalk(walk, walk), mode="gps", options=_opts(), params=DriveParams(gps_noise_m=0.5), seed=3)
    assert res.reached and res.total_disengagements == 0 and 29.0 < res.driven_m < 36.0
    assert res.final_error_m <= 3.0 and polyline_distance(walk, *res.track_xy_m[-1]) < 3.0
    assert res.outcomes == ["reached"] and res.gps_m == pytest.approx(res.driven_m)
    assert res.as_dict()["gps_share"] == 1.0
    # the map's positions are 9 m east of the true ones: the robot leaves the true path
    shifted = walk + np.array([9.0, 0.0])
    bad = drive_walk(w, SimWalk(walk, shifted), mode="gps", options=_opts(), params=DriveParams(max_disengagements=3),
                     seed=3)
    assert bad.disengagements["off_path"] >= 1 and not bad.reached
    assert len(bad.events) == bad.total_disengagements and res.events == []
    assert all(kind in bad.disengagements and 0 <= i < len(walk) for kind, i in bad.events)
    with pytest.raises(ValueError, match="mode must be"):
        drive_walk(w, SimWalk(walk, walk), mode="car", options=_opts())
    with pytest.raises(ValueError, match="needs vnm"):
        drive_walk(w, SimWalk(walk, walk), mode="vnm", options=_opts())
    with pytest.raises(ValueError, match="map positions"):
        drive_walk(w, SimWalk(walk), mode="gps", options=_opts())


def test_a_collision_is_a_disengagement_and_is_replanned():
    """The map's walk runs through a street lamp: GPS drives into it, the policy's collision rule (wheels
    blocked) ends the walk collided, which counts as a disengagement and is re-planned from the fix (a
    detour, here); without a re-plan the operator puts the robot back past the lamp."""
    mapping = {
        "world": {"name": "lamp", "extent_m": [100.0, 100.0], "anchor_latlon": [37.0, -122.0], "start": [0, -40, 90]},
        "paths": [{"name": "p", "points": [[0.0, -45.0], [0.0, 45.0]]}],
        "objects": [{"category": "street lamp", "at": [0.0, -29.5], "name": "lamp"}],
    }
    w = world_from_mapping(mapping, origin="lamp")
    walk = np.stack([np.zeros(11), np.linspace(-40.0, -10.0, 11)], axis=1)  # a node every 3 m, the lamp between two
    calls = []

    def replan(sw, reached, fix):
        calls.append((reached, fix))
        here = np.array([fix])
        detour = np.array([[2.0, -32.0], [3.5, -29.5], [3.0, -25.0], [0.0, -21.0], [0.0, -10.0]])  # back off first
        xy = np.concatenate([here, detour])
        return SimWalk(xy, xy)

    opts = _opts(collide_s=0.5)
    res = drive_walk(w, SimWalk(walk, walk), mode="gps", options=opts, params=DriveParams(gps_noise_m=0.0), seed=3,
                     replan=replan, max_replans=2)
    assert res.outcomes == ["collided", "reached"] and res.replans == 1 and len(calls) == 1
    assert res.disengagements["collision"] == 1 and res.total_disengagements == 1 and res.reached
    reached, fix = calls[0]
    assert reached <= 4 and abs(fix[1] - (-29.5)) < 1.5  # where it hit the lamp
    # no re-plan: the operator puts it on the walk's next node past the lamp, and it drives on
    alone = drive_walk(w, SimWalk(walk, walk), mode="gps", options=opts, params=DriveParams(gps_noise_m=0.0), seed=3)
    assert alone.outcomes[0] == "collided" and alone.disengagements["collision"] == 1 and alone.reached


def test_vnm_drive_takes_gps_where_the_node_images_face_away_from_the_walk():
    """Out along a recorded stretch and back: the way back faces away from every node image, so the
    policy hands it to GPS at the turning node (as on the robot) and still ends there."""
    pytest.importorskip("pybullet")
    from models.vnm import open_vnm
    from robot_app.sim.vnm_follow import route_nodes

    shipped = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "models" / "sim"
    world = load_world("campus")
    images, poses = route_nodes(world, np.array([[0.0, -85.0], [0.0, -67.0]]), spacing_m=1.0, seed=5)
    walk = list(range(len(images))) + list(range(len(images) - 2, 7, -1))
    xy, heading = poses[walk, :2], poses[walk, 2]
    vnm = open_vnm(shipped)
    sw = SimWalk(xy, xy, heading, [images[v] for v in walk])
    params = DriveParams()
    # this rule alone (no GPS at the U-turn)
    res = drive_walk(world, sw, mode="vnm", options=_opts(goal_confirm_steps=4, gps_at_turns_deg=0.0), vnm=vnm,
                     camera=CAMERA, params=params, seed=2)
    assert res.reached and res.final_error_m <= params.goal_radius_m
    assert 6.0 < res.gps_m < res.driven_m - 10.0  # the way back by GPS, the way out with the VNM
    assert res.as_dict()["gps_m"] == round(res.gps_m, 2)
    # without the rule the whole walk goes to the VNM
    off = drive_walk(world, sw, mode="vnm", vnm=vnm, camera=CAMERA, params=DriveParams(max_disengagements=2), seed=2,
                     options=_opts(goal_confirm_steps=4, gps_where_facing_away=False, gps_at_turns_deg=0.0,
                                   gps_goal_check_m=0.0))
    assert off.gps_m == 0.0


def test_vnm_drive_gps_goal_check_drives_the_rest_when_the_vnm_stops_short():
    """GNM's end rule (1 confirm step) stops the sim VNM short of the end of a 55 m stretch (it localises on
    the last node early); with the GPS goal check GPS drives the rest."""
    pytest.importorskip("pybullet")
    from models.vnm import open_vnm
    from robot_app.sim.vnm_follow import route_nodes

    shipped = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "models" / "sim"
    world = load_world("campus")
    images, poses = route_nodes(world, np.array([[0.0, -85.0], [0.0, -30.0]]), spacing_m=1.0, seed=11)
    vnm = open_vnm(shipped)
    sw = SimWalk(poses[:, :2], poses[:, :2], poses[:, 2], list(images))

    def drive(check_m):
        return drive_walk(world, sw, mode="vnm", vnm=vnm, camera=CAMERA, params=DriveParams(gps_noise_m=0.0), seed=1,
                          options=_opts(goal_confirm_steps=1, gps_goal_check_m=check_m, goal_radius_m=0.3))

    # How far short the int8 VNM stops depends on the CPU's int8 kernels (0.8 m on AVX2 without VNNI, 1.3 m
    # with VNNI): the check's 0.5 m and the GPS goal radius's 0.3 m hold on both.
    short, checked = drive(0.0), drive(0.5)
    assert short.gps_m == 0.0 and short.final_error_m > 0.5  # the premise: the VNM alone stops short
    assert checked.gps_m > 0.1 and checked.final_error_m < 0.5 and checked.total_disengagements == 0


def test_vnm_drive_ends_reached_by_gps_when_the_vnm_does_not_confirm_the_last_node():
    """A VNM that never confirms the goal (goal_confirm_steps far above what a 15 m stretch gives) drives on
    past the end; with the walk's positions, the GPS fix at or past the last node ends it reached there."""
    pytest.importorskip("pybullet")
    from models.vnm import open_vnm
    from robot_app.sim.vnm_follow import route_nodes

    shipped = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "models" / "sim"
    world = load_world("campus")
    images, poses = route_nodes(world, np.array([[0.0, -85.0], [0.0, -70.0]]), spacing_m=1.0, seed=11)
    vnm = open_vnm(shipped)
    kw = dict(mode="vnm", vnm=vnm, camera=CAMERA, options=_opts(goal_confirm_steps=100),
              params=DriveParams(gps_noise_m=0.0, max_disengagements=1, time_limit_s=60.0), seed=1)
    blind = drive_walk(world, SimWalk(poses[:, :2], images=list(images)), **kw)
    assert not blind.reached  # the premise: without positions it never stops at the end
    res = drive_walk(world, SimWalk(poses[:, :2], poses[:, :2], poses[:, 2], list(images)), **kw)
    assert res.reached and res.total_disengagements == 0 and res.gps_m == 0.0 and res.final_error_m < 3.0


# --- end to end ----------------------------------------------------------------------------------------
def _models_dir(tmp_path_factory) -> Path:
    """The shipped sim models when present, else tiny random exports (torch, the `export` extra)."""
    try:
        from robot_app.sim import shipped_models_dir

        d = Path(shipped_models_dir())
        if (d / "clip-image.onnx").is_file() and (d / "vnm.onnx").is_file():
            return d
    except (ImportError, AttributeError):
        pass
    pytest.importorskip("torch", reason="no shipped sim models and no torch to export test models")
    pytest.importorskip("onnx")
    from robot_app.cli import main

    out = tmp_path_factory.mktemp("eval-models")
    assert main(["models", "export-clip", "--arch", "clip-tiny", "--pretrained", "none", "--out", str(out)]) == 0
    assert main(["models", "export-vnm", "--checkpoint", "none", "--out", str(out)]) == 0
    return out


def test_tiny_eval_runs_end_to_end_and_reuses_its_cache(tmp_path, tmp_path_factory, capsys):
    pytest.importorskip("pybullet")
    from robot_app.cli import main

    models = _models_dir(tmp_path_factory)
    capsys.readouterr()  # the exporters' output
    f = tmp_path / "tiny-instructions.json"
    f.write_text(json.dumps(GOOD))
    out = tmp_path / "out"
    args = ["eval", "sim", "--world", "campus", "--instructions", str(f), "--models", str(models),
            "--out", str(out), "--json"]
    assert main(args + ["--drive-time-limit", "25"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(args + ["--no-drive"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert report["world"] == "campus" and len(report["instructions"]) == 2
    assert not report["exploration"]["cached"] and again["exploration"]["cached"] and again["map"]["cached"]
    assert report["map"]["nodes"] >= 15 and report["map"]["components"] >= 1
    for row in report["instructions"]:
        assert "error" not in row, row
        assert all(t["nodes"] > 0 for t in row["truth"])
        assert row["intended"]["length_steps"] > 0 and row["intended"]["length_m"] > 10
        for name in ("lmnav", "max-likelihood"):
            p = row["planners"][name]
            assert p["status"] == "ok" and 0.0 <= p["efficiency"] <= 1.0 and isinstance(p["success"], bool)
        for name in ("lmnav-vnm", "lmnav-gps"):
            e = row["executions"][name]
            assert e["driven_m"] >= 0 and e["disengagements_total"] == sum(e["disengagements"].values())
            assert 0.0 <= e["efficiency"] <= 1.0
    t = report["totals"]
    assert t["instructions"] == 2 and t["invalid"] == 0
    # landmarks judged not in the map: every one is in the world, so each flag is a false alarm
    assert all(set(row["not_in_map"]) <= set(row["landmarks"]) for row in report["instructions"])
    assert t["grounding"]["landmarks"] == sum(len(row["landmarks"]) for row in report["instructions"])
    assert t["grounding"]["flagged_not_in_map"] == sum(len(row["not_in_map"]) for row in report["instructions"])
    assert "threshold" in report["presence_rule"] and "source" in report["presence_rule"]
    for p in t["planning"].values():
        assert 0.0 <= p["success_rate"] <= 1.0 and 0.0 <= p["efficiency_mean_all"] <= 1.0
    assert set(t["execution"]) == {"lmnav-vnm", "lmnav-gps"}
    assert set(report["targets"]) == {"lmnav_planning_success_at_least_0.85", "lmnav_efficiency_above_max_likelihood"}
    assert Path(report["chart"]).stat().st_size > 1000 and Path(report["report"]).is_file()
    assert "executions" not in again["instructions"][0] and again["totals"]["execution"] == {}
    # a perfect category detector: the two instructions' landmarks are the only instances near this route
    assert main(args + ["--no-drive", "--grounding", "oracle", "--alpha", "0.01"]) == 0
    oracle = json.loads(capsys.readouterr().out)
    assert oracle["grounding"] == "oracle" and oracle["alpha"] == 0.01
    assert oracle["totals"]["planning"]["lmnav"]["success_rate"] == 1.0
    assert oracle["instructions"][0]["parser"] == "truth"
    assert main(args[:-1] + ["--no-drive", "--limit", "1"]) == 0
    text = capsys.readouterr().out
    assert "LM-Nav search" in text and "max-likelihood" in text and "eval-campus.png" in text
    assert "landmarks judged not in the map:" in text
    shutil.rmtree(out)


def test_cli_refuses_bad_input(tmp_path, capsys):
    from robot_app.cli import main

    assert main(["eval", "sim", "--world", "campus", "--limit", "0"]) == 2
    assert "--limit 0" in capsys.readouterr().err
    assert main(["eval", "sim", "--world", "campus", "--alpha", "-1"]) == 2
    assert "--alpha -1" in capsys.readouterr().err
    assert main(["eval", "sim", "--world", "campus", "--models", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["eval", "sim", "--world", "campus", "--models", "package:robot_app/data/models/none"]) == 2
    assert capsys.readouterr().err.startswith("robot-app: error: --models: 'package:robot_app/data/models/none'")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["eval", "sim", "--world", "campus", "--instructions", str(bad), "--models", str(tmp_path),
                 "--out", str(tmp_path / "o")]) == 2
    assert "bad.json: format" in capsys.readouterr().err
    assert main(["eval", "sim", "--world", "nowhere", "--models", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "nowhere" in capsys.readouterr().err
