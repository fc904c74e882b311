"""The world plant: Jackal kinematics, collisions stop the robot, GPS noise and dropout zones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from firmware_bridge.kinematics import twist_to_wheels
from robot_app.sim.plant import GpsView, WorldPlant
from robot_app.sim.world import load_world


@pytest.fixture(scope="module")
def campus():
    return load_world("campus")


def drive(plant, v, w, seconds, dt=0.02):
    left, right = twist_to_wheels(v, w, wheel_radius_m=plant.r, wheel_separation_m=plant.ws)
    for _ in range(int(round(seconds / dt))):
        plant.step(left, right, dt)


def test_free_drive_follows_the_kinematics(campus):
    plant = WorldPlant(campus)  # start (0, -85) facing north on the main path
    drive(plant, 1.0, 0.0, 5.0)
    st = plant.state()
    assert st.x_m == pytest.approx(0.0, abs=1e-6) and st.y_m == pytest.approx(-80.0, abs=0.1)
    assert plant.collisions == []


def test_driving_into_a_building_stops_and_reports(campus):
    # 6 m east of the red "library" wall (x = -10) facing west
    plant = WorldPlant(campus, start=(-4.0, -40.0, math.pi))
    drive(plant, 1.5, 0.0, 8.0)
    st = plant.state()
    assert plant.last_collision is not None and plant.last_collision.name == "library"
    assert plant.last_collision.category == "red building"
    assert len(plant.collisions) == 1  # one record per contact, however long it pushes
    assert -10.0 + plant.robot_radius_m <= st.x_m < -10.0 + plant.robot_radius_m + 0.1
    assert st.v_mps == 0.0 and st.wheel_radps == (0.0, 0.0)
    drive(plant, -1.0, 0.0, 1.0)  # backing away is allowed
    assert plant.state().x_m > st.x_m + 0.5


def test_objects_collide_and_manholes_do_not(campus):
    plant = WorldPlant(campus, start=(-3.0, -20.0, 0.0))  # the manhole cover at (0, -20) is drive-over
    drive(plant, 1.0, 0.0, 5.0)
    assert plant.collisions == [] and plant.state().x_m > 1.5
    plant = WorldPlant(campus, start=(3.5, -64.0, math.pi / 2))  # the fire hydrant at (3.5, -60)
    drive(plant, 1.0, 0.0, 6.0)
    assert plant.last_collision is not None and plant.last_collision.category == "fire hydrant"


def test_start_in_an_obstacle_is_refused(campus):
    with pytest.raises(ValueError, match="touches 'library'"):
        WorldPlant(campus, start=(-20.0, -40.0, 0.0))


class _Flags:
    gps_dropout = False
    dropout = False
    plant = object()


class _Sims:
    def __init__(self):
        self.mcu, self.gps = _Flags(), _Flags()


def test_dropout_zones_switch_the_receivers_and_gps_has_noise(campus):
    plant = WorldPlant(campus, start=(-70.0, 20.0, math.pi / 2))  # the west spur, 8 m before the tree zone
    sims = _Sims()
    plant.attach(sims, gps_noise_m=2.0, seed=1)
    assert isinstance(sims.gps.plant, GpsView) and not sims.mcu.gps_dropout
    errs = []
    for _ in range(20):
        drive(plant, 1.0, 0.0, 0.5)
        g, t = sims.gps.plant.state(), plant.state()
        errs.append(math.hypot(g.x_m - t.x_m, g.y_m - t.y_m))
    assert plant.state().y_m > 28.0 + 1.0
    assert sims.mcu.gps_dropout and sims.gps.dropout and plant.in_dropout
    assert 0.2 < float(np.mean(errs)) < 6.0
    # same seed, same noise
    a, b = GpsView(plant, noise_m=2.0, seed=7), GpsView(plant, noise_m=2.0, seed=7)
    assert a.state() == b.state()
