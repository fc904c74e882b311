"""The boot-time model inventory: installed, missing, or present but unusable (damaged) model files."""

from __future__ import annotations

import dataclasses
import shutil

from robot_app.config import Config
from robot_app.service.app import model_inventory
from robot_app.sim import shipped_models_dir


def _config(models_dir):
    c = Config()
    return dataclasses.replace(c, paths=dataclasses.replace(c.paths, models_dir=str(models_dir)))


def test_installed_missing_and_damaged_models(tmp_path):
    src = shipped_models_dir()
    for f in src.glob("vnm*"):  # the model, its sidecar and the extra files the sidecar lists
        shutil.copy(f, tmp_path / f.name)
    inv = model_inventory(_config(tmp_path))
    assert inv["vnm"] == "installed"
    assert inv["clip"].startswith("missing (clip-image.onnx, clip-text.onnx)")
    assert inv["llm"].startswith("missing (llm.gguf): rule-based landmark parser")
    # a truncated copy (a power cut during provisioning) is not "installed"
    data = (tmp_path / "vnm.onnx").read_bytes()
    (tmp_path / "vnm.onnx").write_bytes(data[: len(data) // 2])
    inv = model_inventory(_config(tmp_path))
    assert inv["vnm"].startswith("unusable (") and "sha256" in inv["vnm"] and inv["vnm"].endswith(
        "GPS edges and GPS straight-line controller")
    # a model without its sidecar cannot be checked or opened
    (tmp_path / "vnm.onnx").write_bytes(data)
    (tmp_path / "vnm.onnx.json").unlink()
    assert "sidecar" in model_inventory(_config(tmp_path))["vnm"]
    # a file named llm.gguf that is not a GGUF model
    (tmp_path / "llm.gguf").write_bytes(b"<html>not a model</html>")
    assert model_inventory(_config(tmp_path))["llm"].startswith("unusable (") and "GGUF magic" in \
        model_inventory(_config(tmp_path))["llm"]
