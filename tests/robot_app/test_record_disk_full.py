"""A drive recorded onto a disk that fills up (a real 1 MB tmpfs): the recording stops by itself, cleanly, the
status says why in words, STOP answers 409 with the reason instead of 500, and the log's committed part
verifies and builds a map. A recording does not start below ``[mapping] record_reserve_mb``; with a reserve
it stops before the disk is full."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import aiohttp

from core.tlog import verify_log
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.commands import Source
from robot_app.config import Config
from robot_app.service.app import App
from tests.robot_app.test_record_a_map import ORIGIN, app_config, ui_url_when_up, write_video


def _free_kb(path) -> float:
    return shutil.disk_usage(path).free / 1e3


async def _until_stopped(http, url, max_polls: int = 600) -> dict:
    """The status once the recording stopped by itself (polled every 0.1 s, at most ``max_polls`` times)."""
    for _ in range(max_polls):
        st = (await (await http.get(url + "/api/status")).json())["recording"]
        if st["stopped"]:
            return st
        await asyncio.sleep(0.1)
    raise AssertionError(f"the recording never stopped by itself: {st}")


def test_a_full_disk_stops_the_recording_cleanly_and_keeps_a_valid_log(tmp_path, tiny_tmpfs, capsys):
    video = tmp_path / "cam.avi"
    write_video(video, n=300)
    logs = tiny_tmpfs / "logs"
    logs.mkdir()
    ports = tmp_path / "ports"
    ports.mkdir()

    async def main_():
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            cfg = app_config(sim, tmp_path, video, logs_dir=logs,
                             mapping=dataclasses.replace(Config().mapping, record_reserve_mb=10.0))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                url = await ui_url_when_up(app)
                async with aiohttp.ClientSession(headers={"X-Robot-Token": app.ui_token}) as http:
                    # 1. below the reserve: refused in words, nothing written
                    r = await http.post(url + "/api/record/start", json={"name": "drive0"})
                    assert r.status == 409 and "almost full" in (await r.json())["error"]
                    assert not (logs / "drive0").exists()
                    # 2. a reserve of 300 kB with about 500 kB free: the recording stops itself at the reserve
                    (tiny_tmpfs / "filler").write_bytes(b"\0" * int((_free_kb(tiny_tmpfs) - 500) * 1e3))
                    app.recording.config = dataclasses.replace(
                        cfg, mapping=dataclasses.replace(cfg.mapping, record_reserve_mb=0.3))
                    assert (await http.post(url + "/api/record/start", json={"name": "drive1"})).status == 200
                    app.commands.submit(Source.TELEOP, 1.0, 0.0, sender="test")
                    st = await _until_stopped(http, url)
                    assert "drive1" in st["stopped"] and "almost full" in st["stopped"] and st["recording"] is None
                    # 3. no reserve: the writes fail on the full disk and the recording stops itself
                    app.recording.config = dataclasses.replace(
                        cfg, mapping=dataclasses.replace(cfg.mapping, record_reserve_mb=0.0))
                    assert (await http.post(url + "/api/record/start", json={"name": "drive2"})).status == 200
                    st = await _until_stopped(http, url)
                    app.commands.release(Source.TELEOP)
                    assert "drive2" in st["stopped"] and "the disk is full" in st["stopped"]
                    assert st["last_saved"]["log"] == "drive2" and st["last_saved"]["frames"] >= 1
                    stop = await http.post(url + "/api/record/stop", json={})
                    assert stop.status == 409 and "the disk is full" in (await stop.json())["error"]
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    asyncio.run(main_())
    for name in ("drive1", "drive2"):
        copy = tmp_path / name
        shutil.copytree(logs / name, copy)  # read where there is space: a reader replays the WAL
        assert verify_log(copy)["frames"] >= 1
        assert main(["map", "build", str(copy), "--out", str(tmp_path / f"{name}.sqlite")]) == 0
        capsys.readouterr()
