"""SIM-ONLY stand-in models: the VNM runtime says so, and the onboard process refuses them on a real camera."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from robot_app.sim import shipped_models_dir


def _config_file(tmp_path, camera_source: str):
    p = tmp_path / "config.toml"
    p.write_text(f'[paths]\nmodels_dir = "{shipped_models_dir()}"\nlogs_dir = "{tmp_path / "logs"}"\n'
                 f'[camera]\nsource = "{camera_source}"\n[ui]\nenabled = false\n')
    return p


def test_the_vnm_runtime_warns_once_about_a_sim_only_model(tmp_path, caplog):
    import shutil

    from models.vnm import open_vnm

    for f in shipped_models_dir().glob("vnm*"):  # a file this process has not opened yet
        shutil.copy(f, tmp_path / f.name)
    with caplog.at_level(logging.WARNING, logger="models.sidecar"):
        vnm = open_vnm(tmp_path, warm_up=False)
        again = open_vnm(tmp_path, warm_up=False)
    assert vnm.sim_only is True and again.sim_only is True
    warned = [r.getMessage() for r in caplog.records if "SIM-ONLY" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "vnm.onnx") in warned[0]  # once per file and process


def test_run_with_a_real_camera_refuses_sim_only_models_in_one_line(tmp_path):
    cfg = _config_file(tmp_path, "/dev/video0")
    r = subprocess.run([sys.executable, "-m", "robot_app", "--config", str(cfg), "run"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in r.stderr
    assert "SIM-ONLY" in err[0] and "clip-image.onnx" in err[0] and "vnm.onnx" in err[0]
    assert "[camera] source" in err[0]


@pytest.mark.parametrize("source", ["sim", "none"])
def test_sim_only_models_are_accepted_with_the_simulated_camera_or_none(tmp_path, source):
    from robot_app.config import load_config
    from robot_app.service.models import check_model_policy, sim_only_models

    cfg = load_config(_config_file(tmp_path, source))
    assert set(sim_only_models(cfg)) == {"clip-image.onnx", "clip-text.onnx", "vnm.onnx"}
    check_model_policy(cfg)  # no error
