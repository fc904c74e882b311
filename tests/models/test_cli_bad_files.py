"""Bad files on the command line end in one line, never a traceback: corrupted maps for every map command,
a tampered CLIP model for ``plan --instruction``; and a refused config exits 2 in every command."""

from __future__ import annotations

import random
import shutil

import pytest

from robot_app.cli import main
from robot_app.mapping.synthetic_logs import write_synthetic_log


def _corruptions(path, tmp_path, n: int = 12):
    data = path.read_bytes()
    rng = random.Random(7)
    for k in range(n):
        b = bytearray(data)
        if k % 3 == 2:
            b = b[: rng.randrange(100, len(b))]  # truncated
        else:
            for _ in range(1 + k % 4):
                pos = rng.randrange(len(b))
                b[pos] ^= 1 << rng.randrange(8)
        out = tmp_path / f"bad{k}.sqlite"
        out.write_bytes(bytes(b))
        yield out


def test_corrupted_maps_are_one_line_errors_in_every_map_command(tmp_path, capsys):
    assert main(["map", "example", "--out", str(tmp_path / "ex")]) == 0
    good, scores = tmp_path / "ex" / "map.sqlite", tmp_path / "ex" / "scores.npy"
    capsys.readouterr()
    refused = 0
    for bad in _corruptions(good, tmp_path):
        for argv in (["map", "info", str(bad)], ["map", "plot", str(bad), "--out", str(tmp_path / "p.png"),
                                                 "--thumbnails", "0,1"],
                     ["plan", "--map", str(bad), "--start", "0", "--landmarks", "a stop sign; a white car; a glass "
                      "building", "--scores", str(scores)]):
            rc = main(argv)
            err = capsys.readouterr().err
            assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, (argv, err)
            if rc != 0:
                assert err.startswith("robot-app: error:"), err
                refused += 1
    assert refused >= 12  # flips in unused pages change no content; the rest are refused


def test_a_tampered_clip_model_is_one_line_for_plan_instruction(tmp_path, clip_export_dir, capsys):
    models = tmp_path / "models"
    shutil.copytree(clip_export_dir, models)
    write_synthetic_log(tmp_path / "log", [(0, 0), (30, 0)], seed=4)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models}"\n[llm]\nlandmark_parser = "rules"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")]) == 0
    capsys.readouterr()
    onnx = models / "clip-text.onnx"
    b = bytearray(onnx.read_bytes())
    b[len(b) // 2] ^= 0x01
    onnx.write_bytes(bytes(b))
    rc = main(["--config", str(conf), "plan", "--map", str(tmp_path / "m.map"), "--start", "0",
               "--instruction", "Go to the red house."])
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "clip-text.onnx" in err or "sha256" in err.lower(), err


@pytest.mark.parametrize("argv", [["config", "show"], ["map", "info", "x.sqlite"], ["run"]])
def test_an_unsafe_ui_config_is_refused_with_exit_2_in_every_command(tmp_path, capsys, argv):
    conf = tmp_path / "c.toml"
    conf.write_text('[ui]\nhost = "0.0.0.0"\n')
    assert main(["--config", str(conf), *argv]) == 2
    err = capsys.readouterr().err
    assert "[ui] host '0.0.0.0' is not loopback" in err and "Traceback" not in err
