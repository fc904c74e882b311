"""Landmarks that are not in the map: the shipped sim models' calibrated presence rule on a
small simulated map, the calibration file's sha256 check, and ``models calibrate-grounding --worlds``."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

from robot_app.cli import main
from robot_app.sim import shipped_models_dir

pytest.importorskip("pybullet")

#: The first 48 m of the campus main path: a stop sign, a fire hydrant, a blue dumpster and a mailbox are in
#: view (ground truth), no traffic cone, picnic table or white truck.
ROUTE = [(0.0, -88.0), (0.0, -40.0)]
CLIP_FILES = ("clip-image.onnx", "clip-image.onnx.json", "clip-text.onnx", "clip-text.onnx.json",
              "clip-tokenizer.json", "clip-reference.npz", "grounding-calibration.json")


@pytest.fixture(scope="module")
def small_sim_map(tmp_path_factory):
    """A 48-node map of the campus main path built with the shipped sim VLM and VNM (about 5 s); its path."""
    from robot_app.config import Config
    from robot_app.mapping.map_build import build_map
    from robot_app.sim import record_exploration
    from robot_app.sim.eval import _eval_config

    out = tmp_path_factory.mktemp("sim-map")
    rep = record_exploration("campus", ROUTE, out / "log", speed_mps=1.0, seed=0)
    assert rep.reached_end
    cfg = _eval_config(Config(), shipped_models_dir(), None, 1.0)  # the crops the sim VLM was trained on
    build_map([out / "log"], out / "map.sqlite", config=cfg, models_dir=shipped_models_dir(), overwrite=True)
    return out / "map.sqlite"


def _config(tmp_path, models_dir) -> str:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models_dir}"\n[llm]\nlandmark_parser = "rules"\n')
    return str(conf)


def _plan(conf, map_path, instruction, capsys, *, json_out=True):
    args = ["--config", conf, "plan", "--map", str(map_path), "--start", "0", "--instruction", instruction]
    rc = main(args + (["--json"] if json_out else []))
    out = capsys.readouterr().out
    return rc, (json.loads(out) if json_out else out)


def test_shipped_models_carry_a_calibration_for_their_own_files():
    from models.grounding_calibration import read_presence_rule, tower_digests

    d = shipped_models_dir()
    doc = json.loads((d / "grounding-calibration.json").read_text())
    assert {k: doc[k] for k in tower_digests(d)} == tower_digests(d)
    assert "TUNING worlds" in doc["material"] and set(doc["worlds"]) == {"campus", "industrial"}
    assert doc["figures"]["chosen"]["balanced_accuracy"] > doc["figures"]["config_fallback"]["balanced_accuracy"]
    rule = read_presence_rule(d)
    assert rule is not None and rule.calibrated and rule.threshold == doc["threshold"] and rule.median_weight == 0.5


def test_a_present_landmark_is_found_and_an_absent_one_is_flagged(tmp_path, small_sim_map, capsys):
    conf = _config(tmp_path, shipped_models_dir())
    rc, out = _plan(conf, small_sim_map, "Go past the stop sign, then stop at the fire hydrant.", capsys)
    assert rc == 0 and out["status"] == "ok" and out["absent_landmarks"] == []
    rule = out["grounding"]["presence_rule"]
    assert rule["calibrated"] and rule["median_weight"] == 0.5 and "grounding-calibration.json" in rule["source"]
    for g, lm in zip(out["grounding"]["landmarks"], out["landmarks"]):
        assert g["found"] and not g["not_in_map"] and lm["found"]
        assert g["presence_score"] >= g["presence_threshold"] == rule["threshold"]
        assert g["presence_score"] == pytest.approx(g["best_cosine"] - 0.5 * g["median_cosine"], abs=2e-4)

    rc, out = _plan(conf, small_sim_map, "go to the purple elephant", capsys)
    assert rc == 0 and out["status"] == "ok"  # the walk still goes to the best match ...
    (g,) = out["grounding"]["landmarks"]
    assert not g["found"] and g["not_in_map"] and g["presence_score"] < g["presence_threshold"]
    assert out["absent_landmarks"] == ["a purple elephant"] and out["landmarks"][0]["found"] is False
    rc, text = _plan(conf, small_sim_map, "go to the purple elephant", capsys, json_out=False)
    assert text.splitlines()[0] == "NOT IN THE MAP: a purple elephant"  # ... and the operator is told first
    assert "calibrated for this model" in text


def test_calibration_file_is_ignored_for_other_model_files(tmp_path, small_sim_map, capsys, caplog):
    from models.grounding_calibration import CALIBRATION_FILE, read_presence_rule, write_calibration
    from robot_app.config import load_config
    from robot_app.route.grounding_service import presence_rule

    d = tmp_path / "models"
    d.mkdir()
    for f in CLIP_FILES:
        shutil.copy(shipped_models_dir() / f, d / f)
    assert read_presence_rule(d).calibrated
    doc = json.loads((d / CALIBRATION_FILE).read_text())
    doc["clip_text_sha256"] = "0" * 64  # made for another text tower
    (d / CALIBRATION_FILE).write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        assert read_presence_rule(d) is None
    assert "another CLIP text tower" in caplog.text and "calibrate-grounding --write" in caplog.text
    conf = _config(tmp_path, d)
    rule = presence_rule(load_config(conf))
    assert not rule.calibrated and rule.median_weight == 0.0 and rule.threshold == 0.2  # [models] landmark_min_cosine
    rc, out = _plan(conf, small_sim_map, "go to the purple elephant", capsys)
    (g,) = out["grounding"]["landmarks"]
    assert not out["grounding"]["presence_rule"]["calibrated"]
    assert g["presence_score"] == g["best_cosine"]  # the uncalibrated rule: the raw best cosine

    # written again for these files, it holds; unreadable or odd values are ignored with a warning
    write_calibration(d, {"threshold": 0.3, "median_weight": 0.5, "material": "test"})
    assert read_presence_rule(d).threshold == 0.3
    for bad in ('{"format": "robot-app-grounding-calibration", "threshold": "high", "median_weight": 0.5}', "{", "[]"):
        (d / CALIBRATION_FILE).write_text(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert read_presence_rule(d) is None
        assert "unreadable" in caplog.text
    (d / "clip-text.onnx.json").unlink()
    with pytest.raises(ValueError, match="no readable sidecar"):
        write_calibration(d, {"threshold": 0.3, "median_weight": 0.5})
    with pytest.raises(ValueError, match="median_weight"):
        write_calibration(d, {"threshold": 0.3, "median_weight": 2.0})


def test_calibrate_grounding_on_a_quick_world_reports_and_refuses_to_write_too_little(tmp_path, capsys):
    d = tmp_path / "models"
    d.mkdir()
    for f in CLIP_FILES[:-1]:  # no calibration yet
        shutil.copy(shipped_models_dir() / f, d / f)
    args = ["models", "calibrate-grounding", "--models", str(d), "--worlds", "campus", "--quick",
            "--out", str(tmp_path / "out")]
    assert main(args + ["--write"]) == 1  # 60 m of one world: too few samples to write
    text = capsys.readouterr().out
    assert "TUNING worlds campus" in text and "NOT written: only" in text
    assert "present landmark phrases flagged" in text and "absent, made-up" in text
    assert not (d / "grounding-calibration.json").exists()
    assert main(args + ["--json"]) == 0  # the map is reused
    rep = json.loads(capsys.readouterr().out)
    c = rep["summary"]["chosen"]
    assert c["present"] >= 20 and c["absent"] >= 24 and 0.0 <= c["balanced_accuracy"] <= 1.0
    assert rep["worlds"]["campus"]["model_trained_on_it"] and list(rep["worlds"]["campus"]["explorations"]) == ["quick"]
    samples = json.loads((tmp_path / "out" / "calibrate-grounding.json").read_text())["samples"]
    elephant = next(s for s in samples if s["phrase"] == "purple elephant")
    assert elephant["label"] == "absent" and elephant["score"] < c["threshold"]
    assert np.isclose(elephant["score"], elephant["best"] - 0.5 * elephant["median"], atol=2e-4)


@pytest.mark.parametrize("args, message", [
    (["--median-weight", "2"], "--median-weight"),
    (["--map", "m.map", "--worlds", "campus"], "not both"),
    (["--map", "m.map"], "--present"),
    (["--present", "a"], "go with --map"),
    (["--worlds", "atlantis", "--quick"], "atlantis"),
])
def test_calibrate_grounding_bad_input_is_a_one_line_error(tmp_path, capsys, args, message):
    rc = main(["models", "calibrate-grounding", "--models", str(shipped_models_dir()), "--out", str(tmp_path / "o"),
               *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
