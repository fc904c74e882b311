"""Generated worlds on disk for a split (robot_app.sim.generated) and ``eval sim --generated N --seed-range``."""

from __future__ import annotations

import json

import pytest

from robot_app.cli import main
from robot_app.sim.eval_instructions import load_instructions
from robot_app.sim.generated import materialise, record_unseen_eval
from robot_app.sim.world import load_world
from robot_app.sim.worldgen import SEED_RANGES


def test_materialise_writes_the_splits_first_seeds_reproducibly(tmp_path):
    files = materialise("dev", 2, tmp_path, n_instructions=3)
    assert [f.seed for f in files] == list(SEED_RANGES["dev"][:2]) and all(f.split == "dev" for f in files)
    w = load_world(str(files[0].world))
    iset = load_instructions(files[0].instructions, world=w)
    assert w.name == "gen-2000" and 1 <= len(iset.instructions) <= 3 and len(iset.route) >= 2
    stamp = files[0].world.stat().st_mtime_ns
    again = materialise("dev", 2, tmp_path, n_instructions=3)
    assert again == files and files[0].world.stat().st_mtime_ns == stamp  # unchanged files are not rewritten
    with pytest.raises(ValueError, match="not there"):
        materialise("test", 101, tmp_path)
    with pytest.raises(KeyError, match="unknown seed split"):
        materialise("nope", 1, tmp_path)


@pytest.mark.parametrize("argv, words", [
    (["--world", "campus", "--generated", "2"], "not both"),
    ([], "give --world W or --generated N"),
    (["--generated", "500"], "must be 1-100"),
    (["--generated", "1", "--instructions", "x.json"], "bring their own instruction sets"),
    (["--generated", "1", "--seed-range", "dev", "--write"], "use --seed-range test"),
])
def test_eval_sim_generated_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, words):
    if "x.json" in argv:
        (tmp_path / "x.json").write_text("{}")
        argv = [a if a != "x.json" else str(tmp_path / "x.json") for a in argv]
    assert main(["eval", "sim", *argv, "--out", str(tmp_path / "o"), "--no-drive"]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_eval_sim_on_one_generated_dev_world_pools_its_report(tmp_path, capsys):
    assert main(["eval", "sim", "--generated", "1", "--seed-range", "dev", "--no-drive", "--limit", "3",
                 "--out", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["split"] == "dev" and doc["seeds"] == [2000] and not doc["unseen"]
    assert doc["totals"]["lmnav"]["instructions"] == 3 and doc["worlds_evaluated"] == 1


def _doc(split="test", grounding="vlm", rate=0.5):
    worlds = {"3000": {"lmnav": rate, "instructions": 20}, "3001": {"error": "exploration stopped"},
              "3002": {"lmnav": rate, "instructions": 20}}
    return {"split": split, "grounding": grounding, "worlds": worlds, "worlds_evaluated": 2,
            "totals": {"lmnav": {"instructions": 40, "success_rate": rate}}, "lmnav_success_min_world": rate}


def test_unseen_figures_are_recorded_beside_the_models_they_were_measured_with(tmp_path):
    (tmp_path / "clip-image.onnx.json").write_text(json.dumps({"sha256": "a" * 64}))
    (tmp_path / "vnm.onnx.json").write_text(json.dumps({"sha256": "b" * 64}))
    path = record_unseen_eval(tmp_path, _doc(rate=0.7))
    record_unseen_eval(tmp_path, _doc(grounding="oracle", rate=0.9))
    doc = json.loads(path.read_text())
    assert path.name == "unseen-worlds-eval.json"
    assert (doc["lmnav_success_rate"], doc["oracle_success_rate"]) == (0.7, 0.9)
    assert (doc["seed_first"], doc["seed_last"], doc["worlds"], doc["instructions"]) == (3000, 3002, 2, 40)
    assert doc["clip_image_sha256"] == "a" * 64
    # another VLM: the oracle figure of the old one is not carried over
    (tmp_path / "clip-image.onnx.json").write_text(json.dumps({"sha256": "c" * 64}))
    doc = json.loads(record_unseen_eval(tmp_path, _doc(rate=0.6)).read_text())
    assert doc["lmnav_success_rate"] == 0.6 and "oracle_success_rate" not in doc
    with pytest.raises(ValueError, match="only the test seed range"):
        record_unseen_eval(tmp_path, _doc(split="dev"))


def test_the_demo_report_quotes_unseen_figures_of_the_installed_vlm_only(tmp_path):
    from types import SimpleNamespace

    from robot_app.demo.report import provenance

    side = {"sha256": "a" * 64, "params": {"train_worlds": ["campus", "gen-1000"], "train_seeds": [1000, 1000]}}
    (tmp_path / "clip-image.onnx.json").write_text(json.dumps(side))
    record_unseen_eval(tmp_path, _doc(rate=0.7))
    p = provenance(tmp_path, SimpleNamespace(name="campus"))
    assert p["trained_on_world"] is True and p["unseen_eval"]["lmnav_success_rate"] == 0.7
    assert provenance(tmp_path, SimpleNamespace(name="gen-3000"))["trained_on_world"] is False
    (tmp_path / "clip-image.onnx.json").write_text(json.dumps({**side, "sha256": "c" * 64}))
    assert provenance(tmp_path, SimpleNamespace(name="campus"))["unseen_eval"] is None
