import math

import numpy as np
import pytest

from core.control import WindowLocaliser, line_follow_velocity, waypoint_to_velocity, wrap_angle


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
