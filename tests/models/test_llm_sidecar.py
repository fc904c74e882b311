"""Provisioning hints of model sidecars: a GGUF language model is not exported like the ONNX models."""

from __future__ import annotations

import pytest


def test_missing_llm_sidecar_says_how_to_write_one_not_the_onnx_exporters(tmp_path):
    from models.sidecar import ModelMissing, read_sidecar

    gguf = tmp_path / "llm.gguf"
    with pytest.raises(ModelMissing, match="not found") as exc:
        read_sidecar(gguf)
    assert "robot-app models llm-sidecar" in str(exc.value) and "export-clip" not in str(exc.value)
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(ModelMissing, match="sidecar .* not found.*llm-sidecar"):
        read_sidecar(gguf)
    with pytest.raises(ModelMissing, match="export-clip"):  # ONNX models keep the exporters' hint
        read_sidecar(tmp_path / "vnm.onnx")
