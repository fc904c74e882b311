"""Config values that name shipped data: ``package:`` paths."""

from __future__ import annotations

from pathlib import Path

import pytest

import robot_app
from robot_app.config import ConfigError, config_from_mapping, package_path_of


def test_package_paths_resolve_to_the_installed_package(tmp_path):
    """``package:robot_app/...`` names shipped data wherever the package is installed; anything else
    under that prefix is refused naming the key."""
    shipped = Path(robot_app.__file__).resolve().parent / "data" / "worlds"
    cfg = config_from_mapping({"paths": {"models_dir": "package:robot_app/data/worlds"}}, origin="c.toml")
    assert Path(cfg.paths.models_dir) == shipped
    assert package_path_of(str(shipped)) == "package:robot_app/data/worlds"
    assert package_path_of(str(tmp_path)) == str(tmp_path)
    for bad in ("package:robot_app/no/such/thing", "package:numpy/core", "package:robot_app/../setup.py", "package:"):
        with pytest.raises(ConfigError, match=r"c\.toml: \[paths\] models_dir: .*package"):
            config_from_mapping({"paths": {"models_dir": bad}}, origin="c.toml")
