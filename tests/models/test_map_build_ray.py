"""The Ray engine of the map build against the local engine: same map, a killed worker, resume.

A local Ray runtime of 2 CPUs (started once for the module) runs the tiny random-init VNM and CLIP exports on
a simulated drive pair; the local build of the same logs is the reference.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from core import graph_build as gb
from core.mapstore import open_map
from core.tlog import read_log
from robot_app.config import Config, MappingConfig
from robot_app.mapping.map_build import DistanceCache, build_map, select_build_nodes, vnm_pair_distances
from robot_app.mapping.synthetic_logs import write_synthetic_log

ray = pytest.importorskip("ray", reason="the fleet extra (ray) runs the Ray engine")

from robot_app.mapping.map_build_ray import KILL_ONCE_ENV, RayEngine, pair_chunks  # noqa: E402
from tests.ray_support import _no_leaked_threads, ray_runtime  # noqa: E402, F401


@pytest.fixture(scope="module")
def drive_pair(tmp_path_factory, vnm_export, clip_export_dir):
    """Two crossing simulated drives and a models folder with the tiny VNM and CLIP exports."""
    root = tmp_path_factory.mktemp("ray-build")
    models = root / "models"
    shutil.copytree(vnm_export[0], models)
    shutil.copytree(clip_export_dir, models, dirs_exist_ok=True)
    write_synthetic_log(root / "a", [(0, 0), (45, 0)], seed=1)
    write_synthetic_log(root / "b", [(20, -15), (20, 15)], seed=2, t0_s=500.0)
    return models, [root / "a", root / "b"]


def config(models, **mapping):
    return dataclasses.replace(Config(), mapping=dataclasses.replace(MappingConfig(), **mapping),
                               paths=dataclasses.replace(Config().paths, models_dir=str(models)))


@pytest.fixture(scope="module")
def local_map(drive_pair, tmp_path_factory):
    models, logs = drive_pair
    out = tmp_path_factory.mktemp("local") / "m.map"
    rep = build_map(logs, out, config=config(models))
    return out, rep


def assert_same_map(a, b):
    """Same nodes, edges, sources and images; weights and embeddings within float tolerance."""
    with open_map(a) as x, open_map(b) as y:
        assert len(x.nodes) == len(y.nodes) > 0
        for f in dataclasses.fields(x.nodes):
            va, vb = getattr(x.nodes, f.name), getattr(y.nodes, f.name)
            if va.dtype.kind == "f":
                np.testing.assert_array_equal(va, vb)  # node selection is exact arithmetic on the same data
            else:
                assert va.tolist() == vb.tolist()
        ex, ey = x.edges, y.edges
        assert ex.src.tolist() == ey.src.tolist() and ex.dst.tolist() == ey.dst.tolist()
        assert ex.source.tolist() == ey.source.tolist()
        np.testing.assert_allclose(ex.weight_steps, ey.weight_steps, rtol=1e-4, atol=1e-4)
        assert x.image_count() == y.image_count()
        for n in range(len(x.nodes)):
            assert x.images(n) == y.images(n)
        assert x.embedding_models() == y.embedding_models() and len(x.embedding_models()) == 1
        ea, na = x.embeddings(x.embedding_models()[0])
        eb, nb = y.embeddings(y.embedding_models()[0])
        assert na.tolist() == nb.tolist()
        np.testing.assert_allclose(ea.astype(np.float32), eb.astype(np.float32), atol=2e-3)
        assert x.metadata["build"] == y.metadata["build"]


def test_ray_build_equals_the_local_build(tmp_path, drive_pair, local_map):
    models, logs = drive_pair
    out = tmp_path / "ray.map"
    rep = build_map(logs, out, config=config(models), engine=RayEngine(workers=2, chunk_pairs=24))
    ref = local_map[1]
    assert rep.vnm_evaluations == ref.vnm_evaluations == rep.candidate_pairs > 24
    assert (rep.nodes, rep.edges, rep.components, rep.removed_redundant) == (
        ref.nodes, ref.edges, ref.components, ref.removed_redundant)
    assert rep.engine["name"] == "ray" and rep.engine["workers"] == 2
    assert rep.engine["calls"]["logs"] == rep.engine["calls"]["nodes"] == 2
    assert rep.engine["calls"]["vnm"] >= 2 and rep.engine["calls"]["clip"] >= 1
    assert_same_map(local_map[0], out)
    assert not out.with_name(out.name + ".build-cache.sqlite").exists()
    assert ray.is_initialized()  # a runtime started by the caller is left running


def test_a_killed_vnm_worker_is_restarted_and_the_map_is_the_same(tmp_path, drive_pair, local_map, monkeypatch):
    models, logs = drive_pair
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, str(marker))
    out = tmp_path / "ray.map"
    rep = build_map(logs, out, config=config(models), engine=RayEngine(workers=2, chunk_pairs=24))
    assert marker.exists()  # one worker process exited mid-build
    assert rep.vnm_evaluations == rep.candidate_pairs
    assert_same_map(local_map[0], out)


def test_a_local_checkpoint_resumes_on_ray(tmp_path, drive_pair, local_map):
    from models.vnm import open_vnm

    models, log_dirs = drive_pair
    cfg = config(models)
    mc = cfg.mapping
    out = tmp_path / "m.map"
    logs = [read_log(d) for d in log_dirs]
    nodes = select_build_nodes(logs, min_travel_m=mc.min_travel_m, min_dt_s=mc.min_dt_s, epsilon_s=mc.epsilon_s)
    ts, td, _ = gb.temporal_edges(nodes.t_s, nodes.log_index, nodes.gap_before, frame_rate_hz=4.0)
    pairs = gb.candidate_pairs(nodes.xy_m, k=mc.candidate_k, radius_m=mc.candidate_radius_m,
                               exclude=set(zip(ts.tolist(), td.tolist())))
    half = len(pairs) // 2
    cache = DistanceCache(out.with_name(out.name + ".build-cache.sqlite"), open_vnm(models).model_id)
    vnm_pair_distances(open_vnm(models), logs, nodes, pairs[:half], cache, batch=mc.vnm_batch,
                       progress=lambda k: None)
    cache.close(delete=False)  # the local build "died" here
    rep = build_map(log_dirs, out, config=cfg, engine=RayEngine(workers=2, chunk_pairs=24))
    assert rep.vnm_cached == half and rep.vnm_evaluations == len(pairs) - half
    assert_same_map(local_map[0], out)


def test_gps_fallback_ray_build_equals_local(tmp_path):
    write_synthetic_log(tmp_path / "a", [(0, 0), (80, 0)], seed=1)
    write_synthetic_log(tmp_path / "b", [(40, -40), (40, 40)], seed=2, t0_s=1000.0)
    logs, cfg = [tmp_path / "a", tmp_path / "b"], config(tmp_path / "no-models")
    loc = build_map(logs, tmp_path / "l.map", config=cfg)
    rem = build_map(logs, tmp_path / "r.map", config=cfg, engine=RayEngine(workers=2))
    assert rem.distance_source == loc.distance_source and rem.edges == loc.edges
    with open_map(tmp_path / "l.map") as x, open_map(tmp_path / "r.map") as y:
        assert x.edges.src.tolist() == y.edges.src.tolist() and x.edges.source.tolist() == y.edges.source.tolist()
        np.testing.assert_array_equal(x.edges.weight_steps, y.edges.weight_steps)
        assert [x.images(n) for n in range(len(x.nodes))] == [y.images(n) for n in range(len(y.nodes))]


def test_pair_chunks_never_split_an_observation_node():
    pairs = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [2, 3], [2, 4], [2, 5], [3, 4]], dtype=np.int64)
    chunks = pair_chunks(pairs, max_pairs=3)
    assert [c.tolist() for c in chunks] == [[0, 1, 2], [3], [4, 5, 6], [7]]
    assert np.concatenate(chunks).tolist() == list(range(len(pairs)))


def test_cli_map_build_engine_ray(tmp_path, capsys):
    from robot_app.cli import main

    write_synthetic_log(tmp_path / "a", [(0, 0), (40, 0)], seed=1)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path / "none"}"\n')
    out = tmp_path / "m.map"
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "a"), "--out", str(out), "--engine", "ray",
                 "--workers", "2"]) == 0
    text = capsys.readouterr().out
    assert "ray (local): 2 workers" in text
    with open_map(out) as m:
        assert m.metadata["build_report"]["engine"]["name"] == "ray" and len(m.nodes) == 14
