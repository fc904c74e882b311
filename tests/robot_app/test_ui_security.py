"""The touchscreen API's request checks (robot_app.ui.server.RequestGuard) on every endpoint, with
aiohttp's test client against the real application of a (not running) App: another origin, a forged
Host, a missing or wrong session token, a body that is not JSON, and the PIN exchange."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import stat

import pytest
from aiohttp.test_utils import TestClient, TestServer

from robot_app.config import Config
from robot_app.service.app import App
from robot_app.ui.server import build_app, write_secret

COMMANDS = [("/api/release", {}), ("/api/route/plan", {"goal": 0}), ("/api/route/go", {"plan_id": "0" * 32}),
            ("/api/record/start", {"name": "drive1"}), ("/api/record/stop", {}), ("/api/map/build", {"logs": ["x"]}),
            ("/api/task/run", {"goal": "(inspected yard)"}), ("/api/task/answer", {"id": 1, "done": True}),
            ("/api/task/stop", {}), ("/api/task/approve", {"keep": False})]
READS = ["/api/status", "/api/map", "/api/map/image/0", "/api/camera/latest"]


def _app(tmp_path, **ui) -> App:
    base = Config()
    cfg = dataclasses.replace(base, ui=dataclasses.replace(base.ui, port=0, secret_file="", **ui),
                              paths=dataclasses.replace(base.paths, maps_dir=str(tmp_path / "maps"),
                                                        logs_dir=str(tmp_path / "logs"),
                                                        models_dir=str(tmp_path / "models")))
    return App(cfg)


def _run(app: App, fn):
    async def main():
        async with TestClient(TestServer(build_app(app))) as client:
            return await fn(client, client.server.port)
    return asyncio.run(main())


def _refused(status: int) -> bool:
    return status in (401, 403, 415)


def test_commands_refuse_other_origins_forged_hosts_no_token_and_non_json(tmp_path):
    app = _app(tmp_path)
    tok = {"X-Robot-Token": app.ui_token}

    async def fn(client, port):
        out = {}
        for path, body in COMMANDS:
            out[path] = (
                (await client.post(path, json=body, headers={**tok, "Origin": "http://evil.example"})).status,
                (await client.post(path, json=body, headers={**tok, "Host": "evil.example:8080"})).status,
                (await client.post(path, json=body, headers={**tok, "Host": f"rebound.example:{port}"})).status,
                (await client.post(path, json=body)).status,
                (await client.post(path, json=body, headers={"X-Robot-Token": "wrong"})).status,
                (await client.post(path, data="{}", headers={**tok, "Content-Type": "text/plain"})).status,
                (await client.post(path, data="x=1", headers={**tok, "Content-Type":
                                                             "application/x-www-form-urlencoded"})).status,
                (await client.post(path, json=body, headers={**tok, "Origin": f"http://127.0.0.1:{port}"})).status,
            )
        return out

    for path, (evil, forged, rebound, none, wrong, text, form, own) in _run(app, fn).items():
        assert (evil, forged, rebound) == (403, 403, 403), path
        assert (none, wrong) == (401, 401), path
        assert (text, form) == (415, 415), path
        assert not _refused(own), (path, own)  # the page's own origin with the token gets through


def test_stop_is_never_blocked_from_the_screen_but_refused_from_elsewhere(tmp_path):
    app = _app(tmp_path)

    async def fn(client, port):
        return ((await client.post("/api/stop")).status,
                (await client.post("/api/stop", headers={"Origin": f"http://localhost:{port}"})).status,
                (await client.post("/api/stop", headers={"Origin": "http://evil.example"})).status,
                (await client.post("/api/stop", headers={"Host": "evil.example"})).status)

    assert _run(app, fn) == (200, 200, 403, 403)
    assert app.commands.stop_reason is not None  # latched


def test_reads_on_loopback_need_no_token_but_a_matching_host_and_the_same_site(tmp_path):
    app = _app(tmp_path)

    async def fn(client, port):
        out = {}
        for path in READS + ["/", "/static/app.js"]:
            out[path] = ((await client.get(path)).status,
                         (await client.get(path, headers={"Host": "evil.example"})).status,
                         (await client.get(path, headers={"Sec-Fetch-Site": "cross-site"})).status)
        return out

    for path, (plain, forged, cross) in _run(app, fn).items():
        assert not _refused(plain), path
        assert forged == 403, path
        assert cross == (403 if path.startswith("/api/") else plain), path


def test_away_from_loopback_reads_need_the_token_too(tmp_path):
    app = _app(tmp_path, token="s3cret-token")
    # the guard is the address's, not the socket's: build it for a LAN address and serve it on loopback
    app.config = dataclasses.replace(app.config, ui=dataclasses.replace(app.config.ui, host="10.0.0.7",
                                                                       allowed_origins=["http://127.0.0.1"]))

    async def fn(client, port):
        out = {}
        for path in READS:
            h = {"Host": f"10.0.0.7:{port}"}
            out[path] = ((await client.get(path, headers=h)).status,
                         (await client.get(path, headers={**h, "X-Robot-Token": "s3cret-token"})).status,
                         (await client.get(path, headers={**h, "Cookie": "robot_token=s3cret-token"})).status)
        out["/"] = ((await client.get("/", headers={"Host": f"10.0.0.7:{port}"})).status, None, None)
        return out

    res = _run(app, fn)
    assert not _refused(res.pop("/")[0])  # the page itself loads, to ask for the PIN
    for path, (none, header, cookie) in res.items():
        assert none == 401 and not _refused(header) and not _refused(cookie), path


def test_the_pin_gives_the_token_and_wrong_tries_lock_it(tmp_path):
    app = _app(tmp_path, auth="pin", pin="2468")

    async def fn(client, port):
        ok = await client.post("/api/session", json={"pin": "2468"})
        token = (await ok.json())["token"]
        wrong = [(await client.post("/api/session", json={"pin": "0000"})).status for _ in range(5)]
        locked = await client.post("/api/session", json={"pin": "2468"})
        cross = await client.post("/api/session", json={"pin": "2468"}, headers={"Origin": "http://evil.example"})
        return ok.status, token, wrong, locked.status, cross.status

    status, token, wrong, locked, cross = _run(app, fn)
    assert status == 200 and token == app.ui_token and len(token) >= 32
    assert wrong == [403] * 5 and locked == 429 and cross == 403
    no_pin = _app(tmp_path)
    assert _run(no_pin, lambda c, p: _status(c.post("/api/session", json={"pin": "2468"}))) == 404


async def _status(req):
    return (await req).status


def test_the_session_secret_file_is_private_and_replaced_whole(tmp_path):
    cfg = dataclasses.replace(Config().ui, secret_file=str(tmp_path / "run" / "ui-secret"), secret_group="")
    path = write_secret(cfg, "tok-1")
    assert path.read_text() == "tok-1\n" and stat.S_IMODE(os.stat(path).st_mode) == 0o640
    write_secret(cfg, "tok-2")
    assert path.read_text() == "tok-2\n" and not list(path.parent.glob("*.partial"))
    blocked = dataclasses.replace(cfg, secret_file="/proc/no-such-dir/ui-secret")
    assert write_secret(blocked, "tok") is None  # said in the log; the UI still starts


def test_go_needs_the_confirmed_plans_own_id(tmp_path):
    """Plan ids are 128 random bits (test_ui_route checks one planned through the API and its single use):
    a guessed id confirms nothing."""
    app = _app(tmp_path)
    with pytest.raises(Exception, match="plan a route first"):
        asyncio.run(app.mission.go("0" * 32))


def test_idle_connections_are_closed_after_the_idle_timeout(tmp_path):
    """Half-open connections that never send a request (or idle ones between requests) do not pile up:
    the server closes them after [ui] idle_timeout_s."""
    import socket

    from robot_app.ui.server import UiServer

    app = _app(tmp_path, idle_timeout_s=1.0)

    async def main():
        server = UiServer(app)
        task = asyncio.ensure_future(server.run())
        try:
            while server.port is None:
                await asyncio.sleep(0.01)
            loop = asyncio.get_running_loop()
            socks = []
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", server.port))
                s.settimeout(60.0)  # only a hung server reaches this
                socks.append(s)
            closed = await asyncio.gather(*(loop.run_in_executor(None, s.recv, 1) for s in socks))
            for s in socks:
                s.close()
            return closed
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    assert asyncio.run(main()) == [b""] * 20  # each one closed by the server (EOF), none left open


@pytest.mark.parametrize("body", ['{"goal": ' + "9" * 5000 + "}", '{"start": -' + "1" * 40 + "}", '{"goal": NaN}',
                                  '{"goal": Infinity}'])
def test_numbers_in_bodies_are_bounded_before_use(tmp_path, body):
    app = _app(tmp_path)

    async def fn(client, port):
        r = await client.post("/api/route/plan", data=body,
                              headers={"X-Robot-Token": app.ui_token, "Content-Type": "application/json"})
        return r.status, await r.json()

    status, out = _run(app, fn)
    assert status == 400 and ("digits" in out["error"] or "not a number" in out["error"]), out
