"""The touchscreen page in a real headless Chromium against the app on the simulated Jackal.

Debian's chromium is driven by Playwright (``executable_path``; Playwright's own browser download
does not work offline). ``.ci/run`` installs chromium; screenshots at 800x480 and 1280x800 are kept in
``test-artifacts/ui/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import pytest

from tests.models.test_ui_route import route_setup, running_app  # noqa: F401 - the shared fixture
from tests.robot_app.test_task_jobs import task_app_config  # noqa: F401 - the shared fixture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@contextlib.asynccontextmanager
async def operator_page(app, viewport: dict):
    """Headless Chromium on the app's touchscreen page, opened as the kiosk launcher opens it (``#token=``);
    yields ``(page, errors)``, the page's uncaught script errors collecting in ``errors``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = await browser.new_page(viewport=viewport)
            errors: list = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"http://127.0.0.1:{app.ui.port}/#token={app.ui_token}")
            yield page, errors
        finally:
            await browser.close()


def test_operator_plans_drives_and_stops_from_the_touchscreen(tmp_path, route_setup):  # noqa: F811
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    async def main_():
        async with running_app(tmp_path, route_setup) as (app, sim):
            async with operator_page(app, {"width": 1280, "height": 800}) as (page, errors):
                await page.wait_for_function("document.getElementById('st-link').textContent === 'MCU link'")
                await page.wait_for_function("document.getElementById('st-gps').textContent.startsWith('GPS')")
                # route from words: parsed landmarks with the chosen node images, Go only after that
                assert await page.is_disabled("#go")
                # the on-screen keyboard types into the focused field
                await page.click("#instruction")
                assert await page.is_visible("#keyboard")
                for key in ["h", "i", "space", "⌫", "⌫", "⌫"]:
                    await page.click(f'#keyboard button[data-key="{key}"]')
                assert await page.input_value("#instruction") == ""
                await page.click('#keyboard button[data-key="hide"]')
                await page.fill("#instruction", "Go past the red house, then stop at the blue car.")
                await page.click("#plan")
                await page.wait_for_selector("#landmarks li >> nth=1")
                assert "red house" in await page.inner_text("#landmarks")
                assert "red house" in await page.inner_text("#recent")  # one tap to reuse it
                assert await page.is_enabled("#go")
                await page.screenshot(path=str(ARTIFACTS / "route-1280x800.png"))
                # tap the far end of the drive on the map: a walk there, confirmed with Go
                await page.click('.tab[data-screen="map"]')
                n = len(await page.evaluate("fetch('/api/map').then(r => r.json()).then(d => d.xy_m)"))
                x, y = await page.evaluate(f"window.robotUi.nodePixel({n - 1})")
                await page.mouse.click(x, y)
                try:
                    await page.wait_for_function(
                        f"document.getElementById('landmarks').textContent.includes('node {n - 1}')", timeout=15000)
                except Exception:
                    await page.screenshot(path=str(ARTIFACTS / "failed-map-tap.png"))
                    raise AssertionError(
                        f"tap at ({x}, {y}) planned nothing: {await page.inner_text('#message')!r}"
                    )
                await page.click("#go")
                await page.wait_for_function("document.getElementById('st-mode').dataset.state === 'running'")
                await page.wait_for_function("!document.getElementById('subgoal').hidden")  # next subgoal image
                # the driving view: who drives and how far along the walk, STOP above it
                await page.wait_for_function(
                    "document.getElementById('drive-driver').textContent.startsWith('Driving')")
                assert "on the walk" in await page.inner_text("#drive-text")
                for _ in range(60):
                    if abs(sim.plant.state().v_mps) > 0.1:
                        break
                    await asyncio.sleep(0.1)
                assert abs(sim.plant.state().v_mps) > 0.1, "the robot did not move"
                await page.screenshot(path=str(ARTIFACTS / "running-1280x800.png"))
                # STOP: latched through the bridge, motion ends
                await page.click("#stop")
                await page.wait_for_function("document.getElementById('st-estop').textContent === 'STOPPED'")
                await asyncio.sleep(0.5)
                assert abs(sim.plant.state().v_mps) < 0.05
                assert app.base.estop_latched
                await page.set_viewport_size({"width": 800, "height": 480})
                await page.screenshot(path=str(ARTIFACTS / "stopped-800x480.png"))
                box = await page.locator("#stop").bounding_box()
                assert box["width"] >= 100 and box["height"] >= 56  # finger-sized at 800x480
                for screen in ("task", "record", "status"):
                    await page.click(f'.tab[data-screen="{screen}"]')
                    assert await page.is_visible(f"#screen-{screen}")
                await page.click('.tab[data-screen="task"]')
                await page.screenshot(path=str(ARTIFACTS / "task-800x480.png"))
                # the map shows the robot; "Set start" then a tap picks the start node of the next plan
                await page.set_viewport_size({"width": 1280, "height": 800})
                await page.click('.tab[data-screen="map"]')
                await page.click("#pick-start")
                x, y = await page.evaluate("window.robotUi.nodePixel(1)")
                await page.mouse.click(x, y)
                await page.wait_for_function(
                    "document.getElementById('map-hint').textContent.startsWith('Start: node 1')"
                )
                await page.screenshot(path=str(ARTIFACTS / "map-1280x800.png"))
                assert not errors, errors


    asyncio.run(main_())
    assert (ARTIFACTS / "stopped-800x480.png").stat().st_size > 5000


EVIL_PAGE = """<!DOCTYPE html><html><body><script>
const robot = "ROBOT";
const out = {};
async function attempt(name, fn) {
  try { const r = await fn(); out[name] = r && r.status !== undefined ? r.status : String(r); }
  catch (e) { out[name] = "blocked: " + e.name; }
}
(async () => {
  // "simple" cross-origin requests: no preflight, the response is never read
  await attempt("release", () => fetch(robot + "/api/release", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: "{}"}));
  await attempt("plan", () => fetch(robot + "/api/route/plan", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: JSON.stringify({goal: 1})}));
  await attempt("go", () => fetch(robot + "/api/route/go", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: JSON.stringify({plan_id: "0"})}));
  // a JSON request needs a CORS preflight the robot never grants
  await attempt("release-json", () => fetch(robot + "/api/release", {method: "POST",
      headers: {"Content-Type": "application/json"}, body: "{}"}));
  await attempt("status-read", () => fetch(robot + "/api/status").then(r => r.json()));
  // an image tag for the camera frame and a map image
  for (const [name, path] of [["frame", "/api/camera/latest"], ["map-image", "/api/map/image/0"]]) {
    out[name] = await new Promise((res) => { const i = new Image(); i.onload = () => res("loaded");
      i.onerror = () => res("error"); i.src = robot + path; });
  }
  // a form post (the JSON-CSRF trick: text/plain encoding) into a hidden frame
  const f = document.createElement("form");
  f.method = "POST"; f.action = robot + "/api/release"; f.enctype = "text/plain"; f.target = "sink";
  const inp = document.createElement("input"); inp.name = '{"x":"'; inp.value = '"}'; f.append(inp);
  const sink = document.createElement("iframe"); sink.name = "sink"; document.body.append(sink, f);
  f.submit();
  await new Promise((res) => setTimeout(res, 1500));
  window.result = out;
})();
</script></body></html>"""


def test_a_page_from_another_origin_cannot_release_plan_go_or_read_frames(tmp_path, route_setup):  # noqa: F811
    """Another web page (here served from another port of the same machine, in the same browser) tries
    the robot's API: fetch without preflight, a JSON fetch, a read, image tags, a form post. None of it
    changes the robot's state or reads a frame: the STOP stays latched, no route is planned."""
    from aiohttp import web
    from playwright.async_api import async_playwright

    async def main_():
        async with running_app(tmp_path, route_setup) as (app, _sim):
            evil = web.Application()
            runner = None
            try:
                app.mission.stop("test: latched before the attack")
                robot = f"http://127.0.0.1:{app.ui.port}"
                page_html = EVIL_PAGE.replace("ROBOT", robot)
                evil.router.add_get("/", lambda request: web.Response(text=page_html, content_type="text/html"))
                runner = web.AppRunner(evil)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                evil_url = f"http://localhost:{runner.addresses[0][1]}/"
                async with async_playwright() as pw:
                    browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
                    try:
                        page = await browser.new_page()
                        await page.goto(evil_url)
                        await page.wait_for_function("window.result !== undefined", timeout=20000)
                        result = await page.evaluate("window.result")
                    finally:
                        await browser.close()
                return result, app.commands.stop_reason, app.mission.plan, app.mission.state
            finally:
                if runner is not None:
                    await runner.cleanup()

    result, stop_reason, plan, state = asyncio.run(main_())
    assert stop_reason is not None and state == "stopped"  # still latched: no release got through
    assert plan is None  # no route planned (so none to go)
    assert result["release-json"].startswith("blocked") and result["status-read"].startswith("blocked")
    assert result["frame"] == "error" and result["map-image"] == "error"


def test_route_screen_fits_800x480_and_the_keyboard_shows_only_for_a_focused_field(tmp_path, route_setup):  # noqa: F811
    """The robot's small panel: no field focused, no keyboard; after Plan route the landmark images and Go
    are on the screen without scrolling; STOP is visible on every screen."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    async def inside(page, selector):
        box = await page.locator(selector).bounding_box()
        return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 480 and box["x"] + box["width"] <= 800

    async def main_():
        async with running_app(tmp_path, route_setup) as (app, _sim):
            async with operator_page(app, {"width": 800, "height": 480}) as (page, errors):
                await page.wait_for_function("document.getElementById('st-link').textContent === 'MCU link'")
                assert not await page.is_visible("#keyboard")  # nothing focused: no keyboard
                await page.click("#instruction")
                assert await page.is_visible("#keyboard")
                await page.click('#keyboard button[data-key="g"]')  # typing keeps the field focused
                assert await page.is_visible("#keyboard")
                assert await page.evaluate("document.activeElement.id") == "instruction"
                await page.click('#keyboard button[data-key="hide"]')
                assert not await page.is_visible("#keyboard")
                await page.click("#instruction")
                await page.click("#st-gps")  # a tap elsewhere takes the focus away: the keyboard goes
                await page.wait_for_selector("#keyboard", state="hidden", timeout=2000)
                await page.fill("#instruction", "Go past the red house, then stop at the blue car.")
                await page.click("#plan")  # the field still has the focus and the keyboard is up
                await page.wait_for_selector("#landmarks li >> nth=1")
                assert await page.is_enabled("#go")
                assert not await page.is_visible("#keyboard")
                assert await page.evaluate("window.scrollY") == 0
                assert await inside(page, "#go") and await inside(page, "#stop")
                for i in range(await page.locator("#landmarks li").count()):
                    box = await page.locator(f"#landmarks li >> nth={i}").bounding_box()
                    assert await inside(page, f"#landmarks li >> nth={i}"), f"landmark {i} below the fold: {box}"
                assert "match" in await page.inner_text("#landmarks")  # the grounding score beside each image
                await page.screenshot(path=str(ARTIFACTS / "route-planned-800x480.png"))
                for screen in ("map", "task", "record", "status"):
                    await page.click(f'.tab[data-screen="{screen}"]')
                    assert await inside(page, "#stop"), f"STOP not on the {screen} screen"
                    if screen == "map":
                        await page.screenshot(path=str(ARTIFACTS / "map-800x480.png"))
                # the Status screen: readable panels, the raw JSON only behind its disclosure
                devices = await page.inner_text("#panel-devices")
                assert "Base MCU" in devices and "connected" in devices and "GPS" in devices
                assert "installed" in await page.inner_text("#panel-models")  # the test's CLIP
                assert "control" in await page.inner_text("#panel-components")
                assert not await page.is_visible("#status-json")
                await page.screenshot(path=str(ARTIFACTS / "status-800x480.png"))
                await page.click("details summary")
                assert await page.is_visible("#status-json")
                assert not errors, errors

    asyncio.run(main_())



def test_the_map_screen_says_why_there_is_no_map(tmp_path, route_setup):  # noqa: F811
    import dataclasses


    cfg = dataclasses.replace(route_setup, mission=dataclasses.replace(route_setup.mission,
                                                                       map_file=str(tmp_path / "none.sqlite")))

    async def main_():
        async with running_app(tmp_path, cfg) as (app, _sim):
            async with operator_page(app, {"width": 800, "height": 480}) as (page, _errors):
                await page.click('.tab[data-screen="map"]')
                await page.wait_for_function(
                    "document.getElementById('map-hint').textContent.includes('no usable')")
                hint = await page.inner_text("#map-hint")
                assert "[mission] map_file" in hint and "Record screen" in hint
                await page.screenshot(path=str(ARTIFACTS / "map-none-800x480.png"))

    asyncio.run(main_())


def _big_map(tmp_path, cfg):
    """A map of about 120 nodes (an L of 240 m + 120 m): too many for node ids when the whole map is in sight."""
    import dataclasses

    from robot_app.cli import main
    from robot_app.mapping.synthetic_logs import write_synthetic_log
    from tests.models.test_ui_route import ORIGIN

    write_synthetic_log(tmp_path / "biglog", [(0, 0), (240, 0), (240, 120)], seed=3, anchor=ORIGIN)
    conf = tmp_path / "big.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{cfg.paths.models_dir}"\n')
    out = str(tmp_path / "big.map")
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "biglog"), "--out", out]) == 0
    return dataclasses.replace(cfg, mission=dataclasses.replace(cfg.mission, map_file=out))


@pytest.mark.parametrize("viewport", [{"width": 800, "height": 480}, {"width": 1280, "height": 800}])
def test_the_map_pans_zooms_labels_nodes_and_a_tap_still_picks_the_node(tmp_path, route_setup, viewport):  # noqa: F811
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    cfg = _big_map(tmp_path, route_setup)
    size = f"{viewport['width']}x{viewport['height']}"

    async def main_():
        async with running_app(tmp_path, cfg) as (app, _sim):
            async with operator_page(app, viewport) as (page, errors):
                await page.click('.tab[data-screen="map"]')
                await page.wait_for_function("window.robotUi.nodePixel && document.getElementById('map-fit')")
                d = await page.evaluate("fetch('/api/map').then(r => r.json())")
                n = len(d["xy_m"])
                assert n > 60 and set(d["edge_source"]) <= {"temporal", "vnm", "gps", "manual"}
                assert len(d["edge_source"]) == len(d["edges"])
                await page.wait_for_function("window.robotUi.view().k === 1")
                # fitted on open: every node inside the canvas, too many for ids
                box = await page.locator("#map").bounding_box()
                pts = [await page.evaluate(f"window.robotUi.nodePixel({i})") for i in range(n)]
                assert all(box["x"] <= x <= box["x"] + box["width"] and box["y"] <= y <= box["y"] + box["height"]
                           for x, y in pts)
                assert not await page.evaluate("window.robotUi.labelsShown()")
                # the zoom buttons scale the distances between nodes by 2 each, about the canvas centre
                def dist(a, b):
                    return ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5
                far = dist(pts[0], pts[n - 1])
                await page.click("#map-zoom-in")
                await page.click("#map-zoom-in")
                a, b = (await page.evaluate("window.robotUi.nodePixel(0)"),
                        await page.evaluate(f"window.robotUi.nodePixel({n - 1})"))
                assert dist(a, b) == pytest.approx(4 * far, rel=1e-3)
                await page.click("#map-fit")
                assert await page.evaluate("window.robotUi.view()") == {"k": 1, "tx": 0, "ty": 0}
                # scrolling zooms about the pointer: the map point under it stays put (a node next to it moves
                # away from it by the zoom factor; events carry whole pixels)
                mid = n // 2
                mx, my = round(pts[mid][0]), round(pts[mid][1])
                await page.mouse.move(mx, my)
                for _ in range(4):
                    await page.mouse.wheel(0, -400)
                await page.wait_for_function("window.robotUi.view().k > 8")
                k = (await page.evaluate("window.robotUi.view()"))["k"]
                x2, y2 = await page.evaluate(f"window.robotUi.nodePixel({mid})")
                assert dist((x2, y2), (mx, my)) == pytest.approx(k * dist(pts[mid], (mx, my)), abs=1.0)
                assert await page.evaluate("window.robotUi.labelsShown()")  # zoomed in: node ids written
                # a drag pans by the finger's movement and plans nothing
                await page.mouse.move(x2, y2)
                await page.mouse.down()
                await page.mouse.move(x2 - 60, y2 - 30, steps=6)
                await page.mouse.up()
                x3, y3 = await page.evaluate(f"window.robotUi.nodePixel({mid})")
                assert (x3 - x2, y3 - y2) == (pytest.approx(-60, abs=1.5), pytest.approx(-30, abs=1.5))
                assert (await page.evaluate("window.robotUi.view()"))["k"] == k
                assert await page.inner_text("#landmarks") == ""
                await page.screenshot(path=str(ARTIFACTS / f"map-zoomed-{size}.png"))
                # zoomed and panned, a tap on a node still plans the walk to that node
                await page.mouse.click(x3, y3)
                try:
                    await page.wait_for_function(
                        f"document.getElementById('landmarks').textContent.includes('node {mid}')", timeout=15000)
                except Exception:
                    raise AssertionError(f"tap on node {mid} at ({x3}, {y3}): {await page.inner_text('#message')!r} "
                                         f"{await page.inner_text('#landmarks')!r}") from None
                # Fit brings the whole map back; STOP stays in sight on the map screen
                await page.click('.tab[data-screen="map"]')
                await page.click("#map-fit")
                assert await page.evaluate("window.robotUi.view()") == {"k": 1, "tx": 0, "ty": 0}
                stop = await page.locator("#stop").bounding_box()
                assert stop["y"] + stop["height"] <= viewport["height"]
                legend = await page.locator(".legend").bounding_box()
                assert legend["y"] + legend["height"] <= viewport["height"]  # the legend fits under the map
                await page.screenshot(path=str(ARTIFACTS / f"map-fit-{size}.png"))
                # a plan to a tapped node has no grounding: nothing to colour by
                assert await page.is_disabled("#map-colour")
                # a plan from words: Colour steps through its landmarks' grounding scores over the map
                await page.click('.tab[data-screen="route"]')
                await page.fill("#instruction", "Go past the red house, then stop at the blue car.")
                await page.click("#plan")
                await page.wait_for_selector("#landmarks li >> nth=1")
                await page.click('.tab[data-screen="map"]')
                assert await page.is_enabled("#map-colour")
                await page.click("#map-colour")
                label = await page.inner_text("#map-colour")
                assert "red house" in label, label
                assert await page.evaluate("window.robotUi.coloured()") == min(n, 300)
                legend_text = await page.inner_text("#map-legend-score")
                assert "best node" in legend_text and "ringed" in legend_text
                score = await page.locator("#map-legend-score").bounding_box()
                assert score["y"] + score["height"] <= viewport["height"]
                await page.screenshot(path=str(ARTIFACTS / f"map-grounding-{size}.png"))
                await page.click("#map-colour")
                assert "blue car" in await page.inner_text("#map-colour")
                await page.click("#map-colour")
                assert await page.inner_text("#map-colour") == "Colour: edges"
                assert await page.evaluate("window.robotUi.coloured()") == 0
                legend = await page.locator(".legend").bounding_box()
                assert legend["y"] + legend["height"] <= viewport["height"]
                assert not errors, errors

    asyncio.run(main_())


def test_a_task_job_runs_from_the_task_screen_with_its_question_and_plan(tmp_path, task_app_config):  # noqa: F811
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    async def task_state(page):
        return await page.evaluate("fetch('/api/status').then(r => r.json()).then(s => s.task.state)")

    async def main_():
        async with running_app(tmp_path, task_app_config) as (app, _sim):
            async with operator_page(app, {"width": 800, "height": 480}) as (page, errors):
                await page.wait_for_function("document.getElementById('st-gps').textContent.startsWith('GPS')")
                await page.click('.tab[data-screen="task"]')
                await page.fill("#task-goal", "(carrying jackal parcel-1")
                await page.click("#task-run")
                await page.wait_for_function("document.getElementById('task-message').textContent.length > 0")
                assert "goal" in (await page.inner_text("#task-message")).lower()  # named as the goal
                await page.fill("#task-goal", "(carrying jackal parcel-1)")
                await page.click("#task-run")
                # the robot asks in words, shows the plan with the step being done, STOP in sight
                await page.wait_for_selector("#task-question:not([hidden])", timeout=30000)
                q = await page.inner_text("#task-question-text")
                assert q.startswith("Please load parcel 1 onto jackal at "), q
                current = await page.inner_text("#task-plan li.current")
                assert current.startswith("(load"), current
                assert "doing: load parcel 1" in await page.inner_text("#task-message")
                assert await page.inner_text("#st-mode") == "task: your turn"  # not "idle" while it waits
                stop = await page.locator("#stop").bounding_box()
                assert stop["y"] + stop["height"] <= 480
                await page.screenshot(path=str(ARTIFACTS / "task-question-800x480.png"))
                await page.click("#task-done")
                for _ in range(300):
                    if await task_state(page) != "running":
                        break
                    await asyncio.sleep(0.1)
                assert await task_state(page) == "succeeded"
                await page.wait_for_selector("#task-question", state="hidden")
                await page.screenshot(path=str(ARTIFACTS / "task-done-800x480.png"))
                assert not errors, errors

    asyncio.run(main_())
