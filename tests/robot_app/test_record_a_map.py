"""Record-a-map in the running app: camera (a real video file through OpenCV) + simulated Jackal ->
traversal log -> map build job -> route to a node of the new map."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import aiohttp
import numpy as np

from core.mapstore import open_map
from core.tlog import read_log
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import Source
from robot_app.config import Config
from robot_app.service.app import App

ORIGIN = (52.5148, 13.4643)


def write_video(path, n=60, fps=15.0):
    import cv2

    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (160, 120))
    assert w.isOpened()
    for i in range(n):
        img = np.zeros((120, 160, 3), np.uint8)
        img[:, :, 1] = (i * 4) % 255
        img[40:80, (i * 2) % 140:(i * 2) % 140 + 20] = 255
        w.write(img)
    w.release()


def app_config(sim, tmp_path, video, *, logs_dir=None, **sections) -> Config:
    """The app's config against the simulated MCU ``sim``, with ``video`` as its camera, its files under
    ``tmp_path`` (logs in ``logs_dir`` when given) and the UI on a free port; ``sections`` replace others."""
    base = Config()
    return dataclasses.replace(
        base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
        paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "models"),
                                  logs_dir=str(logs_dir or tmp_path / "logs"), maps_dir=str(tmp_path / "maps")),
        camera=dataclasses.replace(base.camera, source=str(video), fps=15.0),
        ui=dataclasses.replace(base.ui, port=0, secret_file=""), **sections)


async def ui_url_when_up(app) -> str:
    """Wait until the app's MCU link, touchscreen server and camera are up; returns the UI's base URL."""
    await app.base.wait_connected(10.0)
    while not app.ui.port or app.camera.latest is None:
        await asyncio.sleep(0.05)
    return f"http://127.0.0.1:{app.ui.port}"


def test_record_drive_build_map_and_plan_on_it(tmp_path):
    video = tmp_path / "cam.avi"
    write_video(video)
    ports = tmp_path / "ports"
    ports.mkdir()

    async def main_():
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            app = App(app_config(sim, tmp_path, video))
            task = asyncio.ensure_future(app.run())
            try:
                url = await ui_url_when_up(app)
                async with aiohttp.ClientSession(headers={"X-Robot-Token": app.ui_token}) as http:
                    frame = await http.get(url + "/api/camera/latest")
                    assert frame.status == 200 and (await frame.read())[:2] == b"\xff\xd8"
                    assert (await http.post(url + "/api/record/start", json={"name": "../etc"})).status == 400
                    r = await http.post(url + "/api/record/start", json={"name": "drive1"})
                    assert r.status == 200
                    again = await http.post(url + "/api/record/start", json={"name": "drive2"})
                    assert again.status == 409 and "already recording" in (await again.json())["error"]
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < 8.0:  # the operator drives east at 1.5 m/s (teleop stand-in)
                        app.commands.submit(Source.TELEOP, 1.5, 0.0, sender="test")
                        await asyncio.sleep(0.05)
                    app.commands.release(Source.TELEOP)
                    stopped = await (await http.post(url + "/api/record/stop", json={})).json()
                    assert stopped["log"] == "drive1" and stopped["frames"] >= 20
                    assert (await http.post(url + "/api/map/build", json={"logs": ["nope"]})).status == 400
                    assert (await http.post(url + "/api/map/build", json={"logs": ["drive1"]})).status == 200
                    for _ in range(200):
                        st = await (await http.get(url + "/api/status")).json()
                        if st["recording"]["build"]["state"] != "building":
                            break
                        await asyncio.sleep(0.1)
                    assert st["recording"]["build"]["state"] == "done", st["recording"]
                    # what was saved stays on the screen after the recording stopped
                    assert st["recording"]["last_saved"] == {"log": "drive1", "frames": stopped["frames"]}
                    rep = st["recording"]["build"]["report"]
                    assert rep["nodes"] >= 3 and rep["components"] == 1
                    # the robot stands at the end of its drive: the start is the node nearest its GPS fix
                    plan = await (await http.post(url + "/api/route/plan", json={"goal": 0})).json()
                    assert plan["start"] == rep["nodes"] - 1 and plan["nodes"][-1] == 0
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    asyncio.run(main_())
    tl = read_log(tmp_path / "logs" / "drive1")
    assert tl.frame_t_s.size >= 20
    assert np.all(np.diff(tl.frame_t_s) >= 0.2 - 1e-9)  # 4 Hz of a 15 Hz camera, at least 0.8 periods apart
    assert np.sum(tl.gps["quality"] > 0) >= 40
    # wheel odometry integrated from the MCU's feedback: about 12 m east (1.5 m/s for 8 s), straight
    assert tl.odom["t_s"].size > 100
    assert 9.0 < tl.odom["x_m"][-1] < 14.0 and abs(tl.odom["y_m"][-1]) < 0.5
    with open_map(tmp_path / "maps" / "current.sqlite") as m:
        assert m.image_count() == len(m.nodes) and np.ptp(m.nodes.easting_m) > 6.0
