"""The sim-only stand-in VLM: shipped files through the production CLIP runtime, views, training, bad files."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from models.clip import check_reference, open_clip_model
from models.clip_preprocess import WordPieceTokenizer
from models.sidecar import ModelInvalid, ModelMissing, sidecar_path
from robot_app.cli.models_cmd import verify_bound
from robot_app.sim import shipped_models_dir

pytest.importorskip("pybullet")

from robot_app.sim.views import CATEGORIES, PHRASES, label_pose, render_views, sample_poses  # noqa: E402
from robot_app.sim.world import load_world, world_from_mapping  # noqa: E402


@pytest.fixture(scope="module")
def shipped():
    return open_clip_model(shipped_models_dir())


def test_shipped_files_are_sim_only_clip_format(shipped):
    d = shipped_models_dir()
    img = json.loads(sidecar_path(d / "clip-image.onnx").read_text())
    txt = json.loads(sidecar_path(d / "clip-text.onnx").read_text())
    assert img["params"]["sim_only"] and txt["params"]["sim_only"] and shipped.sim_only
    assert img["params"]["pair_id"] == txt["params"]["pair_id"]
    assert txt["params"]["tokenizer_kind"] == "wordpiece" and txt["params"]["int8_cosine_min"] > 0.98
    assert shipped.embed_dim == 384 and shipped.model_id.startswith("clip:sim-vlm-cnn:")
    assert (d / "clip-image.onnx").stat().st_size < 8e6
    assert shipped.suggested_min_cosine is not None
    q = json.loads((d / "sim-vlm-quality.json").read_text())
    assert q["sim_only"] and not q["quick"]
    r = check_reference(shipped, d / "clip-reference.npz")
    assert r["ids_equal"] and r["pixel_max_abs"] < 1e-6 and r["image_max_abs"] < 1e-3
    # the int8 text tower: exact where the CPU's int8 kernels are (VNNI, aarch64), cosine 0.98 on AVX2 alone
    bound = verify_bound(txt["params"], fp16=False, precision="int8")
    assert (r["text_cosine_min"] >= bound["min_cosine"]) if bound else (r["text_max_abs"] < 1e-3)


def test_shipped_model_beats_chance_on_held_out_renders(shipped):
    """Landmark retrieval top-3 (LM-Nav Table 3) with HELD-OUT phrasings on renders of unseen poses."""
    from robot_app.sim.train_vlm import retrieval_top_k

    hits, chance = [], []
    for name in ("campus", "industrial"):
        w = load_world(name)
        poses = sample_poses(w, 36, rng=np.random.default_rng([424242, len(name)]))
        views = render_views(w, poses, image_size=shipped.image_size, seed=424242)
        emb = shipped.encode_images(list(views.images))
        for ci, c in enumerate(CATEGORIES):
            text = shipped.encode_landmarks(list(PHRASES[c][1]))
            for j in range(text.shape[0]):
                r = retrieval_top_k(emb @ text[j], views.labels[:, ci])
                if r is not None:
                    hits.append(r[0])
                    chance.append(r[1])
    assert len(hits) >= 20
    assert np.mean(hits) >= np.mean(chance) + 0.2, (np.mean(hits), np.mean(chance))


def test_paraphrase_grounds_near_the_object(shipped):
    """A view looking at a stop sign from 6 m scores 'a red octagonal sign' above a view of the empty park."""
    w = load_world("campus")
    sign = next(o for o in w.objects if o.category == "stop sign")
    x, y = sign.at[0] - 6.0, sign.at[1]
    views = render_views(w, np.array([[x, y, 0.0], [x, y, math.pi]]), image_size=shipped.image_size)
    assert views.labels[0, CATEGORIES.index("stop sign")] == 1 and views.labels[1, CATEGORIES.index("stop sign")] == 0
    cos = shipped.encode_images(list(views.images)) @ shipped.encode_landmarks(["a red octagonal sign"])[0]
    assert cos[0] > cos[1]


def test_wordpiece_tokenizer_pads_to_the_longest_text():
    tok = WordPieceTokenizer(shipped_models_dir() / "clip-tokenizer.json", pad_id=0, max_tokens=16)
    ids = tok(["stop sign", "a red octagonal sign on a pole"])
    assert ids.dtype == np.int64 and ids.shape[0] == 2 and ids.shape[1] <= 16
    assert ids[0, 0] == 101 and 102 in ids[0] and ids[0, -1] == 0 and ids[1, -1] == 102  # [CLS] .. [SEP] [PAD]
    assert tok(["word " * 50]).shape == (1, 16)
    assert tok([]).shape == (0, 0)
    with pytest.raises(ValueError, match="one string"):
        tok("stop sign")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        tok(["ok", 3])
    with pytest.raises(ValueError, match="pad_id 999999"):
        WordPieceTokenizer(shipped_models_dir() / "clip-tokenizer.json", pad_id=999999, max_tokens=16)


def test_padding_barely_changes_a_text_embedding(shipped):
    """The text graph derives its attention mask from ids != pad_id (exact in fp32, tested by the
    exporter's parity check); the int8 graph quantises activations per batch, so padding in a batch moves
    an embedding a little, never far."""
    alone = shipped.encode_text(["This is a photo of a bench"])
    batch = shipped.encode_text(["This is a photo of a bench", "a much longer phrase about a wooden bench by a path"])
    assert float(batch[0] @ alone[0]) > 0.98


def _copy_models(tmp_path):
    d = tmp_path / "models"
    shutil.copytree(shipped_models_dir(), d, ignore=shutil.ignore_patterns("vnm*"))
    return d


def _edit_text_params(d, **changes):
    p = sidecar_path(d / "clip-text.onnx")
    doc = json.loads(p.read_text())
    for k, v in changes.items():
        if v is None:
            doc["params"].pop(k, None)
        else:
            doc["params"][k] = v
    p.write_text(json.dumps(doc))


def test_bad_text_files_are_refused_with_clear_errors(tmp_path):
    d = _copy_models(tmp_path)
    (d / "clip-tokenizer.json").unlink()
    with pytest.raises(ModelMissing, match="clip-tokenizer.json"):
        open_clip_model(d, warm_up=False)
    d = _copy_models(tmp_path / "b")
    _edit_text_params(d, tokenizer_kind="sentencepiece")
    with pytest.raises(ModelInvalid, match="unknown tokenizer_kind 'sentencepiece'"):
        open_clip_model(d, warm_up=False)
    _edit_text_params(d, tokenizer_kind="wordpiece", pad_id=None)
    with pytest.raises(ModelInvalid, match="lack 'pad_id'"):
        open_clip_model(d, warm_up=False)


def test_models_info_says_sim_only(capsys):
    from robot_app.cli import main

    assert main(["models", "info", "--models", str(shipped_models_dir())]) in (0, 1)
    out = capsys.readouterr().out
    assert "clip-image.onnx" in out and "SIM-ONLY" in out
    # the package: form of a config written by robot-app demo, on the command line too
    assert main(["models", "info", "--models", "package:robot_app/data/models/sim", "--json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["models_dir"] == str(shipped_models_dir().resolve())
    assert any(r["file"] == "clip-image.onnx" for r in doc["models"])


def test_labels_follow_the_geometry():
    world = world_from_mapping({
        "world": {"name": "t", "extent_m": [100.0, 100.0], "anchor_latlon": [10.0, 10.0]},
        "buildings": [{"category": "red building", "center": [20.0, 0.0], "size_m": [4.0, 10.0, 8.0]}],
        "objects": [{"category": "stop sign", "at": [6.0, 0.0]},
                    {"category": "white truck", "at": [32.0, 0.0], "yaw_deg": 90.0},
                    {"category": "traffic cone", "at": [0.0, 40.0]}],
    })
    col = {c: i for i, c in enumerate(CATEGORIES)}
    ahead = label_pose(world, 0.0, 0.0, 0.0)
    assert ahead[col["stop sign"]] == 1 and ahead[col["red building"]] == 1
    assert ahead[col["white truck"]] == 0  # behind the building
    assert ahead[col["traffic cone"]] == 0  # outside the field of view and far
    assert label_pose(world, 0.0, 12.0, 0.0)[col["white truck"]] != 0  # seen past the building's side
    behind = label_pose(world, 0.0, 0.0, math.pi)
    assert not (behind == 1).any()


def test_side_crops_label_what_they_show():
    """A stop sign 40 degrees left of the heading lies past the centre crop's edge (36.9 degrees on a 4:3,
    90 degree frame): seen in the left crop only; the right crop does not see it at all."""
    world = world_from_mapping({
        "world": {"name": "t", "extent_m": [100.0, 100.0], "anchor_latlon": [10.0, 10.0]},
        "objects": [{"category": "stop sign", "at": [6.0 * math.cos(math.radians(40)),
                                                     6.0 * math.sin(math.radians(40))]}]})
    col = CATEGORIES.index("stop sign")
    left, centre, right = (label_pose(world, 0.0, 0.0, 0.0, crop_position=p)[col] for p in (0.0, 0.5, 1.0))
    assert left == 1 and centre != 1 and right == 0
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="crop_position"):
            label_pose(world, 0.0, 0.0, 0.0, crop_position=bad)


def test_building_range_is_measured_from_its_outline():
    """A long building beside the path, 20-22 m away at its nearest corner (outside the crop), is seen
    although every ray of the crop hits it more than 33 m away: the truth measures from the outline."""
    from robot_app.sim.views import MIN_RAYS

    world = world_from_mapping({
        "world": {"name": "t", "extent_m": [200.0, 200.0], "anchor_latlon": [10.0, 10.0]},
        "buildings": [{"category": "red building", "center": [35.0, 25.0], "size_m": [50.0, 10.0, 8.0]}]})
    assert MIN_RAYS <= 4  # the crop's rays 9-12 of 13 hit its near face
    assert label_pose(world, 0.0, 0.0, 0.0)[CATEGORIES.index("red building")] == 1


def test_render_views_refuses_bad_crops():
    w = load_world("campus")
    poses = sample_poses(w, 2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="crops"):
        render_views(w, poses, image_size=32, crops=0)
    with pytest.raises(ValueError, match="crops"):
        render_views(w, poses, image_size=32, crops=3, crop_weights=(0.5, 0.5))


def test_model_clip_crops_reads_the_sidecar(tmp_path):
    from robot_app.sim import model_clip_crops

    assert model_clip_crops(tmp_path) is None  # no file: the config decides
    doc = json.loads((shipped_models_dir() / "clip-image.onnx.json").read_text())
    for value, want in ((3, 3), (1, 1)):
        doc["params"]["clip_crops"] = value
        (tmp_path / "clip-image.onnx.json").write_text(json.dumps(doc))
        assert model_clip_crops(tmp_path) == want
    for bad in (True, 0, "three", 9, None):  # recorded but wrong: an error, not a silent centre crop
        doc["params"]["clip_crops"] = bad
        (tmp_path / "clip-image.onnx.json").write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="clip_crops: expected an integer 1-8"):
            model_clip_crops(tmp_path)
    del doc["params"]["clip_crops"]  # a real CLIP export records none
    (tmp_path / "clip-image.onnx.json").write_text(json.dumps(doc))
    assert model_clip_crops(tmp_path) is None
    (tmp_path / "clip-image.onnx.json").write_text("{not json")
    assert model_clip_crops(tmp_path) is None


def test_poses_are_seeded_and_outside_obstacles():
    w = load_world("campus")
    a = sample_poses(w, 50, rng=np.random.default_rng(3))
    b = sample_poses(w, 50, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    from robot_app.sim.world import _point_in_building

    assert not any(_point_in_building(x, y, bd) for x, y, _ in a for bd in w.buildings)
    with pytest.raises(ValueError, match="n: expected >= 0"):
        sample_poses(w, -1, rng=np.random.default_rng(0))


def test_every_catalogue_category_has_train_and_held_out_phrasings():
    from robot_app.sim.world import CATALOGUE

    for c in CATALOGUE:
        train, held = PHRASES[c]
        assert len(train) >= 3 and len(held) >= 2 and not set(train) & set(held)


def test_retrieval_top_k_and_its_chance_level():
    from robot_app.sim.train_vlm import retrieval_top_k

    cos = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.95])
    assert retrieval_top_k(cos, np.array([0, 0, 0, 1, 0, -1])) == (0.0, pytest.approx(1 - 4 / 10))
    assert retrieval_top_k(cos, np.array([0, 0, 1, 0, 0, -1]))[0] == 1.0  # the unsure view is left out
    assert retrieval_top_k(cos, np.array([0, 0, 1, 0, 0, 0]))[0] == 0.0
    assert retrieval_top_k(cos, np.array([0, 0, 1, 0, 0, 2]))[0] == 1.0  # a FAR view is left out too
    assert retrieval_top_k(cos, np.zeros(6, dtype=int)) is None


def test_alignment_loss_weighs_hard_negatives_only():
    """Unseen pairs already under the margin do not dilute one that scores high; unsure pairs count nowhere."""
    torch = pytest.importorskip("torch")
    from robot_app.sim.train_vlm import NEG_COSINE, NEG_WEIGHT, POS_COSINE, alignment_loss

    hard = NEG_COSINE + 0.2
    one = alignment_loss(torch.tensor([[hard]]), torch.tensor([[0]]))
    many = alignment_loss(torch.tensor([[hard], [0.0], [-0.3], [0.1]]), torch.tensor([[0], [0], [0], [0]]))
    assert float(one) == pytest.approx(NEG_WEIGHT * 0.2 ** 2) and float(many) == pytest.approx(float(one))
    seen = alignment_loss(torch.tensor([[POS_COSINE - 0.1, 0.9]]), torch.tensor([[1, -1]]))
    assert float(seen) == pytest.approx(0.1 ** 2)
    assert float(alignment_loss(torch.tensor([[0.0]]), torch.tensor([[0]]))) == 0.0


def test_alignment_loss_keeps_far_views_under_their_margin():
    """A thing in clear view past the truth's range (label FAR) is pushed under FAR_COSINE, not to the
    unseen margin: the score falls off past the range instead of staying at the seen target."""
    torch = pytest.importorskip("torch")
    from robot_app.sim.train_vlm import FAR_COSINE, NEG_COSINE, alignment_loss
    from robot_app.sim.views import FAR

    assert NEG_COSINE < FAR_COSINE
    assert float(alignment_loss(torch.tensor([[FAR_COSINE - 0.05]]), torch.tensor([[FAR]]))) == 0.0
    far = alignment_loss(torch.tensor([[FAR_COSINE + 0.1], [0.0]]), torch.tensor([[FAR], [FAR]]))
    assert float(far) == pytest.approx(0.1 ** 2)  # averaged over the violating pairs only


def test_quick_training_writes_loadable_files(tmp_path):
    pytest.importorskip("torch")
    from robot_app.sim.train_vlm import train_sim_vlm

    q = train_sim_vlm(["campus"], tmp_path, quick=True, progress=False, threads=1)
    assert q["quick"] and 0.0 <= q["top3_held_out_phrasings"] <= 1.0 and q["logit_scale"] > 0
    assert json.loads((tmp_path / "sim-vlm-quality.json").read_text())["train_views"] == q["train_views"]
    m = open_clip_model(tmp_path)
    assert m.sim_only and m.logit_scale == q["logit_scale"]
    assert check_reference(m, tmp_path / "clip-reference.npz")["ids_equal"]
    from robot_app.sim import model_clip_crops
    from robot_app.sim.train_vlm import CROPS

    assert model_clip_crops(tmp_path) == CROPS == q["clip_crops"]  # eval sim and demo embed the map so
    with pytest.raises(ValueError, match="non-empty list"):
        train_sim_vlm([], tmp_path, quick=True, progress=False)


def test_labels_share_the_eval_truth_ranges():
    """A hydrant is labelled seen over the eval truth's range (8 x its size, at least 15 m), unsure just
    past it, unseen far past it; a building seen from 15 m, not from 60 m."""
    from robot_app.sim.eval_truth import TruthParams, object_size_m
    from robot_app.sim.views import FAR, FAR_RANGE, SEEN_RANGE, UNSURE_RANGE, view_range_m

    p = TruthParams()
    reach = view_range_m("fire hydrant")
    size = object_size_m("fire hydrant")
    assert reach == min(p.object_view_max_m, max(p.object_view_m, p.object_view_per_size * size))
    assert view_range_m("red building") == p.building_view_m
    col = {c: i for i, c in enumerate(CATEGORIES)}

    def hydrant_at(d):
        world = world_from_mapping({
            "world": {"name": "t", "extent_m": [200.0, 200.0], "anchor_latlon": [10.0, 10.0]},
            "objects": [{"category": "fire hydrant", "at": [d, 0.0]}]})
        return label_pose(world, 0.0, 0.0, 0.0)[col["fire hydrant"]]

    assert hydrant_at(0.9 * SEEN_RANGE * reach) == 1
    assert hydrant_at(0.95 * reach) != 0  # the truth counts it: never labelled unseen
    assert hydrant_at(0.5 * (1 + FAR_RANGE) * reach) == -1  # just past the truth's cut: unsure
    assert hydrant_at(0.5 * (FAR_RANGE + UNSURE_RANGE) * reach) == FAR  # in clear view, past the range
    assert hydrant_at(1.2 * UNSURE_RANGE * reach) == 0

    def building_at(gap_m):
        world = world_from_mapping({
            "world": {"name": "t", "extent_m": [200.0, 200.0], "anchor_latlon": [10.0, 10.0]},
            "buildings": [{"category": "red building", "center": [gap_m + 5.0, 0.0], "size_m": [10.0, 30.0, 12.0]}]})
        return label_pose(world, 0.0, 0.0, 0.0)[col["red building"]]

    assert building_at(15.0) == 1 and building_at(60.0) == 0

    def hydrants_at(*ds):  # several instances of one category in view: seen beats unsure beats FAR
        world = world_from_mapping({
            "world": {"name": "t", "extent_m": [200.0, 200.0], "anchor_latlon": [10.0, 10.0]},
            "objects": [{"category": "fire hydrant", "at": [d, 2.0 * i]} for i, d in enumerate(ds)]})
        return label_pose(world, 0.0, 0.0, 0.0)[col["fire hydrant"]]

    far, unsure = 0.5 * (FAR_RANGE + UNSURE_RANGE) * reach, 0.5 * (1 + FAR_RANGE) * reach
    assert hydrants_at(far, 0.5 * reach) == 1 and hydrants_at(0.5 * reach, far) == 1
    assert hydrants_at(far, unsure) == -1 and hydrants_at(unsure, far) == -1
    assert hydrants_at(far, 1.2 * UNSURE_RANGE * reach) == FAR
    assert building_at(0.5 * (FAR_RANGE + UNSURE_RANGE) * p.building_view_m) == FAR


def test_path_poses_face_along_the_path():
    """Map-like poses (targeted_fraction 0) lie on the paths and mostly head along them, as map nodes do."""
    w = load_world("campus")
    poses = sample_poses(w, 200, rng=np.random.default_rng(5), targeted_fraction=0.0)
    segs = [(a, b) for path in w.paths for a, b in zip(path.points[:-1], path.points[1:])]
    along = 0
    for x, y, yaw in poses:
        def dist(seg):
            (x0, y0), (x1, y1) = seg
            d = np.array([x1 - x0, y1 - y0])
            t = np.clip(np.dot([x - x0, y - y0], d) / np.dot(d, d), 0.0, 1.0)
            return math.hypot(x - x0 - t * d[0], y - y0 - t * d[1])
        (x0, y0), (x1, y1) = min(segs, key=dist)
        heading = math.atan2(y1 - y0, x1 - x0)
        along += abs(math.sin(yaw - heading)) < math.sin(math.radians(30))
    assert along / len(poses) > 0.8


def test_a_trained_text_projection_is_exported_inside_the_text_model(tmp_path):
    pytest.importorskip("torch")
    from robot_app.sim.train_vlm import train_sim_vlm

    q = train_sim_vlm(["campus"], tmp_path, quick=True, progress=False, threads=1, text_projection=0.001)
    assert q["text_projection"] == {"kind": "linear", "identity_penalty": 0.001}
    side = json.loads((tmp_path / "clip-text.onnx.json").read_text())
    assert "trained linear projection" in side["weights"] and side["params"]["text_projection"] != "none"
    m = open_clip_model(tmp_path)
    assert check_reference(m, tmp_path / "clip-reference.npz")["ids_equal"]
    frozen = open_clip_model(shipped_models_dir())  # the same MiniLM without a projection
    phrases = ["a stop sign", "a park seat", "a white lorry"]
    a, b = m.encode_landmarks(phrases), frozen.encode_landmarks(phrases)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert np.all(cos > 0.8) and np.all(cos < 0.99999)  # near the identity, yet trained
