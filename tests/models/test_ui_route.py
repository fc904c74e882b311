"""Route job through the touchscreen API against the simulated Jackal: plan, confirm, drive, STOP."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
from pathlib import Path

import aiohttp
import pytest

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.config import Config
from robot_app.mapping.synthetic_logs import write_synthetic_log
from robot_app.service.app import App
from robot_app.ui.server import UiConfigError

ORIGIN = (52.5148, 13.4643)


@contextlib.asynccontextmanager
async def running_app(tmp_path, cfg):
    """The app for ``cfg`` on the simulated Jackal (its base port set here), the UI serving; yields (app,
    simulated devices) and stops the app on exit."""
    ports = tmp_path / "ports"
    ports.mkdir()
    async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
        app = App(dataclasses.replace(cfg, serial=dataclasses.replace(cfg.serial, base_port=str(sim.ports["jackal"]))))
        task = asyncio.ensure_future(app.run())
        try:
            await app.base.wait_connected(10.0)
            while not app.ui.port:
                await asyncio.sleep(0.05)
            yield app, sim
        finally:
            app.request_stop()
            await asyncio.wait_for(task, 10.0)


@pytest.fixture
def route_setup(tmp_path, clip_export_dir, capsys):
    models = tmp_path / "models"
    shutil.copytree(clip_export_dir, models)
    write_synthetic_log(tmp_path / "log", [(0, 0), (30, 0)], seed=5, anchor=ORIGIN)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models}"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")]) == 0
    capsys.readouterr()
    base = Config()
    return dataclasses.replace(
        base,
        paths=dataclasses.replace(base.paths, models_dir=str(models), logs_dir=str(tmp_path / "logs")),
        mission=dataclasses.replace(base.mission, map_file=str(tmp_path / "m.map"), max_v_mps=0.8),
        ui=dataclasses.replace(base.ui, port=0, secret_file=""),
        llm=dataclasses.replace(base.llm, landmark_parser="rules"),
    )


def test_plan_confirm_drive_and_stop_through_the_api(tmp_path, route_setup):
    async def main_():
        async with running_app(tmp_path, route_setup) as (app, sim):
            for _ in range(100):
                if app.ui.port and app.status_dict()["gps"]:
                    break
                await asyncio.sleep(0.1)
            url = f"http://127.0.0.1:{app.ui.port}"
            async with aiohttp.ClientSession(headers={"X-Robot-Token": app.ui_token}) as http:
                page = await (await http.get(url + "/")).text()
                assert "STOP" in page and "/static/app.js" in page
                st = await (await http.get(url + "/api/status")).json()
                assert st["mcu_link"] and st["mission"]["state"] == "idle" and st["gps"]["quality"] >= 1
                # nothing to confirm yet
                r = await http.post(url + "/api/route/go", json={"plan_id": "0" * 32})
                assert r.status == 409 and "plan a route first" in (await r.json())["error"]
                r = await http.post(url + "/api/route/plan",
                                    json={"instruction": "Go past the red house, then stop at the blue car."})
                plan = await r.json()
                assert r.status == 200, plan
                assert plan["start"] == 0 and len(plan["landmarks"]) == 2
                assert [g["name"] for g in plan["grounding"]["landmarks"]] == [x["name"] for x in plan["landmarks"]]
                first_id = plan["id"]
                img = await http.get(url + f"/api/map/image/{plan['landmarks'][0]['node']}")
                assert img.status == 200 and (await img.read())[:2] == b"\xff\xd8"
                # the tiny CLIP has random weights, so where its landmarks land is arbitrary: drive to a
                # chosen node (the far end of the drive) to exercise Go and STOP deterministically
                n_nodes = len((await (await http.get(url + "/api/map")).json())["xy_m"])
                r = await http.post(url + "/api/route/plan", json={"goal": n_nodes - 1})
                plan = await r.json()
                assert r.status == 200 and plan["nodes"][0] == 0 and plan["nodes"][-1] == n_nodes - 1
                assert isinstance(plan["id"], str) and len(plan["id"]) == 32  # 128 random bits, hex
                r = await http.post(url + "/api/route/go", json={"plan_id": first_id})
                assert r.status == 409 and "expired" in (await r.json())["error"]  # the newer plan replaced it
                r = await http.post(url + "/api/route/go", json={"plan_id": plan["id"]})
                assert r.status == 200
                again = await http.post(url + "/api/route/go", json={"plan_id": plan["id"]})
                # single use: the plan is being driven; the screen says another Go was first
                assert again.status == 409 and "another Go was first" in (await again.json())["error"]
                moved = False
                for _ in range(60):
                    await asyncio.sleep(0.1)
                    if abs(sim.plant.state().v_mps) > 0.1:
                        moved = True
                        break
                assert moved, f"the robot never moved: {app.status_dict()} plan {plan['nodes']}"
                r = await http.post(url + "/api/stop")
                st = await r.json()
                assert st["estop_latched"] and st["mission"]["state"] == "stopped"
                await asyncio.sleep(0.6)
                assert abs(sim.plant.state().v_mps) < 0.05  # motion ended
                st = await (await http.get(url + "/api/status")).json()
                assert st["mission"]["disengagements"] == 1
                record = json.loads(Path(st["mission"]["progress"]["record"]).read_text())
                assert record["outcome"] == "stopped" and record["disengagements"] == 1
                assert record["plan"]["nodes"] == plan["nodes"] and len(record["trace"]) > 0
                # re-localise and re-plan from where the robot is now (what a lost/stuck run does)
                lat, lon = await asyncio.to_thread(app.mission.replan_from_here, [n_nodes - 1])
                replanned = app.mission.progress["replanned_walk"]
                assert replanned[-1] == n_nodes - 1 and len(lat) == len(replanned)
                assert 0 <= replanned[0] <= 3  # the node nearest the robot, a few metres along the drive
                r = await http.post(url + "/api/release", json={})
                assert r.status == 200 and not (await r.json())["estop_latched"]
                # bad input is refused, not run
                assert (await http.post(url + "/api/route/plan", data=b"not json",
                                        headers={"Content-Type": "application/json"})).status == 400
                assert (await http.post(url + "/api/route/plan", data=b"not json")).status == 415  # not JSON
                assert (await http.post(url + "/api/route/go", json={"plan_id": 1})).status == 400
                nested = b"[" * 20000 + b"]" * 20000  # deeply nested: 400, not a RecursionError
                assert (await http.post(url + "/api/route/plan", data=nested,
                                        headers={"Content-Type": "application/json"})).status == 400
                # bad values get 400 with the reason; what the robot's state refuses gets 409
                r = await http.post(url + "/api/route/plan", json={"instruction": "x" * 501})
                assert r.status == 400 and "1 to 500 characters" in (await r.json())["error"]
                r = await http.post(url + "/api/route/plan", json={"instruction": "go now"})
                err = (await r.json())["error"]  # the operator's words: no CLI flag in it
                assert r.status == 400 and err.startswith("no landmark found in 'go now'") and "--" not in err
                assert (await http.get(url + "/api/map/image/99999")).status == 404
                assert (await http.get(url + "/static/../../config.py")).status in (403, 404)


    asyncio.run(main_())


def test_ui_on_a_network_needs_a_token(route_setup):
    cfg = dataclasses.replace(route_setup, ui=dataclasses.replace(route_setup.ui, host="0.0.0.0"))

    async def make():
        App(cfg)

    with pytest.raises(UiConfigError, match="token"):
        asyncio.run(make())


def test_commands_need_the_token_when_one_is_set(route_setup):
    cfg = dataclasses.replace(route_setup, ui=dataclasses.replace(route_setup.ui, token="s3cret"),
                              serial=dataclasses.replace(route_setup.serial, base_port="/nonexistent/jackal"))

    async def main_():
        app = App(cfg)
        task = asyncio.ensure_future(app.run())
        try:
            for _ in range(100):
                if app.ui.port:
                    break
                await asyncio.sleep(0.05)
            url = f"http://127.0.0.1:{app.ui.port}"
            async with aiohttp.ClientSession() as http:
                assert app.ui_token == "s3cret"  # [ui] token replaces the per-start random one
                assert (await http.post(url + "/api/release", json={})).status == 401
                assert (
                    await http.post(url + "/api/release", json={}, headers={"X-Robot-Token": "wrong"})
                ).status == 401
                r = await http.post(url + "/api/release", json={}, headers={"X-Robot-Token": "s3cret"})
                assert r.status not in (401, 403, 415)  # accepted (the base is not connected: 400/409)
                assert (await http.post(url + "/api/stop")).status == 200  # STOP: never blocked
                assert (await http.get(url + "/api/status")).status == 200
        finally:
            app.request_stop()
            await asyncio.wait_for(task, 10.0)

    asyncio.run(main_())


@pytest.mark.llm
def test_the_app_shares_one_llm_worker_for_landmark_parsing(tmp_path, route_setup):
    from models.llm import make_tiny_gguf

    make_tiny_gguf(tmp_path / "models" / "llm.gguf", sidecar=True)
    cfg = dataclasses.replace(route_setup, llm=dataclasses.replace(route_setup.llm, landmark_parser="auto"),
                              serial=dataclasses.replace(route_setup.serial, base_port="/nonexistent/jackal"))

    async def main_():
        app = App(cfg)
        assert app.models["llm"] == "installed"
        task = asyncio.ensure_future(app.run())
        try:
            plans = []
            for _ in range(2):
                plans.append(await app.mission.plan_route("Go past the red house, then stop at the blue car.",
                                                          start=0))
                app.mission.state = "idle"
            first = app.registry.llm()
            assert first is not None and app.registry.llm() is first  # opened once, reused
            assert all(p["grounding"]["parser"] == "llm" for p in plans)
        finally:
            app.request_stop()
            await asyncio.wait_for(task, 15.0)

    asyncio.run(main_())


def test_start_is_localised_by_the_camera_among_the_gps_candidates(tmp_path, route_setup):
    from tests.robot_app.test_record_a_map import write_video

    video = tmp_path / "cam.avi"
    write_video(video, n=30)

    async def main_():
        ports = tmp_path / "ports"
        ports.mkdir()
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            cfg = dataclasses.replace(
                route_setup, serial=dataclasses.replace(route_setup.serial, base_port=str(sim.ports["jackal"])),
                camera=dataclasses.replace(route_setup.camera, source=str(video), fps=15.0))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                for _ in range(100):
                    if app.status_dict()["gps"] and app.camera.latest is not None:
                        break
                    await asyncio.sleep(0.1)
                plan = await app.mission.plan_route(None, goal=5)
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
            return plan

    plan = asyncio.run(main_())
    loc = plan["start_localisation"]
    assert loc["gps_nearest"] == 0 and len(loc["candidates"]) >= 2
    assert loc["picked"] in loc["candidates"] and plan["start"] == loc["picked"]  # CLIP picked it
