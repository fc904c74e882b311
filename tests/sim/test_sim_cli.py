"""``robot-app sim worlds|check|render|record|run|devices --world`` and ``bench sim``."""

from __future__ import annotations

import json

import cv2
import pytest

from core.tlog import read_log
from robot_app.cli import main

pytest.importorskip("pybullet")


def test_worlds_lists_the_shipped_worlds(capsys):
    assert main(["sim", "worlds", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"campus", "industrial"} <= set(rows)
    assert rows["campus"]["categories"]["stop sign"] >= 2


def test_check_reports_bad_files_with_exit_2(tmp_path, capsys):
    assert main(["sim", "check", "campus"]) == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[world]\nname = "x"\nextent_m = [50.0, 50.0]\nanchor_latlon = [1.0, 2.0]\n'
                   '[[objects]]\ncategory = "dragon"\nat = [1.0, 1.0]\n')
    assert main(["sim", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "objects[0] (dragon): category: unknown object category 'dragon'" in err


def test_render_writes_an_image(tmp_path):
    out = tmp_path / "view.png"
    assert main(["sim", "render", "--world", "industrial", "--pose=-60,0,0", "--size", "40x30", "--out", str(out)]) == 0
    assert cv2.imread(str(out)).shape == (30, 40, 3)
    assert main(["sim", "render", "--pose=-20,-40,0", "--out", str(out)]) == 2  # inside the library


def test_record_writes_a_log(tmp_path, capsys):
    out = tmp_path / "log"
    assert main(["sim", "record", "--route", "0,-85;0,-75", "--out", str(out), "--size", "32x24",
                 "--speed", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["reached_end"] and rep["frames"] == len(read_log(out).frame_t_s) > 10
    assert main(["sim", "record", "--route", "nowhere", "--out", str(tmp_path / "x")]) == 2


def test_devices_with_a_shipped_world(tmp_path, capsys):
    assert main(["sim", "devices", "--world", "campus", "--dir", str(tmp_path), "--duration", "0.3", "--json"]) == 0
    ports = json.loads(capsys.readouterr().out.splitlines()[0])
    assert set(ports) == {"jackal", "gps", "imu"}
    assert main(["sim", "devices", "--world", "atlantis", "--duration", "0.1"]) == 2


def test_run_app_in_the_world_stops_after_duration(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[ui]\nenabled = false\n[paths]\nmodels_dir = "{tmp_path}/none"\n'
                   '[camera]\nwidth = 32\nheight = 24\nfps = 4.0\n')
    assert main(["--config", str(cfg), "sim", "run", "--world", "campus", "--duration", "1.5"]) == 0


def test_run_prints_the_touchscreen_address_with_its_token(tmp_path, capsys):
    """On a desk there is no kiosk launcher: `sim run` prints the page's address with the session token
    (the page reads it from the URL fragment, as the kiosk unit passes it)."""
    import re

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[ui]\nport = 0\nsecret_file = ""\n[paths]\nmodels_dir = "{tmp_path}/none"\n'
                   '[camera]\nwidth = 32\nheight = 24\nfps = 4.0\n')
    assert main(["--config", str(cfg), "sim", "run", "--world", "campus", "--duration", "2.5"]) == 0
    m = re.search(r"^touchscreen: http://127\.0\.0\.1:(\d+)/#token=([\w-]{20,})$", capsys.readouterr().out, re.M)
    assert m, "no touchscreen line"


def test_bench_sim_prints_figures(capsys):
    assert main(["bench", "sim", "--frames", "2", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert set(fig["render_ms_per_frame"]) == {"85x64", "160x120", "320x240", "640x480"}
    assert fig["exploration"]["frames"] > 0
