"""docs/configuration.md is generated from the config's metadata and must be current."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from robot_app.cli import main
from robot_app.config import Config, config_reference_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_checked_in_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == config_reference_markdown(), \
        "docs/configuration.md is out of date: run `robot-app config reference > docs/configuration.md`"


def test_every_key_is_in_the_reference_with_its_default(capsys):
    assert main(["config", "reference"]) == 0
    text = capsys.readouterr().out
    for name, cls in typing.get_type_hints(Config).items():
        if not dataclasses.is_dataclass(cls):
            continue
        assert f"## [{name}]" in text
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text, f"[{name}] {f.name} missing"
    assert "| `alpha` | `0.005` | >= 0.0 |" in text
