"""``eval sim --engine ray``: the instructions fanned out over a local Ray of 2 workers give
the rows and totals of the local run, drives included."""

from __future__ import annotations

import json

import pytest

from robot_app.cli import main
from tests.sim.test_eval_sim import GOOD, _models_dir

ray = pytest.importorskip("ray", reason="the fleet extra (ray) runs the Ray engine")

from tests.ray_support import _no_leaked_threads, ray_runtime  # noqa: E402, F401


def _without_times(x):
    """A report part with its wall-clock seconds left out (they differ between any two runs)."""
    if isinstance(x, dict):
        return {k: _without_times(v) for k, v in x.items() if not (k.endswith("wall_s") or k == "seconds")}
    if isinstance(x, list):
        return [_without_times(v) for v in x]
    return x


def test_ray_rows_and_totals_equal_the_local_run(tmp_path, tmp_path_factory, capsys):
    pytest.importorskip("pybullet")
    models = _models_dir(tmp_path_factory)
    capsys.readouterr()
    f = tmp_path / "tiny-instructions.json"
    data = json.loads(json.dumps(GOOD))
    data["instructions"] = json.loads(json.dumps(data["instructions"] * 2))  # four instructions, two workers
    for k, ins in enumerate(data["instructions"]):
        ins["id"] = f"{ins['id']}{k}"
    f.write_text(json.dumps(data))
    args = ["eval", "sim", "--world", "campus", "--instructions", str(f), "--models", str(models),
            "--out", str(tmp_path / "out"), "--json", "--drive-time-limit", "20"]
    assert main(args) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(args + ["--engine", "ray", "--workers", "2"]) == 0
    fanned = json.loads(capsys.readouterr().out)
    assert fanned["map"]["cached"] and len(fanned["instructions"]) == 4
    assert local["engine"] == "local" and fanned["engine"] == "ray"
    assert all("executions" in row for row in local["instructions"] if "lmnav" in row.get("planners", {}))
    assert _without_times(fanned["instructions"]) == _without_times(local["instructions"])
    assert _without_times({k: v for k, v in fanned.items() if k not in ("engine", "map", "exploration")}) == \
        _without_times({k: v for k, v in local.items() if k not in ("engine", "map", "exploration")})
    assert _without_times(fanned["totals"]) == _without_times(local["totals"])
    assert fanned["targets"] == local["targets"]


def test_engine_flags_are_checked(tmp_path, capsys):
    assert main(["eval", "sim", "--world", "campus", "--workers", "2", "--out", str(tmp_path / "o")]) == 2
    assert "--ray-address and --workers need --engine ray" in capsys.readouterr().err
    assert main(["eval", "sim", "--world", "campus", "--engine", "ray", "--workers", "0",
                 "--out", str(tmp_path / "o")]) == 2
    assert "--workers: expected >= 1" in capsys.readouterr().err


def test_sim_tune_on_ray_gives_the_local_figures(tmp_path, tmp_path_factory, capsys):
    pytest.importorskip("pybullet")
    models = _models_dir(tmp_path_factory)
    capsys.readouterr()
    f = tmp_path / "route.json"
    f.write_text(json.dumps(GOOD))
    args = ["eval", "sim-tune", "--world", "campus", "--instructions", str(f), "--models", str(models),
            "--out", str(tmp_path / "tune"), "--n", "6", "--alphas", "0.002,0.02", "--max-cosines", "1,0.46", "--json"]
    assert main(args) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(args + ["--engine", "ray", "--workers", "2"]) == 0
    fanned = json.loads(capsys.readouterr().out)
    assert local["worlds"]["campus"]["instructions"] >= 1
    for key in ("alpha", "max_cosine", "mean_success_rate"):
        assert fanned[key] == local[key]
    by_cap = "success_rate_by_max_cosine"
    assert fanned["worlds"]["campus"][by_cap] == local["worlds"]["campus"][by_cap]
