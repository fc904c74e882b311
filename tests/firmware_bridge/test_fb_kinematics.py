"""Differential-drive kinematics, the command limiter and the kinematic plant."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firmware_bridge.kinematics import VelocityLimiter, twist_to_wheels, wheels_to_twist
from firmware_bridge.sim.plant import KinematicPlant

R, WS = 0.098, 0.563


@given(st.floats(-2, 2), st.floats(-4, 4))
def test_inverse_then_forward_is_identity(v, w):
    l, r = twist_to_wheels(v, w, wheel_radius_m=R, wheel_separation_m=WS)
    assert wheels_to_twist(l, r, wheel_radius_m=R, wheel_separation_m=WS) == pytest.approx((v, w), abs=1e-9)


def test_jackal_numbers():
    # 1 m/s straight: both wheels 1/0.098 rad/s; turning in place at 1 rad/s: -+0.2815/0.098 rad/s
    assert twist_to_wheels(1.0, 0.0, wheel_radius_m=R, wheel_separation_m=WS) == pytest.approx(
        (10.2041, 10.2041), rel=1e-4
    )
    assert twist_to_wheels(0.0, 1.0, wheel_radius_m=R, wheel_separation_m=WS) == pytest.approx(
        (-2.87245, 2.87245), rel=1e-4
    )


def test_limiter_clips_speed_and_ramps_acceleration():
    lim = VelocityLimiter(max_v_mps=2.0, max_omega_radps=4.0, max_accel_mps2=20.0, max_alpha_radps2=25.0)
    outs = [lim.step(5.0, -9.0, 0.02) for _ in range(10)]
    assert outs[0] == pytest.approx((0.4, -0.5))
    assert outs[-1] == pytest.approx((2.0, -4.0))
    assert all(abs(v) <= 2.0 and abs(w) <= 4.0 for v, w in outs)
    lim.reset()
    assert lim.step(0.0, 0.0, 0.02) == (0.0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        lim.step(math.inf, 0.0, 0.02)


def test_plant_straight_and_circle():
    p = KinematicPlant(tau_s=0.0)
    l, r = twist_to_wheels(1.0, 0.0, wheel_radius_m=R, wheel_separation_m=WS)
    for _ in range(100):
        p.step(l, r, 0.01)
    s = p.state()
    assert (s.x_m, s.y_m, s.yaw_rad) == pytest.approx((1.0, 0.0, 0.0), abs=1e-9)
    assert s.wheel_travel_rad == pytest.approx((1.0 / R, 1.0 / R))
    p = KinematicPlant(tau_s=0.0)
    l, r = twist_to_wheels(1.0, 1.0, wheel_radius_m=R, wheel_separation_m=WS)
    for _ in range(int(round(2 * math.pi / 0.001))):
        p.step(l, r, 0.001)
    s = p.state()
    assert math.hypot(s.x_m, s.y_m) < 1e-2  # back at the start after one full circle of radius 1 m
    assert s.accel_mps2[1] == pytest.approx(1.0)  # centripetal v * omega
