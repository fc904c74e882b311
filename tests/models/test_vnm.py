"""GNM-compatible VNM: strict checkpoint loading, ONNX parity with torch, the control-step contract."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from models.sidecar import ModelMissing, ModelTampered, read_sidecar
from models.vnm import VnmPrediction, check_reference, open_vnm

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def vnm(vnm_export):
    return open_vnm(vnm_export[0])


def _frames(n, seed=0, shape=(120, 160)):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for _ in range(n)]


def test_network_matches_the_published_gnm_parameter_list():
    from models.export.gnm_net import GnmNet, expected_gnm_state_shapes

    got = {k: tuple(v.shape) for k, v in GnmNet().state_dict().items()}
    want = expected_gnm_state_shapes()
    assert got == want and len(want) == 638
    assert want["obs_mobilenet.0.0.weight"] == (32, 18, 3, 3)
    assert want["goal_mobilenet.0.0.weight"] == (32, 21, 3, 3)
    assert want["linear_layers.0.weight"] == (256, 2048)
    assert want["action_predictor.0.weight"] == (20, 32)


def test_released_style_checkpoint_loads_strictly_without_the_training_package(tmp_path, vnm_export):
    """A whole pickled module of a class from an absent package (like gnm.pth) loads by remapping."""
    from models.export.vnm_export import load_gnm

    pkg = tmp_path / "pkg" / "vint_train" / "models" / "gnm"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "gnm.py").write_text("from models.export.gnm_net import GnmNet\n\nclass GNM(GnmNet):\n    pass\n")
    ckpt = tmp_path / "gnm.pth"
    code = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(tmp_path / 'pkg')!r})
        from vint_train.models.gnm.gnm import GNM
        torch.manual_seed(5)
        m = GNM()
        torch.save({{"model": m, "epoch": 7, "optimizer": None}}, {str(ckpt)!r})
        torch.save(m.state_dict(), {str(tmp_path / 'want.pth')!r})
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "vint_train" not in sys.modules
    with pytest.raises(Exception):
        torch.load(ckpt)  # weights_only=True (torch's default) refuses a pickled module
    net = load_gnm(ckpt)
    want = torch.load(tmp_path / "want.pth")
    for k, v in net.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert "vint_train" not in sys.modules


def test_checkpoint_of_another_shape_is_refused_with_the_differences(tmp_path):
    from models.export.common import ExportError
    from models.export.gnm_net import GnmNet
    from models.export.vnm_export import load_gnm

    p = tmp_path / "ctx4.pth"
    torch.save({"state_dict": {"module." + k: v for k, v in GnmNet(context_size=4).state_dict().items()}}, p)
    with pytest.raises(ExportError, match="shape mismatches.*obs_mobilenet.0.0.weight"):
        load_gnm(p)
    assert load_gnm(p, context_size=4).context_size == 4  # DataParallel "module." prefix stripped


def test_onnx_matches_torch_eager_on_fresh_inputs(vnm, vnm_export):
    _, net = vnm_export
    rng = np.random.default_rng(11)
    obs = rng.normal(size=(1, 18, 64, 85)).astype(np.float32)
    goals = rng.normal(size=(4, 3, 64, 85)).astype(np.float32)
    pred = vnm.predict(obs, goals)
    with torch.no_grad():
        dist, wp = net(torch.from_numpy(obs).expand(4, -1, -1, -1), torch.from_numpy(goals))
    np.testing.assert_allclose(pred.dist_steps, dist.numpy()[:, 0], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(pred.waypoints, wp.numpy(), atol=1e-4, rtol=1e-4)
    assert pred.dist_steps.std() > 1e-6 and pred.waypoints.std(axis=0).max() > 1e-6  # not constant


def test_runtime_matches_the_exporters_reference(vnm, vnm_export):
    r = check_reference(vnm, vnm_export[0] / "vnm-reference.npz")
    assert r["dist_max_abs"] < 1e-4 and r["waypoints_max_abs"] < 1e-4


def test_one_call_for_many_goals_equals_one_call_per_goal(vnm):
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(1, 18, 64, 85)).astype(np.float32)
    goals = rng.normal(size=(9, 3, 64, 85)).astype(np.float32)
    batch = vnm.predict(obs, goals)
    assert batch.dist_steps.shape == (9,) and batch.waypoints.shape == (9, 5, 4)
    assert batch.dist_steps.dtype == np.float32
    for j in range(9):
        one = vnm.predict(obs, goals[j:j + 1])
        np.testing.assert_allclose(one.dist_steps, batch.dist_steps[j:j + 1], atol=1e-5)
        np.testing.assert_allclose(one.waypoints, batch.waypoints[j:j + 1], atol=1e-5)
    np.testing.assert_allclose(np.hypot(batch.waypoints[..., 2], batch.waypoints[..., 3]), 1.0, atol=1e-5)


def test_context_queue_keeps_the_newest_frames_oldest_first(vnm):
    frames = _frames(8)
    ctx = vnm.new_context()
    for f in frames[:5]:
        ctx.push(f)
    assert not ctx.ready
    with pytest.raises(ValueError, match="5 of 6 frames"):
        ctx.stack()
    for f in frames[5:]:
        ctx.push(f)
    obs = ctx.stack()
    assert ctx.ready and obs.shape == (1, 18, 64, 85)
    np.testing.assert_allclose(obs[0, :3], vnm.preprocess(frames[2]))
    np.testing.assert_allclose(obs[0, 15:], vnm.preprocess(frames[7]))
    goals = _frames(3, seed=1, shape=(480, 640))
    a = vnm.predict(obs, vnm.preprocess_many(goals))
    b = vnm.predict_frames(frames[2:], goals)
    np.testing.assert_allclose(a.dist_steps, b.dist_steps, atol=1e-6)


def test_preprocessing_is_imagenet_normalised_bicubic(vnm):
    from PIL import Image

    f = _frames(1, shape=(480, 640))[0]
    x = vnm.preprocess(f)
    ref = np.asarray(Image.fromarray(f).resize((85, 64), Image.BICUBIC), np.float32) / 255.0
    ref = (ref - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    assert x.shape == (3, 64, 85) and x.dtype == np.float32
    np.testing.assert_allclose(x, ref.transpose(2, 0, 1), atol=1e-5)


def test_waypoints_in_metres_and_heading():
    wp = np.zeros((1, 5, 4), np.float32)
    wp[0, :, 0] = np.arange(1, 6)
    wp[0, :, 2], wp[0, :, 3] = 0.0, 1.0
    p = VnmPrediction(np.zeros(1, np.float32), wp)
    m = p.waypoints_m(max_v_mps=0.4, frame_rate_hz=4.0)
    np.testing.assert_allclose(m[0, :, 0], 0.1 * np.arange(1, 6), rtol=1e-6)
    np.testing.assert_allclose(p.heading_rad(), np.pi / 2, rtol=1e-6)


def test_bad_inputs_are_refused(vnm):
    good_obs = np.zeros((1, 18, 64, 85), np.float32)
    with pytest.raises(ValueError, match=r"obs: expected shape \(1, 18, 64, 85\)"):
        vnm.predict(np.zeros((2, 18, 64, 85), np.float32), np.zeros((1, 3, 64, 85), np.float32))
    with pytest.raises(ValueError, match="goals: expected dtype float32"):
        vnm.predict(good_obs, np.zeros((1, 3, 64, 85), np.float64))
    with pytest.raises(ValueError, match="NaN"):
        vnm.predict(good_obs, np.full((1, 3, 64, 85), np.nan, np.float32))
    with pytest.raises(ValueError, match="above the allowed maximum"):
        vnm.predict(good_obs, np.full((1, 3, 64, 85), 255.0, np.float32))  # raw pixels, not normalised
    with pytest.raises(ValueError, match=r"frames\[1\]"):
        vnm.preprocess_many([np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8), np.uint8)])
    with pytest.raises(ValueError, match="expected 6 frames"):
        vnm.predict_frames(_frames(2), _frames(1))
    assert vnm.predict(good_obs, np.zeros((0, 3, 64, 85), np.float32)).waypoints.shape == (0, 5, 4)


def test_sidecar_describes_the_contract(vnm_export):
    sc = read_sidecar(vnm_export[0] / "vnm.onnx", kind="vnm")
    p = sc.params
    assert (p["context_size"], p["len_traj_pred"], p["image_width"], p["image_height"]) == (5, 5, 85, 64)
    assert p["frame_rate_hz"] == 4.0 and (p["dist_min_steps"], p["dist_max_steps"]) == (0.0, 20.0)
    assert sc.onnx["ir_version"] <= 9
    assert [i["name"] for i in sc.inputs] == ["obs", "goal"]


def test_missing_or_tampered_vnm_is_refused(vnm_export, tmp_path):
    with pytest.raises(ModelMissing, match="vnm.onnx.*export-vnm"):
        open_vnm(tmp_path)
    import shutil

    d = tmp_path / "m"
    shutil.copytree(vnm_export[0], d)
    with open(d / "vnm.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ModelTampered, match="vnm.onnx"):
        open_vnm(d)


def test_random_init_export_is_marked_and_varies(vnm_export):
    sc = read_sidecar(vnm_export[0] / "vnm.onnx", kind="vnm")
    assert sc.random_init and sc.weights == "random-init"
    with np.load(vnm_export[0] / "vnm-reference.npz") as ref:
        assert ref["dist"].std() > 1e-6  # BatchNorm statistics recalibrated: not a constant network


def test_constant_output_is_caught():
    from models.export.common import ExportError, assert_varies

    with pytest.raises(ExportError, match="do not vary"):
        assert_varies("net", np.ones((4, 3)))


def test_concurrent_steps_from_several_threads_agree(vnm):
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(9)
    obs = rng.normal(size=(1, 18, 64, 85)).astype(np.float32)
    goals = rng.normal(size=(9, 3, 64, 85)).astype(np.float32)
    want = vnm.predict(obs, goals)
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda _: vnm.predict(obs, goals), range(6)))
    for g in got:
        np.testing.assert_allclose(g.dist_steps, want.dist_steps, atol=1e-6)


def test_file_name_and_threads_come_from_config(vnm_export, tmp_path):
    import shutil

    from models.sidecar import write_sidecar
    from robot_app.config import ModelsConfig

    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(vnm_export[0] / "vnm.onnx", d / "gnm-recon.onnx")
    shutil.copy(vnm_export[0] / "vnm-reference.npz", d / "vnm-reference.npz")
    sc = read_sidecar(vnm_export[0] / "vnm.onnx")
    write_sidecar(d / "gnm-recon.onnx", kind="vnm", architecture=sc.architecture, weights=sc.weights,
                  random_init=sc.random_init, inputs=sc.inputs, outputs=sc.outputs, params=sc.params,
                  extra_files=["vnm-reference.npz"], onnx=sc.onnx)
    m = open_vnm(d, config=ModelsConfig(vnm_file="gnm-recon.onnx", intra_op_threads=1,
                                        providers=["CPUExecutionProvider"]), warm_up=False)
    assert m.context_size == 5
