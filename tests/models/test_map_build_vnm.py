"""Map building with a real (tiny, random-init) VNM export: VNM edges, tau from the sidecar, resume."""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3

import numpy as np
import pytest

from core import graph_build as gb
from core.mapstore import open_map
from core.tlog import read_log
from robot_app.config import Config, MappingConfig
from robot_app.mapping.map_build import DistanceCache, build_map, select_build_nodes, vnm_pair_distances
from robot_app.mapping.synthetic_logs import write_synthetic_log


@pytest.fixture
def setup(tmp_path, vnm_export):
    models = tmp_path / "models"
    shutil.copytree(vnm_export[0], models)
    write_synthetic_log(tmp_path / "a", [(0, 0), (45, 0)], seed=1)
    write_synthetic_log(tmp_path / "b", [(20, -15), (20, 15)], seed=2, t0_s=500.0)
    return models, [tmp_path / "a", tmp_path / "b"]


def config(models, **mapping):
    return dataclasses.replace(Config(), mapping=dataclasses.replace(MappingConfig(), **mapping),
                               paths=dataclasses.replace(Config().paths, models_dir=str(models)))


def test_vnm_edges_and_tau_from_the_sidecar(tmp_path, setup):
    models, logs = setup
    rep = build_map(logs, tmp_path / "m.map", config=config(models))
    assert rep.distance_source.startswith("vnm (vnm:")
    assert rep.vnm_evaluations == rep.candidate_pairs > 0 and rep.vnm_cached == 0
    with open_map(tmp_path / "m.map") as m:
        build = m.metadata["build"]
        assert build["tau_steps"] == pytest.approx(15.0)  # 75 % of GNM's trained 0-20 range
        assert build["models"]["vnm"].startswith("vnm:") and build["frame_rate_hz"] == 4.0
        assert set(m.edges.source.tolist()) <= {"temporal", "vnm"}
    assert rep.rejected_far + rep.edges["vnm"] + rep.removed_redundant >= rep.edges["vnm"]


def test_gps_floor_raises_vnm_edge_weights_to_the_straight_line(tmp_path, setup):
    models, logs = setup
    off = build_map(logs, tmp_path / "off.map", config=config(models, tau_steps=1e9, gps_floor=False))
    on = build_map(logs, tmp_path / "on.map", config=config(models, tau_steps=1e9, gps_floor_tolerance_m=0.5))
    assert off.gps_floored == 0 and on.gps_floored > 0  # a random-init VNM predicts about the same for all
    with open_map(tmp_path / "on.map") as m:
        assert m.metadata["build"]["gps_floor"] is True and m.metadata["build"]["gps_floor_tolerance_m"] == 0.5
        xy = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1)
        v = m.edges.source == "vnm"
        gps_m = np.linalg.norm(xy[m.edges.src[v]] - xy[m.edges.dst[v]], axis=1)
        # every VNM edge takes at least the time the straight line needs at 1 m/s and 4 Hz, less 0.5 m
        assert np.all(m.edges.weight_steps[v] >= (gps_m - 0.5) * 4.0 - 1e-3)


def test_every_candidate_becomes_an_edge_when_tau_is_huge(tmp_path, setup):
    models, logs = setup
    rep = build_map(logs, tmp_path / "m.map", config=config(models, tau_steps=1e9, reduction_tolerance=0.0))
    assert rep.rejected_far == 0
    assert rep.edges["vnm"] + rep.removed_redundant >= rep.candidate_pairs  # kept or proven redundant
    assert rep.components == 1


def test_interrupted_build_resumes_from_the_checkpoint(tmp_path, setup):
    from models.vnm import open_vnm

    models, log_dirs = setup
    cfg = config(models)
    out = tmp_path / "m.map"
    mc = cfg.mapping
    logs = [read_log(d) for d in log_dirs]
    nodes = select_build_nodes(logs, min_travel_m=mc.min_travel_m, min_dt_s=mc.min_dt_s, epsilon_s=mc.epsilon_s)
    ts, td, _ = gb.temporal_edges(nodes.t_s, nodes.log_index, nodes.gap_before, frame_rate_hz=4.0)
    pairs = gb.candidate_pairs(nodes.xy_m, k=mc.candidate_k, radius_m=mc.candidate_radius_m,
                               exclude=set(zip(ts.tolist(), td.tolist())))
    vnm = open_vnm(models)
    half = len(pairs) // 2
    cache = DistanceCache(out.with_name(out.name + ".build-cache.sqlite"), vnm.model_id)
    first, runs = vnm_pair_distances(vnm, logs, nodes, pairs[:half], cache, batch=16, progress=lambda k: None)
    cache.close(delete=False)  # the process "died" here; no map was written
    with sqlite3.connect(out.with_name(out.name + ".build-cache.sqlite")) as c:  # commits append to a WAL
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert runs == half and not out.exists()
    rep = build_map(log_dirs, out, config=cfg)
    assert rep.vnm_cached == half and rep.vnm_evaluations == len(pairs) - half
    for suffix in ("", "-wal", "-shm"):  # the cache (a write-ahead log) and its side files are gone
        assert not out.with_name(out.name + ".build-cache.sqlite" + suffix).exists()
    # resumed distances are the ones a fresh run measures
    fresh = DistanceCache(tmp_path / "fresh.sqlite", vnm.model_id)
    again, _ = vnm_pair_distances(vnm, logs, nodes, pairs[:half], fresh, batch=7, progress=lambda k: None)
    fresh.close(delete=True)
    np.testing.assert_allclose(again, first, rtol=1e-5)
