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
