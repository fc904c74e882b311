"""`robot-app landmarks`, `eval landmarks`, `bench landmarks|llm`, parse_instruction and the [llm] config."""

from __future__ import annotations

import json
import logging

import pytest

from robot_app.cli import main
from robot_app.config import ConfigError, config_from_mapping
from robot_app.route.landmark_parsing import parse_instruction

INSTRUCTION = "Find the fountain, but first pass by a wooden bench near the oak tree."


def run_json(capsys, argv):
    capsys.readouterr()
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


@pytest.fixture
def config_with_models(tmp_path):
    return config_from_mapping({"paths": {"models_dir": str(tmp_path)}, "llm": {"worker": False}})


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from models.llm import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("llm") / "llm.gguf", sidecar=True)


# --- [llm] config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("table, fragment", [
    ({"n_ctx": 10}, "[llm] n_ctx"),
    ({"n_threads": 0}, "[llm] n_threads"),
    ({"n_gpu_layers": -2}, "[llm] n_gpu_layers"),
    ({"timeout_s": "fast"}, "[llm] timeout_s"),
    ({"landmark_parser": "spacy"}, "[llm] landmark_parser"),
    ({"chat_template": "yes"}, "[llm] chat_template"),
    ({"model": "x.gguf"}, "[llm] model: unknown key"),
])
def test_llm_config_bad_values(table, fragment):
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"llm": table}, origin="robot.toml")
    assert fragment in str(info.value) and "robot.toml" in str(info.value)


# --- parse_instruction: choice and fallback -------------------------------------------------------

def test_rules_without_a_model(config_with_models):
    assert parse_instruction(INSTRUCTION, config=config_with_models) == (
        ["a wooden bench near the oak tree", "a fountain"], "rules")


def test_llm_requested_without_model_falls_back_with_a_logged_reason(config_with_models, caplog):
    with caplog.at_level(logging.WARNING, logger="robot_app.route.landmark_parsing"):
        landmarks, used = parse_instruction(INSTRUCTION, config=config_with_models, parser="llm")
    assert used == "rules" and landmarks[-1] == "a fountain"
    assert "not found" in caplog.text


@pytest.mark.llm
def test_llm_used_when_model_present(tmp_path, tiny_model):
    config = config_from_mapping({"paths": {"models_dir": str(tiny_model.parent)},
                                  "llm": {"worker": False, "max_tokens": 32}})
    landmarks, used = parse_instruction(INSTRUCTION, config=config, parser="auto")  # auto: the file exists
    assert used == "llm" and 1 <= len(landmarks) <= 10
    assert parse_instruction(INSTRUCTION, config=config, parser="rules")[1] == "rules"
    assert parse_instruction(INSTRUCTION, config=config)[1] == "rules"  # the default: the model is not loaded


@pytest.mark.llm
def test_configured_model_needs_an_intact_sidecar(tmp_path, tiny_model, caplog):
    import shutil

    models_dir = tmp_path / "models"
    models_dir.mkdir()
    shutil.copy(tiny_model, models_dir / "llm.gguf")
    config = config_from_mapping({"paths": {"models_dir": str(models_dir)}, "llm": {"worker": False}})
    with caplog.at_level(logging.WARNING, logger="robot_app.route.landmark_parsing"):
        assert parse_instruction(INSTRUCTION, config=config, parser="llm")[1] == "rules"
    assert "llm-sidecar" in caplog.text  # says how to provision it
    assert main(["--config", str(_write_config(tmp_path, models_dir)), "models", "llm-sidecar",
                 str(models_dir / "llm.gguf")]) == 0
    assert parse_instruction(INSTRUCTION, config=config, parser="llm")[1] == "llm"
    with open(models_dir / "llm.gguf", "r+b") as f:  # a byte flipped: refused
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="robot_app.route.landmark_parsing"):
        assert parse_instruction(INSTRUCTION, config=config, parser="auto")[1] == "rules"
    assert "sha256" in caplog.text


def _write_config(tmp_path, models_dir):
    cfg = tmp_path / "robot.toml"
    cfg.write_text(f'[paths]\nmodels_dir = "{models_dir}"\n')
    return cfg


def test_llm_sidecar_command_rejects_non_gguf(tmp_path, capsys):
    junk = tmp_path / "x.gguf"
    junk.write_bytes(b"nope")
    assert main(["models", "llm-sidecar", str(junk)]) == 2
    assert main(["models", "llm-sidecar", str(tmp_path / "none.gguf")]) == 2
    assert "GGUF" in capsys.readouterr().err


@pytest.mark.llm
def test_llm_failure_falls_back_to_rules(tiny_model, caplog):
    from models.llm import open_llm

    config = config_from_mapping({"llm": {"timeout_s": 0.5}})
    client = open_llm(tiny_model, n_ctx=64, in_process=True)  # the prompt does not fit: LlmError
    with client, caplog.at_level(logging.WARNING, logger="robot_app.route.landmark_parsing"):
        landmarks, used = parse_instruction(INSTRUCTION, config=config, parser="llm", llm=client)
    assert used == "rules" and landmarks == ["a wooden bench near the oak tree", "a fountain"]
    assert "LLM landmark extraction failed" in caplog.text


def test_parse_instruction_rejects_unknown_parser(config_with_models):
    with pytest.raises(ValueError, match="landmark parser"):
        parse_instruction("x", config=config_with_models, parser="gpt")


# --- CLI ------------------------------------------------------------------------------------------

def test_landmarks_json(capsys):
    rc, out = run_json(capsys, ["landmarks", "--parser", "rules", "--json", INSTRUCTION])
    assert rc == 0 and out == {"landmarks": ["a wooden bench near the oak tree", "a fountain"],
                               "parser": "rules"}


@pytest.mark.llm
def test_landmarks_with_tiny_llm(capsys, tiny_model):
    rc, out = run_json(capsys, ["landmarks", "--parser", "llm", "--model", str(tiny_model), "--json",
                                "Go to the gate."])
    assert rc == 0 and out["parser"] == "llm" and out["landmarks"]


def test_landmarks_bad_input(capsys, tmp_path):
    assert main(["landmarks", "   "]) == 2
    assert main(["landmarks", "--model", str(tmp_path / "none.gguf"), "x"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_eval_landmarks(capsys, tmp_path):
    f = tmp_path / "set.jsonl"
    f.write_text(json.dumps({"instruction": "Go past the bench to the gate.", "landmarks": ["bench", "gate"]})
                 + "\n\n" + json.dumps({"instruction": "Go to the gate.", "landmarks": ["a tower"]}) + "\n")
    rc, out = run_json(capsys, ["eval", "landmarks", str(f), "--parser", "rules", "--json"])
    assert rc == 0 and out["extraction_success"] == pytest.approx(0.5)
    assert [i["success"] for i in out["items"]] == [1.0, 0.0]
    assert main(["eval", "landmarks", str(f)]) == 0
    assert "mean extraction success 0.500 over 2" in capsys.readouterr().out


@pytest.mark.parametrize("content, fragment", [
    ("{not json\n", ":1: not valid JSON"),
    ('{"instruction": "x"}\n', "'landmarks' must be"),
    ('{"instruction": "x", "landmarks": []}\n', "'landmarks' must be"),
    ('["x"]\n', "expected an object"),
    ("\n", "no instructions"),
])
def test_eval_landmarks_bad_files(capsys, tmp_path, content, fragment):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    assert main(["eval", "landmarks", str(f)]) == 2
    assert fragment in capsys.readouterr().err


def test_eval_on_the_shared_set_meets_target(capsys, dev_data):
    rc, out = run_json(capsys, ["eval", "landmarks", str(dev_data / "landmark_instructions.jsonl"),
                                "--parser", "rules", "--json"])
    assert rc == 0 and out["extraction_success"] >= 0.95


@pytest.mark.llm
def test_bench_landmarks_and_llm(capsys, tiny_model):
    rc, out = run_json(capsys, ["bench", "landmarks", "--repeat", "2", "--json"])
    assert rc == 0 and out["calls"] == 2 * out["instructions"] and out["max_ms"] >= out["p50_ms"] > 0
    rc, out = run_json(capsys, ["bench", "llm", "--tiny", "--in-process", "--json"])
    assert rc == 0 and out["failed"] == 0 and out["load_s"] > 0 and out["tokens_per_s"] > 0
