"""The route job checks its map's graph once per map, not once per plan: the map is re-opened for every
plan (and re-plan), the checked CSR arrays are kept while the opened map's verified graph is the same
(docs/benchmarks.md, "Validating a map once")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core import search
from core.example_map import build_example
from core.mapstore import MapWriter
from robot_app.commands import CommandMux, Source
from robot_app.config import Config
from robot_app.interfaces import Sensors
from robot_app.jobs.mission import MissionExecutive


def write_example_map(path, *, grid: int = 3, overwrite: bool = False):
    ex = build_example(grid)
    with MapWriter.create(path, overwrite=overwrite) as w:
        w.add_nodes(timestamp_s=np.arange(len(ex.xy_m), dtype=np.float64), lat_deg=ex.lat_deg, lon_deg=ex.lon_deg)
        w.add_edges(ex.edges[:, 0], ex.edges[:, 1], ex.weights_steps, source="gps")
    return len(ex.xy_m)


@pytest.fixture
def graph_checks(monkeypatch):
    """Counts the graph validations (the one-pass CSR check every unchecked graph goes through)."""
    calls = []
    real = search.kern.csr_check

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(search.kern, "csr_check", counting)
    return calls


def mission_on(path, tmp_path, **mission) -> MissionExecutive:
    base = Config()
    cfg = dataclasses.replace(base, paths=dataclasses.replace(base.paths, logs_dir=str(tmp_path)),
                              mission=dataclasses.replace(base.mission, map_file=str(path), **mission))
    return MissionExecutive(cfg, Sensors(), CommandMux({Source.AUTONOMY: 0.25, Source.TELEOP: 0.25}), models=None)


def test_the_route_job_checks_a_maps_graph_once_for_many_plans(tmp_path, graph_checks, monkeypatch):
    path = tmp_path / "current.sqlite"
    n = write_example_map(path)
    mission = mission_on(path, tmp_path)
    first = mission._plan_blocking(None, 0, goal=n - 1)
    assert first["status"] == "ok" and first["nodes"][-1] == n - 1
    assert len(graph_checks) == 1  # the first plan checked the map's graph
    again = mission._plan_blocking(None, 0, goal=n - 1)
    other = mission._plan_blocking(None, n - 1, goal=0)
    assert again["nodes"] == first["nodes"] and other["nodes"][-1] == 0
    monkeypatch.setattr(mission, "_start_node", lambda m, start: 0)  # no GPS fix here
    mission.replan_from_here([n // 2, n - 1])
    assert mission.progress["replanned_walk"][-1] == n - 1
    assert len(graph_checks) == 1  # three more plans and a re-plan, each on a freshly opened map: no re-check

    # the walk is the one planned on the raw arrays, checked as before
    with mission.open_map() as m:
        indptr, indices, weights = (np.array(a) for a in m.csr())
    logp = np.full((n, 1), -np.inf)
    logp[n - 1, 0] = 0.0
    raw = search.plan_walk(indptr, indices, weights, logp, 0, alpha=mission.config.planner.alpha)
    assert raw.nodes.tolist() == first["nodes"]


def test_a_rebuilt_map_gets_its_graph_checked_again(tmp_path, graph_checks):
    path = tmp_path / "current.sqlite"
    write_example_map(path, grid=3)
    mission = mission_on(path, tmp_path)
    mission._plan_blocking(None, 0, goal=5)
    assert len(graph_checks) == 1
    n = write_example_map(path, grid=4, overwrite=True)  # the Record screen built a new current map
    walk = mission._plan_blocking(None, 0, goal=n - 1)
    assert walk["nodes"][-1] == n - 1 and len(graph_checks) == 2
    mission._plan_blocking(None, 0, goal=n - 1)
    assert len(graph_checks) == 2


def test_a_map_without_content_hashes_is_checked_on_every_open(tmp_path, graph_checks):
    import sqlite3

    path = tmp_path / "old.sqlite"
    write_example_map(path)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta WHERE key = 'content_sha256'")  # written before content hashes
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    conn.commit()
    conn.close()
    mission = mission_on(path, tmp_path, allow_unverified_maps=True)
    mission._plan_blocking(None, 0, goal=5)
    mission._plan_blocking(None, 0, goal=5)
    assert len(graph_checks) == 2  # nothing verifies its rows between opens: no identity to keep it by
