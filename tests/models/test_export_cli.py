"""``robot-app models ...`` and ``robot-app bench models`` through the real CLI; [models] config checks."""

from __future__ import annotations

import json
import os

import pytest

from robot_app.cli import main
from robot_app.config import ConfigError, config_from_mapping


@pytest.fixture
def models_dir(tmp_path, clip_export_dir, vnm_export, text_embed_export_dir):
    """All four models side by side (symlinks to the session exports; the sidecars verify the targets)."""
    d = tmp_path / "models"
    d.mkdir()
    for src in (clip_export_dir, vnm_export[0], text_embed_export_dir):
        for f in src.iterdir():
            os.symlink(f, d / f.name)
    return d


def test_export_clip_cli_wrote_the_files(clip_export_dir):
    """(The session fixture ran ``robot-app models export-clip``.)"""
    for f in ("clip-image.onnx", "clip-image.onnx.json", "clip-text.onnx", "clip-text.onnx.json",
              "clip-tokenizer.json", "clip-reference.npz"):
        assert (clip_export_dir / f).is_file(), f


@pytest.mark.slow
def test_export_vnm_cli_from_a_checkpoint(tmp_path, vnm_export, capsys):
    import torch

    ckpt = tmp_path / "gnm.pth"
    torch.save({"model": vnm_export[1].state_dict(), "epoch": 1}, ckpt)
    assert main(["models", "export-vnm", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == str(ckpt)
    sc = json.loads((tmp_path / "out" / "vnm.onnx.json").read_text())
    assert sc["random_init"] is False and sc["kind"] == "vnm"


def test_export_errors_exit_1_and_bad_usage_exits_2(tmp_path, capsys):
    assert main(["models", "export-clip", "--arch", "no-such-net", "--pretrained", "none", "--out", str(tmp_path)]) == 1
    assert "unknown open_clip architecture" in capsys.readouterr().err
    assert main(["models", "export-vnm", "--checkpoint", str(tmp_path / "nope.pth"), "--out", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a checkpoint")
    assert main(["models", "export-vnm", "--checkpoint", str(bad), "--out", str(tmp_path)]) == 1
    assert "cannot read the checkpoint" in capsys.readouterr().err
    assert main(["models", "export-text-embed", "--source", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert main(["models", "info", "--models", str(tmp_path / "absent")]) == 2


def test_info_verifies_every_model(models_dir, capsys):
    assert main(["models", "info", "--models", str(models_dir), "--verify", "--json"]) == 0
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows["clip-image"]["parity"]["ok"] and rows["vnm"]["parity"]["ok"] and rows["text-embed"]["parity"]["ok"]
    assert rows["clip-image"]["random_init"] and not rows["text-embed"]["random_init"]


def test_info_names_fallbacks_and_refuses_tampered_files(tmp_path, clip_export_dir, capsys):
    d = tmp_path / "m"
    d.mkdir()
    for f in clip_export_dir.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    assert main(["models", "info", "--models", str(d)]) == 0
    out = capsys.readouterr().out
    assert "vnm.onnx" in out and "missing" in out and "GPS straight-line controller" in out
    with open(d / "clip-text.onnx", "ab") as f:
        f.write(b"x")
    assert main(["models", "info", "--models", str(d)]) == 1
    assert "refused" in capsys.readouterr().out


def test_bench_models_reports_every_model(models_dir, capsys):
    assert main(["bench", "models", "--models", str(models_dir), "--repeats", "1", "--no-torch", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["models"]) == {"clip-image", "clip-text", "text-embed", "vnm"} and not res["skipped"]
    v = res["models"]["vnm"]
    assert v["goals_per_step"] == 9 and v["step_onnx"]["median_ms"] > 0
    assert res["allow_spinning"] is False and "loadavg_1m_before" in res["machine"]
    assert main(["bench", "models", "--models", str(models_dir), "--repeats", "0"]) == 2
    assert main(["bench", "models", "--models", str(models_dir), "--threads", "0"]) == 2


def test_bench_models_compares_the_thread_settings(models_dir, capsys):
    assert main(["bench", "models", "--models", str(models_dir), "--repeats", "2", "--compare-threads",
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["settings"] == ["threads=1 spinning=off", "threads=0 spinning=on", "threads=0 spinning=off"]
    assert set(res["models"]) == {"clip-image batch 1", "vnm step (9 goals)"} and not res["skipped"]
    for figures in res["models"].values():
        assert set(figures) == set(res["settings"])
        assert all(0 < f["median_ms"] <= f["p90_ms"] for f in figures.values())
    assert main(["bench", "models", "--models", str(models_dir), "--compare-threads"]) == 0
    out = capsys.readouterr().out
    assert "load average (1 min)" in out and "threads=0 spinning=off" in out and "(1.00x)" in out


@pytest.mark.parametrize("spinning", [False, True])
def test_sessions_take_the_spinning_setting_from_config(clip_export_dir, spinning):
    from models.onnx_common import open_session, thread_options
    from robot_app.config import ModelsConfig

    opts = thread_options(ModelsConfig(intra_op_threads=1, allow_spinning=spinning))
    assert opts == {"intra_op_threads": 1, "allow_spinning": spinning}
    sess = open_session(clip_export_dir / "clip-image.onnx", **opts)
    so = sess.get_session_options()
    assert so.intra_op_num_threads == 1
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == ("1" if spinning else "0")
    assert thread_options(None) == {"intra_op_threads": 0, "allow_spinning": False}


def test_tensorrt_gets_fp16_and_an_engine_cache_from_config(tmp_path):
    from models.onnx_common import provider_list, session_options
    from robot_app.config import ModelsConfig

    opts = session_options(ModelsConfig(tensorrt_cache_dir=str(tmp_path / "trt")))
    assert opts["tensorrt_fp16"] is True and opts["tensorrt_cache_dir"] == str(tmp_path / "trt")
    chosen = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    got = provider_list(chosen, tensorrt_fp16=True, tensorrt_cache_dir=str(tmp_path / "trt"))
    assert got == [("TensorrtExecutionProvider", {"trt_fp16_enable": True, "trt_engine_cache_enable": True,
                                                  "trt_engine_cache_path": str(tmp_path / "trt")}),
                   "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert provider_list(chosen[:1], tensorrt_fp16=False) == [("TensorrtExecutionProvider",
                                                                {"trt_fp16_enable": False})]
    assert provider_list(["CPUExecutionProvider"], tensorrt_cache_dir="/x") == ["CPUExecutionProvider"]


@pytest.mark.parametrize("table, match", [
    ({"providers": ["FooExecutionProvider"]}, r"\[models\] providers: 'FooExecutionProvider' is not one of"),
    ({"providers": "CPUExecutionProvider"}, r"\[models\] providers: expected a list"),
    ({"intra_op_threads": -1}, r"\[models\] intra_op_threads: -1 is below"),
    ({"allow_spinning": "no"}, r"\[models\] allow_spinning: expected"),
    ({"clip_prompt_ensemble": [1]}, r"\[models\] clip_prompt_ensemble: expected a list of str"),
    ({"landmark_min_cosine": 2.0}, r"\[models\] landmark_min_cosine: 2.0 is above"),
    ({"vnm_max_v_mps": 0}, r"\[models\] vnm_max_v_mps: 0.0 is below"),
    ({"vnm_files": "x"}, r"\[models\] vnm_files: unknown key"),
])
def test_bad_models_config_values_name_the_key(table, match):
    with pytest.raises(ConfigError, match=match):
        config_from_mapping({"models": table}, origin="robot.toml")


def test_providers_are_filtered_to_the_build_cpu_last():
    from models.onnx_common import choose_providers

    assert choose_providers(["CUDAExecutionProvider", "CPUExecutionProvider"],
                            available=["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert choose_providers(["TensorrtExecutionProvider"], available=["TensorrtExecutionProvider",
                                                                      "CPUExecutionProvider"]) == [
        "TensorrtExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(ValueError, match="unknown onnxruntime provider"):
        choose_providers(["Foo"], available=[])


def test_exports_need_no_kernel_missing_from_onnxruntime_1_16(clip_export_dir, vnm_export, text_embed_export_dir):
    import onnx

    from models.export.common import unsupported_on_oldest_runtime

    for path in (clip_export_dir / "clip-image.onnx", clip_export_dir / "clip-text.onnx", vnm_export[0] / "vnm.onnx",
                 text_embed_export_dir / "text-embed.onnx"):
        m = onnx.load(str(path), load_external_data=False)
        assert m.ir_version <= 9 and unsupported_on_oldest_runtime(m) == [], path.name


def test_the_check_catches_an_int64_argmax():
    import onnx
    from onnx import TensorProto, helper

    from models.export.common import unsupported_on_oldest_runtime

    g = helper.make_graph([helper.make_node("ArgMax", ["ids"], ["pos"], axis=1, keepdims=0, name="eot")], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 77])],
                          [helper.make_tensor_value_info("pos", TensorProto.INT64, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert unsupported_on_oldest_runtime(m) == ["ArgMax(int64) at eot"]
    assert isinstance(m, onnx.ModelProto)
