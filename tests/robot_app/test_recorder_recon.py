"""Recorder frame-rate subsampling, RECON HDF5 import round trip, and a map built from an import."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.tlog import read_log
from robot_app.cli import main
from robot_app.mapping.recorder import Recorder
from robot_app.mapping.synthetic_logs import enu_to_latlon, tiny_jpeg

h5py = pytest.importorskip("h5py", reason="the `recon` extra (h5py) is part of `dev`")


def test_recorder_keeps_4_hz_of_a_30_hz_camera(tmp_path):
    jpeg = tiny_jpeg((10, 20, 30))
    with Recorder(tmp_path / "log", frame_rate_hz=4.0) as rec:
        for i in range(300):  # 10 s at 30 Hz
            rec.on_frame(i / 30.0, jpeg)
            rec.on_fix(i / 30.0, 37.0, -122.0, quality=1, hacc_m=0.8)
        rec.on_cmd(1.0, 0.5, 0.1)
        rec.on_event(2.0, "estop", "operator")
    tl = read_log(tmp_path / "log")
    assert rec.frames_kept == tl.frame_t_s.size == 40
    assert np.allclose(np.diff(tl.frame_t_s), 0.25, atol=1 / 30.0 + 1e-9)
    assert tl.gps["t_s"].size == 300 and tl.meta["frame_rate_hz"] == 4.0 and tl.meta["source"] == "recorder"
    with pytest.raises(ValueError, match="frame_rate_hz"):
        Recorder(tmp_path / "x", frame_rate_hz=0)


def write_recon(path, n=40, *, start=(0.0, 0.0), no_fix=(), bad_key=None):
    xy = np.stack([start[0] + np.arange(n) * 0.75, np.full(n, start[1])], axis=1)
    lat, lon = enu_to_latlon(xy)
    latlon = np.stack([lat, lon], axis=1)
    for i in no_fix:
        latlon[i] = 0.0
    with h5py.File(path, "w") as h5:
        imgs = h5.create_dataset("images/rgb_left", (n,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(n):
            imgs[i] = np.frombuffer(tiny_jpeg((100, 3 * i % 255, 50), seed=i), dtype=np.uint8)
        if bad_key != "gps/latlong":
            h5["gps/latlong"] = latlon
        h5["jackal/position"] = np.concatenate([xy, np.zeros((n, 1))], axis=1)
        h5["jackal/yaw"] = np.zeros(n)
        h5["commands/linear_velocity"] = np.full(n, 2.25)
        h5["commands/angular_velocity"] = np.zeros(n)
        h5["collision/any"] = np.arange(n) == 5
    return xy


def test_recon_import_round_trip(tmp_path, capsys):
    xy = write_recon(tmp_path / "a.hdf5", no_fix=(7,))
    write_recon(tmp_path / "b.hdf5", n=10)
    assert main(["log", "import-recon", str(tmp_path / "a.hdf5"), str(tmp_path / "b.hdf5"),
                 "--out", str(tmp_path / "log"), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts == {"files": 2, "frames": 50, "gps_fixes": 49, "gps_no_fix": 1}
    tl = read_log(tmp_path / "log")
    assert tl.frame_t_s.size == 50 and tl.frame_t_s[1] == pytest.approx(1 / 3.0)
    assert tl.frame_t_s[40] - tl.frame_t_s[39] > 10.0  # files are separated in log time
    with h5py.File(tmp_path / "a.hdf5") as h5:
        assert tl.frame_jpeg([tl.frame_id[3]])[0] == bytes(h5["images/rgb_left"][3])
    assert np.sum(tl.gps["quality"] == 0) == 1
    np.testing.assert_allclose(tl.odom["x_m"][:40], xy[:, 0])
    assert main(["log", "info", str(tmp_path / "log"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["frames"] == 50 and info["gps_fixes"] == 49


def test_map_from_imported_recon_drive(tmp_path, capsys):
    write_recon(tmp_path / "a.hdf5", n=60)
    assert main(["log", "import-recon", str(tmp_path / "a.hdf5"), "--out", str(tmp_path / "log")]) == 0
    assert "imported 1 file(s)" in capsys.readouterr().out
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path / "none"}"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map"),
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["nodes"] == 15 and rep["components"] == 1  # 44 m driven, one node per 3 m


@pytest.mark.parametrize("kind, message", [("missing", "missing key 'gps/latlong'"), ("nofile", "no such file")])
def test_recon_bad_files(tmp_path, capsys, kind, message):
    path = tmp_path / "a.hdf5"
    if kind == "missing":
        write_recon(path, bad_key="gps/latlong")
    assert main(["log", "import-recon", str(path), "--out", str(tmp_path / "log")]) == 2
    assert message in capsys.readouterr().err


def test_second_import_appends_after_the_first_and_bad_files_write_nothing(tmp_path, capsys):
    write_recon(tmp_path / "a.hdf5", n=20)
    write_recon(tmp_path / "b.hdf5", n=20, start=(0.0, 22.0))
    write_recon(tmp_path / "bad.hdf5", bad_key="gps/latlong")
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5")
    log = tmp_path / "log"
    assert main(["log", "import-recon", str(tmp_path / "a.hdf5"), "--out", str(log)]) == 0
    assert main(["log", "import-recon", str(tmp_path / "b.hdf5"), "--out", str(log)]) == 0
    tl = read_log(log)
    assert tl.frame_t_s.size == 40 and np.all(np.diff(tl.frame_t_s) > 0)
    assert tl.frame_t_s[20] - tl.frame_t_s[19] >= 10.0 - 1e-9  # the second drive starts 10 s after the first
    capsys.readouterr()
    assert main(["log", "import-recon", str(tmp_path / "a.hdf5"), str(tmp_path / "bad.hdf5"), "--out", str(log)]) == 2
    assert read_log(log).frame_t_s.size == 40           # the good file before the bad one was not written
    assert main(["log", "import-recon", str(tmp_path / "junk.hdf5"), "--out", str(tmp_path / "new")]) == 2
    assert "junk.hdf5: not an HDF5 file" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
