"""The boot-time model inventory: installed, missing, or present but unusable (damaged) model files."""

from __future__ import annotations

import dataclasses
import shutil

from robot_app.config import Config
from robot_app.service.models import model_inventory
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


def _garbage_vnm(tmp_path):
    """A garbage vnm.onnx whose sidecar's checksum was rewritten to match (the shipped sim VNM's sidecar)."""
    import hashlib
    import json
    import shutil

    from robot_app.sim import shipped_models_dir

    d = tmp_path / "models"
    d.mkdir()
    src = shipped_models_dir()
    shutil.copy(src / "vnm-reference.npz", d / "vnm-reference.npz")
    (d / "vnm.onnx").write_bytes(bytes(range(256)) * 20)
    side = json.loads((src / "vnm.onnx.json").read_text())
    side["sha256"] = hashlib.sha256((d / "vnm.onnx").read_bytes()).hexdigest()
    side["size_bytes"] = (d / "vnm.onnx").stat().st_size
    (d / "vnm.onnx.json").write_text(json.dumps(side))
    return d


def test_a_model_that_fails_to_load_is_failed_never_ok_nor_installed(tmp_path, capsys):
    import dataclasses

    from robot_app.cli import main
    from robot_app.config import Config
    from robot_app.service.app import App

    d = _garbage_vnm(tmp_path)
    assert main(["models", "info", "--models", str(d), "--verify"]) == 1
    out = capsys.readouterr()
    line = next(ln for ln in out.out.splitlines() if ln.strip().startswith("vnm.onnx"))
    assert "failed" in line and "Traceback" not in out.err + out.out
    base = Config()
    app = App(dataclasses.replace(base, paths=dataclasses.replace(base.paths, models_dir=str(d)),
                                  ui=dataclasses.replace(base.ui, enabled=False)))
    assert app.registry.vnm() is None  # the runtime cannot load it: GPS mode
    assert app.models["vnm"].startswith("failed to load") and "installed" not in app.models["vnm"]
