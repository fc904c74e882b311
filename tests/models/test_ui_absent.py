"""A landmark that is not in the map, on the touchscreen API and page: the shipped sim models
and a small simulated map; the plan says which landmark is absent, the Route screen shows it in whole words at
800x480, and Go needs a second tap on Confirm Go."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import aiohttp
import pytest

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.config import Config
from robot_app.service.app import App
from robot_app.sim import shipped_models_dir
from tests.models.test_ui_browser import ARTIFACTS, CHROMIUM, operator_page
from tests.sim.test_landmark_presence import small_sim_map  # noqa: F401 - the shared fixture

pytest.importorskip("pybullet")


@pytest.fixture
def absent_setup(tmp_path, small_sim_map):  # noqa: F811
    """(config, origin lat/lon): the app on the small campus map with the shipped sim models, the simulated
    Jackal at the map's first node."""
    from core.mapstore import open_map

    with open_map(small_sim_map) as m:
        origin = (float(m.nodes.lat_deg[0]), float(m.nodes.lon_deg[0]))
    base = Config()
    cfg = dataclasses.replace(
        base,
        paths=dataclasses.replace(base.paths, models_dir=str(shipped_models_dir()), logs_dir=str(tmp_path / "logs")),
        mission=dataclasses.replace(base.mission, map_file=str(small_sim_map), max_v_mps=0.8),
        ui=dataclasses.replace(base.ui, port=0, secret_file=""),
        llm=dataclasses.replace(base.llm, landmark_parser="rules"),
    )
    return cfg, origin


@contextlib.asynccontextmanager
async def app_at(tmp_path, cfg, origin):
    """The app for ``cfg`` with the simulated Jackal at ``origin``; yields the app, stops it on exit."""
    ports = tmp_path / "ports"
    ports.mkdir()
    async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=origin) as sim:
        app = App(dataclasses.replace(cfg, serial=dataclasses.replace(cfg.serial, base_port=str(sim.ports["jackal"]))))
        task = asyncio.ensure_future(app.run())
        try:
            await app.base.wait_connected(10.0)
            while not app.ui.port:
                await asyncio.sleep(0.05)
            yield app
        finally:
            app.request_stop()
            await asyncio.wait_for(task, 10.0)


def test_the_plan_response_says_which_landmark_is_not_in_the_map(tmp_path, absent_setup):
    cfg, origin = absent_setup

    async def main_():
        async with app_at(tmp_path, cfg, origin) as app:
            url = f"http://127.0.0.1:{app.ui.port}"
            async with aiohttp.ClientSession(headers={"X-Robot-Token": app.ui_token}) as http:
                r = await http.post(url + "/api/route/plan",
                                    json={"instruction": "Go past the stop sign, then find the purple elephant.",
                                          "start": 0})
                assert r.status == 200, await r.text()
                plan = await r.json()
                assert plan["absent_landmarks"] == ["a purple elephant"]
                assert [lm["found"] for lm in plan["landmarks"]] == [True, False]
                g = plan["grounding"]
                assert [x["found"] for x in g["landmarks"]] == [True, False]
                assert g["presence_rule"]["calibrated"] and g["presence_rule"]["threshold"] > 0.2
                for x in g["landmarks"]:
                    assert (x["presence_score"] >= x["presence_threshold"]) == x["found"]
                st = await (await http.get(url + "/api/status")).json()
                assert st["mission"]["state"] == "confirm"
                assert st["mission"]["message"].startswith("not in the map: a purple elephant")
                r = await http.post(url + "/api/route/plan", json={"instruction": "Go to the stop sign.", "start": 0})
                plan = await r.json()
                assert plan["absent_landmarks"] == [] and plan["landmarks"][0]["found"]

    asyncio.run(main_())


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_route_screen_shows_an_absent_landmark_in_whole_words_and_go_needs_a_confirmation(tmp_path, absent_setup):
    cfg, origin = absent_setup
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    async def shown_whole(page, selector) -> bool:
        """On the 800x480 screen without scrolling, and nothing of it clipped."""
        return await page.evaluate(
            """(sel) => { const e = document.querySelector(sel), r = e.getBoundingClientRect();
                 return e.offsetParent !== null && r.top >= 0 && r.left >= 0 && r.bottom <= 480 && r.right <= 800
                   && e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight; }""", selector)

    async def main_():
        async with app_at(tmp_path, cfg, origin) as app:
            async with operator_page(app, {"width": 800, "height": 480}) as (page, errors):
                gos = []
                page.on("request", lambda req: gos.append(req.url) if req.url.endswith("/api/route/go") else None)
                await page.wait_for_function("document.getElementById('st-link').textContent === 'MCU link'")
                await page.fill("#instruction", "Go past the stop sign, then find the purple elephant.")
                await page.click("#plan")
                await page.wait_for_selector("#landmarks li >> nth=1")
                await page.screenshot(path=str(ARTIFACTS / "route-absent-800x480.png"))
                # the absent landmark in whole words, on the screen without scrolling
                assert await page.evaluate("window.scrollY") == 0
                assert await page.is_visible("#absent")
                text = await page.inner_text("#absent")
                assert "Not in the map: a purple elephant." in text, text
                assert await shown_whole(page, "#absent")
                # its card is marked; the found one is not
                assert await page.locator("#landmarks li.absent").count() == 1
                tag = page.locator("#landmarks li >> nth=1").locator(".absent-tag")
                assert await tag.inner_text() == "not in the map"
                assert await shown_whole(page, "#landmarks li:nth-child(2) .absent-tag")
                assert await shown_whole(page, "#go") and await shown_whole(page, "#landmarks li:nth-child(2)")
                # Go: the first tap only asks for the confirmation
                await page.click("#go")
                assert await page.inner_text("#go") == "Confirm Go"
                assert "Tap Confirm Go to drive anyway" in await page.inner_text("#absent")
                assert await shown_whole(page, "#absent") and await shown_whole(page, "#go")
                await asyncio.sleep(0.5)
                assert gos == [] and app.mission.state == "confirm"
                await page.screenshot(path=str(ARTIFACTS / "route-absent-confirm-800x480.png"))
                # the second tap drives
                await page.click("#go")
                await page.wait_for_function("document.getElementById('st-mode').dataset.state === 'running'")
                assert len(gos) == 1 and await page.inner_text("#go") == "Go"
                await page.click("#stop")
                await page.wait_for_function("document.getElementById('st-estop').textContent === 'STOPPED'")
                await page.click("#release")
                # a plan of landmarks that are all in the map: no caption, one tap drives
                await page.wait_for_function("document.getElementById('st-estop').textContent !== 'STOPPED'")
                await page.wait_for_function("document.getElementById('st-mode').dataset.state !== 'running'")
                await page.fill("#instruction", "Go to the stop sign.")
                await page.click("#plan")
                await page.wait_for_function("document.getElementById('landmarks').children.length === 1 && "
                                             "!document.getElementById('landmarks').textContent.includes('elephant')")
                assert not await page.is_visible("#absent")
                assert await page.locator("#landmarks li.absent").count() == 0
                await page.click("#go")
                await page.wait_for_function("document.getElementById('st-mode').dataset.state === 'running'")
                assert len(gos) == 2
                await page.click("#stop")
                assert not errors, errors

    asyncio.run(main_())
