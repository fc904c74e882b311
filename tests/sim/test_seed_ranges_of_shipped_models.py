"""Figures that hold: train, dev and test seed ranges never overlap; a VLM trained on generated worlds records
its train seeds in its sidecar, a planner tuned on generated worlds records its dev seeds, and whatever the
shipped models record lies in the right range and apart from the test seeds (the worlds that
``eval sim --generated N --seed-range test`` reports on)."""

from __future__ import annotations

import json

import pytest

from robot_app.cli import main
from robot_app.sim import TUNING_FILE, shipped_models_dir
from robot_app.sim.worldgen import SEED_RANGES, split_of


def test_the_named_seed_ranges_never_overlap():
    names = list(SEED_RANGES)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not set(SEED_RANGES[a]) & set(SEED_RANGES[b]), (a, b)
    assert split_of(1000) == "train" and split_of(2000) == "dev" and split_of(3000) == "test"


def _recorded(models_dir) -> tuple[set, set, set]:
    """(train seeds, tuning seeds, calibration seeds) a models folder records (empty where it records none)."""
    params = json.loads((models_dir / "clip-image.onnx.json").read_text())["params"]
    train = set(range(params["train_seeds"][0], params["train_seeds"][1] + 1)) if "train_seeds" in params else set()
    tuning_file = models_dir / TUNING_FILE
    tuned = set(json.loads(tuning_file.read_text()).get("tuning_seeds", [])) if tuning_file.is_file() else set()
    calib_file = models_dir / "grounding-calibration.json"
    calibrated = ({int(w[4:]) for w in json.loads(calib_file.read_text())["worlds"] if w.startswith("gen-")}
                  if calib_file.is_file() else set())
    return train, tuned, calibrated


def test_whatever_the_shipped_models_record_is_in_its_range_and_apart_from_the_test_seeds():
    train, tuned, calibrated = _recorded(shipped_models_dir())
    assert train <= set(SEED_RANGES["train"])
    assert tuned <= set(SEED_RANGES["dev"]) and calibrated <= set(SEED_RANGES["dev"])
    assert not (train | tuned | calibrated) & set(SEED_RANGES["test"])


@pytest.mark.slow
def test_a_vlm_trained_on_generated_worlds_records_its_train_seeds(tmp_path, capsys):
    assert main(["models", "train-sim", "--only", "vlm", "--generated", "2", "--views-per-world", "20",
                 "--epochs", "1", "--out", str(tmp_path), "--json"]) == 0
    capsys.readouterr()
    params = json.loads((tmp_path / "clip-image.onnx.json").read_text())["params"]
    assert params["train_seeds"] == [1000, 1001] and params["train_split"] == "train"
    assert {"campus", "industrial", "gen-1000", "gen-1001"} == set(params["train_worlds"])
    from robot_app.sim.eval_tune import write_tuning

    report = {"alphas": [0.01], "alpha": 0.01, "max_cosine": 0.48, "seed": 1, "n": 5,
              "worlds": {"gen-2000": {"instructions": 5, "logit_scale": 16.0, "success_rate": [0.6]}}}
    write_tuning(tmp_path, report)
    train, tuned, _ = _recorded(tmp_path)
    assert train == {1000, 1001} and tuned == {2000}
    assert json.loads((tmp_path / TUNING_FILE).read_text())["tuning_splits"] == ["dev"]
