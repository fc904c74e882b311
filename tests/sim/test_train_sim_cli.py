"""``robot-app models train-sim``: bad input is refused before any work; a quick run writes loadable models."""

from __future__ import annotations

import json

import pytest

from robot_app.cli import main

pytest.importorskip("pybullet")
pytest.importorskip("torch")


@pytest.mark.parametrize("extra, message", [
    (["--world", "atlantis"], "--world atlantis"),
    (["--threads", "0"], "--threads: expected >= 1"),
])
def test_bad_arguments_are_refused_with_the_reason(tmp_path, capsys, extra, message):
    rc = main(["models", "train-sim", "--out", str(tmp_path / "m"), *extra])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


def test_out_must_be_a_folder(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["models", "train-sim", "--out", str(f), "--world", "campus"]) == 2
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_writes_both_models_and_reports_json(tmp_path, capsys):
    out = tmp_path / "sim-models"
    rc = main(["models", "train-sim", "--world", "campus", "--out", str(out), "--quick", "--threads", "1", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["worlds"] == ["campus"] and report["quick"] is True
    assert report["loaded"]["vlm"].startswith("clip:") and report["loaded"]["vnm"]
    for name in ("clip-image.onnx", "clip-text.onnx", "vnm.onnx", "sim-vlm-quality.json", "sim-vnm-quality.json"):
        assert (out / name).is_file(), name
