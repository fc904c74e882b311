"""``robot-app bench estop``: how long after STOP is pressed a zero-velocity ``Drive`` frame is on the wire.

Through the whole onboard process (:class:`robot_app.service.app.App`: touchscreen server, route jobs, command
multiplexer, control loop, base driver) on the simulated Jackal MCU over a virtual serial port in this process,
as ``bench stale-stop`` runs it. STOP is pressed the two ways it is pressed on the robot, each through the code it
takes there:

- ``touchscreen``: ``POST /api/stop`` to the app's UI server (on a free loopback port) from a client thread, as
  the kiosk's browser sends it; the press is the moment just before the request is written to the socket.
- ``hardware``: the simulated MCU reports its external stop loop open in a ``Status`` frame written at once
  (:meth:`firmware_bridge.sim.mcu.JackalMcuSim.send_status`); the press is the moment just before that frame
  is written to the port.

Each trial: a stand-in navigator renews the autonomy slot at the control rate at 1 m/s until the MCU receives
non-zero ``Drive`` frames, waits a random part of a control period (so that presses fall anywhere between two
drive ticks), presses STOP, and takes the first zero ``Drive`` frame after the press: ``wire_s`` is the press
to that frame's arrival at the simulated MCU (its receive time on the pty: the figure the goal applies to),
``written_s`` the press to the driver's write of it (``JackalBase.sent_log``). The stop is then released (the
touchscreen's release; for the hardware stop, the loop closed in a new ``Status``, then ``reset_estop``) and
the next trial starts. Goal: at most :data:`GOAL_S` (0.1 s) at the maximum, with two busy processes on the
robot's two cores (``--load 2``). The load average is printed beside the figures: every step between the
press and the write runs on the event loop, so a busy machine adds its scheduling delay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import math
import os
import random
import statistics
import tempfile
import time
from typing import Callable

from firmware_bridge.bench import percentile
from firmware_bridge.readings import BaseStatus
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import Source
from robot_app.service.app import App

__all__ = ["GOAL_S", "PATHS", "run", "format_table"]

GOAL_S = 0.1
PATHS = ("touchscreen", "hardware")
DRIVE_V_MPS = 1.0


def _summary(lat: list, written: list) -> dict:
    return {"trials": len(lat), "max_s": max(lat), "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95),
            "min_s": min(lat), "mean_s": statistics.fmean(lat), "within_goal": sum(x <= GOAL_S for x in lat),
            "written_max_s": max(written), "written_p50_s": percentile(written, 50), "wire_s": lat,
            "written_s": written}


class _StopButton:
    """The kiosk's STOP: one keep-alive HTTP connection to the UI, used from a worker thread."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5.0)

    def press(self) -> float:
        """POST /api/stop; returns the monotonic time just before the request was sent.

        Raises
        ------
        RuntimeError
            If the UI does not answer 200.
        """
        if self.conn.sock is None:  # the kiosk's connection is open before the press
            self.conn.connect()
        t = time.monotonic()
        self.conn.request("POST", "/api/stop", body=b"{}", headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST /api/stop answered {resp.status}")
        return t

    def close(self) -> None:
        self.conn.close()


async def _trials(config, paths, trials: int, progress: Callable[[str], None]) -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="robot-app-bench-") as tmp:
        async with SimulatedDevices(tmp, gps=False, imu=False) as sim:
            mcu = sim.mcu
            cfg = dataclasses.replace(
                config, robot=dataclasses.replace(config.robot, backend="serial"),
                serial=dataclasses.replace(config.serial, base_port=str(sim.ports["jackal"]), gps_source="none",
                                           imu_source="none"),
                ui=dataclasses.replace(config.ui, enabled=True, host="127.0.0.1", port=0, secret_file=""),
                teleop=dataclasses.replace(config.teleop, device=""),
                estimation=dataclasses.replace(config.estimation, enabled=False),
                camera=dataclasses.replace(config.camera, source="none"),
                paths=dataclasses.replace(config.paths, models_dir=os.path.join(tmp, "no-models")))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            period = 1.0 / cfg.robot.control_rate_hz
            driving = asyncio.Event()

            async def navigator() -> None:  # the autonomy slot renewed at the control rate while driving
                while True:
                    await driving.wait()
                    app.commands.submit(Source.AUTONOMY, DRIVE_V_MPS, 0.0, sender="bench")
                    await asyncio.sleep(period)

            nav = asyncio.ensure_future(navigator())
            button = None
            try:
                await app.base.wait_connected(10.0)
                while app.ui.port is None:
                    await asyncio.sleep(0.05)
                button = _StopButton(app.ui.port)
                for path in paths:
                    lat, written = [], []
                    for _ in range(trials):
                        driving.set()
                        t_go = time.monotonic()
                        while time.monotonic() - t_go < 5.0:  # until the MCU receives a non-zero command
                            last = mcu.drive_log[-1] if mcu.drive_log else None
                            if last is not None and last[0] > t_go + 0.1 and last[1].left != 0.0:
                                break
                            await asyncio.sleep(period)
                        else:
                            raise RuntimeError("bench estop: the robot did not start driving")
                        await asyncio.sleep(random.uniform(0.0, period))
                        if path == "touchscreen":
                            t_press = await asyncio.to_thread(button.press)
                        else:
                            mcu.estop_engaged = True
                            t_press = await mcu.send_status()
                        await asyncio.sleep(0.3)
                        driving.clear()
                        zero = next((t for t, m in list(mcu.drive_log)
                                     if t > t_press and m.left == 0.0 and m.right == 0.0), None)
                        sent = next((t for t, m in list(app.base.sent_log)
                                     if t > t_press and m.left == 0.0 and m.right == 0.0), None)
                        lat.append(math.inf if zero is None else zero - t_press)
                        written.append(math.inf if sent is None else sent - t_press)
                        await _release(app, mcu, path)
                    out[path] = _summary(lat, written)
                    r = out[path]
                    progress(f"{path}: max {r['max_s'] * 1e3:.1f} ms, p50 {r['p50_s'] * 1e3:.1f} ms, "
                             f"p95 {r['p95_s'] * 1e3:.1f} ms over {trials} presses")
            finally:
                nav.cancel()
                await asyncio.gather(nav, return_exceptions=True)
                if button is not None:
                    button.close()
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
    return out


async def _release(app: App, mcu, path: str) -> None:
    """Release the stop as the operator would: the touchscreen's release, or the hardware loop closed (a new
    Status saying so) and then the latch reset."""
    if path == "hardware":
        mcu.estop_engaged = False
        t = await mcu.send_status()
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            st = app.base.latest(BaseStatus)
            if st is not None and st.t_mono_s >= t and not st.estop_stopped:
                break
            await asyncio.sleep(0.01)
        app.base.reset_estop()
    else:
        app.mission.release_stop()
    await asyncio.sleep(0.05)


def run(config, *, paths=PATHS, trials: int = 20, progress: Callable[[str], None] = lambda _m: None) -> dict:
    """Measure STOP -> zero on the wire for each of ``paths`` ("touchscreen", "hardware"); returns
    ``{"load_avg": [1, 5, 15 min], "control_rate_hz", "goal_s", "paths": {path: {...}}}`` with per path the
    max / p50 / p95 / min seconds to the MCU's receipt, the same to the driver's write, and every trial.

    Raises
    ------
    ValueError
        For an unknown path or fewer than one trial.
    """
    for p in paths:
        if p not in PATHS:
            raise ValueError(f"bench estop: unknown path {p!r} ({', '.join(PATHS)})")
    if trials < 1:
        raise ValueError("bench estop: --trials must be >= 1")
    res = asyncio.run(_trials(config, tuple(paths), trials, progress))
    return {"load_avg": list(os.getloadavg()), "control_rate_hz": config.robot.control_rate_hz, "goal_s": GOAL_S,
            "paths": res}


def format_table(res: dict) -> str:
    la = ", ".join(f"{x:.2f}" for x in res["load_avg"])
    hogs = res.get("cpu_hogs")
    lines = [f"STOP -> zero Drive frame at the MCU (goal: max <= {res['goal_s'] * 1e3:.0f} ms; control "
             f"{res['control_rate_hz']:g} Hz; {'' if hogs is None else f'{hogs} busy processes, '}"
             f"load average {la})",
             "| STOP from | trials | max | p50 | p95 | min | within goal | written (max / p50) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path, r in res["paths"].items():
        lines.append(f"| {path} | {r['trials']} | {r['max_s'] * 1e3:.1f} ms | {r['p50_s'] * 1e3:.1f} ms | "
                     f"{r['p95_s'] * 1e3:.1f} ms | {r['min_s'] * 1e3:.1f} ms | {r['within_goal']}/{r['trials']} | "
                     f"{r['written_max_s'] * 1e3:.1f} / {r['written_p50_s'] * 1e3:.1f} ms |")
    return "\n".join(lines)
