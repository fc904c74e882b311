"""The app against the simulated world: App -> virtual serial port -> MCU simulator -> world plant, and
the ``sim`` camera rendering from the plant's true pose, as on the robot (no shortcut in between)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time

import numpy as np
import pytest

from firmware_bridge.readings import GpsFix
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import Source
from robot_app.config import Config, nav_options
from robot_app.mapping.map_build import decode_jpeg
from robot_app.mapping.synthetic_logs import enu_to_latlon
from robot_app.service.app import App
from robot_app.sim.camera import SimCamera, set_active_plant
from robot_app.sim.plant import WorldPlant
from robot_app.sim.world import load_world

pytest.importorskip("pybullet")


def app_config(tmp_path, port: str) -> Config:
    base = Config()
    return dataclasses.replace(
        base, serial=dataclasses.replace(base.serial, base_port=port),
        paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "none")),
        ui=dataclasses.replace(base.ui, port=0, enabled=False),
        camera=dataclasses.replace(base.camera, source="sim", width=64, height=48, fps=5.0))


def test_app_drives_the_world_plant_and_sees_it_through_the_sim_camera(tmp_path):
    world = load_world("campus")
    plant = WorldPlant(world, start=(-70.0, 24.0, math.pi / 2))  # west spur, 4 m before the tree zone

    async def drive(app, v, omega, seconds):
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            app.commands.submit(Source.AUTONOMY, v, omega, sender="test")
            await asyncio.sleep(0.05)
        app.commands.release(Source.AUTONOMY)

    async def main():
        async with SimulatedDevices(tmp_path, plant=plant, gps=False, imu=False,
                                    origin_latlon=world.anchor_latlon) as sim:
            plant.attach(sim)
            set_active_plant(plant)
            app = App(app_config(tmp_path, str(sim.ports["jackal"])))
            assert isinstance(app.camera, SimCamera)
            frames = []
            app.camera.subscribe(frames.append)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                await asyncio.sleep(0.6)
                first = frames[0] if frames else None
                fix0 = app.base.latest(GpsFix, max_age_s=1.0)
                await drive(app, 1.5, 0.0, 5.0)  # north into the GPS dropout zone (no sky under the trees)
                await asyncio.sleep(0.5)
                fix1 = app.base.latest(GpsFix, max_age_s=0.5)
                last = app.camera.latest
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
                set_active_plant(None)
            return first, last, fix0, fix1

    first, last, fix0, fix1 = asyncio.run(main())
    st = plant.state()
    # the app's Drive commands went over the virtual port to the MCU simulator, which stepped the world plant
    assert 29.0 < st.y_m < 33.5 and abs(st.x_m + 70.0) < 0.2 and plant.collisions == []
    assert plant.in_dropout
    # the fix the driver decoded before the drive is the plant's position (MCU NMEA: true position)
    lat0, lon0 = enu_to_latlon(np.array([[-70.0, 24.0]]), anchor=world.anchor_latlon)
    assert fix0 is not None and abs(fix0.latitude_deg - lat0[0]) < 2e-5 and abs(fix0.longitude_deg - lon0[0]) < 2e-5
    assert fix1 is None  # void RMC sentences only in the dropout zone: no fresh fix
    # the sim camera rendered from the plant's pose: the view changed as the robot drove
    assert first is not None and last is not None and last.index > first.index
    a, b = decode_jpeg(first.jpeg), decode_jpeg(last.jpeg)
    assert a.shape[:2] == (48, 64)
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 1.0


def test_sim_camera_without_a_world_fails_clearly(tmp_path):
    from robot_app.sensing.camera import CameraError

    set_active_plant(None)
    cam = SimCamera(Config().camera)
    with pytest.raises(CameraError, match="no simulated world"):
        asyncio.run(cam.run())


def test_gps_navigator_follows_a_walk_in_the_world(tmp_path):
    """The app's GPS navigator closes the loop through the drivers and the world plant (no camera)."""
    from robot_app.nav.gps import GpsNavigator

    world = load_world("campus")
    plant = WorldPlant(world, start=(0.0, -44.0, 0.0))  # just south of the main path / east loop junction
    walk = np.array([(0.0, -44.0), (3.0, -40.0), (8.0, -40.0), (12.0, -40.0)])
    lat, lon = enu_to_latlon(walk, anchor=world.anchor_latlon)

    async def main():
        async with SimulatedDevices(tmp_path, plant=plant, gps=False, imu=False,
                                    origin_latlon=world.anchor_latlon) as sim:
            plant.attach(sim)
            cfg = dataclasses.replace(app_config(tmp_path, str(sim.ports["jackal"])),
                                      camera=Config().camera)
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                nav = GpsNavigator(app.sensors, app.commands, nav_options(app.config), max_v_mps=1.5, lookahead_m=1.5,
                                   goal_radius_m=0.6, timeout_s=40.0)
                return await nav.follow(lat, lon)
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    report = asyncio.run(main())
    assert report.outcome == "reached", report
    st = plant.state()
    assert math.hypot(st.x_m - 12.0, st.y_m + 40.0) < 1.5
    assert plant.collisions == []


def _follow_with_sim_vnm(tmp_path, world, jpegs, walk_latlon, headings, start):
    """The app's VNM navigator (shipped sim VNM, GPS navigator beside it) follows the walk on the sim
    camera and the world plant from the pose ``start`` (x_m, y_m, yaw_rad ENU); returns (report,
    navigator, plant)."""
    import shutil
    from pathlib import Path

    import robot_app
    from robot_app.nav.gps import GpsNavigator
    from robot_app.nav.vnm import VnmNavigator
    from robot_app.sim import sim_nav_config

    shipped = Path(robot_app.__file__).resolve().parent / "data" / "models" / "sim"
    models = tmp_path / "models"
    models.mkdir()
    for name in ("vnm.onnx", "vnm.onnx.json", "vnm-reference.npz"):
        shutil.copy(shipped / name, models / name)
    plant = WorldPlant(world, start=start)
    (tmp_path / "ports").mkdir()

    async def main():
        async with SimulatedDevices(tmp_path / "ports", plant=plant, gps=False, imu=False,
                                    origin_latlon=world.anchor_latlon) as sim:
            plant.attach(sim)
            set_active_plant(plant)
            base = sim_nav_config(app_config(tmp_path, str(sim.ports["jackal"])))  # eval sim's and the demo's
            cfg = dataclasses.replace(base, paths=dataclasses.replace(base.paths, models_dir=str(models)),
                                      camera=dataclasses.replace(base.camera, width=160, height=120, fps=8.0),
                                      vnm_nav=dataclasses.replace(base.vnm_nav, gps_goal_check_m=1.5))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                vnm = app.registry.vnm()
                gps = GpsNavigator(app.sensors, app.commands, nav_options(app.config))
                # the sim's rules (robot_app.sim.SIM_VNM_NAV): no step is lost by its distance; with 26 this
                # VNM, stepped at real time on a loaded machine, lost the last stretch now and then
                nav = VnmNavigator(
                    app.sensors,
                    app.commands,
                    vnm,
                    nav_options(app.config),
                    goal_confirm_steps=4,
                    timeout_s=30.0,
                    gps_navigator=gps,
                    gps_at_turns_deg=0.0,
                )
                report = await nav.follow(jpegs, walk_latlon, headings)
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
                set_active_plant(None)
            return report, nav

    report, nav = asyncio.run(main())
    return report, nav, plant


def test_vnm_navigator_hands_stretches_facing_away_to_gps(tmp_path):
    """The app's VNM navigator with the sim VNM on the sim camera: out along a recorded stretch (node
    images facing the way) with the VNM, back over part of it (images facing away) with the GPS
    navigator, out again with the VNM, through the drivers and the world plant; it ends at the walk's
    last node."""
    from robot_app.mapping.map_build import encode_jpeg
    from robot_app.sim.vnm_follow import route_nodes

    world = load_world("campus")
    images, poses = route_nodes(world, np.array([[0.0, -85.0], [0.0, -72.0]]), spacing_m=1.0, seed=5)
    walk = list(range(9)) + list(range(7, 3, -1)) + list(range(5, len(images) - 3))  # out 8 m, back 4 m, out 6 m
    lat, lon = enu_to_latlon(poses[walk, :2], anchor=world.anchor_latlon)
    jpegs = [encode_jpeg(images[v]) for v in walk]
    report, nav, plant = _follow_with_sim_vnm(tmp_path, world, jpegs, (lat, lon), poses[walk, 2],
                                              (0.0, -85.0, math.pi / 2))
    n = len(walk)
    kinds = [m for m, _lo, _hi in nav.stretches]
    assert kinds[:3] == ["vnm", "gps", "vnm"] and nav.stretches[0][1] == 0 and nav.stretches[2][2] == n - 1
    assert kinds[3:] in ([], ["gps"])  # + the goal check's GPS stretch when the VNM stopped short
    assert 6 <= nav.stretches[1][1] <= 9 and 11 <= nav.stretches[1][2] <= 14  # the way back, +- the smoothing
    assert report.outcome == "reached", report
    st = plant.state()
    # the sim VNM localises on the last node a little early; the GPS goal check (1.5 m here) drives the rest
    # when the fix is farther. The fix is the base simulator's (noisy, up to 0.2 s old at 1 m/s), so the
    # true stop may lie a few decimetres beyond the check's radius (1.67 m once in CI).
    assert math.hypot(st.x_m - poses[walk[-1], 0], st.y_m - poses[walk[-1], 1]) < 2.0 and plant.collisions == []
    rows = [row for row in report.trace if row.driver in ("vnm", "gps")]  # not the turns and the stops
    drivers = [row.driver for row in rows]
    assert [d for i, d in enumerate(drivers) if i == 0 or d != drivers[i - 1]] == ["vnm", "gps", "vnm", "gps"][
        : len(kinds)
    ]
    part = np.cumsum([1] + [int(a != b) for a, b in zip(drivers, drivers[1:])]) - 1  # stretch of each row
    for row, k in zip(rows, part):  # indices of the whole walk, each inside its own stretch
        _mode, lo, hi = nav.stretches[k]
        assert lo <= row.walk_index <= hi and lo <= row.subgoal <= hi
    assert n - 3 <= report.final_index <= n - 1  # the GPS localiser lags a node or two at the end


def test_vnm_navigator_drives_onto_a_walk_that_starts_away_from_the_robot(tmp_path):
    """A route may start up to [mission] start_max_distance_m (15 m) from its walk: the robot 13 m west of
    the walk's first node (beyond the off-walk guard's 10 m) and facing west gets the GPS approach leg to
    it, turns onto the walk, and the sim VNM drives the walk to its last node, through the drivers and
    the world plant."""
    from robot_app.mapping.map_build import encode_jpeg
    from robot_app.sim.vnm_follow import route_nodes

    world = load_world("campus")
    images, poses = route_nodes(world, np.array([[0.0, -85.0], [0.0, -72.0]]), spacing_m=1.0, seed=5)
    lat, lon = enu_to_latlon(poses[:, :2], anchor=world.anchor_latlon)
    jpegs = [encode_jpeg(im) for im in images]
    report, nav, plant = _follow_with_sim_vnm(tmp_path, world, jpegs, (lat, lon), poses[:, 2],
                                              (-13.0, -86.0, math.pi))
    assert nav.stretches[:2] == [("gps", 0, 0), ("vnm", 0, len(images) - 1)]
    assert report.outcome == "reached", report
    drivers = [row.driver for row in report.trace if row.driver != "stop"]
    assert drivers[0] == "gps" and "vnm" in drivers  # the leg by GPS, then the VNM
    first_vnm = next(row for row in report.trace if row.driver == "vnm")
    assert first_vnm.walk_index <= 3  # the VNM took over at the walk's start, after the turn onto it
    st = plant.state()
    assert math.hypot(st.x_m - poses[-1, 0], st.y_m - poses[-1, 1]) < 2.0 and plant.collisions == []
