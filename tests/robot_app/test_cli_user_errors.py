"""User errors give one line and exit status 2 (or, for a closed pipe, a quiet 141), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from robot_app.cli import main

EXE = Path(sys.executable).with_name("robot-app")


def test_a_reader_that_goes_away_is_not_a_traceback():
    """`robot-app config show | head -0`: the pipe closes before the first write."""
    p = subprocess.Popen([str(EXE), "config", "show"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and "Traceback" not in err, err


@pytest.mark.parametrize("toml, message", [
    ("[planner]\nalpha = 1e400\n", "[planner] alpha: inf is not a finite number"),
    ('[mission]\nplaces = ["yard=abc", "x"]\n', "[mission] places[0]: 'yard=abc' is not name=node_index"),
    ('[mission]\nplaces = ["yard=3", "x"]\n', "[mission] places[1]: 'x' is not name=node_index"),
])
def test_config_values_must_be_finite_and_places_name_equals_node(tmp_path, capsys, toml, message):
    conf = tmp_path / "c.toml"
    conf.write_text(toml)
    assert main(["--config", str(conf), "config", "show"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def _one_line_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1, err


def test_plan_with_a_100_kb_instruction_is_a_usage_error(tmp_path, capsys):
    # the length is checked before the map's embeddings are needed: a map of two nodes will do
    path = tmp_path / "m.map"
    _tiny_map(path)
    _one_line_error(capsys, ["plan", "--map", str(path), "--start", "0", "--instruction", "x" * 100_000],
                    "--instruction: instruction is 100000 characters long")


def _tiny_map(path):
    import numpy as np

    from core.mapstore import MapWriter

    w = MapWriter.create(path)
    w.add_nodes(timestamp_s=np.array([0.0, 1.0]), lat_deg=np.array([37.0, 37.00001]),
                lon_deg=np.array([-122.0, -122.0]))
    w.close()


def test_lasp_with_a_non_utf8_domain_or_knowledge_file_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "bad.pddl"
    bad.write_bytes(b"\xff\xfe(define (domain x))")
    ok = tmp_path / "p.pddl"
    ok.write_text("(define (problem p) (:domain x))")
    _one_line_error(capsys, ["lasp", "run", "--domain", str(bad), "--problem", str(ok), "--env-domain", str(ok)],
                    f"--domain {bad}: not UTF-8 text")


def test_demo_checks_its_output_folder_before_any_stage(tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("x")
    _one_line_error(capsys, ["demo", "--quick", "--out", str(blocked / "sub")], "cannot write there")
    _one_line_error(capsys, ["demo", "--quick", "--out", str(blocked)], "exists and is not a folder")


def test_global_options_are_accepted_after_the_subcommand_too(tmp_path, capsys):
    import json

    conf = tmp_path / "c.toml"
    conf.write_text("[planner]\nalpha = 0.25\n")
    assert main(["config", "show", "--config", str(conf)]) == 0
    assert json.loads(capsys.readouterr().out)["planner"]["alpha"] == 0.25
    # given after the command it replaces the one before it
    assert main(["--config", str(tmp_path / "nope.toml"), "config", "show", "--config", str(conf)]) == 0
    capsys.readouterr()
