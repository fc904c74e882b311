"""The demo's start and route on any world: a start with a GPS fix, a route through a junction, an instruction
whose best walk is a detour, and the one-line failure of a start without a fix (no drive, no renderer)."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import numpy as np
import pytest

from robot_app.config import Config
from robot_app.demo.routes import (
    START_MARGIN_M,
    chain_routes,
    demo_start,
    dropout_zone_at,
    junction_routes,
    no_gps_fix_message,
    path_network,
)
from robot_app.demo.scenario import (
    DemoInputError,
    Scenario,
    _samples,
    _walk_detour_m,
    check_start,
    derive_scenario,
    scenario_for,
)
from robot_app.demo.stages import StageFailed
from robot_app.demo.truth import landmark_truth
from robot_app.route.landmark_parsing import parse_instruction
from robot_app.sim.world import load_world

#: a main path north with a spur west at (0, 0); the world's start (0, -85) lies in the zone around (0, -80)
WORLD = """
[world]
name = "dropout-start"
extent_m = [200.0, 200.0]
anchor_latlon = [37.0, -122.0]
start = [0.0, -85.0, 90.0]

[[paths]]
name = "main"
points = [[0.0, -90.0], [0.0, 80.0]]

[[paths]]
name = "spur"
points = [[0.0, 0.0], [-60.0, 0.0]]

[[objects]]
category = "fire hydrant"
at = [2.5, -40.0]

[[objects]]
category = "mailbox"
at = [-2.5, -20.0]

[[objects]]
category = "picnic table"
at = [-30.0, 2.5]

[[objects]]
category = "traffic cone"
at = [2.5, 35.0]

[[gps_dropouts]]
center = [0.0, -80.0]
radius_m = 10.0

[[gps_dropouts]]
center = [50.0, 50.0]
radius_m = 5.0
"""


@pytest.fixture
def world(tmp_path):
    p = tmp_path / "dropout-start.toml"
    p.write_text(WORLD)
    return load_world(p)


def _outside_every_zone(world, x, y, margin=0.0):
    return all(math.hypot(x - z.center[0], y - z.center[1]) > z.radius_m + margin for z in world.gps_dropouts)


def test_the_start_moves_out_of_the_dropout_zone_along_the_path(world):
    assert dropout_zone_at(world, *world.start[:2]) == 0
    x, y, yaw = demo_start(world)
    assert _outside_every_zone(world, x, y, margin=START_MARGIN_M - 1e-6)
    assert x == pytest.approx(0.0) and y == pytest.approx(-80.0 + 10.0 + START_MARGIN_M, abs=0.51)  # nearest
    assert yaw == pytest.approx(math.pi / 2)  # along the path, the way the world's start faces


def test_the_worlds_start_is_kept_when_it_has_a_fix():
    campus = load_world("campus")
    assert demo_start(campus) == pytest.approx((0.0, -85.0, math.pi / 2))


def test_a_start_without_a_fix_is_one_line_naming_the_zone(world):
    msg = no_gps_fix_message(world, *world.start[:2])
    assert "\n" not in msg and msg.startswith("no GPS fix at the start (0.0, -85.0) m of world 'dropout-start'")
    assert "gps_dropouts[0] (centre (0, -80) m, radius 10 m)" in msg
    # outside every zone (a receiver that stays silent): says so, and how long it waited
    msg = no_gps_fix_message(world, 0.0, -50.0, waited_s=20.0)
    assert "no GPS fix at the start" in msg and "within 20 s" in msg and "outside every GPS dropout zone" in msg
    with pytest.raises(DemoInputError) as exc:  # a scenario starting in the zone is refused before any work
        check_start(world, Scenario(world.name, ((0.0, -85.0), (0.0, -40.0)), "Go to the fire hydrant."))
    assert "no GPS fix at the start" in str(exc.value) and "gps_dropouts[0]" in str(exc.value)


def test_every_path_in_a_zone_is_refused(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(WORLD.replace("radius_m = 10.0", "radius_m = 500.0"))
    with pytest.raises(DemoInputError, match="no start with a GPS fix"):
        demo_start(load_world(p))


def test_path_network_splits_at_junctions(world):
    net = path_network(world)
    junctions = [tuple(net.xy[v]) for v in range(len(net.xy)) if net.degree(v) >= 3]
    assert junctions == [(0.0, 0.0)] and len(net.edges) == 3
    assert sorted(net.length_m.tolist()) == [60.0, 80.0, 90.0]


def test_derived_scenario_starts_with_gps_and_detours_through_the_junction(world):
    sc = scenario_for(world)  # not a shipped world: derived
    x, y, _ = sc.start
    assert _outside_every_zone(world, x, y) and "gps_dropouts[0]" in sc.start_note
    check_start(world, sc)
    pts = np.asarray(sc.route)
    assert any(np.allclose(p, (0.0, 0.0)) for p in pts)  # through the junction
    landmarks, _ = parse_instruction(sc.instruction, config=Config(), parser="rules")
    assert len(landmarks) == 3, sc.instruction
    xy, yaw, arc = _samples(pts)
    truth = landmark_truth(world, np.column_stack([xy, yaw]), landmarks, hfov_deg=90.0)
    firsts = [int(t.nodes.min()) for t in truth]
    assert firsts == sorted(firsts)  # seen in driving order
    assert int(truth[-1].nodes.max()) <= len(xy) - 20  # room for the task job's places after the goal
    # the landmark of the branch is seen only off the way from the start to the goal: the best walk is longer
    assert _walk_detour_m(xy, yaw, arc, [t.nodes for t in truth]) >= 10.0
    quick = scenario_for(world, quick=True)
    assert _outside_every_zone(world, *quick.start[:2])
    assert len(parse_instruction(quick.instruction, config=Config(), parser="rules")[0]) == 2


def test_route_candidates_from_the_start(world):
    start = demo_start(world)
    routes = junction_routes(world, start)
    assert len(routes) == 1 and routes[0].junction == (0.0, 0.0)
    # out along the spur and back, then straight on north (where the map joins the approach and the onward leg)
    assert routes[0].points.tolist() == [[0.0, start[1]], [0.0, 0.0], [-40.0, 0.0], [0.0, 0.0], [0.0, 70.0]]
    for r in routes:
        assert r.legs["approach"] == 0.0 < r.legs["branch"] < r.legs["back"] < r.legs["onward"] < r.length_m
    chain = chain_routes(world, start, length_m=70.0)
    assert chain[0].points[-1] == pytest.approx((0.0, start[1] + 70.0))  # straight on, the start's way first


def test_walk_detour_on_a_spur():
    """Along x to 20 m with a spur north at x = 10 m driven out and back: a set seen only at the spur's end
    costs twice its length; passes that meet facing each other are not joined (the VNM would not)."""
    xy = np.array([(x, 0.0) for x in range(11)] + [(10.0, y) for y in range(1, 11)]
                  + [(10.0, y) for y in range(9, -1, -1)] + [(x, 0.0) for x in range(11, 21)], dtype=float)
    yaw = np.array([0.0] * 10 + [math.pi / 2] * 11 + [-math.pi / 2] * 10 + [0.0] * 10)
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])
    spur_top, end = np.array([20]), np.array([len(xy) - 1])
    # the pass along x joins itself across the spur (facing the same way): the end is 20 m away, not 40
    assert _walk_detour_m(xy, yaw, arc, [end]) == pytest.approx(0.0, abs=0.1)
    assert _walk_detour_m(xy, yaw, arc, [spur_top, end]) == pytest.approx(20.0, abs=1.5)
    # on south after the spur instead: the approach (facing east) and the onward leg (facing south) are not
    # joined, every walk to the end goes up the spur: no detour
    xy2 = np.concatenate([xy[:31], [(10.0, -y) for y in range(1, 11)]])
    yaw2 = np.concatenate([yaw[:31], [-math.pi / 2] * 10])
    arc2 = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy2, axis=0), axis=1))])
    assert _walk_detour_m(xy2, yaw2, arc2, [spur_top, np.array([len(xy2) - 1])]) == pytest.approx(0.0, abs=0.1)


@pytest.mark.parametrize("name", ["campus", "industrial"])
def test_shipped_scenarios_start_with_a_fix_and_stay_hand_picked(name):
    from robot_app.demo.scenario import _SCENARIOS

    world = load_world(name)
    for quick in (False, True):
        sc = scenario_for(world, quick=quick)
        assert sc == _SCENARIOS[(name, quick)]
        check_start(world, sc)
    # the derived one (a copy with other geometry would get it) also goes through a junction with a detour
    sc = derive_scenario(world)
    xy, yaw, arc = _samples(np.asarray(sc.route))
    landmarks, _ = parse_instruction(sc.instruction, config=Config(), parser="rules")
    truth = landmark_truth(world, np.column_stack([xy, yaw]), landmarks, hfov_deg=90.0)
    assert _walk_detour_m(xy, yaw, arc, [t.nodes for t in truth]) >= 10.0


def test_an_edited_copy_of_a_shipped_world_gets_a_derived_scenario(tmp_path):
    from robot_app.sim.world import shipped_worlds

    text = shipped_worlds()["campus"].read_text()
    same, edited = tmp_path / "same.toml", tmp_path / "edited.toml"
    same.write_text(text)
    edited.write_text(text.replace("start = [0.0, -85.0, 90.0]", "start = [-70.0, 40.0, 90.0]"))
    assert scenario_for(load_world(same)) == scenario_for(load_world("campus"))
    sc = scenario_for(load_world(edited))  # its start lies in the west spur's dropout zone
    assert sc.start_note and "gps_dropouts[0]" in sc.start_note
    assert dropout_zone_at(load_world(edited), *sc.start[:2]) is None


# -- the onboard app's wait for a fix --------------------------------------------------------------------------
class _FakeApp:
    """The parts of robot_app.service.app.App that _wait_ready reads: everything up but the GPS."""

    def __init__(self):
        self.ui = SimpleNamespace(port=8080)
        self.camera = SimpleNamespace(latest=object())

    def status_dict(self):
        return {"mcu_link": True, "gps": None}


def _wait(world, xy, **kw):
    from robot_app.demo.onboard import _wait_ready

    async def go():
        never = asyncio.get_running_loop().create_future()
        try:
            return await _wait_ready(_FakeApp(), never, world=world, start_xy=xy, **kw)
        finally:
            never.cancel()

    return asyncio.run(go())


def test_no_fix_fails_in_one_line_not_a_status_dump(world):
    with pytest.raises(StageFailed) as exc:
        _wait(world, (0.0, -85.0), fix_timeout_s=0.3)
    msg = str(exc.value)
    assert msg.startswith("no GPS fix at the start") and "gps_dropouts[0]" in msg and "'gps'" not in msg
    with pytest.raises(StageFailed, match="no GPS fix at the start .* the receiver reported none within"):
        _wait(world, (0.0, -50.0), fix_timeout_s=0.3)
