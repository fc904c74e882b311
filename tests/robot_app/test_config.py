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


def test_every_bad_key_is_reported_at_once_in_one_line():
    data = {"ros2": {"domain_id": -3, "namespace": 5, "no_such_key": 1}, "serial": {"base_baud": 1234},
            "nosection": {}}
    with pytest.raises(ConfigError) as exc:
        config_from_mapping(data, origin="robot.toml")
    msg = str(exc.value)
    assert "\n" not in msg and msg.count("; ") == 4, msg
    for part in ("robot.toml: [ros2] domain_id: -3 is below the minimum", "robot.toml: [ros2] namespace: expected a "
                 "string, got 5", "robot.toml: [ros2] no_such_key: unknown key", "robot.toml: [serial] base_baud:",
                 "robot.toml: unknown section [nosection]"):
        assert part in msg, part


def test_the_rules_across_keys_are_reported_together_too():
    data = {"ros2": {"namespace": "not a namespace", "cmd_topic": ""}, "ui": {"auth": "pin", "pin": "12"}}
    with pytest.raises(ConfigError) as exc:
        config_from_mapping(data, origin="robot.toml")
    msg = str(exc.value)
    assert "[ros2] namespace: 'not a namespace' is not a ROS 2 namespace" in msg
    assert "[ros2] cmd_topic must not be empty" in msg and "[ui] auth = 'pin' needs [ui] pin of 4-12 digits" in msg
