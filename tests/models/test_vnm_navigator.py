"""VNM navigation loop on the simulated Jackal with a camera (a real video file through OpenCV) and a
real (random-init, GNM-size) VNM export: the loop runs, commands stay within limits, the robot stops."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import numpy as np

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.config import Config
from robot_app.navigator import GpsNavigator
from robot_app.service.app import App
from robot_app.synthetic_logs import enu_to_latlon
from robot_app.vnm_navigator import VnmNavigator

from tests.robot_app.test_record_a_map import ORIGIN, write_video


def test_vnm_loop_runs_within_limits_and_stops(tmp_path, vnm_export):
    import cv2

    models = tmp_path / "models"
    shutil.copytree(vnm_export[0], models)
    video = tmp_path / "cam.avi"
    write_video(video, n=40)
    cap = cv2.VideoCapture(str(video))
    jpegs = []
    for _ in range(6):
        ok, img = cap.read()
        jpegs.append(cv2.imencode(".jpg", img)[1].tobytes())
    cap.release()
    base = Config()
    ports = tmp_path / "ports"
    ports.mkdir()

    async def main_():
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            cfg = dataclasses.replace(
                base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                paths=dataclasses.replace(base.paths, models_dir=str(models)),
                camera=dataclasses.replace(base.camera, source=str(video), fps=15.0),
                ui=dataclasses.replace(base.ui, enabled=False))
            app = App(cfg)
            assert app.models["vnm"] == "installed"
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                vnm = app.vnm_model()
                assert vnm is not None and app.vnm_model() is vnm
                # random weights: force stepping (never lost, never close) and end by the time limit
                nav = VnmNavigator(app, vnm, lost_steps=1e9, close_steps=-1.0, timeout_s=4.0, goal_close=True)
                report = await nav.follow(jpegs)
                await asyncio.sleep(0.4)
                after = sim.plant.state()
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
            return report, after, nav

    report, after, nav = asyncio.run(main_())
    assert report.outcome == "stuck" and len(report.trace) >= 4
    for _, idx, sub, d, v, omega, driver in report.trace:
        assert driver == 0.0  # no positions or headings given: all VNM
        assert 0 <= idx < 6 and idx <= sub <= idx + 1
        assert 0.0 <= v <= nav.max_v_mps + 1e-9 and abs(omega) <= 4.0 + 1e-9
    assert abs(after.v_mps) < 0.05


def test_vnm_stretch_ends_lost_when_gps_puts_the_robot_off_the_walk(tmp_path, vnm_export):
    """The arg-min always names a node (never lost by distance here), so only GPS can tell the robot is off
    the walk: node positions 60 m north of the robot end the stretch lost at once, positions around it
    do not (the run ends by its time limit: this VNM never reports the goal), and a walk whose last node
    lies 1 m behind the robot ends reached by GPS (the robot is past it)."""
    import cv2

    models = tmp_path / "models"
    shutil.copytree(vnm_export[0], models)
    video = tmp_path / "cam.avi"
    write_video(video, n=40)
    cap = cv2.VideoCapture(str(video))
    jpegs = [cv2.imencode(".jpg", cap.read()[1])[1].tobytes() for _ in range(4)]
    cap.release()
    base = Config()
    ports = tmp_path / "ports"
    ports.mkdir()

    def walk(north_m):
        return enu_to_latlon(np.array([[0.0, north_m + 2.0 * k] for k in range(4)]), anchor=ORIGIN)

    async def main_():
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            cfg = dataclasses.replace(
                base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                paths=dataclasses.replace(base.paths, models_dir=str(models)),
                camera=dataclasses.replace(base.camera, source=str(video), fps=15.0),
                ui=dataclasses.replace(base.ui, enabled=False))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                out = []
                for north_m in (60.0, -3.0, -7.0):
                    nav = VnmNavigator(app, app.vnm_model(), lost_steps=1e9, close_steps=-1.0, timeout_s=3.0,
                                       goal_close=True, gps_navigator=GpsNavigator(app))
                    out.append(await nav.follow(jpegs, walk_latlon=walk(north_m)))
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
            return out

    off, on, past = asyncio.run(main_())
    assert base.vnm_nav.max_off_walk_m == 10.0
    assert off.outcome == "lost" and off.duration_s < 2.5
    assert on.outcome == "stuck"
    assert past.outcome == "reached" and past.final_index == 3 and past.duration_s < 2.5
