import math

import numpy as np
import pytest

from core.control import (
    WindowLocaliser,
    advance_along,
    faces_travel,
    line_follow_velocity,
    near_sharp_turns,
    passed_end,
    polyline_distance,
    waypoint_to_velocity,
    wrap_angle,
)


def test_waypoint_rule_matches_gnm():
    v, w = waypoint_to_velocity(0.5, 0.0, dt_s=1.0, max_v_mps=2.0, max_omega_radps=4.0)
    assert (v, w) == (0.5, 0.0)
    v, w = waypoint_to_velocity(0.5, 0.5, dt_s=1.0, max_v_mps=2.0, max_omega_radps=4.0)
    assert v == 0.5 and w == pytest.approx(math.pi / 4)
    v, w = waypoint_to_velocity(0.0, -0.2, dt_s=0.5, max_v_mps=2.0, max_omega_radps=4.0)
    assert v == 0.0 and w == pytest.approx(-math.pi)            # rotate in place, right
    v, w = waypoint_to_velocity(10.0, 0.0, dt_s=0.25, max_v_mps=0.4, max_omega_radps=4.0)
    assert v == 0.4                                              # clipped
    assert waypoint_to_velocity(-1.0, 0.0, dt_s=1.0, max_v_mps=1.0, max_omega_radps=1.0)[0] == 0.0  # no reverse
    with pytest.raises(ValueError, match="finite"):
        waypoint_to_velocity(float("nan"), 0.0, dt_s=1.0, max_v_mps=1.0, max_omega_radps=1.0)


def test_line_follow_turns_towards_the_target_and_slows_near_it():
    v, w = line_follow_velocity(0, 0, 0, 10, 0, max_v_mps=1.0, max_omega_radps=2.0)
    assert v == pytest.approx(1.0) and w == 0.0
    v, w = line_follow_velocity(0, 0, 0, 0, 10, max_v_mps=1.0, max_omega_radps=2.0)
    assert v == 0.0 and w == pytest.approx(2.0)                  # 90 deg left: turn in place, clipped
    v, _ = line_follow_velocity(0, 0, 0, 1, 0, max_v_mps=1.0, max_omega_radps=2.0)
    assert v == pytest.approx(0.5)                               # inside the slow radius
    assert wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)


def test_closed_loop_kinematic_robot_reaches_a_target():
    x, y, yaw, dt = 0.0, 0.0, math.pi, 0.02
    for _ in range(2000):
        v, w = line_follow_velocity(x, y, yaw, 5.0, 3.0, max_v_mps=1.0, max_omega_radps=2.0)
        x += v * math.cos(yaw) * dt
        y += v * math.sin(yaw) * dt
        yaw += w * dt
    assert math.hypot(x - 5.0, y - 3.0) < 0.1


def test_window_localiser_advances_along_the_walk_without_flicker():
    walk = np.stack([np.arange(20) * 3.0, np.zeros(20)], axis=1)
    loc = WindowLocaliser(walk, window=2, hysteresis_m=0.5)
    assert loc.update(0.2, 0.0).index == 0
    assert loc.update(1.6, 0.0).index == 0          # a little closer to node 1: within the hysteresis
    assert loc.update(2.0, 0.0).index == 1          # closer to node 1 by more than the hysteresis
    assert loc.update(1.45, 0.0).index == 1         # back a little: no flicker
    r = loc.update(30.0, 0.0)                       # beyond the window and 21 m from it: lost this step
    assert r.index == 1 and not r.changed and loc.lost_steps == 1
    assert loc.update(0.0, 50.0).distance_m > 10 and loc.lost_steps == 2
    assert loc.update(6.2, 0.0).index == 2 and loc.lost_steps == 0
    with pytest.raises(ValueError, match="walk_xy_m"):
        WindowLocaliser(np.zeros((0, 2)))


def test_faces_travel_tells_images_facing_the_walk_from_those_facing_away():
    # an L-shaped walk east then north, 1 m nodes, 1 m of GPS-like noise on the positions
    rng = np.random.default_rng(0)
    east = np.stack([np.arange(10.0), np.zeros(10)], axis=1)
    north = np.stack([np.full(10, 9.0), np.arange(1.0, 11.0)], axis=1)
    xy = np.concatenate([east, north]) + rng.normal(0.0, 0.3, (20, 2))
    heading = np.concatenate([np.zeros(10), np.full(10, math.pi / 2)])
    assert faces_travel(xy, heading).all()
    # walked the other way round, the same images face away everywhere
    assert not faces_travel(xy[::-1], heading[::-1]).any()
    # one stretch recorded the other way
    back = heading.copy()
    back[12:] = -math.pi / 2
    got = faces_travel(xy, back)
    assert got[:10].all() and not got[13:].any()
    # unknown headings, standing still and one-node walks count as facing
    assert faces_travel(xy, np.full(20, np.nan)).all()
    assert faces_travel(np.zeros((5, 2)), np.full(5, math.pi)).all()
    assert faces_travel(np.zeros((1, 2)), [math.pi]).all()


@pytest.mark.parametrize("xy, heading, kw, match", [
    (np.zeros((3, 2)), np.zeros(2), {}, "heading_rad"),
    (np.zeros((3, 3)), np.zeros(3), {}, "walk_xy_m"),
    (np.array([[0.0, 0.0], [np.nan, 1.0]]), np.zeros(2), {}, "non-finite"),
    (np.zeros((3, 2)), np.zeros(3), {"span": 0}, "span"),
    (np.zeros((3, 2)), np.zeros(3), {"max_angle_rad": 4.0}, "max_angle_rad"),
])
def test_faces_travel_refuses_bad_input(xy, heading, kw, match):
    with pytest.raises(ValueError, match=match):
        faces_travel(xy, heading, **kw)


def test_advance_along_follows_a_walk_that_folds_back_in_order():
    walk = np.array([[0.0, 0.0], [6.0, 0.0], [6.0, 1.5], [0.5, 1.5]])  # out 6 m, across, back
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(walk, axis=0).T))])
    p, seen = 0.0, []
    for x, y in [(0.0, 0.0), (2.0, 0.0), (4.0, 0.0), (6.0, 0.5), (5.0, 1.5), (3.0, 1.5), (1.0, 1.5)]:
        p = advance_along(walk, arc, p, x, y, span_m=5.0)
        seen.append(p)
    assert seen == sorted(seen) and seen[-1] > 12.0 and abs(seen[2] - 4.0) < 0.2
    # standing at the start of the way back does not jump over the way out (window ahead only)
    assert advance_along(walk, arc, 0.0, 1.0, 1.5, span_m=5.0) < 5.0
    assert advance_along(walk[:1], arc[:1], 0.0, 3.0, 3.0, span_m=5.0) == 0.0


def test_polyline_distance_to_segments_ends_and_single_points():
    walk = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])
    assert polyline_distance(walk, 5.0, 3.0) == pytest.approx(3.0)  # beside the first segment
    assert polyline_distance(walk, 13.0, 5.0) == pytest.approx(3.0)  # beside the second
    assert polyline_distance(walk, -3.0, -4.0) == pytest.approx(5.0)  # beyond the first node: to the node
    assert polyline_distance(walk[:1], 3.0, 4.0) == pytest.approx(5.0)
    assert polyline_distance(np.array([[1.0, 1.0], [1.0, 1.0]]), 1.0, 2.0) == pytest.approx(1.0)  # zero length
    for bad in (np.zeros((0, 2)), np.zeros((3,)), np.zeros((2, 3))):
        with pytest.raises(ValueError, match="polyline_distance"):
            polyline_distance(bad, 0.0, 0.0)


def test_passed_end_needs_the_radius_and_the_far_side_of_the_last_node():
    walk = np.array([[0.0, 0.0], [5.0, 0.0], [10.0, 0.0], [10.3, 0.0]])  # last leg from (5, 0): 1 m rule
    assert passed_end(walk, 11.0, 0.5, radius_m=3.0)  # just past the end
    assert passed_end(walk, 10.3, 2.9, radius_m=3.0)  # beside the end, on the line square to the last leg
    assert not passed_end(walk, 9.5, 0.0, radius_m=3.0)  # before it
    assert not passed_end(walk, 14.0, 0.0, radius_m=3.0)  # past it, but farther than the radius
    assert not passed_end(walk, 11.0, 0.0, radius_m=0.0)
    assert passed_end(np.array([[2.0, 2.0]]), 2.5, 1.5, radius_m=1.0)  # one node: the radius alone
    assert passed_end(np.array([[0.0, 0.0], [0.5, 0.0]]), 0.0, 0.8, radius_m=1.0)
    # the leg is taken from the last node at least 1 m before the end: east here, not the 0.5 m hop north
    hook = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 0.5]])
    assert passed_end(hook, 11.0, 0.0, radius_m=3.0) and not passed_end(hook, 9.5, 1.0, radius_m=3.0)


def test_near_sharp_turns_marks_the_walk_around_a_corner_only():
    leg1 = [[0.0, float(y)] for y in range(0, 20)]
    corner = np.array(leg1 + [[float(x), 19.0] for x in range(1, 20)])  # 90 degrees at (0, 19)
    m = near_sharp_turns(corner, min_turn_rad=math.radians(50.0))
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(corner, axis=0).T))])
    assert m[(arc >= 13.0) & (arc <= 22.0)].all() and not m[(arc < 12.0) | (arc > 23.0)].any()
    assert not near_sharp_turns(corner, min_turn_rad=math.radians(100.0)).any()  # 90 < 100
    bend = np.array([[0.0, float(y)] for y in range(0, 20)] + [[0.3 * k, 19.0 + k] for k in range(1, 10)])
    assert not near_sharp_turns(bend, min_turn_rad=math.radians(50.0)).any()  # a 17-degree bend
    assert not near_sharp_turns(corner[:2], min_turn_rad=1.0).any()
    for bad, kw in ((np.zeros((3,)), {}), (np.array([[0.0, np.nan], [1.0, 0.0], [2.0, 0.0]]), {}),
                    (corner, {"span_m": 0.0})):
        with pytest.raises(ValueError, match="near_sharp_turns"):
            near_sharp_turns(bad, min_turn_rad=1.0, **kw)
