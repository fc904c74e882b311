"""CLIP runtime on a tiny real export: parity with open_clip, grounding, refusal of bad files and inputs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from core.grounding import landmark_log_likelihoods
from models.clip import check_reference, ground_landmarks, open_clip_model
from models.sidecar import ModelInvalid, ModelMissing, ModelTampered, read_sidecar

TEXTS = ["This is a photo of a stop sign", "glass building!!", "it’s a café &amp; bar",
         "  Über  große\tStraße ",
         "ﬁnd the ２nd tree", "x" * 300, "", "emoji 🚗🚦 car", "don't 123 4.5m", "日本語のテキスト", "a " * 100,
         "<start_of_text> hi", "aaaa bbbbbbbb Mississippi"]


@pytest.fixture(scope="module")
def clip(clip_export_dir):
    return open_clip_model(clip_export_dir)


def _images(seed=0, n=5):
    rng = np.random.default_rng(seed)
    shapes = [(240, 320), (224, 224), (100, 37), (480, 640), (31, 500)]
    return [rng.integers(0, 256, (*shapes[j % len(shapes)], 3), dtype=np.uint8) for j in range(n)]


def test_tokenizer_ids_equal_open_clip(clip):
    open_clip = pytest.importorskip("open_clip")
    assert np.array_equal(clip._tok(TEXTS), open_clip.tokenize(TEXTS).numpy())


def test_random_strings_tokenize_like_open_clip(clip):
    open_clip = pytest.importorskip("open_clip")
    rng = np.random.default_rng(1)
    chars = list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 ,.'!?-&;éüñß日本🚗\t")
    texts = ["".join(rng.choice(chars, size=rng.integers(0, 50))) for _ in range(300)]
    assert np.array_equal(clip._tok(texts), open_clip.tokenize(texts).numpy())


def test_preprocessing_equals_open_clip_transform(clip):
    pytest.importorskip("open_clip")
    from open_clip.transform import image_transform
    from PIL import Image

    from models.clip_preprocess import preprocess_images

    tf = image_transform(clip.image_size, is_train=False, mean=clip.mean, std=clip.std)
    imgs = _images()
    ours = preprocess_images(imgs, size=clip.image_size, mean=clip.mean, std=clip.std)
    theirs = np.stack([tf(Image.fromarray(im)).numpy() for im in imgs])
    assert ours.shape == (5, 3, clip.image_size, clip.image_size) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_runtime_matches_the_exporters_torch_reference(clip, clip_export_dir):
    r = check_reference(clip, clip_export_dir / "clip-reference.npz")
    assert r["ids_equal"]
    assert r["pixel_max_abs"] < 1e-5
    assert r["image_max_abs"] < 1e-4 and r["text_max_abs"] < 1e-4


def test_embeddings_are_normalised_batched_and_vary(clip):
    imgs = _images(n=5)
    emb = clip.encode_images(imgs, batch_size=2)
    assert emb.shape == (5, clip.embed_dim) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    single = np.concatenate([clip.encode_images([im]) for im in imgs])
    np.testing.assert_allclose(emb, single, atol=1e-5)
    assert emb.std(axis=0).max() > 1e-3  # not a constant network
    txt = clip.encode_text(["a stop sign", "a white car"])
    assert txt.shape == (2, clip.embed_dim) and txt.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1.0, atol=1e-5)
    assert clip.encode_images([]).shape == (0, clip.embed_dim)
    assert clip.encode_text([]).shape == (0, clip.embed_dim)


def test_trimmed_text_pass_equals_the_full_77_token_pass(clip):
    texts = ["a", "a glass building with a red door next to the white car near the fountain", "x " * 90]
    ids = clip._tok(texts)
    (full,) = clip._txt.run(None, {"input_ids": ids})  # all 77 positions
    np.testing.assert_allclose(clip.encode_text(texts), full, atol=1e-5)
    batch = clip.encode_text(texts)
    np.testing.assert_allclose(batch, np.concatenate([clip.encode_text([t]) for t in texts]), atol=1e-5)


def test_prompt_and_ensemble(clip_export_dir, clip):
    from robot_app.config import ModelsConfig

    lm = clip.encode_landmarks(["stop sign"])
    np.testing.assert_allclose(lm, clip.encode_text(["This is a photo of stop sign"]), atol=1e-6)
    ens = open_clip_model(clip_export_dir, config=ModelsConfig(clip_prompt_ensemble=["a photo of a {}."]),
                          warm_up=False)
    both = clip.encode_text(["This is a photo of stop sign", "a photo of a stop sign."]).mean(axis=0)
    np.testing.assert_allclose(ens.encode_landmarks(["stop sign"])[0], both / np.linalg.norm(both), atol=1e-5)
    with pytest.raises(ValueError, match="no \\{\\}"):
        open_clip_model(clip_export_dir, config=ModelsConfig(clip_prompt="a photo"), warm_up=False)


def test_calls_from_several_threads_agree(clip):
    imgs = _images(n=4)
    want = clip.encode_images(imgs)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: clip.encode_images(imgs), range(8)))
    for g in got:
        np.testing.assert_allclose(g, want, atol=1e-6)


@pytest.mark.parametrize("bad, match", [
    (np.zeros((10, 10), np.uint8), "dimensions"),
    (np.zeros((10, 10, 4), np.uint8), r"\(H, W, 3\)"),
    (np.zeros((10, 10, 3), np.float32), "dtype"),
    (np.zeros((0, 10, 3), np.uint8), r"H, W >= 1"),
])
def test_bad_images_are_refused_with_their_index(clip, bad, match):
    with pytest.raises(ValueError, match=match) as ei:
        clip.encode_images([np.zeros((8, 8, 3), np.uint8), bad])
    assert "images[1]" in str(ei.value)


def test_bad_pixels_and_texts_are_refused(clip):
    with pytest.raises(ValueError, match="shape"):
        clip.encode_pixels(np.zeros((1, 3, 10, 10), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        clip.encode_pixels(np.full((1, 3, clip.image_size, clip.image_size), np.nan, np.float32))
    with pytest.raises(ValueError, match="one string"):
        clip.encode_text("a stop sign")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        clip.encode_text(["ok", 3])


def test_grounding_flags_absent_landmarks_and_returns_top_nodes(clip):
    lms = ["stop sign", "glass building"]
    t = clip.encode_landmarks(lms)
    rng = np.random.default_rng(2)
    n_nodes, d = 6, clip.embed_dim
    emb = rng.normal(size=(8, d)).astype(np.float32)
    emb -= np.outer(emb @ t[0], t[0]) + np.outer(emb @ t[1], t[1])  # near-orthogonal to both landmarks
    emb[3] = t[0] * 0.9 + emb[3] * 0.01  # node 4 holds the stop sign (two images)
    nodes = np.array([0, 1, 1, 2, 3, 4, 4, 5])
    emb[6] = t[0]
    c01 = float(t[0] @ t[1])  # random-init text embeddings are correlated: threshold between c01 and 1
    assert c01 < 0.99
    g = ground_landmarks(clip, lms, emb.astype(np.float16), nodes, n_nodes=n_nodes + 1,
                         min_cosine=(1 + c01) / 2)
    assert g.log_likelihood.shape == (n_nodes + 1, 2) and g.cosine.shape == (n_nodes + 1, 2)
    assert g.best_node[0] == 4 and g.best_cosine[0] > 0.99
    assert g.top_nodes[0, 0] == 4 and g.top_nodes[0, 1] == 2
    assert not g.not_in_map[0] and g.not_in_map[1]
    assert np.isneginf(g.log_likelihood[6]).all()  # node 6 has no image
    assert g.top_nodes.shape == (2, 3) and (g.top_nodes >= 0).all()
    want = landmark_log_likelihoods(emb.astype(np.float16), nodes, t, n_nodes=n_nodes + 1,
                                    logit_scale=clip.logit_scale)
    np.testing.assert_allclose(g.log_likelihood, want, atol=1e-3)


def test_grounding_pads_top_nodes_when_the_map_is_small(clip):
    t = clip.encode_landmarks(["bench"])
    g = ground_landmarks(clip, ["bench"], t, np.array([0]), n_nodes=2, top_k=3)
    assert list(g.top_nodes[0]) == [0, -1, -1] and np.isneginf(g.top_cosine[0, 1:]).all()


def test_missing_files_name_the_file_and_how_to_provision(clip_dir):
    (clip_dir / "clip-text.onnx").unlink()
    with pytest.raises(ModelMissing, match="clip-text.onnx.*export-clip"):
        open_clip_model(clip_dir)
    assert issubclass(ModelMissing, FileNotFoundError)


def test_missing_sidecar_and_extra_file(clip_dir):
    (clip_dir / "clip-tokenizer.json").unlink()
    with pytest.raises(ModelMissing, match="clip-tokenizer.json"):
        open_clip_model(clip_dir)
    (clip_dir / "clip-image.onnx.json").unlink()
    with pytest.raises(ModelMissing, match="sidecar"):
        open_clip_model(clip_dir)


def test_tampered_model_is_refused(clip_dir):
    p = clip_dir / "clip-image.onnx"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(ModelTampered, match="clip-image.onnx.*sha256"):
        open_clip_model(clip_dir)


def test_sidecar_of_another_kind_or_version_is_refused(clip_dir):
    sc = clip_dir / "clip-image.onnx.json"
    doc = json.loads(sc.read_text())
    sc.write_text(json.dumps({**doc, "kind": "vnm"}))
    with pytest.raises(ModelInvalid, match="'vnm' model"):
        read_sidecar(clip_dir / "clip-image.onnx", kind="clip-image")
    sc.write_text(json.dumps({**doc, "format_version": 99}))
    with pytest.raises(ModelInvalid, match="format_version"):
        read_sidecar(clip_dir / "clip-image.onnx")
    sc.write_text("{not json")
    with pytest.raises(ModelInvalid, match="unreadable"):
        read_sidecar(clip_dir / "clip-image.onnx")


def test_encoders_from_different_exports_are_refused(clip_dir):
    sc = clip_dir / "clip-text.onnx.json"
    doc = json.loads(sc.read_text())
    doc["params"]["pair_id"] = "another-export"
    sc.write_text(json.dumps(doc))
    with pytest.raises(ModelInvalid, match="different exports"):
        open_clip_model(clip_dir)


def test_model_id_names_architecture_weights_and_hash(clip):
    assert clip.model_id.startswith("clip:clip-tiny:random-init:") and clip.name == clip.model_id
    assert clip.prompt(" stop sign ") == "This is a photo of stop sign"


def test_sidecar_records_what_the_robot_needs(clip_export_dir):
    img = read_sidecar(clip_export_dir / "clip-image.onnx", kind="clip-image")
    txt = read_sidecar(clip_export_dir / "clip-text.onnx", kind="clip-text")
    assert img.random_init and img.weights == "random-init"
    assert img.onnx["opset"] == 17 and img.onnx["ir_version"] <= 9
    assert set(img.params) >= {"image_size", "mean", "std", "embed_dim", "logit_scale"}
    assert txt.params["context_length"] == 77 and txt.params["tokenizer"] == "clip-tokenizer.json"
    assert txt.params["trim_after_eot"] and txt.inputs[0]["shape"] == ["batch", "tokens"]
    assert img.params["pair_id"] == txt.params["pair_id"]


def test_calibration_picks_the_gap_between_present_and_absent():
    from models.clip import calibrate_min_cosine

    r = calibrate_min_cosine([0.31, 0.28, 0.35], [0.12, 0.2, 0.18])
    assert 0.2 < r["threshold"] < 0.28 and r["balanced_accuracy"] == 1.0
    r = calibrate_min_cosine([0.3, 0.15], [0.2, 0.1])  # overlapping: best balanced accuracy 0.75
    assert r["balanced_accuracy"] == 0.75
    with pytest.raises(ValueError, match="at least one"):
        calibrate_min_cosine([], [0.1])
    with pytest.raises(ValueError, match="finite"):
        calibrate_min_cosine([-np.inf], [0.1])


def test_calibrate_grounding_cli_on_a_real_map_file(tmp_path, clip_export_dir, clip, capsys):
    import io

    from PIL import Image

    from core.mapstore import MapWriter
    from robot_app.cli import main

    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, format="JPEG")
    t = clip.encode_landmarks(["stop sign", "white car", "glass building"])
    emb = np.stack([t[0], t[1], -t[2]])  # the glass building is nowhere in the map
    w = MapWriter.create(tmp_path / "m.map")
    w.add_nodes(timestamp_s=[0.0, 1.0, 2.0], lat_deg=[37.0, 37.0001, 37.0002], lon_deg=[-122.0] * 3)
    for i in range(3):
        w.add_image(i, buf.getvalue(), embeddings={clip.model_id: emb[i]})
    w.close()
    rc = main(["models", "calibrate-grounding", "--models", str(clip_export_dir), "--map", str(tmp_path / "m.map"),
               "--present", "stop sign; white car", "--absent", "glass building", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert res["landmarks"]["stop sign"]["best_node"] == 0 and res["landmarks"]["stop sign"]["best_cosine"] > 0.99
    assert res["balanced_accuracy"] == 1.0
    lm = res["landmarks"]  # the threshold is on the presence score: best - 0.5 x the map's median cosine
    assert lm["glass building"]["presence_score"] < res["threshold"] < lm["stop sign"]["presence_score"]
    assert res["median_weight"] == 0.5 and "raw_cosine_threshold" in res and "written" not in res
    assert main(["models", "calibrate-grounding", "--models", str(clip_export_dir), "--map", str(tmp_path / "m.map"),
                 "--present", " ; ", "--absent", "x"]) == 2
