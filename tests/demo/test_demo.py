"""``robot-app demo``: a short run of every stage, the ground truth, the report writer, bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from robot_app.cli import main
from robot_app.demo.report import learned_text, render_html, summary, write_report
from robot_app.demo.runner import STAGES, DemoContext, shipped_models_dir
from robot_app.demo.scenario import Scenario, derive_scenario, phrase_categories, scenario_for
from robot_app.demo.truth import intended_walk, landmark_truth, node_true_poses, plan_metrics, visible_nodes
from robot_app.sim.world import load_world

pytest.importorskip("pybullet")

SHIPPED = shipped_models_dir()
HAVE_STAND_INS = all((SHIPPED / f).is_file() for f in ("clip-image.onnx", "clip-text.onnx"))
HAVE_SIM_VNM = (SHIPPED / "vnm.onnx").is_file()


# -- ground truth ----------------------------------------------------------------------------------------
def _straight_north(n=30, spacing=3.0, x=0.0, y0=-90.0):
    """Poses along the campus main path, driving north (yaw pi/2)."""
    return np.stack([np.full(n, x), y0 + spacing * np.arange(n), np.full(n, math.pi / 2)], axis=1)


def test_visible_nodes_see_objects_ahead_and_beside_not_behind():
    """The eval's truth rules: a 0.7 m hydrant counts within 7 m, or in view within 15 m."""
    world = load_world("campus")
    poses = _straight_north(n=60, spacing=1.0)
    hydrant = visible_nodes(world, poses, ["fire hydrant"], hfov_deg=90.0)  # campus hydrant at (3.5, -60)
    ys = poses[hydrant, 1]
    assert hydrant.size > 0 and ys.min() >= -60.0 - 15.0 and ys.max() <= -60.0 + 7.0
    assert ys.max() >= -60.0 + 5.0  # passing it still counts
    # driving south past it, the nodes north of it see it instead
    south = poses.copy()
    south[:, 2] = -math.pi / 2
    ys_s = south[visible_nodes(world, south, ["fire hydrant"], hfov_deg=90.0), 1]
    assert ys_s.min() >= -60.0 - 7.0 and ys_s.max() <= -60.0 + 15.0 and ys_s.max() > ys.max()
    # a category the route never comes near: nothing
    assert visible_nodes(world, poses, ["trailer"], hfov_deg=90.0).size == 0


def test_landmark_truth_names_categories_and_refuses_what_the_world_lacks():
    from robot_app.demo.scenario import DemoInputError

    world = load_world("campus")
    poses = _straight_north()
    truth = landmark_truth(world, poses, ["a fire hydrant", "the stop sign"], hfov_deg=90.0)
    assert [t.categories for t in truth] == [["fire hydrant"], ["stop sign"]]
    # going north the hydrant comes first (the larger stop sign is seen from further away)
    assert truth[0].nodes.min() < truth[1].nodes.min() and truth[0].nodes.max() < truth[1].nodes.max()
    with pytest.raises(DemoInputError, match="purple elephant.*names nothing"):
        landmark_truth(world, poses, ["a purple elephant"], hfov_deg=90.0)
    with pytest.raises(DemoInputError, match="never seen"):
        landmark_truth(world, poses, ["a trailer"], hfov_deg=90.0)


def test_intended_walk_and_plan_metrics_on_a_chain():
    from core.search import plan_walk

    poses = _straight_north(10)
    n = len(poses)
    src = np.concatenate([np.arange(n - 1), np.arange(1, n)])
    dst = np.concatenate([np.arange(1, n), np.arange(n - 1)])
    order = np.argsort(src, kind="stable")
    indptr = np.searchsorted(src[order], np.arange(n + 1)).astype(np.int64)
    csr = (indptr, dst[order].astype(np.int64), np.full(len(src), 12.0))

    class T:  # a LandmarkTruth stand-in with the fields plan_metrics reads
        def __init__(self, phrase, nodes):
            self.phrase, self.categories, self.nodes = phrase, ["x"], np.asarray(nodes)

    truth = [T("a", [3, 4]), T("b", [6])]
    intended = intended_walk(csr, truth, 0)
    assert intended.nodes.tolist() == list(range(7)) and intended.length == pytest.approx(72.0)
    logp = np.full((n, 2), -np.inf)
    logp[4, 0] = logp[9, 1] = 0.0  # a planner that overshoots to node 9: right first landmark, wrong second
    planned = plan_walk(*csr, logp, 0, alpha=0.01)
    m = plan_metrics(planned, intended, truth, poses)
    assert not m["planning_success"] and m["landmarks"][0]["true"] and not m["landmarks"][1]["true"]
    assert m["planning_efficiency"] == pytest.approx(72.0 / 108.0, abs=1e-3)
    assert m["landmarks"][1]["m_from_truth"] == pytest.approx(9.0)
    assert m["intended_m"] == pytest.approx(18.0)


def test_node_true_poses_interpolate_the_odometry():
    odom = {"t_s": np.array([0.0, 1.0, 2.0]), "x_m": np.array([0.0, 1.0, 2.0]), "y_m": np.zeros(3),
            "yaw_rad": np.array([0.0, 0.1, 0.2])}
    p = node_true_poses(np.array([0.1, 0.9, 2.5, -1.0]), odom)
    assert p.shape == (4, 3) and p[:, 0] == pytest.approx([0.1, 0.9, 2.0, 0.0]) and p[1, 2] == pytest.approx(0.09)
    with pytest.raises(ValueError, match="no odometry"):
        node_true_poses(np.array([0.0]), {"t_s": np.zeros(0)})


# -- scenarios -------------------------------------------------------------------------------------------
def test_phrase_categories():
    cats = {c for _, c, _, _ in load_world("campus").landmarks()}
    assert phrase_categories("a red building", cats) == ["red building"]
    assert "glass building" in phrase_categories("the building", cats)
    assert phrase_categories("a hydrant", cats) == ["fire hydrant"]
    assert phrase_categories("street lights", cats) == ["street lamp"]
    assert phrase_categories("a purple elephant", cats) == []


@pytest.mark.parametrize("name", ["campus", "industrial"])
def test_shipped_scenarios_name_landmarks_seen_along_their_routes(name):
    from robot_app.config import Config
    from robot_app.route.landmark_parsing import parse_instruction
    from robot_app.sim.explore import route_points

    world = load_world(name)
    for quick in (False, True):
        sc = scenario_for(world, quick=quick)
        pts = route_points(world, sc.route)
        # poses every 3 m along the route, facing along it
        seg = np.diff(pts, axis=0)
        poses = []
        for a, d in zip(pts[:-1], seg):
            k = max(1, int(np.linalg.norm(d) / 3.0))
            poses += [(*(a + d * i / k), math.atan2(d[1], d[0])) for i in range(k)]
        poses = np.asarray(poses)
        landmarks, _ = parse_instruction(sc.instruction, config=Config(), parser="rules")
        assert len(landmarks) == (2 if quick else 3)
        truth = landmark_truth(world, poses, landmarks, hfov_deg=90.0)
        firsts = [int(t.nodes.min()) for t in truth]
        assert firsts == sorted(firsts), (sc.instruction, firsts)  # in driving order
        route_len = float(np.linalg.norm(seg, axis=1).sum())
        assert route_len <= (200.0 if quick else 330.0) and int(truth[-1].nodes.max()) < len(poses) - 3  # task places


def test_derived_scenario_for_a_world_without_one():
    world = load_world("campus")
    sc = derive_scenario(world, quick=True)
    assert isinstance(sc, Scenario) and sc.instruction.startswith("Go past the")


# -- report ------------------------------------------------------------------------------------------------
def _fake_ctx(tmp_path):
    from robot_app.config import Config
    from robot_app.demo.onboard import PathRecorder

    world = load_world("campus")
    poses = _straight_north(20)
    ctx = DemoContext(world=world, scenario=scenario_for(world, quick=True), config=Config(), out=tmp_path,
                      models_dir=tmp_path / "models")
    ctx.poses, ctx.edges = poses, np.stack([np.arange(19), np.arange(1, 20)], axis=1)
    ctx.plan_nodes, ctx.places = list(range(12)), {"depot": 11, "yard": 13, "site-b": 15, "site-c": 17}
    from robot_app.mapping.map_build import encode_jpeg

    ctx.landmark_images = {10: encode_jpeg(np.zeros((12, 16, 3), np.uint8))}
    rec = PathRecorder(plant=None)
    rec.xy = [(0.0, -90.0 + i) for i in range(30)]
    ctx.driven = rec
    records = {n: {"ok": True, "wall_s": 1.0} for n in STAGES if n != "report"}
    records["plan"].update(planning_success=True, planning_efficiency=0.9, intended_nodes=list(range(11)),
                           landmarks=[{"phrase": "a fire hydrant", "node": 10, "true": True, "m_from_truth": 0.0,
                                       "truth_nodes": [9, 10], "categories": ["fire hydrant"]}])
    records["drive"].update(efficiency=0.8, disengagements=1)
    records["task"].update(lasp_success=True, trace=[{"kind": "execute", "step": "(navigate jackal depot yard)",
                                                      "ok": False, "observation": "a <closed> gate"}])
    return ctx, records


def test_report_writer_writes_json_png_and_a_self_contained_page(tmp_path):
    ctx, records = _fake_ctx(tmp_path)
    records["report"] = {"ok": False, "wall_s": None}  # as the runner has it while the report is written
    out = write_report(ctx, records, t0=0.0)
    assert [Path(f).name for f in out["files"]] == ["report.json", "report.png", "report.html"]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["summary"]["success"] and doc["summary"]["failed_stage"] is None  # the page reports the others
    records["report"] = {"ok": True, "wall_s": 0.1}
    s = summary(ctx, records, 0.0)
    assert s["success"] and s["planning_success"] and s["efficiency"] == 0.8 and s["disengagements"] == 1
    assert {"success", "planning_success", "efficiency", "disengagements", "lasp_success", "report"} <= set(s)
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    page = (tmp_path / "report.html").read_text()
    assert "FAILED" not in page and "success" in page
    assert "data:image/png;base64," in page and "data:image/jpeg;base64," in page
    assert "a &lt;closed&gt; gate" in page.replace("&quot;", '"') or "&lt;closed&gt;" in page
    assert "src=\"http" not in page  # self-contained: nothing fetched
    # a wrong landmark node makes the demo fail with the reason, even when every stage ran
    records["plan"]["planning_success"] = False
    records["plan"]["landmarks"][0]["true"] = False
    s = summary(ctx, records, 0.0)
    assert not s["success"] and "a fire hydrant" in s["failed_stage"]["reason"]
    assert "FAILED" in render_html(ctx, s, records, tmp_path / "report.png")


# -- command line: bad input -------------------------------------------------------------------------------
def test_unknown_world_is_a_usage_error(tmp_path, capsys):
    assert main(["demo", "--world", "atlantis", "--out", str(tmp_path / "o")]) == 2
    assert "atlantis" in capsys.readouterr().err


def test_a_world_without_a_start_with_gps_is_a_usage_error(tmp_path, capsys):
    from robot_app.sim.world import shipped_worlds

    text = shipped_worlds()["campus"].read_text() + "\n[[gps_dropouts]]\ncenter = [0.0, 0.0]\nradius_m = 300.0\n"
    (tmp_path / "dark.toml").write_text(text)
    assert main(["demo", "--world", str(tmp_path / "dark.toml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no start with a GPS fix" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "explore-log").exists()


def test_instruction_naming_what_the_world_lacks_is_refused_before_any_work(tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    rc = main(["demo", "--instruction", "Go past the stop sign and stop at the purple elephant.",
               "--models", str(models), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "purple elephant" in err and "names nothing in world 'campus'" in err
    assert not (tmp_path / "o" / "explore-log").exists()


def test_missing_models_folder_and_bad_seed(tmp_path, capsys):
    assert main(["demo", "--models", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such folder" in capsys.readouterr().err
    # the package: form: resolved, or one line naming the flag
    assert main(["demo", "--models", "package:robot_app/data/models/nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("robot-app: error: --models: ") and "does not exist in the installed package" in err
    assert len(err.strip().splitlines()) == 1
    rc = main(["demo", "--models", "package:robot_app/data/models/sim", "--out", str(tmp_path / "o"),
               "--instruction", "Go past the stop sign and stop at the purple elephant."])
    err = capsys.readouterr().err
    assert rc == 2 and "purple elephant" in err and "--models" not in err  # the shipped models were found
    assert main(["demo", "--seed", "-1", "--out", str(tmp_path / "o")]) == 2


def test_models_recording_a_bad_crop_count_are_refused(tmp_path, capsys):
    """A sidecar whose clip_crops is not 1-8 stops demo and eval sim before any work, naming the file."""
    models = tmp_path / "models"
    models.mkdir()
    for f in SHIPPED.iterdir():  # the shipped files, but the image encoder's sidecar
        if f.name != "clip-image.onnx.json":
            (models / f.name).symlink_to(f)
    doc = json.loads((SHIPPED / "clip-image.onnx.json").read_text())
    doc["params"]["clip_crops"] = "three"
    (models / "clip-image.onnx.json").write_text(json.dumps(doc))
    assert main(["demo", "--models", str(models), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "clip-image.onnx.json: params.clip_crops: expected an integer 1-8" in err and "'three'" in err
    assert not (tmp_path / "o" / "explore-log").exists()
    assert main(["eval", "sim", "--world", "campus", "--models", str(models), "--out", str(tmp_path / "e"),
                 "--no-drive"]) == 2
    assert "params.clip_crops" in capsys.readouterr().err
    assert not (tmp_path / "e" / "campus").exists()  # refused before the exploration


def test_demo_config_plans_and_drives_with_the_sim_models_settings(tmp_path):
    from robot_app.config import load_config
    from robot_app.demo.runner import context_for
    from robot_app.sim import SIM_VNM_NAV, tuned_planner

    ctx = context_for(world="campus", instruction=None, out=tmp_path, seed=0, models=None, quick=True,
                      config=load_config(None))
    assert ctx.config.vnm_nav.lost_steps == SIM_VNM_NAV["lost_steps"]  # eval sim's "lost" level for the sim VNM
    assert ctx.config.vnm_nav.gps_at_turns_deg == SIM_VNM_NAV["gps_at_turns_deg"] == 50.0
    assert ctx.config.camera.source == "sim" and ctx.config.mapping.min_travel_m == 1.0
    tuned = tuned_planner(ctx.models_dir)  # the shipped models carry their tuning (eval sim-tune --write)
    assert tuned is not None and ctx.config.planner.alpha == tuned["alpha"]
    assert ctx.config.planner.max_cosine == tuned["max_cosine"] < 1.0
    from robot_app.sim import model_clip_crops

    assert ctx.config.camera.clip_crops == model_clip_crops(ctx.models_dir) == 3  # the crops the sim VLM knows


# -- the short demo: every stage must succeed -----------------------------------------------------------------
@pytest.mark.timeout(420)
@pytest.mark.skipif(not HAVE_STAND_INS, reason=f"the sim stand-in models are not in {SHIPPED}")
def test_quick_demo_succeeds_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--quick", "--json", "--no-progress", "--out", str(out), "--seed", "0"])
    captured = capsys.readouterr()
    s = json.loads(captured.out)
    assert rc == 0, (s, captured.err[-3000:])
    assert s["success"] and s["planning_success"] and s["lasp_success"]
    assert 0.0 < s["efficiency"] <= 1.0 and s["disengagements"] >= 0  # the app may re-plan after a lost run
    doc = json.loads((out / "report.json").read_text())
    assert all(doc["stages"][n]["ok"] for n in STAGES)
    # the VNM navigator drives when the sim VNM is shipped; GPS mode (the documented fallback) otherwise
    assert doc["stages"]["drive"]["runs"][0]["mode"] == ("vnm" if HAVE_SIM_VNM else "gps")
    assert doc["stages"]["task"]["learned"] and doc["stages"]["task"]["injected"]["blocked_steps"]
    assert (out / "report.png").is_file() and (out / "report.html").is_file() and (out / "config.toml").is_file()
    # the drive over time for the report's plot: speed, cross-track error to the planned walk, who drove
    tl = doc["stages"]["drive"]["timeline"]
    assert len(tl["cross_track_m"]) == len(tl["speed_mps"]) + 1 > 20 and max(tl["cross_track_m"]) < 5.0
    assert {d for _t, d in tl["drivers"]} <= {"vnm", "gps", "turn", "back", "stop"} and tl["drivers"]
    # the page and the JSON agree on every stage (the report stage included)
    page = (out / "report.html").read_text()
    # the LASP trace as readable steps (the injected failure, what was learned) and the metrics defined
    assert "failed (" in page and "learned (try): " in page and "task succeeded" in page
    learned = [learned_text(e) for e in doc["stages"]["task"]["learned"]]
    assert "learned: " + "; ".join(learned) in page and not any(t.startswith("{") for t in learned)
    assert "<td>None</td>" not in page  # a stage without a time (the page's own) shows "-"
    assert "What the metrics mean" in page and "LM-Nav Sec. 5" in page
    for name in STAGES:
        assert f"<tr><td>{name}</td><td>{doc['stages'][name]['ok']}</td>" in page, name
    # --serve: the app the demo drove stays up on its map and models, with the touchscreen's address
    from robot_app.cli.demo_cmd import serve

    capsys.readouterr()
    assert serve(out, duration_s=3.0) == 0
    said = capsys.readouterr().out
    assert re.search(r"^touchscreen: http://127\.0\.0\.1:\d+/#token=", said, re.M), said
    # shipped data is named by package: paths (a reinstall moves the package), resolved where it is now
    text = (out / "config.toml").read_text()
    assert 'models_dir = "package:robot_app/data/models/sim"' in text and "package:robot_app/data/worlds/" in text
    from robot_app.config import load_config

    assert Path(load_config(out / "config.toml").paths.models_dir) == SHIPPED.resolve()


def test_report_map_shows_the_driven_area_and_each_landmarks_grounding(tmp_path):
    from PIL import Image

    from robot_app.demo.report import _driven_area, plot_report

    ctx, records = _fake_ctx(tmp_path)
    route = np.asarray(ctx.scenario.route, dtype=float)
    pts = _driven_area(ctx, records, route)
    # the planned and intended walks and the drive, not the whole explored route
    want = np.concatenate([ctx.poses[:12, :2], ctx.poses[:11, :2], np.asarray(ctx.driven.xy)])
    assert np.array_equal(pts, want)
    assert np.ptp(pts, axis=0).max() < np.ptp(route, axis=0).max()
    plain = plot_report(ctx, records, tmp_path / "plain.png")
    records["plan"]["grounding"] = [{"name": "a fire hydrant", "best_node": 10,
                                     "scores": [[10, 0.31], [9, 0.3], [3, 0.1]]}]
    heat = plot_report(ctx, records, tmp_path / "heat.png")
    with Image.open(plain) as a, Image.open(heat) as b:
        assert b.size[1] > a.size[1] + 100  # a row of grounding maps under the landmark images
    ctx.plan_nodes, ctx.driven = [], None
    records["plan"].pop("intended_nodes")
    assert np.array_equal(_driven_area(ctx, records, route), route)  # nothing driven: the explored route


def test_learned_knowledge_reads_as_words():
    assert learned_text({"kind": "precondition", "action": "open", "pddl": "(unlocked ?d)"}) == \
        "precondition (unlocked ?d) of open"
    assert learned_text({"kind": "property", "name": "weight", "numeric": True, "params": ["item"]}) == \
        "property weight(item) (numeric)"
    assert learned_text({"kind": "object", "name": "key1", "type": "key"}) == "object key1 of type key"
    assert learned_text({"kind": "other", "x": 1}) == '{"kind": "other", "x": 1}'
