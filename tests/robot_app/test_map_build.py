"""The map-building job on synthetic logs with known geometry (GPS fallback: no VNM installed)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.mapstore import open_map
from robot_app.cli import main
from robot_app.config import Config, MappingConfig
from robot_app.mapping.map_build import build_map
from robot_app.mapping.synthetic_logs import write_synthetic_log


@pytest.fixture
def crossing_logs(tmp_path):
    """Log A drives east 0 -> 80 m along y = 0; log B drives north across it at x = 40 m."""
    a = tmp_path / "a"
    b = tmp_path / "b"
    write_synthetic_log(a, [(0, 0), (80, 0)], seed=1)
    write_synthetic_log(b, [(40, -40), (40, 40)], seed=2, t0_s=1000.0)
    return a, b


def cfg(tmp_path, **mapping):
    return dataclasses.replace(Config(), mapping=dataclasses.replace(MappingConfig(), **mapping),
                               paths=dataclasses.replace(Config().paths, models_dir=str(tmp_path / "no-models")))


def test_two_crossing_drives_make_one_connected_map(tmp_path, crossing_logs):
    out = tmp_path / "m.map"
    rep = build_map(crossing_logs, out, config=cfg(tmp_path))
    assert rep.distance_source.startswith("gps fallback")
    assert rep.components == 1
    with open_map(out) as m:
        assert len(m.nodes) == rep.nodes and 50 <= rep.nodes <= 56  # about one per 3 m over 2 x 80 m
        src = m.edges.source
        assert set(src.tolist()) == {"temporal", "gps"}
        # the temporal chain of log A: consecutive nodes 0..k joined
        assert rep.edges["temporal"] >= 2 * 25
        # loop closures only where the drives cross (near x = 40 m, y = 0 m)
        gps_edges = np.stack([m.edges.src[src == "gps"], m.edges.dst[src == "gps"]], axis=1)
        xy = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1)
        xy -= xy[0]
        mid = (xy[gps_edges[:, 0]] + xy[gps_edges[:, 1]]) / 2
        assert np.all(np.abs(mid[:, 0] - 40) < 8) and np.all(np.abs(mid[:, 1]) < 8)
        assert m.metadata["build"]["epsilon_s"] == 2.0
        assert m.metadata["build"]["node_headings"] == "gps-track-3"  # the VNM navigator trusts these headings
        assert m.metadata["build"]["distance_source"].startswith("gps fallback")
        assert m.image_count() == len(m.nodes) and m.images(0)[0][:2] == b"\xff\xd8"
    assert not (tmp_path / "m.map.build-cache.sqlite").exists()


def test_look_alike_place_300_m_away_is_never_joined(tmp_path):
    same = lambda p: (200, 40, 40)  # noqa: E731 - every frame looks the same
    write_synthetic_log(tmp_path / "a", [(0, 0), (30, 0)], colour_fn=same, seed=1)
    write_synthetic_log(tmp_path / "b", [(300, 0), (330, 0)], colour_fn=same, seed=2, t0_s=500.0)
    # a candidate radius and link distance wider than eta: only the eta rule can keep them apart
    rep = build_map([tmp_path / "a", tmp_path / "b"], tmp_path / "m.map",
                    config=cfg(tmp_path, candidate_radius_m=400.0, gps_link_m=400.0, eta_m=100.0))
    assert rep.rejected_wormholes > 0
    assert rep.components == 2


def test_gps_dropout_without_odometry_breaks_the_temporal_chain(tmp_path):
    write_synthetic_log(tmp_path / "a", [(0, 0), (60, 0)], gps_dropout=(20.0, 30.0))
    rep = build_map([tmp_path / "a"], tmp_path / "m.map", config=cfg(tmp_path, gps_link_m=1.0))
    assert rep.components == 2  # nothing bridges the 10 s without fixes
    assert rep.dead_reckoned_nodes == 0


def test_gps_dropout_is_bridged_from_wheel_odometry(tmp_path):
    truth = write_synthetic_log(tmp_path / "a", [(0, 0), (60, 0), (60, 30)], gps_dropout=(50.0, 70.0),
                                odometry=True)
    rep = build_map([tmp_path / "a"], tmp_path / "m.map", config=cfg(tmp_path, gps_link_m=1.0))
    assert rep.components == 1 and rep.dead_reckoned_nodes >= 5
    m = open_map(tmp_path / "m.map")
    assert m.metadata["build"]["gps_gap_bridge_s"] == 60.0
    # every node, those in the dropout too, lies on the true track (exact fixes and odometry here)
    en = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1)
    rel = en - en[0] + truth[0]
    dist = np.min(np.hypot(*(rel[:, None, :] - truth[None, :, :]).transpose(2, 0, 1)), axis=1)
    assert dist.max() < 0.3
    off = build_map([tmp_path / "a"], tmp_path / "off.map", config=cfg(tmp_path, gps_link_m=1.0, gps_gap_bridge_s=0.0))
    assert off.components == 2 and off.dead_reckoned_nodes == 0


def test_redundant_edges_are_removed_and_reported(tmp_path, crossing_logs):
    rep = build_map(crossing_logs, tmp_path / "m.map", config=cfg(tmp_path, gps_link_m=10.0))
    assert rep.removed_redundant > 0


def test_existing_map_is_kept_unless_overwrite(tmp_path, crossing_logs):
    out = tmp_path / "m.map"
    build_map(crossing_logs, out, config=cfg(tmp_path))
    with pytest.raises(FileExistsError):
        build_map(crossing_logs, out, config=cfg(tmp_path))
    build_map(crossing_logs, out, config=cfg(tmp_path), overwrite=True)


def test_cli_map_build_info_plot(tmp_path, crossing_logs, capsys):
    out = tmp_path / "m.map"
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path / "none"}"\n')
    assert main(["--config", str(conf), "map", "build", *map(str, crossing_logs), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["components"] == 1 and report["nodes"] == 54  # 27 per 80 m drive
    assert main(["map", "plot", str(out), "--out", str(tmp_path / "m.png")]) == 0
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert main(["map", "build", str(tmp_path / "nolog"), "--out", str(tmp_path / "x.map")]) == 2
    assert "not a traversal log" in capsys.readouterr().err


def test_cli_map_build_says_which_fallbacks_it_used(tmp_path, crossing_logs, capsys):
    """No models installed: the map is built (GPS edges, no embeddings) and the summary says so and how to use
    the shipped SIM-ONLY models; --require-models refuses instead (one line, exit 2, nothing written)."""
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path / "none"}"\n')
    logs = [str(d) for d in crossing_logs]
    assert main(["--config", str(conf), "map", "build", *logs, "--out", str(tmp_path / "m.map")]) == 0
    out = capsys.readouterr().out
    assert f"fallbacks (models directory {tmp_path / 'none'}):" in out
    assert "no VNM: edges from GPS distance at 1.0 m/s" in out
    assert "no CLIP: no image embeddings, landmarks cannot be grounded in this map" in out
    assert "--models package:robot_app/data/models/sim" in out and "--require-models" in out
    assert main(["--config", str(conf), "map", "build", *logs, "--out", str(tmp_path / "j.map"), "--json"]) == 0
    got = capsys.readouterr()
    rep = json.loads(got.out)
    assert [f.split(":")[0] for f in rep["fallbacks"]] == ["no VNM", "no CLIP"]
    assert rep["models_dir"] == str(tmp_path / "none") and "--require-models" in got.err
    # --no-vnm: GPS edges asked for, not a fallback
    assert main(["--config", str(conf), "map", "build", *logs, "--out", str(tmp_path / "g.map"), "--no-vnm",
                 "--json"]) == 0
    assert [f.split(":")[0] for f in json.loads(capsys.readouterr().out)["fallbacks"]] == ["no CLIP"]
    # --require-models: refused before any work
    for extra, named in (([], "no VNM (vnm.onnx), no CLIP (clip-image.onnx, clip-text.onnx)"),
                         (["--no-vnm"], "no CLIP (clip-image.onnx, clip-text.onnx)")):
        rc = main(["--config", str(conf), "map", "build", *logs, "--out", str(tmp_path / "r.map"),
                   "--require-models", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert f"--require-models: {named} in {tmp_path / 'none'}" in err and "package:robot_app/data/models/sim" in err
        assert not (tmp_path / "r.map").exists()
    # an explicit --models that is not a folder is an error, not a silent fallback
    assert main(["map", "build", *logs, "--out", str(tmp_path / "r.map"), "--models", str(tmp_path / "nope")]) == 2
    assert "--models " in capsys.readouterr().err and not (tmp_path / "r.map").exists()


def test_cli_map_build_takes_the_shipped_models_in_the_package_form(tmp_path, crossing_logs, capsys):
    """``--models package:robot_app/data/models/sim`` (the form of the config robot-app demo writes)."""
    from robot_app.sim import shipped_models_dir

    if not (shipped_models_dir() / "vnm.onnx").is_file():
        pytest.skip("the sim stand-in models are not shipped in this checkout")
    logs = [str(d) for d in crossing_logs]
    assert main(["map", "build", *logs, "--out", str(tmp_path / "m.map"), "--models",
                 "package:robot_app/data/models/sim", "--require-models", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["distance_source"].startswith("vnm (") and rep["clip_model"] and rep["fallbacks"] == []
    assert rep["models_dir"] == str(shipped_models_dir().resolve())
    with open_map(tmp_path / "m.map") as m:
        assert m.embedding_models() == [rep["clip_model"]]
    rc = main(["map", "build", *logs, "--out", str(tmp_path / "x.map"), "--models", "package:robot_app/data/nope"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("robot-app: error: --models: ")
    assert "'package:robot_app/data/nope'" in err and "does not exist in the installed package" in err


def test_node_spacing_follows_odometry_not_gps_noise(tmp_path):
    write_synthetic_log(tmp_path / "clean", [(0, 0), (90, 0)], seed=1)
    write_synthetic_log(tmp_path / "noisy", [(0, 0), (90, 0)], seed=1, gps_noise_m=2.0, odometry=True)
    clean = build_map([tmp_path / "clean"], tmp_path / "c.map", config=cfg(tmp_path)).nodes
    noisy = build_map([tmp_path / "noisy"], tmp_path / "n.map", config=cfg(tmp_path)).nodes
    assert 29 <= clean <= 31 and abs(noisy - clean) <= 2  # one node per 3 m over 90 m


def test_cli_engine_flags_are_checked_before_any_work(tmp_path, crossing_logs, capsys, monkeypatch):
    logs = [str(d) for d in crossing_logs]
    assert main(["map", "build", *logs, "--out", str(tmp_path / "m.map"), "--workers", "2"]) == 2
    assert "--engine ray" in capsys.readouterr().err
    assert main(["map", "build", *logs, "--out", str(tmp_path / "m.map"), "--engine", "ray", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
    monkeypatch.setitem(__import__("robot_app.extras").extras.EXTRAS, "fleet", ("no_such_module_for_the_test",))
    assert main(["map", "build", *logs, "--out", str(tmp_path / "m.map"), "--engine", "ray"]) == 2
    assert "robot-app[fleet]" in capsys.readouterr().err
    assert not (tmp_path / "m.map").exists()


def test_an_unreachable_ray_head_is_refused_at_once(tmp_path, capsys):
    """``--ray-address HOST:PORT`` whose head accepts no connection: one line, exit 2 (Ray itself retries for
    minutes), for every --engine ray command."""
    import socket

    pytest.importorskip("ray", reason="the fleet extra")
    from robot_app.cli import main

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for argv in (["map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")],
                 ["bench", "map-build", "--frames", "100"],
                 ["eval", "sim", "--world", "campus", "--out", str(tmp_path / "o")]):
        if argv[0] == "eval":
            pytest.importorskip("pybullet")
        assert main(argv + ["--engine", "ray", "--ray-address", f"127.0.0.1:{port}"]) == 2
        assert "cannot reach a Ray cluster's head" in capsys.readouterr().err
    assert main(["map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map"), "--engine", "ray",
                 "--ray-address", "head"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    assert not (tmp_path / "m.map").exists()
