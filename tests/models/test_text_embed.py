"""Sentence embeddings: all-MiniLM-L6-v2 exported from its real weights, run without torch."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from models.sidecar import ModelTampered
from models.text_embed import ModelMissing, check_reference, open_text_embedder


@pytest.fixture(scope="module")
def embedder(text_embed_export_dir):
    return open_text_embedder(text_embed_export_dir)


def test_matches_sentence_transformers_reference(embedder, text_embed_export_dir):
    r = check_reference(embedder, text_embed_export_dir / "text-embed-reference.npz")
    assert r["ids_equal"] and r["max_abs"] < 1e-4


def test_shape_dtype_and_normalisation(embedder):
    e = embedder.embed(["the fridge is open", "a cup", "x"])
    assert e.shape == (3, 384) and e.dtype == np.float32 and embedder.dim == 384
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_batched_equals_one_at_a_time(embedder):
    texts = ["short", "a much longer sentence about the kitchen counter and the sink", "cup"]
    batch = embedder.embed(texts)
    single = np.concatenate([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(batch, single, atol=1e-5)


def test_similar_meanings_score_higher(embedder):
    s = embedder.similarity(["the fridge is open"], ["the refrigerator door is not closed", "the cup is dirty"])
    assert s.shape == (1, 2) and s[0, 0] > s[0, 1] + 0.1


def test_long_texts_are_truncated_not_refused(embedder):
    e = embedder.embed(["word " * 2000])
    assert e.shape == (1, 384) and np.isfinite(e).all()


def test_bad_input_is_refused(embedder):
    with pytest.raises(ValueError, match="one string"):
        embedder.embed("fridge")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        embedder.embed(["ok", None])


def test_missing_model_raises_model_missing_with_a_hint(tmp_path):
    with pytest.raises(ModelMissing, match="text-embed.onnx.*export-text-embed"):
        open_text_embedder(tmp_path)
    assert issubclass(ModelMissing, FileNotFoundError)


def test_tampered_tokenizer_is_refused(text_embed_export_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(text_embed_export_dir, d)
    p = d / "text-embed-tokenizer.json"
    p.write_text(p.read_text().replace('"[UNK]"', '"[UNKNOWN]"', 1))
    with pytest.raises(ModelTampered, match="text-embed-tokenizer.json"):
        open_text_embedder(d)


def test_concurrent_calls_agree(embedder):
    from concurrent.futures import ThreadPoolExecutor

    texts = ["the fridge is open", "a clean cup", "the robot holds an apple"]
    want = embedder.embed(texts)
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda _: embedder.embed(texts), range(6)))
    for g in got:
        np.testing.assert_allclose(g, want, atol=1e-6)
