"""The operator sees refusals, in a real headless Chromium
against the app on the simulated Jackal: a refused command's reason stays on its screen through the status
updates until the operator acts again; Go is held, with the reason on it, while the e-stop is latched; STOP
is at least as large as every command button on every screen, at 800x480 and 1280x800.

The app is the task tests' (no models: plans come from a tap on the map), nothing is driven.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.models.test_ui_browser import ARTIFACTS, CHROMIUM, operator_page
from tests.models.test_ui_route import running_app
from tests.robot_app.test_task_jobs import task_app_config  # noqa: F401 - the shared fixture

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

SCREENS = ("route", "map", "task", "record", "status")


async def ready(page):
    await page.wait_for_function("document.getElementById('st-link').textContent === 'MCU link'")
    await page.wait_for_function("document.getElementById('st-gps').textContent.startsWith('GPS')")


async def plan_by_map_tap(page):
    """Plan the walk to the map's last node with a tap on it (no CLIP needed); back on the Route screen."""
    await page.click('.tab[data-screen="map"]')
    await page.wait_for_function("window.robotUi.nodePixel && document.getElementById('map-fit')")
    n = len(await page.evaluate("fetch('/api/map').then(r => r.json()).then(d => d.xy_m)"))
    await page.wait_for_function("window.robotUi.view().k === 1")
    x, y = await page.evaluate(f"window.robotUi.nodePixel({n - 1})")
    await page.mouse.click(x, y)
    await page.wait_for_function(
        f"document.getElementById('landmarks').textContent.includes('node {n - 1}')", timeout=15000)


async def still_shown_after_status_updates(page, selector: str, text: str, updates: int = 4) -> str:
    """Wait for ``updates`` more status messages to arrive in the page, then the text of ``selector``: the
    status stream had that many chances to write over it, whatever the machine's speed."""
    seen = await page.evaluate("window.robotUi.statusUpdates()")
    await page.wait_for_function(f"window.robotUi.statusUpdates() >= {seen + updates}", timeout=20000)
    shown = await page.inner_text(selector)
    assert text in shown, f"{text!r} was overwritten after {updates} status updates: {shown!r}"
    return shown


async def within(page, selector: str, width: int, height: int) -> bool:
    box = await page.locator(selector).bounding_box()
    return box is not None and box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width \
        and box["y"] + box["height"] <= height


def test_a_refused_go_stays_on_screen_and_go_waits_for_the_release(tmp_path, task_app_config):  # noqa: F811
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    async def main_():
        async with running_app(tmp_path, task_app_config) as (app, _sim):
            async with operator_page(app, {"width": 800, "height": 480}) as (page, errors):
                await ready(page)
                await page.click("#stop")
                await page.wait_for_function("document.getElementById('st-estop').textContent === 'STOPPED'")
                assert app.base.estop_latched
                await plan_by_map_tap(page)
                # planned while latched: Go is held, the reason written on it, within the screen
                await page.wait_for_function("document.getElementById('go').disabled")
                assert await page.is_visible("#go-why")
                assert "e-stop latched: release it first" in await page.inner_text("#go")
                assert await within(page, "#go", 800, 480) and await within(page, "#go-why", 800, 480)
                go, stop = await page.locator("#go").bounding_box(), await page.locator("#stop").bounding_box()
                assert stop["width"] >= go["width"] and stop["height"] >= go["height"], (stop, go)
                await page.screenshot(path=str(ARTIFACTS / "go-held-800x480.png"))
                # a tap on Go that lands before the status update that holds it (the latch arrived in between):
                # the robot refuses, and the reason stays through the status updates that follow
                await page.evaluate("() => { const g = document.getElementById('go'); g.disabled = false; g.click(); }")
                refusal = "Go refused: the e-stop is latched: release it first"
                await page.wait_for_function(
                    f"document.getElementById('message').textContent.includes({refusal!r})", timeout=10000)
                assert app.mission.state == "confirm"  # nothing driven
                await still_shown_after_status_updates(page, "#message", refusal)
                assert await within(page, "#message", 800, 480)
                assert await page.is_disabled("#go")  # held again by the status stream
                await page.screenshot(path=str(ARTIFACTS / "go-refused-800x480.png"))
                # the operator acts again (Release stop): the refusal goes, Go comes back
                await page.click("#release")
                await page.wait_for_function("document.getElementById('st-estop').textContent !== 'STOPPED'")
                assert "refused" not in await page.inner_text("#message")
                await page.wait_for_function("!document.getElementById('go').disabled")
                assert app.mission.state == "confirm"  # the plan made while latched is still there to drive
                assert not await page.is_visible("#go-why")
                assert await page.inner_text("#go") == "Go"
                assert not errors, errors

    asyncio.run(main_())


def test_a_refused_task_stays_until_the_goal_is_edited_or_ten_seconds_pass(tmp_path, task_app_config):  # noqa: F811
    async def main_():
        async with running_app(tmp_path, task_app_config) as (app, _sim):
            async with operator_page(app, {"width": 800, "height": 480}) as (page, errors):
                await page.clock.install()  # the page's timers on a clock the test can move on
                await page.reload()
                await ready(page)
                await page.click('.tab[data-screen="task"]')
                await page.fill("#task-goal", "(carrying jackal parcel-1")
                await page.click("#task-run")
                await page.wait_for_function(
                    "document.getElementById('task-message').textContent.startsWith('Run task refused: ')")
                shown = await still_shown_after_status_updates(page, "#task-message", "Run task refused: ")
                assert "goal" in shown.lower()
                assert await within(page, "#task-message", 800, 480)
                await page.fill("#task-goal", "(carrying jackal parcel-1)")  # an edit: the refusal goes
                assert "refused" not in await page.inner_text("#task-message")
                # refused again, and left alone: it goes after 10 s
                await page.fill("#task-goal", "(carrying jackal")
                await page.click("#task-run")
                await page.wait_for_function(
                    "document.getElementById('task-message').textContent.startsWith('Run task refused: ')")
                await page.clock.fast_forward(9000)
                assert (await page.inner_text("#task-message")).startswith("Run task refused: ")
                await page.clock.fast_forward(1500)  # fires the timers due by then
                assert "refused" not in await page.inner_text("#task-message")
                assert not errors, errors

    asyncio.run(main_())


def test_stop_is_at_least_as_large_as_go_and_every_command_on_every_screen(tmp_path, task_app_config):  # noqa: F811
    async def main_():
        async with running_app(tmp_path, task_app_config) as (app, _sim):
            async with operator_page(app, {"width": 800, "height": 480}) as (page, errors):
                await ready(page)
                await plan_by_map_tap(page)  # Go enabled, in the planned Route screen's layout
                assert await page.is_enabled("#go")
                for viewport in ({"width": 800, "height": 480}, {"width": 1280, "height": 800}):
                    await page.set_viewport_size(viewport)
                    for screen in SCREENS:
                        await page.click(f'.tab[data-screen="{screen}"]')
                        stop = await page.locator("#stop").bounding_box()
                        assert await within(page, "#stop", viewport["width"], viewport["height"])
                        buttons = await page.locator(f"#screen-{screen} button.big:visible").all()
                        assert (screen == "route") == await page.is_visible("#go")
                        for b in buttons:
                            box = await b.bounding_box()
                            name = await b.get_attribute("id")
                            assert stop["width"] >= box["width"] and stop["height"] >= box["height"], \
                                f"{viewport}, {screen} screen: STOP {stop} smaller than {name} {box}"
                        if screen == "route":
                            assert "go" in [await b.get_attribute("id") for b in buttons]
                            assert await page.evaluate("window.scrollY") == 0
                assert not errors, errors

    asyncio.run(main_())
