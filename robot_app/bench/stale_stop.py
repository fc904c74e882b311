"""``robot-app bench stale-stop``: how long after its last command a silent autonomy source stops the robot.

Through the whole onboard process (:class:`robot_app.service.app.App`: command multiplexer, control loop,
base driver) on the simulated Jackal MCU over a virtual serial port: a stand-in navigator renews the
autonomy slot at 20 Hz at the given speed, then falls silent. The figure is the time from its last
command to the first zero ``Drive`` frame the simulated MCU receives (both ``time.monotonic()`` in one
process), per trial. The bound it is measured against: ``[robot] cmd_timeout_s`` (0.25 s, the stock
``cmd_vel_timeout`` of jackal_control) plus one control period (20 ms at 50 Hz), under the 0.3 s target.
The load average is printed beside the figures: the loop runs on asyncio, so a busy machine adds its
scheduling delay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import tempfile
import time
from typing import Callable

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import Source
from robot_app.service.app import App

TARGET_S = 0.3


async def _trials(config, speeds, trials: int, progress: Callable[[str], None]) -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="robot-app-bench-") as tmp:
        async with SimulatedDevices(tmp, gps=False, imu=False) as sim:
            cfg = dataclasses.replace(
                config, ui=dataclasses.replace(config.ui, enabled=False),
                serial=dataclasses.replace(config.serial, base_port=str(sim.ports["jackal"]), gps_source="none",
                                           imu_source="none"),
                teleop=dataclasses.replace(config.teleop, device=""),
                estimation=dataclasses.replace(config.estimation, enabled=False),
                camera=dataclasses.replace(config.camera, source="none"),
                paths=dataclasses.replace(config.paths, models_dir=os.path.join(tmp, "no-models")))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                for v in speeds:
                    lat = []
                    for k in range(trials):
                        t_end = time.monotonic() + 0.6
                        while time.monotonic() < t_end:
                            cmd = app.commands.submit(Source.AUTONOMY, v, 0.0, sender="bench")
                            await asyncio.sleep(0.05)
                        last = cmd.t_mono_s  # the last command's own stamp
                        await asyncio.sleep(0.6)
                        zero = next((t for t, m in list(sim.mcu.drive_log)
                                     if t > last and m.left == 0.0 and m.right == 0.0), None)
                        lat.append(float("inf") if zero is None else zero - last)
                        await asyncio.sleep(0.2)
                    out[f"{v:g}"] = {"v_mps": v, "trials": trials, "median_s": statistics.median(lat),
                                     "max_s": max(lat), "min_s": min(lat),
                                     "within_target": sum(x <= TARGET_S for x in lat), "latencies_s": lat}
                    progress(f"{v:g} m/s: median {statistics.median(lat):.3f} s, max {max(lat):.3f} s")
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
    return out


def run(config, *, speeds=(1.0, 2.0), trials: int = 20, progress: Callable[[str], None] = lambda _m: None) -> dict:
    """Measure; returns ``{"load_avg": [1, 5, 15 min], "cmd_timeout_s", "control_rate_hz", "target_s",
    "speeds": {"1": {...}, "2": {...}}}`` with per-speed median / max / min seconds and the trials."""
    robot = config.robot
    for v in speeds:
        if not 0.0 < v <= robot.max_v_mps:
            raise ValueError(f"bench stale-stop: speed {v} m/s is not within (0, [robot] max_v_mps = "
                             f"{robot.max_v_mps}]")
    res = asyncio.run(_trials(config, speeds, trials, progress))
    return {"load_avg": list(os.getloadavg()), "cmd_timeout_s": robot.cmd_timeout_s,
            "control_rate_hz": robot.control_rate_hz, "target_s": TARGET_S, "speeds": res}


def format_table(res: dict) -> str:
    la = ", ".join(f"{x:.2f}" for x in res["load_avg"])
    lines = [f"stale autonomy command -> zero on the wire (cmd_timeout_s {res['cmd_timeout_s']} s, control "
             f"{res['control_rate_hz']:g} Hz, target {res['target_s']} s; load average {la})",
             "| speed | trials | median | max | min | within target |", "| --- | --- | --- | --- | --- | --- |"]
    for r in res["speeds"].values():
        lines.append(f"| {r['v_mps']:g} m/s | {r['trials']} | {r['median_s']:.3f} s | {r['max_s']:.3f} s | "
                     f"{r['min_s']:.3f} s | {r['within_target']}/{r['trials']} |")
    return "\n".join(lines)
