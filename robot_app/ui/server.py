"""HTTP API and static pages of the touchscreen UI (served by ``robot-app run``).

Endpoints (JSON unless noted):

- ``GET /`` the page; ``GET /static/...`` its assets (in the package: works offline, no CDN);
- ``GET /api/status`` robot, devices, models, mission; ``GET /api/events`` the same as a
  server-sent event stream (2 Hz);
- ``GET /api/map`` node positions (m, relative) and edges of the route map;
  ``GET /api/map/image/{node}`` the node's first image (JPEG);
- ``POST /api/stop`` latch the e-stop (the big STOP); ``POST /api/release`` release it;
- ``POST /api/route/plan`` ``{"instruction": str, "start": int | null}`` or ``{"goal": int, "start": ...}``
  (to a chosen node; works without CLIP) -> the plan to confirm;
  ``POST /api/route/go`` ``{"plan_id": int}`` drive it;
- ``POST /api/record/start`` ``{"name": str}`` / ``POST /api/record/stop``: record a drive;
  ``POST /api/map/build`` ``{"logs": [str], "name": "current"}``: build a map from recorded drives;
  ``GET /api/camera/latest`` the newest camera frame (JPEG);
- ``POST /api/task/run`` ``{"goal": PDDL}`` a LASP task job; ``POST /api/task/answer``
  ``{"id": int, "done": bool, "observation": str}`` answers the robot's question; ``POST /api/task/stop``.

Security (``[ui]``): every request's ``Host`` must name the UI's own address and port (loopback names on
loopback, plus ``allowed_origins``' hosts), so DNS rebinding gets nothing; a request with an ``Origin``
must come from an allowed origin (the UI's own, ``allowed_origins``), so another web page cannot drive
the robot. Every command (POST) but STOP carries the session token in ``X-Robot-Token`` and a JSON body
(``Content-Type: application/json``: no form post or "simple" cross-origin request gets through). The
token is ``[ui] token``, else a new random one per start, written to ``[ui] secret_file`` (mode 0640,
group ``secret_group``) for the kiosk, whose launcher passes it to the page (``/#token=...``); with
``[ui] auth = "pin"`` the page gets it from ``POST /api/session {"pin": ...}`` (5 wrong tries lock it for
30 s, doubling). STOP needs no token (one tap from the screen, never blocked); releasing it does. Away
from loopback (a token is then required in the config) the reads need the token too (header, or the
``robot_token`` cookie the page sets for its image tags). Plan ids are random (128 bits) and single-use.
Inputs are validated here; no endpoint takes a path or runs anything but these commands.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from pathlib import Path

from aiohttp import web

from core.mapstore import MapError
from robot_app.errors import RequestError

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class UiConfigError(ValueError):
    """The [ui] settings are unsafe or invalid."""


class _NumberTooLarge(ValueError):
    pass


#: the longest integer a request body may hold (a node id, a count): 18 digits fit an int64
MAX_INT_DIGITS = 18


def _bounded_int(text: str) -> int:
    """JSON integers are parsed only up to :data:`MAX_INT_DIGITS` digits (a 5,000-digit one made Python's
    int() raise past its 4,300-digit limit: an HTTP 500)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _NumberTooLarge(f"a number in the body has {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str):
    raise _NumberTooLarge(f"{name} is not a number a request may hold")


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


#: commands that need no session token: STOP (never blocked from the screen) and the PIN exchange
NO_TOKEN = {"/api/stop", "/api/session"}


class RequestGuard:
    """The UI's request checks (module docstring): ``check(request)`` -> None (allowed) or (HTTP status,
    reason)."""

    def __init__(self, cfg, token: str):
        self.cfg, self.token = cfg, token
        self.loopback = cfg.host in LOOPBACK
        names = {cfg.host} | ({"127.0.0.1", "localhost", "[::1]"} if self.loopback else set())
        self._names = {n if not (":" in n and not n.startswith("[")) else f"[{n}]" for n in names}
        self._extra_origins = {o.rstrip("/").lower() for o in cfg.allowed_origins}
        self._extra_hosts = {o.split("://", 1)[1].lower() for o in self._extra_origins}
        self.pin_failures, self.pin_locked_until, self.pin_lock_s = 0, 0.0, 30.0

    def _port(self, request) -> int | None:
        sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
        return int(sock[1]) if sock else None

    def hosts(self, request) -> set[str]:
        port = self._port(request)
        own = {f"{n}:{port}".lower() for n in self._names} if port is not None else set()
        if port == 80:
            own |= {n.lower() for n in self._names}
        return own | self._extra_hosts

    def given_token(self, request) -> str:
        return request.headers.get("X-Robot-Token") or request.cookies.get("robot_token", "")

    def token_ok(self, request) -> bool:
        return hmac.compare_digest(self.given_token(request).encode(), self.token.encode())

    def check(self, request) -> tuple[int, str] | None:
        hosts = self.hosts(request)
        host = request.headers.get("Host", "").lower()
        if host not in hosts:
            return 403, f"Host {host!r} is not this robot's UI"
        public = request.path == "/" or request.path.startswith("/static/")
        if not public and request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site"):
            return 403, "requests from other sites are not allowed"  # image tags and frames of another page
        origin = request.headers.get("Origin")
        if origin is not None:
            o = origin.rstrip("/").lower()
            if o not in {f"http://{h}" for h in hosts} | {f"https://{h}" for h in hosts} | self._extra_origins:
                return 403, f"requests from {origin!r} are not allowed"
        if request.method == "POST":
            if request.path in NO_TOKEN:
                return None
            if request.content_type != "application/json":
                return 415, "commands must be application/json"
            if not self.token_ok(request):
                return 401, "missing or wrong X-Robot-Token (the session token)"
            return None
        if request.method not in ("GET", "HEAD"):
            return 405, f"method {request.method} not allowed"
        if not self.loopback and not public and not self.token_ok(request):
            return 401, "missing or wrong session token"
        return None

    def pin(self, given, now: float) -> tuple[int, str] | None:
        """The PIN exchange: None when ``given`` is the PIN, else (status, reason); rate-limited."""
        cfg = self.cfg
        if cfg.auth != "pin":
            return 404, "[ui] auth is not 'pin'"
        if now < self.pin_locked_until:
            return 429, f"too many wrong PINs: try again in {self.pin_locked_until - now:.0f} s"
        if isinstance(given, str) and hmac.compare_digest(given.encode(), cfg.pin.encode()):
            self.pin_failures, self.pin_lock_s = 0, 30.0
            return None
        self.pin_failures += 1
        if self.pin_failures >= 5:
            self.pin_locked_until, self.pin_failures = now + self.pin_lock_s, 0
            self.pin_lock_s *= 2.0
        return 403, "wrong PIN"


def build_app(robot) -> web.Application:
    """The aiohttp application for a running :class:`robot_app.service.app.App` (``robot``)."""
    cfg = robot.config.ui
    if cfg.host not in LOOPBACK and not cfg.token:
        raise UiConfigError(f"[ui] host {cfg.host!r} is not loopback: set [ui] token so commands and reads need it")

    guard = RequestGuard(cfg, robot.ui_token)

    @web.middleware
    async def auth(request: web.Request, handler):
        refused_why = guard.check(request)
        if refused_why is not None:
            status, message = refused_why
            log.warning("UI: refused %s %s from %s: %s", request.method, request.path, request.remote, message)
            return _json_error(status, message)
        return await handler(request)

    @web.middleware
    async def refused(request: web.Request, handler):
        """A command the robot cannot carry out as asked, with the reason for the screen: 400 when the
        request itself is bad (``bad_input``: a malformed value, a node or drive that does not exist), 409
        when the robot's state refuses it (busy, no fix, base not connected)."""
        try:
            return await handler(request)
        except RequestError as exc:  # the route, task and recording jobs' errors
            return _json_error(400 if exc.bad_input else 409, str(exc))

    app = web.Application(middlewares=[auth, refused], client_max_size=64 * 1024)
    mission = robot.mission

    async def index(request):
        return web.FileResponse(STATIC / "index.html")

    async def status(request):
        return web.json_response(robot.status_dict())

    async def events(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            while True:
                await resp.write(f"data: {json.dumps(robot.status_dict())}\n\n".encode())
                await asyncio.sleep(0.5)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp

    async def map_info(request):
        try:
            m = await asyncio.to_thread(mission.open_map)
        except Exception as exc:  # noqa: BLE001 - MissionError or a read error: say it on screen
            return _json_error(404, str(exc))
        with m:
            import numpy as np

            xy = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1)
            origin = xy.min(axis=0)
            xy = xy - origin
            edges = np.stack([m.edges.src, m.edges.dst], axis=1)
            return web.json_response({"xy_m": np.round(xy, 2).tolist(), "edges": edges.tolist(),
                                      "edge_source": [str(x) for x in m.edges.source],
                                      "path": str(m.path), "verified": m.verified,
                                      "origin_utm_m": origin.tolist(),
                                      "utm_zone": [int(m.nodes.utm_zone[0]), str(m.nodes.utm_band[0])]})

    async def map_image(request):
        try:
            node = int(request.match_info["node"])
        except ValueError:
            return _json_error(400, "node must be an integer")
        try:
            m = await asyncio.to_thread(mission.open_map)
        except Exception as exc:  # noqa: BLE001
            return _json_error(404, str(exc))
        with m:
            if not 0 <= node < len(m.nodes):
                return _json_error(404, f"node {node} is not in the map")
            try:
                imgs = m.images(node)
            except MapError as exc:  # a damaged image row: say so, never a 500
                return _json_error(409, f"node {node}'s image cannot be used: {exc}")
        if not imgs:
            return _json_error(404, f"node {node} has no image")
        return web.Response(body=imgs[0], content_type="image/jpeg")

    async def session(request):
        body = await _body(request)
        refused_pin = guard.pin(body.get("pin"), time.monotonic())
        if refused_pin is not None:
            return _json_error(*refused_pin)
        return web.json_response({"token": robot.ui_token})

    async def stop(request):
        mission.stop("operator STOP (touchscreen)")
        return web.json_response(robot.status_dict())

    async def release(request):
        mission.release_stop()
        return web.json_response(robot.status_dict())

    async def _body(request) -> dict:
        try:
            body = json.loads(await request.text(), parse_int=_bounded_int, parse_constant=_no_constant)
        except _NumberTooLarge as exc:
            raise web.HTTPBadRequest(text=json.dumps({"error": str(exc)}), content_type="application/json")
        except (ValueError, UnicodeDecodeError, RecursionError):  # JSONDecodeError is a ValueError
            raise web.HTTPBadRequest(text=json.dumps({"error": "body must be JSON"}), content_type="application/json")
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text=json.dumps({"error": "body must be a JSON object"}),
                                     content_type="application/json")
        return body

    async def plan(request):
        body = await _body(request)
        instruction = body.get("instruction")
        start, goal = body.get("start"), body.get("goal")
        for name, v in (("start", start), ("goal", goal)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                return _json_error(400, f"{name} must be a node id (integer) or null")
        result = await mission.plan_route(instruction, start, goal)
        return web.json_response(result)

    async def go(request):
        body = await _body(request)
        plan_id = body.get("plan_id")
        if not isinstance(plan_id, str) or len(plan_id) > 64:
            return _json_error(400, "plan_id must be the plan's id (a string)")
        await mission.go(plan_id)
        return web.json_response(robot.status_dict())

    async def record_start(request):
        body = await _body(request)
        await robot.recording.start(body.get("name"))
        return web.json_response(robot.status_dict())

    async def record_stop(request):
        out = await robot.recording.stop()
        return web.json_response(out)

    async def map_build(request):
        body = await _body(request)
        await robot.recording.build(body.get("logs"), body.get("name", "current"))
        return web.json_response(robot.status_dict())

    async def camera_frame(request):
        cam = robot.camera
        if cam is None or cam.latest is None:
            return _json_error(404, "no camera frame")
        return web.Response(body=cam.latest.jpeg, content_type="image/jpeg")

    async def task_run(request):
        body = await _body(request)
        await robot.tasks.start(body.get("goal"))
        return web.json_response(robot.status_dict())

    async def task_answer(request):
        body = await _body(request)
        qid, done, obs = body.get("id"), body.get("done"), body.get("observation", "")
        if not isinstance(qid, int) or isinstance(qid, bool) or not isinstance(done, bool):
            return _json_error(400, "id must be an integer and done true or false")
        robot.tasks.answer(qid, done, obs)
        return web.json_response(robot.status_dict())

    async def task_approve(request):
        body = await _body(request)
        keep = body.get("keep")
        if not isinstance(keep, bool):
            return _json_error(400, "keep must be true or false")
        kept = robot.tasks.approve(keep)
        return web.json_response({"kept": kept, **robot.status_dict()})

    async def task_stop(request):
        robot.tasks.stop()
        return web.json_response(robot.status_dict())

    app.router.add_get("/", index)
    app.router.add_post("/api/task/run", task_run)
    app.router.add_post("/api/task/answer", task_answer)
    app.router.add_post("/api/task/stop", task_stop)
    app.router.add_post("/api/task/approve", task_approve)
    app.router.add_post("/api/record/start", record_start)
    app.router.add_post("/api/record/stop", record_stop)
    app.router.add_post("/api/map/build", map_build)
    app.router.add_get("/api/camera/latest", camera_frame)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/events", events)
    app.router.add_get("/api/map", map_info)
    app.router.add_get("/api/map/image/{node}", map_image)
    app.router.add_post("/api/stop", stop)
    app.router.add_post("/api/session", session)
    app.router.add_post("/api/release", release)
    app.router.add_post("/api/route/plan", plan)
    app.router.add_post("/api/route/go", go)
    return app


def write_secret(cfg, token: str) -> Path | None:
    """Write the session token to ``[ui] secret_file`` (mode 0640, group ``secret_group`` when it exists),
    atomically, for the kiosk's launcher. Returns the path, or None (logged) when it cannot be written:
    the page then needs the PIN (``[ui] auth = "pin"``) or the token typed into its URL."""
    import grp
    import os

    if not cfg.secret_file:
        return None
    path = Path(cfg.secret_file)
    tmp = path.with_name(path.name + ".partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        if cfg.secret_group:
            try:
                os.chown(tmp, -1, grp.getgrnam(cfg.secret_group).gr_gid)
            except (KeyError, PermissionError) as exc:
                log.info("UI: secret file %s not given to group %r (%s)", path, cfg.secret_group, exc)
        os.chmod(tmp, 0o640)
        os.replace(tmp, path)
        return path
    except OSError as exc:
        log.warning("UI: cannot write the session token to [ui] secret_file %s (%s): the kiosk page will need "
                    "the PIN ([ui] auth = 'pin') or [ui] token", path, exc)
        return None


class UiServer:
    """Supervised component serving the UI on ``[ui] host:port``."""

    name = "ui"

    def __init__(self, robot):
        self.robot = robot
        self.port: int | None = None

    async def run(self) -> None:
        cfg = self.robot.config.ui
        write_secret(cfg, self.robot.ui_token)
        # an idle connection (none sent a request yet, or between requests) is closed after [ui] idle_timeout_s
        runner = web.AppRunner(build_app(self.robot), access_log=None, handle_signals=False,
                               keepalive_timeout=cfg.idle_timeout_s)
        await runner.setup()
        site = web.TCPSite(runner, cfg.host, cfg.port)
        try:
            await site.start()
            self.port = runner.addresses[0][1] if runner.addresses else cfg.port
            log.info("touchscreen UI on http://%s:%d/", cfg.host, self.port)
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
