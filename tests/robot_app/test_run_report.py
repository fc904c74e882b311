"""``robot-app log run-report RECORD``: a route job's run record drawn on its map; the plan's node scores."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.example_map import build_example
from core.mapstore import MapWriter, open_map
from robot_app.cli import main
from robot_app.jobs.run_report import RunRecordError, load_record, timeline
from robot_app.route.grounding_service import node_scores


def test_a_plan_carries_the_best_nodes_scores_per_landmark_bounded_in_size():
    c = np.array([0.1, -np.inf, 0.30049, 0.2, np.nan, 0.3])
    assert node_scores(c) == [[2, 0.3], [5, 0.3], [3, 0.2], [0, 0.1]]  # best first, ties in node order
    assert node_scores(c, limit=2) == [[2, 0.3], [5, 0.3]]
    assert node_scores(np.full(4, -np.inf)) == []  # no node has an image
    assert len(node_scores(np.linspace(0, 1, 5000))) == 300


@pytest.fixture
def run(tmp_path):
    """A 4x4 example map and the record of a drive along its first row (poses 1 m left of the walk)."""
    ex = build_example(4)
    path = tmp_path / "m.map"
    with MapWriter.create(path) as w:
        w.add_nodes(timestamp_s=np.arange(len(ex.xy_m), dtype=np.float64), lat_deg=ex.lat_deg, lon_deg=ex.lon_deg)
        w.add_edges(ex.edges[:, 0], ex.edges[:, 1], ex.weights_steps, source="gps")
    with open_map(path) as m:
        xy = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1)
    walk = [0, 1, 2, 3]
    a, b = xy[walk[0]], xy[walk[-1]]
    d = (b - a) / np.linalg.norm(b - a)
    left = np.array([-d[1], d[0]])
    trace = []
    for j, s in enumerate(np.linspace(0.0, np.linalg.norm(b - a), 41)):
        p = a + s * d + left * 1.0
        trace.append({"t_s": j * 0.5, "driver": "gps" if j < 20 else "vnm", "walk_index": 0, "subgoal": 0,
                      "best_steps": math.nan, "x_m": p[0], "y_m": p[1], "yaw_rad": math.nan, "v_mps": 1.0,
                      "omega_radps": 0.0})
    trace.insert(5, {**trace[5], "x_m": math.nan, "y_m": math.nan})  # no pose for a step: skipped
    rec = {"utc": "20261203T000000Z", "outcome": "reached", "message": "walk reached", "mode": "gps",
           "disengagements": 0, "replans": 0, "failures": [], "duration_s": 20.0, "trace": trace,
           "plan": {"nodes": walk, "length_m": float(np.linalg.norm(b - a)), "instruction": "go past the tree",
                    "landmarks": [{"name": "a tree", "node": 2}],
                    "grounding": {"landmarks": [{"name": "a tree", "best_node": 2,
                                                 "scores": [[2, 0.3], [1, 0.2], [5, 0.1]]}]}}}
    rp = tmp_path / "runs" / "run-1.json"
    rp.parent.mkdir()
    rp.write_text(json.dumps(rec))
    return rp, path, rec, float(np.linalg.norm(b - a))


def test_run_report_draws_the_drive_on_its_map_with_its_figures(run, tmp_path, capsys):
    rp, map_path, _rec, length = run
    assert main(["log", "run-report", str(rp), "--map", str(map_path), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["outcome"] == "reached" and res["driven_m"] == pytest.approx(length, abs=0.05)
    assert res["max_cross_track_m"] == pytest.approx(1.0, abs=0.02)  # the poses ran 1 m beside the walk
    assert [p.rsplit("/", 1)[1] for p in res["files"]] == ["run-1.png", "run-1.html"]  # next to the record
    assert (rp.parent / "run-1.png").read_bytes()[:4] == b"\x89PNG"
    page = (rp.parent / "run-1.html").read_text()
    assert "data:image/png;base64," in page and "cross-track error" in page and "go past the tree" in page
    assert "src=\"http" not in page and not list(rp.parent.glob("*.partial*"))
    assert main(["log", "run-report", str(rp), "--map", str(map_path), "--out", str(tmp_path / "o")]) == 0
    assert "reached" in capsys.readouterr().out and (tmp_path / "o" / "run-1.html").is_file()


def test_timeline_resamples_and_marks_who_drove(run):
    rp, _map, rec, _length = run
    walk_xy = np.array([[0.0, 0.0], [10.0, 0.0]])
    tl = timeline([{"t_s": t, "driver": w, "x_m": x, "y_m": 2.0} for t, w, x in
                   [(0.0, "gps", 0.0), (1.0, "gps", 1.0), (3.0, "vnm", 3.0)]], walk_xy, period_s=0.5)
    assert tl["speed_mps"] == [1.0] * 6 and tl["cross_track_m"] == [2.0] * 7 and tl["driven_m"] == 3.0
    assert tl["drivers"] == [[0.0, "gps"], [3.0, "vnm"]]
    assert load_record(rp)["plan"]["nodes"] == [0, 1, 2, 3]


def test_run_report_refuses_bad_records_and_the_wrong_map(run, tmp_path, capsys):
    rp, map_path, rec, _ = run
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["log", "run-report", str(bad), "--map", str(map_path)]) == 2
    assert "not a readable run record" in capsys.readouterr().err
    bad.write_text(json.dumps({"plan": {}}))
    with pytest.raises(RunRecordError, match="missing outcome, trace"):
        load_record(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**rec, "plan": {**rec["plan"], "nodes": [0, 10**6]}}))
    assert main(["log", "run-report", str(other), "--map", str(map_path)]) == 2
    assert "the map the run was planned on" in capsys.readouterr().err
    assert main(["log", "run-report", str(rp), "--map", str(tmp_path / "none.map")]) == 2
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**rec, "trace": [{"t_s": 0.0}]}))
    assert main(["log", "run-report", str(broken), "--map", str(map_path)]) == 2
    assert "trace row is malformed" in capsys.readouterr().err
    assert not (tmp_path / "broken.png").exists()
