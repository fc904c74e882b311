import pytest

from robot_app.config import Config, ConfigError, config_from_mapping, default_config_toml, load_config


def test_defaults_when_no_file_given(tmp_path, monkeypatch):
    monkeypatch.setattr("robot_app.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")
    cfg = load_config(None)
    assert cfg == Config()
    assert cfg.robot.wheel_radius_m == pytest.approx(0.098)
    assert cfg.robot.cmd_timeout_s == pytest.approx(0.25)


def test_file_values_override_defaults(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[planner]\nalpha = 0.5\nplanner = "max-likelihood"\n[robot]\nmax_v_mps = 1\n')
    cfg = load_config(p)
    assert cfg.planner.alpha == 0.5
    assert cfg.planner.planner == "max-likelihood"
    assert cfg.robot.max_v_mps == 1.0 and isinstance(cfg.robot.max_v_mps, float)
    assert cfg.source == str(p)


@pytest.mark.parametrize("text, fragment", [
    ("[planner]\nalpah = 1.0\n", "[planner] alpah: unknown key"),
    ("[plannr]\nalpha = 1.0\n", "unknown section [plannr]"),
    ("[planner]\nalpha = 'x'\n", "[planner] alpha: expected a number"),
    ("[planner]\nalpha = -1.0\n", "[planner] alpha: -1.0 is below the minimum"),
    ("[planner]\nplanner = 'astar'\n", "[planner] planner: 'astar' is not one of"),
    ("[robot]\nmax_v_mps = true\n", "[robot] max_v_mps: expected a number"),
    ("[robot]\nmax_v_mps = nan\n", "[robot] max_v_mps: nan is not a finite number"),
    ("[planner]\nalpha = inf\n", "[planner] alpha: inf is not a finite number"),
    ("[ui]\nauth = 'pin'\npin = '12'\n", "[ui] auth = 'pin' needs [ui] pin of 4-12 digits"),
    ("[ui]\nallowed_origins = ['evil']\n", "[ui] allowed_origins: 'evil' is not scheme://host[:port]"),
    ("planner = 3\n", "[planner] must be a table"),
    ("[planner\n", "not valid TOML"),
])
def test_bad_files_name_the_key_and_file(tmp_path, text, fragment):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert fragment in str(exc.value)
    assert str(p) in str(exc.value)


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_default_toml_round_trips():
    import tomllib

    cfg = config_from_mapping(tomllib.loads(default_config_toml()))
    assert cfg == Config()


@pytest.mark.parametrize("text, fragment", [
    ("[serial]\nreconnect_min_s = 5.0\nreconnect_max_s = 1.0\n", "reconnect_min_s 5.0 is above reconnect_max_s"),
    ("[models]\nclip_prompt = 'no placeholder'\n", "[models] clip_prompt"),
    ("[models]\nclip_prompt_ensemble = ['a {}', 'bad']\n", "[models] clip_prompt_ensemble[1]"),
    ("[vnm_nav]\ngps_approach_m = 12.0\n", "[vnm_nav] gps_approach_m 12.0 must be below max_off_walk_m 10.0"),
])
def test_rules_across_keys(tmp_path, text, fragment):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert fragment in str(exc.value) and str(p) in str(exc.value)
