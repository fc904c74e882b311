"""The sentence embedding shipped with the package (int8 all-MiniLM-L6-v2) and `models quantize` of it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from models.sidecar import ModelTampered, precision, read_sidecar
from models.text_embed import BUNDLED_DIR, ModelMissing, check_reference, open_text_embedder, text_embed_path
from robot_app.cli import main


def test_the_package_ships_an_int8_minilm_with_its_licences():
    sc = read_sidecar(BUNDLED_DIR / "text-embed.onnx", kind="text-embed")  # sha256 checked
    assert precision(sc) == "int8" and sc.architecture == "all-MiniLM-L6-v2" and not sc.random_init
    assert sc.model_path.stat().st_size < 30e6
    for name in ("NOTICE.md", "LICENSE-Apache-2.0.txt", "LICENSE-packaging-MIT.txt"):
        assert (BUNDLED_DIR / name).is_file()
    assert "Apache License" in (BUNDLED_DIR / "LICENSE-Apache-2.0.txt").read_text()


def test_an_empty_models_directory_opens_the_bundled_copy_only_when_asked(tmp_path):
    with pytest.raises(ModelMissing):
        open_text_embedder(tmp_path)
    te = open_text_embedder(tmp_path, bundled=True)
    assert te.bundled and te.path == BUNDLED_DIR / "text-embed.onnx"
    r = check_reference(te, BUNDLED_DIR / "text-embed-reference.npz")
    assert r["ids_equal"] and r["cosine_min"] >= 0.99  # the bound `models quantize` kept it under
    s = te.similarity(["the fridge is open"], ["the refrigerator door is not closed", "the cup is dirty"])
    assert s[0, 0] > s[0, 1] + 0.1


def test_a_damaged_file_of_the_models_directory_is_refused_not_replaced(tmp_path):
    shutil.copy(BUNDLED_DIR / "text-embed.onnx.json", tmp_path / "text-embed.onnx.json")
    (tmp_path / "text-embed.onnx").write_bytes(b"not a model")
    assert text_embed_path(tmp_path, bundled=True) == tmp_path / "text-embed.onnx"
    with pytest.raises(ModelTampered):
        open_text_embedder(tmp_path, bundled=True)


def test_models_info_lists_the_bundled_copy_and_verifies_it(tmp_path, capsys):
    assert main(["models", "info", "--models", str(tmp_path), "--verify", "--json"]) == 0
    rows = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    te = rows["text-embed"]
    assert te["status"] == "ok" and te["precision"] == "int8" and te["source"].startswith("bundled")
    assert te["parity"]["ok"] and te["parity"]["cosine_min"] >= 0.99


def test_the_service_inventory_counts_the_bundled_copy(tmp_path):
    from robot_app.config import config_from_mapping
    from robot_app.service.models import model_inventory

    inv = model_inventory(config_from_mapping({"paths": {"models_dir": str(tmp_path)}}))
    assert inv["text-embed"].startswith("bundled")


def test_quantize_makes_the_exported_minilm_8_bit_with_parity(text_embed_export_dir, tmp_path):
    pytest.importorskip("onnx")
    out = tmp_path / "q"
    assert main(["models", "quantize", str(text_embed_export_dir), str(out), "--only", "text-embed",
                 "--min-speedup", "0", "--repeats", "3", "--no-sim-set"]) == 0
    row = json.loads((out / "quantize-report.json").read_text())["models"]["text-embed"]
    assert row["result"] == "int8" and row["parity"]["cosine_min"] >= 0.99
    sc = read_sidecar(out / "text-embed.onnx", kind="text-embed")
    assert sc.params["int8"]["ops"] == ["MatMul", "Gemm", "Gather"] and sc.params["int8"]["weight_type"] == "uint8"
    assert sc.model_path.stat().st_size < 0.3 * (text_embed_export_dir / "text-embed.onnx").stat().st_size
    te = open_text_embedder(out)
    ref = open_text_embedder(text_embed_export_dir)
    texts = ["the gripper is too hot", "the door is shut", "the battery is low"]
    cos = (te.embed(texts) * ref.embed(texts)).sum(1)
    assert np.all(cos >= 0.99)
