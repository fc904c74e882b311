"""``robot-app eval sim-tune``: development instructions, alpha choice, a tiny end-to-end run, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.search import plan_walk
from robot_app.sim import tuned_alpha, tuned_planner
from robot_app.sim.eval import ORACLE_MISS_LOGP
from robot_app.sim.eval_truth import truth_node_sets
from robot_app.sim.eval_tune import MIN_SEEN_NODES, dev_success, generate_dev_set, pick_alpha, true_graph
from robot_app.sim.views import PHRASES
from robot_app.sim.world import load_world


def _line_map(xy: np.ndarray):
    """A path graph along the given node positions, weights = metres (as time steps)."""
    n = len(xy)
    src = np.concatenate([np.arange(n - 1), np.arange(1, n)])
    dst = np.concatenate([np.arange(1, n), np.arange(n - 1)])
    w = np.hypot(*(xy[dst] - xy[src]).T)
    order = np.lexsort((dst, src))
    src, dst, w = src[order], dst[order], w[order]
    indptr = np.searchsorted(src, np.arange(n + 1)).astype(np.int64)
    return indptr, dst.astype(np.int32), w.astype(np.float32)


@pytest.fixture(scope="module")
def campus_line():
    """Nodes every metre along the campus path x = 0 from y = -88 to 80, heading north."""
    world = load_world("campus")
    y = np.arange(-88.0, 80.0, 1.0)
    xy = np.stack([np.zeros_like(y), y], axis=1)
    yaw = np.full(len(y), np.pi / 2)
    return world, xy, yaw, _line_map(xy)


def _oracle_logp(world, ins, xy, yaw):
    by_cat: dict = {}
    for name, cat, _, _ in world.landmarks():
        by_cat.setdefault(cat, []).append(name)
    logp = np.full((len(xy), len(ins.categories)), ORACLE_MISS_LOGP)
    for k, c in enumerate(ins.categories):
        (nodes,) = truth_node_sets(world, [by_cat[c]], xy, yaw)
        logp[nodes, k] = 0.0
    return logp


def test_true_graph_joins_near_nodes_by_true_distance_only():
    # two parallel paths 10 m apart, nodes every metre, and a crossing node between them at x = 5
    a = np.stack([np.arange(0.0, 10.0), np.zeros(10)], axis=1)
    b = np.stack([np.arange(0.0, 10.0), np.full(10, 10.0)], axis=1)
    xy = np.concatenate([a, b])
    indptr, idx, w = true_graph(xy)
    assert indptr.shape == (21,) and indptr[-1] == idx.size == w.size
    for v in range(20):
        nb = idx[indptr[v]:indptr[v + 1]]
        assert np.all(np.hypot(*(xy[nb] - xy[v]).T) <= 3.0 + 1e-9)
        assert np.all((nb < 10) == (v < 10)), "no edge between paths 10 m apart"
        np.testing.assert_allclose(w[indptr[v]:indptr[v + 1]], np.hypot(*(xy[nb] - xy[v]).T), rtol=1e-6)
    # the walk from node 0 to node 9 runs along its path, 9 m
    r = plan_walk(indptr, idx, w, np.where(np.arange(20) == 9, 0.0, -20.0)[:, None], 0, alpha=0.01)
    assert r.ok and r.nodes[-1] == 9 and np.all(r.nodes < 10) and r.length == pytest.approx(9.0)
    # a wider node spacing widens the link so consecutive nodes stay joined
    far = np.stack([np.arange(0.0, 50.0, 5.0), np.zeros(10)], axis=1)
    ip, ix, _ = true_graph(far)
    assert all(ip[v + 1] > ip[v] for v in range(10))
    with pytest.raises(ValueError, match="xy"):
        true_graph(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="link_m"):
        true_graph(xy, link_m=0.0)


def test_dev_set_truth_defaults_to_the_true_geometry(campus_line):
    world, xy, yaw, csr = campus_line
    assert [d.as_dict() for d in generate_dev_set(world, None, xy, yaw, n=5, seed=3)] == \
        [d.as_dict() for d in generate_dev_set(world, true_graph(xy), xy, yaw, n=5, seed=3)]


def test_dev_set_is_seeded_valid_and_solved_by_a_perfect_category_detector(campus_line):
    world, xy, yaw, csr = campus_line
    dev = generate_dev_set(world, csr, xy, yaw, n=25, seed=3)
    again = generate_dev_set(world, csr, xy, yaw, n=25, seed=3)
    other = generate_dev_set(world, csr, xy, yaw, n=25, seed=4)
    assert len(dev) == 25 and [d.as_dict() for d in dev] == [d.as_dict() for d in again]
    assert [d.as_dict() for d in dev] != [d.as_dict() for d in other]
    cats = {n: c for n, c, _, _ in world.landmarks()}
    for ins in dev:
        assert 2 <= len(ins.categories) <= 4 and len(set(ins.categories)) == len(ins.categories)
        assert "building" not in ins.categories
        for c, phrase, targets, nodes in zip(ins.categories, ins.phrases, ins.targets, ins.truth_nodes):
            assert phrase in PHRASES[c][0] + PHRASES[c][1]
            assert targets and all(cats[t] == c for t in targets)
            seen = truth_node_sets(world, [[t] for t in targets], xy, yaw)
            assert all(n.size >= MIN_SEEN_NODES for n in seen)  # landmarks seen for a few metres at least
            assert np.array_equal(np.unique(np.concatenate(seen)), nodes)
            assert nodes.size > 0 and np.all(np.diff(nodes) > 0)
        # the truth is what the perfect category detector's walk visits: it succeeds, at its own alpha
        assert dev_success(csr, _oracle_logp(world, ins, xy, yaw), ins, 0.01)
        assert json.loads(json.dumps(ins.as_dict()))["id"] == ins.id


def test_dev_success_fails_a_wrong_instance_and_a_missing_landmark(campus_line):
    world, xy, yaw, csr = campus_line
    ins = generate_dev_set(world, csr, xy, yaw, n=1, seed=0)[0]
    logp = np.full((len(xy), len(ins.categories)), ORACLE_MISS_LOGP)
    logp[0, :] = 0.0  # every landmark "seen" only at node 0, where the truth does not see them all
    truth0 = all(0 in set(t.tolist()) for t in ins.truth_nodes)
    assert dev_success(csr, logp, ins, 0.01) == truth0
    assert not dev_success(csr, logp[:, :1], ins, 0.01)  # fewer landmarks planned than the truth has


def test_generate_dev_set_refuses_bad_arguments(campus_line):
    world, xy, yaw, csr = campus_line
    with pytest.raises(ValueError, match="n: expected >= 1"):
        generate_dev_set(world, csr, xy, yaw, n=0, seed=0)
    with pytest.raises(ValueError, match="k_range"):
        generate_dev_set(world, csr, xy, yaw, n=1, seed=0, k_range=(3, 2))
    # a map far from every landmark: nothing to ask for
    far = np.stack([np.full(5, 500.0), np.arange(5.0)], axis=1)
    assert generate_dev_set(world, _line_map(far), far, np.zeros(5), n=3, seed=0) == []


def test_pick_alpha_takes_the_middle_of_the_best_plateau():
    alphas = [0.001, 0.002, 0.005, 0.01, 0.02]
    assert pick_alpha(alphas, [0.1, 0.5, 0.2, 0.1, 0.0]) == pytest.approx(0.002)
    assert pick_alpha(alphas, [0.1, 0.5, 0.5, 0.5, 0.0]) == pytest.approx(0.005)
    assert pick_alpha(alphas, [0.1, 0.6, 0.6, 0.2, 0.0]) == pytest.approx(np.sqrt(0.002 * 0.005))
    # per world: the mean over worlds counts
    both = np.array([[0.9, 0.1], [0.5, 0.6], [0.1, 0.9], [0.0, 0.0], [0.0, 0.0]])
    assert pick_alpha(alphas, both) == pytest.approx(0.002)
    with pytest.raises(ValueError, match="matching"):
        pick_alpha(alphas, [0.1, 0.2])


def test_pick_cap_keeps_the_larger_cap_unless_a_lower_one_is_strictly_better():
    from robot_app.sim.eval_tune import pick_cap

    alphas = [0.005, 0.01, 0.02]
    off = [[0.5, 0.6, 0.5], [0.4, 0.6, 0.4]]  # (worlds, alphas): mean 0.6 at 0.01
    tie = [[0.6, 0.5, 0.4], [0.6, 0.5, 0.4]]  # mean 0.6 at 0.005: a tie
    better = [[0.4, 0.7, 0.6], [0.4, 0.65, 0.6]]  # mean 0.675 at 0.01
    assert pick_cap([1.0, 0.46], alphas, {1.0: off, 0.46: tie}) == (1.0, pytest.approx(0.01))
    assert pick_cap([0.46, 1.0, 0.44], alphas, {1.0: off, 0.46: tie, 0.44: better}) == (0.44, pytest.approx(0.01))
    assert pick_cap([0.46], alphas, {0.46: tie}) == (0.46, pytest.approx(0.005))
    with pytest.raises(ValueError, match="no success rates"):
        pick_cap([1.0, 0.5], alphas, {1.0: off})
    with pytest.raises(ValueError, match="expected shape"):
        pick_cap([1.0], alphas, {1.0: [0.5, 0.6, 0.5]})


def test_cap_grid_values_that_print_alike_share_one_entry(tmp_path):
    """Two caps that print alike (0.46 and 0.4600001) are one cap: they would share a report key."""
    from robot_app.config import load_config
    from robot_app.sim.eval_tune import TuneSettings, run_sim_tune

    with pytest.raises(ValueError, match="max_cosines"):
        run_sim_tune(TuneSettings(worlds=("campus",), out_dir=str(tmp_path), max_cosines=(1.5,)), load_config(None))
    with pytest.raises(ValueError, match="max_cosines"):
        run_sim_tune(TuneSettings(worlds=("campus",), out_dir=str(tmp_path), max_cosines=("x",)), load_config(None))
    assert float(f"{0.4600001:g}") == 0.46  # the normalisation run_sim_tune applies to the grid


def test_tiny_tune_runs_end_to_end(tmp_path, tmp_path_factory, capsys):
    pytest.importorskip("pybullet")
    from robot_app.cli import main
    from tests.sim.test_eval_sim import GOOD, _models_dir

    models = _models_dir(tmp_path_factory)
    capsys.readouterr()
    f = tmp_path / "route.json"
    f.write_text(json.dumps(GOOD))
    out = tmp_path / "tune"
    args = ["eval", "sim-tune", "--world", "campus", "--instructions", str(f), "--models", str(models),
            "--out", str(out), "--n", "8", "--alphas", "0.002,0.02", "--max-cosines", "1,0.46,0.4600001"]
    assert main(args + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    w = report["worlds"]["campus"]
    assert report["alphas"] == [0.002, 0.02] and 0.002 - 1e-12 <= report["alpha"] <= 0.02 + 1e-12
    assert report["max_cosines"] == [1.0, 0.46] and report["max_cosine"] in (1.0, 0.46)
    by_cap = w["success_rate_by_max_cosine"]
    assert set(by_cap) == {"1", "0.46"} and w["success_rate"] == by_cap[f"{report['max_cosine']:g}"]
    # the chosen cap's best mean success is the best of the grid; a tie keeps the larger cap (off)
    assert max(by_cap[f"{report['max_cosine']:g}"]) == max(max(r) for r in by_cap.values())
    if max(by_cap["1"]) == max(by_cap["0.46"]):
        assert report["max_cosine"] == 1.0
    assert 1 <= w["instructions"] <= 8 and len(w["dev_set"]) == w["instructions"]
    assert len(w["success_rate"]) == 2 and all(0.0 <= x <= 1.0 for x in w["success_rate"])
    assert Path(report["chart"]).stat().st_size > 1000 and Path(report["report"]).is_file()
    assert main(args) == 0  # the table; the map is reused
    text = capsys.readouterr().out
    assert "chosen alpha" in text and "[planner] alpha" in text and "per cosine cap" in text
    # --write records it with (a copy of) the models; eval sim then plans with it unless --alpha is given
    mine = tmp_path / "models"
    shutil.copytree(models, mine)
    assert main(args[:args.index("--models")] + ["--models", str(mine)] + args[args.index("--models") + 2:]
                + ["--write"]) == 0
    assert "written to" in capsys.readouterr().out
    assert tuned_alpha(mine) == pytest.approx(json.loads((out / "sim-tune.json").read_text())["alpha"])
    assert tuned_planner(mine)["max_cosine"] == json.loads((out / "sim-tune.json").read_text())["max_cosine"]
    ev = ["eval", "sim", "--world", "campus", "--instructions", str(f), "--models", str(mine),
          "--out", str(tmp_path / "ev"), "--no-drive", "--json", "--limit", "1"]
    assert main(ev) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["alpha"] == pytest.approx(tuned_alpha(mine)) and got["alpha_source"].startswith("planner-tuning")
    assert got["max_cosine"] == tuned_planner(mine)["max_cosine"]
    assert got["max_cosine_source"].startswith("planner-tuning")
    assert main(ev + ["--max-cosine", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["max_cosine"] == 1.0 and got["max_cosine_source"] == "--max-cosine"
    assert main(ev + ["--max-cosine", "2"]) == 2
    assert main(ev + ["--alpha", "0.3"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["alpha"] == 0.3 and got["alpha_source"] == "--alpha"


def test_tuned_alpha_only_for_the_models_it_was_chosen_for(tmp_path, caplog):
    from robot_app.sim import TUNING_FILE

    def sidecar(name, digest):
        (tmp_path / name).write_text(json.dumps({"sha256": digest}))

    assert tuned_alpha(tmp_path) is None  # no tuning file
    sidecar("clip-image.onnx.json", "aa")
    sidecar("vnm.onnx.json", "bb")
    f = tmp_path / TUNING_FILE
    f.write_text(json.dumps({"alpha": 0.02, "clip_image_sha256": "aa", "vnm_sha256": "bb"}))
    assert tuned_alpha(tmp_path) == 0.02
    sidecar("vnm.onnx.json", "cc")  # another VNM installed since: other time steps, another alpha
    assert tuned_alpha(tmp_path) is None and "another vnm" in caplog.text
    sidecar("vnm.onnx.json", "bb")
    for bad in ("{", json.dumps({"alpha": -1, "clip_image_sha256": "aa", "vnm_sha256": "bb"}),
                json.dumps({"alpha": "x"}), json.dumps({"clip_image_sha256": "aa"})):
        f.write_text(bad)
        assert tuned_alpha(tmp_path) is None
    # the cosine cap: absent in files written before it was tuned (off), else checked like alpha
    f.write_text(json.dumps({"alpha": 0.02, "clip_image_sha256": "aa", "vnm_sha256": "bb"}))
    assert tuned_planner(tmp_path) == {"alpha": 0.02, "max_cosine": 1.0}
    f.write_text(json.dumps({"alpha": 0.02, "max_cosine": 0.46, "clip_image_sha256": "aa", "vnm_sha256": "bb"}))
    assert tuned_planner(tmp_path) == {"alpha": 0.02, "max_cosine": 0.46}
    for cap in (1.5, "x", None, True):
        f.write_text(json.dumps({"alpha": 0.02, "max_cosine": cap, "clip_image_sha256": "aa", "vnm_sha256": "bb"}))
        assert tuned_planner(tmp_path) is None and tuned_alpha(tmp_path) is None


def test_sim_tune_refuses_a_bad_cap_grid(capsys):
    from robot_app.cli import main

    for bad in ("1.5", "x", ""):
        assert main(["eval", "sim-tune", "--max-cosines", bad]) == 2
        assert "--max-cosines" in capsys.readouterr().err


def test_tune_cli_refuses_bad_input(tmp_path, capsys):
    from robot_app.cli import main

    for bad, msg in ((["--n", "0"], "--n 0"), (["--alphas", "x,1"], "--alphas"), (["--alphas", "0,0.1"], "> 0"),
                     (["--logit-scale", "-2"], "--logit-scale -2"),
                     (["--models", str(tmp_path / "none")], "no such folder"),
                     (["--instructions", str(tmp_path / "none.json")], "no such file")):
        assert main(["eval", "sim-tune", "--out", str(tmp_path / "o")] + bad) == 2
        assert msg in capsys.readouterr().err
