"""``robot-app models quantize``: the VNM's static (QDQ) int8 path with a calibration set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.export.quantize import quantize_models
from models.export.quantize_static import (
    STATIC_LABEL,
    CalibrationDrive,
    CalibrationError,
    drive_from_log,
    split_steps,
    vnm_steps,
)
from models.sidecar import precision, read_sidecar, sha256_file
from models.vnm import open_vnm
from robot_app.cli import main

onnx = pytest.importorskip("onnx")

SIM = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "models" / "sim"


def _drive(n: int = 40, seed: int = 0) -> CalibrationDrive:
    """A smooth synthetic 'drive': a textured image panning right one pixel column per frame."""
    rng = np.random.default_rng(seed)
    base = np.clip(rng.normal(0, 1, (64, 85 + n, 3)).cumsum(1) * 12 + 128, 0, 255).astype(np.uint8)
    return CalibrationDrive(f"synthetic pan {seed}", np.stack([base[:, j:j + 85] for j in range(n)]))


def _log(folder: Path, *, frames: int, rate_hz: float = 4.0) -> Path:
    from robot_app.mapping.synthetic_logs import write_synthetic_log

    write_synthetic_log(folder, [(0.0, 0.0), (frames / rate_hz, 0.0)], speed_mps=1.0, rate_hz=rate_hz)
    return folder


def _node_types(path: Path) -> set:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory) -> Path:
    """The sim VNM quantised statically through the CLI, calibrated on simulated renders.

    The sim VNM's int8 distances differ from fp32 by 1-3 steps, over the default 0.4 (2 % of 0-20), so the
    bound is widened to 20 % here to get a kept static file (the operator's --dist-tol, recorded in the
    sidecar)."""
    pytest.importorskip("pybullet", reason="the `sim` extra renders the calibration drives")
    out = tmp_path_factory.mktemp("qs") / "int8"
    assert main(["models", "quantize", str(SIM), str(out), "--only", "vnm", "--vnm-method", "static",
                 "--dist-tol", "0.2", "--min-speedup", "0", "--repeats", "2"]) == 0
    return out


def test_static_vnm_is_qdq_int8_opens_and_records_its_calibration(static_dir):
    report = json.loads((static_dir / "quantize-report.json").read_text())
    row = report["models"]["vnm"]
    assert row["result"] == "int8" and row["method"] == "static QDQ" and row["reason"].startswith("static QDQ")
    cal = row["calibration"]
    assert all(s.startswith("sim campus drive") for s in cal["sources"]) and len(cal["sources"]) == 3
    assert cal["steps"] > 0 and cal["held_out_steps"] > 0 and cal["goals_per_step"] == 9
    assert cal["reference_in_calibration"] is False  # the reference step is held out of the calibration
    # parity figures on the reference step and on every held-out step are in the report
    assert row["parity"]["waypoints_cosine_min"] >= 0.99 and row["parity"]["closest_goal_same"]
    held = row["parity_held_out"]
    assert held["steps"] == cal["held_out_steps"] and held["waypoints_cosine_min"] >= 0.99
    assert 0 < held["dist_max_abs"] <= 4.0 and held["closest_goal_same_steps"] <= held["steps"]
    assert row["fp32_ms"] > 0 and row["int8_ms"] > 0
    sc = read_sidecar(static_dir / "vnm.onnx", kind="vnm")
    assert precision(sc) == "int8" and sc.params["quantization"] == STATIC_LABEL
    q = sc.params["int8"]
    assert q["method"] == "static QDQ" and q["calibration"] == cal and q["dist_tol_steps"] == 4.0
    assert q["source_sha256"] == read_sidecar(SIM / "vnm.onnx", kind="vnm").sha256
    ops = _node_types(static_dir / "vnm.onnx")
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops  # QDQ around the Conv layers
    m = onnx.load(str(static_dir / "vnm.onnx"))
    assert sum(t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 4 for t in m.graph.initializer) >= 6
    # the runtime opens it with the product's normal session options and it agrees with fp32
    v_fp, v_q = open_vnm(SIM), open_vnm(static_dir)
    with np.load(SIM / "vnm-reference.npz") as ref:
        a, b = v_fp.predict(ref["obs"], ref["goal"]), v_q.predict(ref["obs"], ref["goal"])
    assert np.argmin(a.dist_steps) == np.argmin(b.dist_steps)
    assert np.abs(a.dist_steps - b.dist_steps).max() <= 4.0


def test_models_info_shows_the_static_file_as_int8_and_verifies_it(static_dir, capsys):
    assert main(["models", "info", "--models", str(static_dir), "--verify", "--json"]) == 0
    row = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["models"]}["vnm"]
    assert row["precision"] == "int8" and row["parity"]["ok"]
    assert row["params"]["quantization"] == STATIC_LABEL


def test_verify_refuses_an_int8_sidecar_whose_bounds_are_not_numbers(static_dir, tmp_path, capsys):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(static_dir, d)
    sc_path = d / "vnm.onnx.json"
    sc = json.loads(sc_path.read_text())
    sc["params"]["int8"]["dist_tol_steps"] = None
    sc_path.write_text(json.dumps(sc))
    assert main(["models", "info", "--models", str(d), "--verify", "--json"]) == 1
    row = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["models"]}["vnm"]
    assert row["parity"]["ok"] is False and "dist_tol_steps None" in row["parity"]["error"]


def test_static_that_fails_parity_falls_back_to_fp32_with_its_figures(tmp_path):
    res = quantize_models(SIM, tmp_path / "o", kinds=("vnm",), vnm_method="static", min_cosine=1.0, repeats=2)
    row = res["models"]["vnm"]
    assert row["result"] == "fp32" and row["reason"].startswith("static QDQ: parity: waypoint cosine"), row
    assert sha256_file(tmp_path / "o" / "vnm.onnx") == sha256_file(SIM / "vnm.onnx")
    assert precision(read_sidecar(tmp_path / "o" / "vnm.onnx", kind="vnm")) == "fp32"
    # without calibration drives the reference step calibrates, and the report says it was not held out
    assert row["calibration"]["reference_in_calibration"] is True and row["calibration"]["held_out_steps"] == 0
    assert 0.9 < row["parity"]["waypoints_cosine_min"] < 1.0
    assert row["int8_ms"] > 0 and row["int8_mb"] < row["fp32_mb"]  # timed anyway, for the report


def test_auto_tries_static_first_and_falls_back_to_dynamic(tmp_path):
    # the sim VNM's static distances miss the default 0.4-step bound; dynamic int8 holds it
    res = quantize_models(SIM, tmp_path / "o", kinds=("vnm",), calibration=[_drive(40, 0), _drive(30, 1)],
                          min_speedup=0.0, repeats=2)
    row = res["models"]["vnm"]
    assert row["result"] == "int8" and row["method"] == "dynamic", row
    assert "static QDQ failed first: parity" in row["reason"]
    assert row["static"]["method"] == "static QDQ" and "parity" in row["static"]
    assert row["calibration"]["sources"] == ["synthetic pan 0", "synthetic pan 1"]
    sc = read_sidecar(tmp_path / "o" / "vnm.onnx", kind="vnm")
    assert sc.params["quantization"] == "int8 dynamic (onnxruntime)"
    assert "QuantizeLinear" not in _node_types(tmp_path / "o" / "vnm.onnx")


def test_random_init_gnm_static_figures_are_reported(vnm_export, tmp_path):
    src, _ = vnm_export
    res = quantize_models(src, tmp_path / "o", kinds=("vnm",), vnm_method="static", calibration=[_drive(40)],
                          min_speedup=0.0, repeats=2)
    row = res["models"]["vnm"]
    assert row["int8_mb"] < 0.35 * row["fp32_mb"]  # every Conv / Gemm weight int8
    assert row["calibration"]["steps"] == 6 and row["calibration"]["held_out_steps"] == 3
    held = row["parity_held_out"]
    assert held["steps"] == 3 and held["waypoints_cosine_min"] > 0.9 and held["dist_max_abs"] < 0.4
    # random weights give nearly equal distances to every goal: the closest goal is a near tie
    assert held["closest_goal_gap_fp32_min"] < 0.05
    if row["result"] == "fp32":
        assert "closest goal" in row["reason"] or "cosine" in row["reason"]
    else:
        assert read_sidecar(tmp_path / "o" / "vnm.onnx", kind="vnm").params["quantization"] == STATIC_LABEL


def test_calibration_steps_are_control_steps_with_distinct_goals():
    sc = read_sidecar(SIM / "vnm.onnx", kind="vnm")
    steps = vnm_steps([_drive(40), _drive(8, 1)], sc)
    assert len(steps) == 9 + 1  # 1 step every 4 frames from frame 5 on: 9 + 1
    for s in steps:
        assert s["obs"].shape == (1, 18, 64, 85) and s["goal"].shape == (9, 3, 64, 85)
        assert s["obs"].dtype == s["goal"].dtype == np.float32
        assert len({g.tobytes() for g in s["goal"]}) == 9  # no repeated goal frame: no forced tie
    # the observation is the 6 newest frames, oldest first, preprocessed as the runtime does
    from models.vnm import VnmModel

    m = VnmModel(None, sidecar=sc)
    d = _drive(40)
    assert np.allclose(steps[0]["obs"][0], m.preprocess_many(list(d.frames[:6])).reshape(18, 64, 85))
    cal, held = split_steps(steps)
    assert (len(cal), len(held)) == (7, 3) and held[0] is steps[2]
    assert split_steps(steps[:2]) == (steps[:2], [])
    with pytest.raises(CalibrationError, match="at least 6"):
        vnm_steps([_drive(5)], sc)


def test_drive_from_log_resamples_to_the_model_rate(tmp_path):
    d = drive_from_log(_log(tmp_path / "log", frames=40, rate_hz=8.0), frame_rate_hz=4.0)
    assert 19 <= len(d.frames) <= 21 and d.frames.dtype == np.uint8 and d.frames.shape[-1] == 3
    assert str(tmp_path / "log") in d.source and "4 Hz" in d.source
    long = drive_from_log(_log(tmp_path / "long", frames=200), max_frames=48)
    assert len(long.frames) == 48


def test_bad_calibration_logs_are_refused_naming_the_path(tmp_path, capsys):
    from core.tlog import TraversalLogWriter

    empty = tmp_path / "no-frames"
    with TraversalLogWriter(empty) as w:
        w.add_gps(0.0, 52.0, 4.0, quality=1, hacc_m=1.0)
    not_log = tmp_path / "not-a-log"
    not_log.mkdir()
    for path, words in ((tmp_path / "absent", "no such traversal log"), (empty, "0 camera frames"),
                        (not_log, "not a traversal log")):
        out = tmp_path / f"o-{path.name}"
        assert main(["models", "quantize", str(SIM), str(out), "--only", "vnm", "--calibration", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and words in err, err
        assert not out.exists()
        with pytest.raises(CalibrationError, match=words):
            drive_from_log(path)
    assert main(["models", "quantize", str(SIM), str(tmp_path / "o"), "--only", "vnm", "--vnm-method", "dynamic",
                 "--calibration", str(empty)]) == 2
    assert "--calibration calibrates the VNM's static" in capsys.readouterr().err
    assert main(["models", "quantize", str(SIM), str(tmp_path / "o"), "--dist-tol", "0"]) == 2
    assert main(["models", "quantize", str(SIM), str(tmp_path / "o"), "--min-speedup", "nan"]) == 2
    assert "--min-speedup: expected a number >= 0, got nan" in capsys.readouterr().err
    assert main(["models", "quantize", str(SIM), str(SIM)]) == 2  # refused before any rendering
    assert "the output must be a new folder outside the input" in capsys.readouterr().err
    assert main(["models", "quantize", str(SIM), str(tmp_path / "o"), "--only", "vnm", "--calibration", str(empty),
                 "--calibration", str(empty) + "/"]) == 2
    assert f"--calibration {empty}: given twice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="VNM method"):
        quantize_models(SIM, tmp_path / "o", kinds=("vnm",), vnm_method="fast")


def test_a_log_calibrates_the_vnm_through_the_cli_and_unlike_frames_are_caught(tmp_path, capsys):
    # the synthetic log's frames are plain colour fields, nothing like the reference step's rendered views:
    # activation ranges calibrated on them clip the reference's, and its (held-out) parity check refuses the file
    log_dir = _log(tmp_path / "drive", frames=40)
    out = tmp_path / "o"
    assert main(["models", "quantize", str(SIM), str(out), "--only", "vnm", "--vnm-method", "static",
                 "--calibration", str(log_dir), "--min-speedup", "0", "--repeats", "2"]) == 0
    assert "static QDQ calibration: 6 steps from traversal log" in capsys.readouterr().out
    row = json.loads((out / "quantize-report.json").read_text())["models"]["vnm"]
    assert row["calibration"]["sources"] == [f"traversal log {log_dir} (41 frames at 4 Hz)"]
    assert row["calibration"]["reference_in_calibration"] is False
    assert row["parity_held_out"]["steps"] == row["calibration"]["held_out_steps"] == 3
    assert row["result"] == "fp32" and row["reason"].startswith("static QDQ: parity: "), row
    assert sha256_file(out / "vnm.onnx") == sha256_file(SIM / "vnm.onnx")


def test_the_closest_goal_check_accepts_a_tie_within_the_distance_bound_and_refuses_a_real_flip():
    from models.export.quantize import _parity

    wp = np.tile(np.array([1.0, 0.0, 1.0, 0.0], np.float32), (3, 5, 1))  # (goals, T, 4), identical in both

    def dist(*d):
        return np.array(d, np.float32)[:, None]

    # fp32's two closest goals 0.0005 steps apart: int8 naming the other one is a tie (bound 0.02 x 20 = 0.4)
    res, why = _parity("vnm", [dist(5.0, 5.0005, 9.0), wp], [dist(5.001, 5.0, 9.0), wp], 0.99, 20.0)
    assert why is None and res["closest_goal_same"] is False
    assert res["closest_goal_excess_steps"] == pytest.approx(0.0005, abs=1e-6)
    # every distance within 0.4 steps, but int8's closest goal is 0.6 steps farther by fp32: refused
    res, why = _parity("vnm", [dist(5.0, 5.6, 9.0), wp], [dist(5.35, 5.25, 9.0), wp], 0.99, 20.0)
    assert res["dist_max_abs"] <= 0.4 and "fp32 puts 0.600 steps farther than its own closest (> 0.400)" in why


def test_drives_too_short_to_hold_steps_out_are_warned_about(tmp_path):
    res = quantize_models(SIM, tmp_path / "o", kinds=("vnm",), vnm_method="static", calibration=[_drive(8)],
                          min_speedup=0.0, repeats=2)
    cal = res["models"]["vnm"]["calibration"]
    assert cal["held_out_steps"] == 0 and cal["reference_in_calibration"] is False
    assert "none held out, parity is checked on the exporter's reference step alone" in cal["warning"]
