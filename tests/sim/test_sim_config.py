"""The [sim] config section: defaults, bad values named with the file and key."""

from __future__ import annotations

import pytest

from robot_app.config import ConfigError, SimConfig, load_config


def test_defaults():
    cfg = SimConfig()
    assert cfg.world == "campus" and cfg.gps_noise_m == 1.0 and cfg.hfov_deg == 90.0


@pytest.mark.parametrize("line, message", [
    ("hfov_deg = 200.0", r"\[sim\] hfov_deg: 200.0 is above the maximum 170.0"),
    ("gps_noise_m = -1.0", r"\[sim\] gps_noise_m: -1.0 is below the minimum 0.0"),
    ("seed = 1.5", r"\[sim\] seed: expected an integer"),
    ("world = 3", r"\[sim\] world: expected a string"),
    ("gravity = 9.8", r"\[sim\] gravity: unknown key"),
])
def test_bad_values(tmp_path, line, message):
    p = tmp_path / "c.toml"
    p.write_text(f"[sim]\n{line}\n")
    with pytest.raises(ConfigError, match=message) as exc:
        load_config(p)
    assert str(p) in str(exc.value)


def test_sim_camera_source_is_accepted(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[camera]\nsource = "sim"\n[sim]\nworld = "industrial"\n')
    cfg = load_config(p)
    assert cfg.camera.source == "sim" and cfg.sim.world == "industrial"
