"""The touchscreen's STOP takes the shortest path to the wire: ``POST /api/stop`` -> route jobs' ``stop`` ->
the base driver's ``estop``, which writes the zero ``Drive`` frame from the request's handler. Checked on an
App whose drive loop never runs (the App is not started), so a zero frame can only come from the handler:
ordering of writes, no wall-clock bounds (how fast it is: ``robot-app bench estop``)."""

from __future__ import annotations

import asyncio
import dataclasses

from aiohttp.test_utils import TestClient, TestServer

from firmware_bridge import ros1
from firmware_bridge.rosserial import FrameDecoder
from robot_app.commands import Source
from robot_app.config import Config
from robot_app.service.app import App
from robot_app.ui.server import build_app


class _Wire:
    """A transport that keeps every write in order: the bytes the port would carry."""

    def __init__(self):
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data) -> None:
        self.writes.append(bytes(data))


def _drives(chunks) -> list:
    dec = FrameDecoder()
    return [ros1.Drive.deserialize(f.payload) for c in chunks for f in dec.feed(c) if f.topic_id == 105]


def _is_zero(m) -> bool:
    return m.mode == ros1.Drive.MODE_VELOCITY and (m.left, m.right) == (0.0, 0.0)


def _app(tmp_path) -> tuple[App, _Wire]:
    base = Config()
    cfg = dataclasses.replace(base, ui=dataclasses.replace(base.ui, port=0, secret_file=""),
                              paths=dataclasses.replace(base.paths, maps_dir=str(tmp_path / "maps"),
                                                        logs_dir=str(tmp_path / "logs"),
                                                        models_dir=str(tmp_path / "models")))
    app = App(cfg)
    drv = app.base
    drv._transport = wire = _Wire()  # the MCU link is up; the drive loop is not running
    drv._subs = {"cmd_drive": 105}
    drv.set_velocity(1.0, 0.0)
    t_cmd = drv._cmd[2]
    for _ in range(5):  # drive ticks by hand, on the command's own clock
        drv._send_drive(t_cmd, 0.02)
    assert _drives(wire.writes)[-1].left > 0.0
    return app, wire


def test_touchscreen_stop_writes_zero_from_its_handler(tmp_path):
    app, wire = _app(tmp_path)
    n = len(wire.writes)

    async def main():
        async with TestClient(TestServer(build_app(app))) as client:
            r = await client.post("/api/stop")
            return r.status, await r.json()

    status, body = asyncio.run(main())
    assert status == 200 and body["estop_latched"] and body["mission"]["state"] == "stopped"
    after = _drives(wire.writes[n:])
    assert len(after) == 1 and _is_zero(after[0])  # written by the handler: no drive tick ran
    assert app.commands.stop_reason is not None and app.commands.select().source == "stop"


def test_route_jobs_stop_puts_zero_on_the_wire_before_anything_else_happens(tmp_path):
    app, wire = _app(tmp_path)
    app.commands.submit(Source.AUTONOMY, 1.0, 0.0, sender="navigator")
    seen = []
    # a hook of the stop (the task jobs' stop is one): by the time it runs, the zero is on the wire
    app.mission.on_stop.append(lambda: seen.append(_drives(wire.writes)[-1]))
    app.mission.stop("operator STOP (test)")
    assert len(seen) == 1 and _is_zero(seen[0])
    assert app.base.estop_latched and app.commands.select().source == "stop"
    assert not app.commands.live(Source.AUTONOMY)
