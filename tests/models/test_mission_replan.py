"""A route job in VNM mode whose walk ends lost: the mission re-plans from the GPS fix and drives the new
walk's first ``[vnm_nav] gps_after_lost_m`` with the GPS navigator (the VNM failed where it starts).

The app runs on the simulated Jackal with a camera (a real video file through OpenCV), a map built by
``robot-app map build`` with the tiny CLIP export and a real (random-init, GNM-size) VNM export. The
VNM navigator's GPS fix is scripted (the robot's position is the test's input), as in
``test_vnm_navigator``."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import numpy as np

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.config import Config
from robot_app.mapping.synthetic_logs import write_synthetic_log
from robot_app.service.app import App
from tests.models.test_vnm_navigator import scripted_navigator
from tests.robot_app.test_record_a_map import ORIGIN, write_video


def test_a_lost_vnm_walk_is_replanned_with_a_gps_start(tmp_path, clip_export_dir, vnm_export, capsys, caplog):
    models = tmp_path / "models"
    shutil.copytree(clip_export_dir, models)
    for f in vnm_export[0].iterdir():
        shutil.copy(f, models / f.name)
    write_synthetic_log(tmp_path / "log", [(0, 0), (30, 0)], seed=5, anchor=ORIGIN)  # 30 m east
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models}"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")]) == 0
    capsys.readouterr()
    video = tmp_path / "cam.avi"
    write_video(video, n=40)
    (tmp_path / "ports").mkdir()
    base = Config()
    # on the walk's start for 2.5 s (the VNM stretch runs), then 30 m north of it for good
    script = lambda t: (1.0, 0.0) if t < 2.5 else (1.0, 30.0)  # noqa: E731

    async def main_():
        async with SimulatedDevices(tmp_path / "ports", gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            cfg = dataclasses.replace(
                base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                paths=dataclasses.replace(base.paths, models_dir=str(models), logs_dir=str(tmp_path / "logs")),
                camera=dataclasses.replace(base.camera, source=str(video), fps=15.0),
                mission=dataclasses.replace(base.mission, map_file=str(tmp_path / "m.map")),
                # the re-plan starts at the node nearest the simulated base's own fix, which moves with the
                # commands for as long as the first run takes in wall time (seconds more on a loaded machine):
                # at 0.05 m/s it stays within one node spacing of the start however long that is
                robot=dataclasses.replace(base.robot, max_v_mps=0.05),
                ui=dataclasses.replace(base.ui, enabled=False))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                for _ in range(100):  # the base simulator's first fix
                    if app.status_dict()["gps"]:
                        break
                    await asyncio.sleep(0.1)
                mission = app.mission
                mission.max_replans = 1
                with mission.open_map() as m:
                    n = len(m.nodes)
                plan = await mission.plan_route(None, goal=n - 1)
                assert plan["nodes"][0] <= 2 and plan["nodes"][-1] == n - 1
                nav = scripted_navigator(app, script, timeout_s=6.0)
                mission.state, mission.progress = "running", {"mode": "vnm"}
                await mission._drive(nav, mission._vnm_args())  # what Go starts, with this navigator
                return mission, nav, plan
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    mission, nav, plan = asyncio.run(main_())
    guard = [r.getMessage() for r in caplog.records if "max_off_walk_m" in r.getMessage()
             and r.name == "robot_app.nav.vnm"]
    assert len(guard) == 1 and "the GPS fix is 30." in guard[0]  # the first run's end
    assert mission.progress["replans"] == 1
    walk = mission.progress["replanned_walk"]
    assert walk[0] <= 2 and walk[-1] == plan["nodes"][-1]  # from the node nearest the fix to the goal
    # the first run: one VNM stretch, ended lost by the off-walk guard; the re-planned walk: GPS for its
    # first 10 m (the fix never comes back, so that GPS stretch ends lost too), then the VNM
    mode, lo, hi = nav.stretches[0]
    assert mode == "gps" and lo == 0 and nav.stretches[1][0] == "vnm"
    lat, lon = mission._walk_latlon
    xy = nav.gps_navigator.estimator.to_xy(lat, lon)
    arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
    assert arc[hi - 1] <= 10.0 < arc[hi]  # the VNM takes over at the first node beyond 10 m
    assert mission.state == "lost" and all(row.driver in ("gps", "stop") for row in nav.trace)
