"""Command-line conventions: every command describes itself, --json means the same everywhere."""

from __future__ import annotations

import argparse

from robot_app.cli import JSON_HELP, build_parser


def _commands(p: argparse.ArgumentParser, path=()):
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                yield from _commands(child, path + (name,))


def test_every_command_has_a_one_line_description():
    missing = [" ".join(path) for path, p in _commands(build_parser()) if path and not (p.description or "").strip()]
    assert not missing, f"no description: {missing}"


def test_json_has_one_wording():
    helps = {a.help for _path, p in _commands(build_parser()) for a in p._actions if "--json" in a.option_strings}
    assert helps == {JSON_HELP}


def test_every_models_option_takes_the_package_form():
    """Each --models is resolved by the one shared resolver (robot_app.cli.path_option) before its command runs."""
    required = {("map", "build"): ["LOG", "--out", "m.map"],  # what the parsers need besides --models
                ("models", "calibrate-grounding"): ["--map", "m", "--present", "a", "--absent", "b"],
                ("eval", "sim"): ["--world", "campus"]}
    with_models = [(path, p) for path, p in _commands(build_parser())
                   if any("--models" in a.option_strings for a in p._actions)]
    assert len(with_models) >= 8  # map build, bench map-build/models, demo, eval sim/sim-tune, models info/...
    for path, p in with_models:
        args = p.parse_args(required.get(path, []) + ["--models", "package:robot_app/data/models/sim"])
        assert args._path_options == {"models": "--models"}, path


def test_path_option_resolves_the_package_form_or_names_the_flag():
    from pathlib import Path

    import pytest

    from robot_app.cli import path_option
    from robot_app.errors import UsageError

    got = Path(path_option("package:robot_app/data/models/sim", "--models"))
    assert got.is_dir() and got.parts[-3:] == ("data", "models", "sim") and got.is_absolute()
    assert path_option("/some/dir", "--models") == "/some/dir" and path_option(None, "--models") is None
    with pytest.raises(UsageError) as exc:
        path_option("package:robot_app/data/models/nope", "--models")
    msg = str(exc.value)
    assert msg.startswith("--models: ") and "does not exist in the installed package" in msg and "\n" not in msg
    with pytest.raises(UsageError, match="^--models: .*a package path is package:robot_app/"):
        path_option("package:numpy/x", "--models")
