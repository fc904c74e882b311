"""VNM navigation loop on the simulated Jackal with a camera (a real video file through OpenCV) and a
real (random-init, GNM-size) VNM export: the loop runs, commands stay within limits, the robot stops."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import numpy as np

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.config import Config, nav_options
from robot_app.mapping.synthetic_logs import enu_to_latlon
from robot_app.nav.gps import GpsNavigator
from robot_app.nav.vnm import VnmNavigator
from robot_app.service.app import App
from tests.robot_app.test_record_a_map import ORIGIN, write_video


def _camera_and_models(tmp_path, vnm_export, n_jpegs: int):
    """The VNM export in a models folder, a video file for the camera, its first frames as JPEG node
    images and a folder for the virtual ports."""
    import cv2

    models = tmp_path / "models"
    shutil.copytree(vnm_export[0], models)
    video = tmp_path / "cam.avi"
    write_video(video, n=40)
    cap = cv2.VideoCapture(str(video))
    jpegs = [cv2.imencode(".jpg", cap.read()[1])[1].tobytes() for _ in range(n_jpegs)]
    cap.release()
    ports = tmp_path / "ports"
    ports.mkdir()
    return models, video, jpegs, ports


def _app_config(base: Config, sim, models, video) -> Config:
    return dataclasses.replace(
        base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
        paths=dataclasses.replace(base.paths, models_dir=str(models)),
        camera=dataclasses.replace(base.camera, source=str(video), fps=15.0),
        ui=dataclasses.replace(base.ui, enabled=False))


def test_vnm_loop_runs_within_limits_and_stops(tmp_path, vnm_export):
    models, video, jpegs, ports = _camera_and_models(tmp_path, vnm_export, 6)
    base = Config()

    async def main_():
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            app = App(_app_config(base, sim, models, video))
            assert app.models["vnm"] == "installed"
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                vnm = app.registry.vnm()
                assert vnm is not None and app.registry.vnm() is vnm
                # random weights: force stepping (never lost, never close) and end by the time limit
                nav = VnmNavigator(
                    app.sensors,
                    app.commands,
                    vnm,
                    nav_options(app.config),
                    lost_steps=1e9,
                    close_steps=-1.0,
                    timeout_s=4.0,
                    goal_close=True,
                )
                report = await nav.follow(jpegs)
                await asyncio.sleep(0.4)
                after = sim.plant.state()
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
            return report, after, nav

    report, after, nav = asyncio.run(main_())
    assert report.outcome == "timeout" and sum(row.driver == "vnm" for row in report.trace) >= 4
    for row in report.trace:
        assert row.driver in ("vnm", "stop")  # no positions or headings given: all VNM (stop: context filling)
        assert 0 <= row.walk_index < 6 and row.walk_index <= row.subgoal <= row.walk_index + 1
        assert 0.0 <= row.v_mps <= nav.options.vnm_max_v_mps + 1e-9 and abs(row.omega_radps) <= 4.0 + 1e-9
    assert abs(after.v_mps) < 0.05


class _ScriptedGps(GpsNavigator):
    """The GPS navigator with its fix scripted in metres ENU from ORIGIN over the seconds since the first
    read (a fresh fix on every read): the robot's position is the test's input, not the plant's."""

    def __init__(self, app, script):
        super().__init__(app.sensors, app.commands, nav_options(app.config), stuck_s=3.0)
        self.script, self.t0 = script, None

    def sense(self) -> bool:
        import time

        now = time.monotonic()
        self.t0 = now if self.t0 is None else self.t0
        east, north = self.script(now - self.t0)
        lat, lon = enu_to_latlon(np.array([[east, north]]), anchor=ORIGIN)
        est = self.estimator
        (est.x_m, est.y_m), est.fix_t_mono_s = est.to_xy(lat, lon)[0], now
        return True


def scripted_navigator(app, script, **changes) -> VnmNavigator:
    """The app's VNM navigator with the GPS fix scripted (:class:`_ScriptedGps`): never lost by distance,
    the goal taken from the VNM's closeness, the other options from ``changes``."""
    return VnmNavigator(app.sensors, app.commands, app.registry.vnm(), nav_options(app.config),
                        gps_navigator=_ScriptedGps(app, script),
                        **{"lost_steps": 1e9, "close_steps": -1.0, "goal_close": True, **changes})


def test_vnm_stretch_gps_guard_and_arrival(tmp_path, vnm_export):
    """The arg-min always names a node (never lost by distance here, and this VNM never reports the goal),
    so only GPS ends these runs early: a fix that was on the walk and then 30 m off it ends the stretch
    lost; without the approach leg, a walk 60 m away from the first fix never arms the guard (a route job
    may start farther than max_off_walk_m from its walk) and the run ends by its time limit, as it does
    on the walk; a fix 1 m past the last node ends it reached, with that distance to the goal. A fix 12 m
    before the walk gets the GPS approach leg to its first node first (the scripted fix ignores the
    commands: this checks the stretches and the trace, not the driving); a fix that never moves ends that
    leg stuck; a fix 20 m away, beyond [mission] start_max_distance_m, gets no leg and ends the walk lost
    at once."""
    models, video, jpegs, ports = _camera_and_models(tmp_path, vnm_export, 4)
    base = Config()
    walk = enu_to_latlon(np.array([[0.0, 2.0 * k] for k in range(4)]), anchor=ORIGIN)  # 0-6 m north
    scripts = {"off": lambda t: (0.0, 2.0) if t < 2.5 else (30.0, 2.0),  # the context fills in ~1.5 s
               "far": lambda t: (0.0, 66.0), "on": lambda t: (0.5, 3.0), "past": lambda t: (0.0, 7.0),
               # driven north onto the walk at 8 m/s (the script ignores the commands), then on it
               "approach": lambda t: (0.0, min(-12.0 + 8.0 * t, 1.0)), "never": lambda t: (0.0, -12.0),
               "too far": lambda t: (0.0, -20.0)}

    async def main_():
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            app = App(_app_config(base, sim, models, video))
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                out = {}
                for name, script in scripts.items():
                    # "far": [vnm_nav] gps_approach_m = 0, no leg onto the walk
                    nav = scripted_navigator(
                        app,
                        script,
                        timeout_s=5.0,
                        stuck_s=3.0,
                        gps_approach_m=0.0 if name == "far" else 5.0,
                    )
                    out[name] = await nav.follow(jpegs, walk_latlon=walk), nav.stretches
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
            return out

    r = asyncio.run(main_())
    stretches = {name: st for name, (_rep, st) in r.items()}
    r = {name: rep for name, (rep, _st) in r.items()}
    assert base.vnm_nav.max_off_walk_m == 10.0 and base.vnm_nav.gps_approach_m == 5.0
    for name in ("off", "far", "on", "past", "too far"):  # 0 to 7 m from the walk's nodes, the leg switched off
        assert stretches[name] == [("vnm", 0, 3)], name
    assert stretches["approach"] == stretches["never"] == [("gps", 0, 0), ("vnm", 0, 3)]
    drivers = [row.driver for row in r["approach"].trace if row.driver != "stop"]
    assert drivers[0] == "gps" and drivers[-1] == "vnm" and "gps" not in drivers[drivers.index("vnm"):]
    assert all(row.walk_index == row.subgoal == 0 for row in r["approach"].trace if row.driver == "gps")
    assert r["approach"].outcome == "timeout" and r["approach"].duration_s > 4.5  # the walk's time limit
    assert r["never"].outcome == "stuck" and r["never"].final_index == 0 and r["never"].duration_s >= 3.0  # stuck_s
    assert all(row.driver in ("gps", "stop") for row in r["never"].trace)
    assert base.mission.start_max_distance_m == 15.0
    assert r["too far"].outcome == "lost" and r["too far"].trace == []  # at once: no step
    assert abs(r["too far"].distance_to_goal_m - 20.0) < 0.05  # the distance to the walk's first node
    assert r["off"].outcome == "off-walk" and r["off"].duration_s > 1.0
    # neither the guard nor the arrival ends these: the time limit, or no progress (the random VNM's index
    # may or may not move) does
    assert r["far"].outcome in ("timeout", "stuck") and r["on"].outcome in ("timeout", "stuck")
    assert r["past"].outcome == "reached" and r["past"].final_index == 3
    assert abs(r["past"].distance_to_goal_m - 1.0) < 0.05
