"""Generated worlds (robot_app.sim.worldgen): valid, reproducible, complete, explorable; street graphs and
exploration routes (robot_app.sim.streets); the instruction sets; ``robot-app sim generate``."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from robot_app.cli import main
from robot_app.sim.eval_instructions import load_instructions
from robot_app.sim.streets import covering_walk, exploration_route, street_graph, walk_points
from robot_app.sim.world import BUILDING_COLOURS, CATALOGUE, load_world, object_footprint_m
from robot_app.sim.worldgen import (
    DROPOUT_START_CLEARANCE_M,
    LAYOUTS,
    LOOKALIKES,
    SEED_RANGES,
    generate,
    generate_world,
    seeds,
    split_of,
)

SEEDS = list(range(20)) + [SEED_RANGES["train"][0], SEED_RANGES["dev"][0], SEED_RANGES["test"][-1]]


@pytest.fixture(scope="module")
def generated():
    return {s: generate(s) for s in SEEDS}


def _seg_dist(pts: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """(P,) distance (m) of each point to the polyline."""
    a, d = poly[:-1], np.diff(poly, axis=0)
    t = np.clip(((pts[:, None] - a[None]) * d[None]).sum(-1) / np.maximum((d * d).sum(-1), 1e-12)[None], 0, 1)
    return np.linalg.norm(a[None] + t[..., None] * d[None] - pts[:, None], axis=2).min(axis=1)


def _corners(b) -> np.ndarray:
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    lx, ly = b.size_m[0] / 2, b.size_m[1] / 2
    return np.array([(b.center[0] + c * u - s * v, b.center[1] + s * u + c * v)
                     for u, v in ((-lx, -ly), (lx, -ly), (lx, ly), (-lx, ly))])


def _rect_dist(pts: np.ndarray, b) -> np.ndarray:
    """(P,) distance (m) of each point to building ``b``'s footprint (0 inside)."""
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    dx, dy = pts[:, 0] - b.center[0], pts[:, 1] - b.center[1]
    u = np.abs(c * dx + s * dy) - b.size_m[0] / 2
    v = np.abs(-s * dx + c * dy) - b.size_m[1] / 2
    return np.hypot(np.maximum(u, 0), np.maximum(v, 0))


def test_generated_worlds_pass_the_world_files_validation(generated, tmp_path):
    for seed, g in generated.items():
        p = tmp_path / f"w{seed}.toml"
        p.write_text(g.text, encoding="utf-8")
        w = load_world(p)  # what `sim check` does
        assert w.name == f"gen-{seed}" and w.paths and w.exploration_route and w.gps_dropouts
        assert w.landmarks() == g.world.landmarks()


def test_same_seed_gives_the_same_bytes_and_seeds_differ(generated):
    assert generate_world(3) == generated[3].text
    texts = {g.text for g in generated.values()}
    assert len(texts) == len(generated)
    assert generate_world(3, name="other") != generated[3].text


def test_every_category_appears_with_repeats_and_look_alike_neighbours(generated):
    for seed, g in generated.items():
        w = g.world
        cats = Counter(c for _, c, _, _ in w.landmarks())
        assert set(CATALOGUE) <= set(cats) and set(BUILDING_COLOURS) <= set(cats), seed
        assert sum(cats[c] > 1 for c in CATALOGUE) >= 6, seed  # repeats in different places
        # distractors: a look-alike pair stands within 20 m of each other
        near = [(a, b) for a, b in LOOKALIKES for oa in w.objects for ob in w.objects
                if (oa.category, ob.category) == (a, b) and math.dist(oa.at, ob.at) <= 20.0]
        assert near, seed
        assert len({o.scale for o in w.objects}) > 10 and len({b.rgb for b in w.buildings}) == len(w.buildings)


def test_layouts_anchors_and_junction_kinds_vary(generated):
    assert {g.layout for g in generated.values()} == set(LAYOUTS)
    lat = [g.world.anchor_latlon[0] for g in generated.values()]
    lon = [g.world.anchor_latlon[1] for g in generated.values()]
    assert min(lat) < 0 < max(lat) and min(lon) < 0 < max(lon)  # both hemispheres, both sides of Greenwich
    degrees = Counter(int(d) for g in generated.values() for d in g.graph.degree())
    assert degrees[1] and degrees[3] and degrees[4]  # dead ends, T-junctions, crossroads
    for seed, g in generated.items():
        assert g.graph.connected() and len(g.graph.junctions()) >= 1, seed
        assert len(g.graph.edges) - len(g.graph.nodes) + 1 >= 1, seed  # at least one loop


def test_things_stand_beside_the_streets_without_overlapping(generated):
    for seed, g in generated.items():
        w = g.world
        polys = [(np.asarray(p.points), p.width_m) for p in w.paths]
        half = np.array(w.extent_m) / 2
        for o in w.objects:
            fp = object_footprint_m(o)
            for poly, width in polys:
                d = float(_seg_dist(np.array([o.at]), poly)[0])
                if fp > 0:  # obstacles beside, not on, the paved width, and clear of the driven centreline
                    assert d >= width / 2 + fp and d >= fp + 0.9, (seed, o.name, d)
                else:  # drive-over covers lie in the street, off its centreline
                    assert d >= 0.5, (seed, o.name)
        for i, a in enumerate(w.objects):
            for b in w.objects[i + 1:]:
                assert math.dist(a.at, b.at) >= object_footprint_m(a) + object_footprint_m(b) + 0.3, (seed, a.name)
        for i, b in enumerate(w.buildings):
            corners = _corners(b)
            assert np.all(np.abs(corners) <= half), (seed, b.name)
            for poly, width in polys:
                n = max(2, int(np.linalg.norm(np.diff(poly, axis=0), axis=1).sum() / 0.5))
                s = np.concatenate([[0], np.cumsum(np.linalg.norm(np.diff(poly, axis=0), axis=1))])
                q = np.linspace(0, s[-1], n)
                samples = np.stack([np.interp(q, s, poly[:, 0]), np.interp(q, s, poly[:, 1])], 1)
                assert _rect_dist(samples, b).min() >= width / 2 + 2.5, (seed, b.name)
            for other in w.buildings[i + 1:]:  # corners outside each other: no overlap of these boxes
                assert _rect_dist(_corners(other), b).min() >= 1.0, (seed, b.name, other.name)
                assert _rect_dist(corners, other).min() >= 1.0, (seed, b.name, other.name)
            assert _rect_dist(np.array([o.at for o in w.objects]), b).min() >= 0.3, (seed, b.name)


def test_start_dropouts_and_route(generated):
    for seed, g in generated.items():
        w = g.world
        x, y = w.start[:2]
        assert min(float(_seg_dist(np.array([[x, y]]), np.asarray(p.points))[0]) for p in w.paths) < 0.05, seed
        assert tuple(w.exploration_route[0]) == (x, y), seed
        junctions = g.graph.junctions()
        for z in w.gps_dropouts:
            assert math.dist(z.center, (x, y)) - z.radius_m >= DROPOUT_START_CLEARANCE_M, seed
            assert np.all(np.hypot(*(junctions - np.asarray(z.center)).T) > z.radius_m), seed
            assert any(_seg_dist(np.array([z.center]), np.asarray(p.points))[0] < z.radius_m for p in w.paths)


def _covers(world, route, tol_m=2.0) -> bool:
    r = np.asarray(route, dtype=np.float64)
    for p in world.paths:
        poly = np.asarray(p.points)
        s = np.concatenate([[0], np.cumsum(np.linalg.norm(np.diff(poly, axis=0), axis=1))])
        q = np.arange(0, s[-1] + 1e-9, 1.0)
        samples = np.stack([np.interp(q, s, poly[:, 0]), np.interp(q, s, poly[:, 1])], 1)
        if _seg_dist(samples, r).max() > tol_m:
            return False
    return True


def _closes_a_loop(graph, walk, start) -> bool:
    """Whether the walk comes back to a node along a way that is not only its own tracks retraced
    (an edge driven an odd number of times in between)."""
    nodes = [start]
    for k, rev in walk:
        e = graph.edges[k]
        nodes.append(e.a if rev else e.b)
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            if nodes[j] == nodes[i] and any(c % 2 for c in Counter(k for k, _ in walk[i:j]).values()):
                return True
    return False


def test_exploration_route_drives_every_street_and_closes_loops(generated):
    for seed, g in generated.items():
        w = g.world
        assert _covers(w, w.exploration_route), seed
        start = int(np.argmin(np.hypot(*(g.graph.nodes - np.asarray(w.start[:2])).T)))
        assert [tuple(p) for p in w.exploration_route] == walk_points(g.graph, start), seed
        walk = covering_walk(g.graph, start)
        assert {k for k, _ in walk} == set(range(len(g.graph.edges))), seed
        assert _closes_a_loop(g.graph, walk, start), seed
        assert exploration_route(w) == [tuple(p) for p in w.exploration_route]


def test_street_graph_and_route_of_the_shipped_worlds():
    campus = load_world("campus")
    g = street_graph(campus)
    assert sorted(map(tuple, g.junctions().tolist())) == [(0.0, -40.0), (0.0, 0.0), (0.0, 40.0)]  # T-junctions
    assert len(g.dead_ends()) == 3 and g.connected()
    route = exploration_route(campus)  # no [exploration] table: the covering walk from the start
    assert route[0] == (0.0, -90.0) and _covers(campus, route)
    industrial = load_world("industrial")
    gi = street_graph(industrial)
    assert len(gi.dead_ends()) == 0 and sorted(gi.degree().tolist())[-1] == 3
    assert _covers(industrial, exploration_route(industrial))
    with pytest.raises(ValueError, match="snap_m"):
        street_graph(campus, snap_m=0.0)


def test_seed_ranges_are_named_and_disjoint():
    names = list(SEED_RANGES)
    assert {"train", "dev", "test"} <= set(names)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not set(SEED_RANGES[a]) & set(SEED_RANGES[b]), (a, b)
    assert seeds("dev") is SEED_RANGES["dev"] and split_of(SEED_RANGES["test"][5]) == "test" and split_of(5) is None
    with pytest.raises(KeyError, match="known: train, dev, test"):
        seeds("validation")


def test_bad_arguments_raise():
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="seed"):
            generate(bad)
    with pytest.raises(ValueError, match="name"):
        generate(1, name='a "quoted" name')
    with pytest.raises(ValueError, match="layout"):
        generate(1, layout="spiral")
    assert generate(1, layout="ring").layout == "ring"


def test_generated_worlds_work_with_the_demo_scenarios(generated):
    from robot_app.demo.scenario import scenario_for

    for seed in range(10):
        for quick in (False, True):
            sc = scenario_for(generated[seed].world, quick=quick)
            assert len(sc.route) >= 2 and sc.instruction.startswith("Go past the"), seed


def test_cli_generate_writes_a_file_that_sim_check_accepts(tmp_path, capsys):
    out = tmp_path / "w.toml"
    assert main(["sim", "generate", "--seed", "11", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["name"] == "gen-11" and summary["objects"] > 20 and out.read_text() == generate_world(11)
    assert main(["sim", "check", str(out)]) == 0
    capsys.readouterr()
    assert main(["sim", "generate", "--seed", "12", "--out", str(out)]) == 2  # refuses to replace it
    err = capsys.readouterr().err
    assert "exists" in err and "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == generate_world(11)
    assert main(["sim", "generate", "--seed", "12", "--out", str(out), "--overwrite"]) == 0
    assert out.read_text() == generate_world(12)


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-3"], "--seed: expected an integer >= 0"),
    (["--layout", "spiral"], "--layout: expected one of grid, ring, curves"),
    (["--name", 'a"b'], "name: expected a non-empty name"),
    (["--out", "/nonexistent-folder/w.toml"], "cannot write: no such folder"),
])
def test_cli_generate_bad_input_is_one_line_with_exit_2(tmp_path, capsys, argv, message):
    args = ["sim", "generate", "--seed", "1", "--out", str(tmp_path / "w.toml")]
    for k in range(0, len(argv), 2):  # replace or add the flag
        if argv[k] in args:
            args[args.index(argv[k]) + 1] = argv[k + 1]
        else:
            args += argv[k:k + 2]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and err.startswith("robot-app: error:")
    assert not (tmp_path / "w.toml").exists()


def test_instruction_set_for_a_generated_world(tmp_path, capsys):
    world_file, ins_file = tmp_path / "w.toml", tmp_path / "w-instructions.json"
    assert main(["sim", "generate", "--seed", "21", "--out", str(world_file), "--instructions", str(ins_file),
                 "--n", "6"]) == 0
    capsys.readouterr()
    world = load_world(world_file)
    iset = load_instructions(ins_file, world=world)  # as `eval sim --world W --instructions I` reads it
    assert len(iset.instructions) == 6 and iset.route == world.exploration_route
    for ins in iset.instructions:
        assert 2 <= len(ins.landmarks) <= 4 and ins.text.endswith(".")
        for lm in ins.landmarks:
            assert lm.phrase in ins.text
    again = tmp_path / "again.json"
    assert main(["sim", "generate", "--seed", "21", "--out", str(tmp_path / "w2.toml"), "--instructions",
                 str(again), "--n", "6"]) == 0
    assert again.read_bytes() == ins_file.read_bytes()


def test_a_generated_world_renders_and_explores(tmp_path):
    pytest.importorskip("pybullet")
    from core.tlog import read_log
    from robot_app.sim.explore import record_exploration
    from robot_app.sim.render import WorldRenderer

    w = generate(4).world
    with WorldRenderer(w, width=32, height=24) as ren:
        img = ren.render(*w.start)
    assert img.shape == (24, 32, 3) and img.std() > 5
    route = np.asarray(w.exploration_route)
    seg = np.linalg.norm(np.diff(route, axis=0), axis=1)
    end = route[0] + (route[1] - route[0]) * min(1.0, 20.0 / seg[0])  # the first 20 m of the route
    rep = record_exploration(w, [route[0].tolist(), end.tolist()], tmp_path / "log", rate_hz=2.0, width=16,
                             height=12, speed_mps=1.5)
    assert rep.reached_end and not rep.collisions and rep.frames == len(read_log(tmp_path / "log").frame_t_s) > 5


def test_sim_record_drives_the_worlds_exploration_route_by_default(tmp_path, capsys):
    pytest.importorskip("pybullet")
    world = tmp_path / "w.toml"
    world.write_text('[world]\nname = "tiny"\nextent_m = [60.0, 60.0]\nanchor_latlon = [-33.9, 151.2]\n'
                     'start = [0.0, -20.0, 90.0]\n[exploration]\nroute = [[0.0, -20.0], [0.0, -8.0]]\n'
                     '[[paths]]\nname = "main"\npoints = [[0.0, -25.0], [0.0, 25.0]]\n')
    assert main(["sim", "record", "--world", str(world), "--out", str(tmp_path / "log"), "--size", "16x12",
                 "--speed", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["reached_end"] and 10.0 <= rep["distance_m"] <= 14.0
    world.write_text(world.read_text().replace("[exploration]\nroute = [[0.0, -20.0], [0.0, -8.0]]\n", ""))
    assert main(["sim", "record", "--world", str(world), "--out", str(tmp_path / "log2")]) == 2
    assert "no [exploration] route; give --route" in capsys.readouterr().err
