"""The app's grounding (plan CLI, route jobs, demo) applies [planner] max_cosine: a real map file, the
shipped sim CLIP on ONNX Runtime, the same log-likelihoods as core.grounding with the cap."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from PIL import Image

from core.grounding import CAP_SLOPE, log_likelihoods, node_similarity
from core.mapstore import MapWriter, open_map
from robot_app.config import load_config

SIM = pytest.importorskip("robot_app.sim").shipped_models_dir()


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (90, 90, 90)).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.mark.skipif(not (SIM / "clip-image.onnx").is_file(), reason="no shipped sim CLIP")
def test_ground_instruction_applies_the_configured_cap(tmp_path):
    from models.clip import open_clip_model
    from robot_app.route.grounding_service import ground_instruction

    clip = open_clip_model(SIM)
    # node "images" are the text embeddings of landmark phrasings: cosines from about 1 down to low
    phrases = ["a stop sign", "a red octagonal sign", "a fire hydrant", "a glass building", "a tree"]
    emb = clip.encode_landmarks(phrases)
    n = len(phrases)
    path = tmp_path / "map.sqlite"
    w = MapWriter.create(path)
    nodes = w.add_nodes(timestamp_s=np.arange(n, dtype=float), lat_deg=np.full(n, 52.5),
                        lon_deg=13.4 + 1e-5 * np.arange(n))
    w.add_images(nodes.tolist(), [_jpeg()] * n, embeddings={clip.model_id: emb})
    w.add_edges(nodes[:-1], nodes[1:], np.ones(n - 1), source="gps")
    w.close()
    base = load_config(None)
    base = dataclasses.replace(base, paths=dataclasses.replace(base.paths, models_dir=str(SIM)))
    capped = dataclasses.replace(base, planner=dataclasses.replace(base.planner, max_cosine=0.46))
    with open_map(path) as topomap:
        lm0, plain, _ = ground_instruction("Go to the stop sign.", topomap, config=base, parser="rules")
        lm1, got, info = ground_instruction("Go to the stop sign.", topomap, config=capped, parser="rules")
        image_emb, image_node = topomap.embeddings(clip.model_id)
    assert lm0 == lm1 == ["a stop sign"]
    cos = node_similarity(image_emb, image_node, clip.encode_landmarks(lm1), n_nodes=n)
    scale = clip.logit_scale
    np.testing.assert_allclose(plain, log_likelihoods(cos, logit_scale=scale), atol=1e-9)
    np.testing.assert_allclose(got, log_likelihoods(cos, logit_scale=scale, max_cosine=0.46), atol=1e-9)
    # node 0 (the phrase itself) and node 1 (a paraphrase) are both over the cap: their gap shrinks to a tenth
    assert cos[0, 0] > cos[1, 0] > 0.46
    assert got[0, 0] - got[1, 0] == pytest.approx(CAP_SLOPE * (plain[0, 0] - plain[1, 0]))
    assert info["landmarks"][0]["best_cosine"] == pytest.approx(cos[0, 0])  # the raw cosine for the operator
