"""``robot-app models quantize IN OUT``: int8 CLIP image tower and VNM from the shipped sim models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from models.clip import open_clip_model
from models.export.quantize import (
    QuantizeError,
    RetrievalSet,
    quantize_models,
    reference_retrieval_set,
    retrieval_agreement,
)
from models.sidecar import ModelTampered, precision, read_sidecar, sha256_file
from models.vnm import open_vnm
from robot_app.cli import main

pytest.importorskip("onnx")

SIM = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "models" / "sim"


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory) -> Path:
    """The sim models quantised through the CLI, keeping every file that holds parity (speed ignored)."""
    out = tmp_path_factory.mktemp("q") / "int8"
    assert main(["models", "quantize", str(SIM), str(out), "--min-speedup", "0", "--repeats", "3"]) == 0
    return out


def test_quantize_writes_int8_files_with_sidecars_and_a_report(int8_dir):
    report = json.loads((int8_dir / "quantize-report.json").read_text())
    rows = report["models"]
    assert rows["clip-image"]["result"] == "int8" and rows["vnm"]["result"] == "int8"
    assert rows["clip-text"]["reason"].startswith("already int8")  # the sim exporter ships it int8
    assert rows["clip-image"]["parity"]["cosine_min"] >= 0.99
    assert rows["vnm"]["parity"]["waypoints_cosine_min"] >= 0.99 and rows["vnm"]["parity"]["closest_goal_same"]
    for kind, name in (("clip-image", "clip-image.onnx"), ("vnm", "vnm.onnx")):
        sc = read_sidecar(int8_dir / name, kind=kind)  # the sha256 of the new file verifies
        fp = read_sidecar(SIM / name, kind=kind)
        assert precision(sc) == "int8" and precision(fp) == "fp32"
        assert sc.params["int8"]["source_sha256"] == fp.sha256 != sc.sha256
        assert sc.inputs == fp.inputs and sc.outputs == fp.outputs
        assert (int8_dir / name).stat().st_size < (SIM / name).stat().st_size
    # everything else is copied unchanged: the folder is a complete models directory
    for f in ("clip-text.onnx", "clip-tokenizer.json", "clip-reference.npz", "vnm-reference.npz"):
        assert sha256_file(int8_dir / f) == sha256_file(SIM / f)
    # the retrieval check ran on the reference set and the labelled sim renders, and agreed
    sets = {s["set"].split(" (")[0]: s for s in report["retrieval"]}
    assert set(sets) == {"exporter reference", "sim campus"}
    sim = sets["sim campus"]
    assert sim["top1_same"] == sim["top3_same"] == sim["phrases"] == 17 and sim["differs"] == []
    assert sim["precision_at_1_int8"] == sim["precision_at_1_fp32"] > 0.8
    assert not int8_dir.with_name("int8.partial").exists()


def test_the_runtimes_load_int8_and_agree_with_fp32(int8_dir):
    fp, q = open_clip_model(SIM), open_clip_model(int8_dir)
    assert q.model_id == fp.model_id  # maps built with the fp32 pair serve the int8 pair
    rs = reference_retrieval_set(SIM, read_sidecar(SIM / "clip-text.onnx", kind="clip-text"))
    a, b = fp.encode_images(list(rs.images)), q.encode_images(list(rs.images))
    assert (a * b).sum(1).min() >= 0.99
    v_fp, v_q = open_vnm(SIM), open_vnm(int8_dir)
    with np.load(SIM / "vnm-reference.npz") as ref:
        p_fp, p_q = v_fp.predict(ref["obs"], ref["goal"]), v_q.predict(ref["obs"], ref["goal"])
    assert np.argmin(p_fp.dist_steps) == np.argmin(p_q.dist_steps)
    assert np.abs(p_fp.dist_steps - p_q.dist_steps).max() <= 0.4


def test_models_info_shows_int8_and_verifies_it_against_the_fp32_reference(int8_dir, capsys):
    assert main(["models", "info", "--models", str(int8_dir), "--verify", "--json"]) == 0
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows["clip-image"]["precision"] == rows["vnm"]["precision"] == "int8"
    assert rows["clip-image"]["parity"]["ok"] and rows["vnm"]["parity"]["ok"]
    assert rows["clip-image"]["parity"]["image_max_abs"] > 1e-4  # int8: not bit-equal, held by the cosine
    assert main(["models", "info", "--models", str(int8_dir)]) == 0
    out = capsys.readouterr().out
    assert "ok       int8 sim-vlm-cnn" in out and "ok       int8 sim-vnm-cnn" in out
    assert main(["models", "info", "--models", str(SIM), "--json"]) == 0
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows["clip-image"]["precision"] == "fp32"


def test_int8_that_does_not_pay_or_fails_parity_stays_fp32(tmp_path):
    slow = quantize_models(SIM, tmp_path / "a", kinds=("clip-image", "vnm"), min_speedup=1000.0, repeats=2)
    strict = quantize_models(SIM, tmp_path / "b", kinds=("clip-image", "vnm"), min_cosine=1.0, repeats=2)
    for res, out, words in ((slow, tmp_path / "a", "does not pay"), (strict, tmp_path / "b", "parity: ")):
        for kind, name in (("clip-image", "clip-image.onnx"), ("vnm", "vnm.onnx")):
            row = res["models"][kind]
            assert row["result"] == "fp32" and words in row["reason"], row
            assert sha256_file(out / name) == sha256_file(SIM / name)  # the fp32 file and sidecar are back
            assert precision(read_sidecar(out / name, kind=kind)) == "fp32"
    assert slow["models"]["vnm"]["fp32_ms"] > 0 and slow["models"]["vnm"]["int8_ms"] > 0


def test_an_image_tower_without_its_text_tower_is_not_kept_int8(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in ("clip-image.onnx", "clip-image.onnx.json", "clip-reference.npz"):
        shutil.copy2(SIM / f, src / f)
    res = quantize_models(src, tmp_path / "out", kinds=("clip-image", "clip-text"), min_speedup=0.0, repeats=2)
    assert res["models"]["clip-text"]["result"] == "missing"
    row = res["models"]["clip-image"]
    assert row["result"] == "fp32" and "cannot be opened" in row["reason"]
    assert sha256_file(tmp_path / "out" / "clip-image.onnx") == sha256_file(SIM / "clip-image.onnx")


def test_bad_folders_and_options_are_refused_and_nothing_is_written(tmp_path, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("operator's file")
    assert main(["models", "quantize", str(SIM), str(busy)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in busy.iterdir()) == ["keep.txt"]
    assert main(["models", "quantize", str(tmp_path / "absent"), str(tmp_path / "o")]) == 2
    assert "no such models directory" in capsys.readouterr().err
    assert main(["models", "quantize", str(SIM), str(tmp_path / "o"), "--only", "llm"]) == 2
    assert main(["models", "quantize", str(SIM), str(tmp_path / "o"), "--min-cosine", "0"]) == 2
    capsys.readouterr()
    assert main(["models", "quantize", str(busy), str(tmp_path / "o"), "--only", "vnm"]) == 2
    assert f"{busy}: holds none of the models asked for (vnm.onnx)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    copy = tmp_path / "copy"
    shutil.copytree(SIM, copy)
    with pytest.raises(QuantizeError, match="outside the input"):
        quantize_models(copy, copy / "sub")
    with pytest.raises(ValueError, match="unknown model kind"):
        quantize_models(copy, tmp_path / "o", kinds=("lidar",))
    # a damaged input model is refused by its sidecar check; no OUT appears
    data = bytearray((copy / "vnm.onnx").read_bytes())
    data[-1] ^= 0xFF
    (copy / "vnm.onnx").write_bytes(bytes(data))
    with pytest.raises(ModelTampered):
        quantize_models(copy, tmp_path / "o", kinds=("vnm",))
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()
    assert main(["models", "quantize", str(copy), str(tmp_path / "o"), "--only", "vnm"]) == 1
    assert "does not match its sidecar" in capsys.readouterr().err


def test_an_interrupted_run_leaves_no_out_and_the_next_run_cleans_up(tmp_path):
    stale = tmp_path / "out.partial"
    stale.mkdir()
    (stale / "vnm.onnx").write_bytes(b"half a file from a power cut")
    res = quantize_models(SIM, tmp_path / "out", kinds=("vnm",), min_speedup=0.0, repeats=2)
    assert res["models"]["vnm"]["result"] == "int8"
    assert not stale.exists()
    read_sidecar(tmp_path / "out" / "vnm.onnx", kind="vnm")


def test_retrieval_agreement_counts_and_checks_its_labels():
    m = open_clip_model(SIM)
    rs = reference_retrieval_set(SIM, read_sidecar(SIM / "clip-text.onnx", kind="clip-text"))
    same = retrieval_agreement(m, m, rs)
    assert same["top1_same"] == same["top3_same"] == len(rs.phrases) and same["differs"] == []
    labelled = RetrievalSet("labelled", rs.images, ["stop sign"], np.ones((len(rs.images), 1), bool))
    assert retrieval_agreement(m, m, labelled)["precision_at_1_fp32"] == 1.0
    with pytest.raises(ValueError, match="positives shape"):
        retrieval_agreement(m, m, RetrievalSet("bad", rs.images, ["stop sign"], np.ones((2, 2), bool)))
    with pytest.raises(ValueError, match="at least 3 images"):
        retrieval_agreement(m, m, RetrievalSet("tiny", rs.images[:2], ["stop sign"]))


def test_verify_holds_int8_and_tensorrt_fp16_to_the_cosine_bounds():
    from robot_app.cli.models_cmd import verify_bound

    fp32 = read_sidecar(SIM / "vnm.onnx", kind="vnm").params
    assert verify_bound(fp32, fp16=False) is None  # fp32 on the CPU: |diff| < 1e-3
    assert verify_bound(fp32, fp16=True) == {"min_cosine": 0.99, "dist_tol_steps": 0.4}
    q = {"int8": {"min_cosine": 0.995, "dist_tol_steps": 0.4}}
    assert verify_bound(q, fp16=False) == verify_bound(q, fp16=True) == q["int8"]
    # the sim exporter's int8 text tower (no recorded bounds): exact kernels -> |diff| < 1e-3, x86 without
    # VNNI (saturating u8s8 kernels) -> cosine 0.98
    text = read_sidecar(SIM / "clip-text.onnx", kind="clip-text").params
    assert verify_bound(text, fp16=False, precision="int8", exact_int8=True) is None
    assert verify_bound(text, fp16=False, precision="int8", exact_int8=False) == {"min_cosine": 0.98}
    u8 = {**text, "int8_weight_type": "uint8"}  # unsigned weights: exact on every CPU
    assert verify_bound(u8, fp16=False, precision="int8", exact_int8=False) is None


@pytest.mark.parametrize(("machine", "avx512_vnni", "flags", "exact"), [
    ("x86_64", True, "fpu sse2 avx2 avx512f avx512_vnni", True),
    ("x86_64", False, "fpu sse2 avx2 avx_vnni", True),  # numpy's CPU features do not name AVX-VNNI
    ("x86_64", False, "fpu sse2 avx2 fma", False),
    ("x86_64", False, "fpu sse2 avx2 avx512f avx512_vnni", False),  # CPUID wins (an emulated CPU)
    ("aarch64", False, "fp asimd asimddp", True),
])
def test_int8_kernels_exact_reads_the_cpu_features(tmp_path, machine, avx512_vnni, flags, exact):
    from models.onnx_common import int8_kernels_exact

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    feats = {"AVX2": True, "AVX512VNNI": avx512_vnni}
    assert int8_kernels_exact(info, machine=machine, features=feats) is exact
    # nothing known: exact, the strict bound
    assert int8_kernels_exact(tmp_path / "missing", machine="x86_64", features={}) is True
