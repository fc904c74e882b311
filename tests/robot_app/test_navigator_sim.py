"""GPS-mode navigation closed over the simulated Jackal: app -> virtual serial port -> MCU simulator -> plant."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import numpy as np

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.config import Config, nav_options
from robot_app.mapping.synthetic_logs import enu_to_latlon
from robot_app.nav.gps import GpsNavigator
from robot_app.service.app import App

ORIGIN = (52.5148, 13.4643)


def _follow(tmp_path, walk_enu, **nav_kwargs):
    """Drive ``walk_enu`` (K, 2) m ENU at ORIGIN with the app's GPS navigator on the simulated Jackal;
    returns the run report and the plant state at the end and 0.3 s after."""
    lat, lon = enu_to_latlon(walk_enu, anchor=ORIGIN)

    async def main():
        async with SimulatedDevices(tmp_path, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            base = Config()
            cfg = dataclasses.replace(base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                                      paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "none")),
                                      ui=dataclasses.replace(base.ui, port=0, secret_file=""))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                nav = GpsNavigator(app.sensors, app.commands, nav_options(app.config), **nav_kwargs)
                report = await nav.follow(lat, lon)
                st = sim.plant.state()
                await asyncio.sleep(0.3)
                after = sim.plant.state()
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
            return report, st, after

    return asyncio.run(main())


def test_gps_navigator_drives_the_simulated_robot_along_a_walk(tmp_path):
    walk_enu = np.array([(0.0, 0.0), (3.0, 0.0), (6.0, 0.0), (8.0, 2.0), (8.0, 5.0)])
    report, st, after = _follow(tmp_path, walk_enu, max_v_mps=1.5, lookahead_m=1.5, goal_radius_m=0.6, timeout_s=40.0)
    assert report.outcome == "reached", report
    # the true robot (the plant) ends near the last walk node; the sim's frame is ENU at the origin
    assert math.hypot(st.x_m - 8.0, st.y_m - 5.0) < 1.5
    assert abs(after.v_mps) < 0.05  # stopped after the run
    xs = np.array([t.x_m for t in report.trace])
    assert xs.size > 10 and report.final_index >= 3


def test_gps_navigator_drives_a_walk_that_ends_near_its_start(tmp_path):
    """Out 6 m and back: the last node is within the goal radius of the start, yet the walk is driven."""
    walk_enu = np.array([(0.0, 0.0), (2.0, 0.0), (4.0, 0.0), (6.0, 0.0), (6.0, 1.5), (4.0, 1.5), (2.0, 1.5),
                         (0.5, 1.5)])
    report, _st, _after = _follow(tmp_path, walk_enu, max_v_mps=1.5, lookahead_m=1.5, goal_radius_m=2.0,
                                  timeout_s=40.0)
    assert report.outcome == "reached", report
    xs = np.array([t.x_m for t in report.trace])
    assert np.nanmax(xs) - np.nanmin(xs) > 4.0 and report.final_index >= len(walk_enu) - 3


def test_pose_estimator_integrates_the_gyro_and_forgets_the_heading_after_a_gap():
    from robot_app.nav.gps import PoseEstimator

    est = PoseEstimator()
    est.yaw_rad, est.yaw_known = 0.0, True
    est.on_gyro(0.5, 10.0)
    for k in range(1, 11):  # 1 s at 0.5 rad/s in 0.1 s steps
        est.on_gyro(0.5, 10.0 + 0.1 * k)
    assert abs(est.yaw_rad - 0.5) < 1e-9 and est.yaw_known
    est.on_gyro(0.5, 15.0)  # 4 s without a reading: the turn in between is unknown
    assert not est.yaw_known and abs(est.yaw_rad - 0.5) < 1e-9
