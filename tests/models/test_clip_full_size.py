"""A full-size ViT-B-32 (random init, ~600 MB of ONNX) through export and the runtime: `pytest -m slow`."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_vit_b_32_random_init_export_parity(tmp_path):
    pytest.importorskip("open_clip")
    from models.clip import check_reference, open_clip_model
    from robot_app.cli import main

    assert main(["models", "export-clip", "--arch", "ViT-B-32", "--pretrained", "none", "--out", str(tmp_path)]) == 0
    clip = open_clip_model(tmp_path)
    assert clip.embed_dim == 512 and clip.image_size == 224
    r = check_reference(clip, tmp_path / "clip-reference.npz")
    assert r["ids_equal"] and r["pixel_max_abs"] < 1e-5
    assert r["image_max_abs"] < 1e-4 and r["text_max_abs"] < 1e-4
    emb = clip.encode_images([np.full((240, 320, 3), v, np.uint8) for v in (0, 128, 255)])
    assert emb.shape == (3, 512) and emb.std(axis=0).max() > 1e-3
