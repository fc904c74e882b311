"""``robot-app bench stale-stop``: how long after its last command a silent autonomy source stops the robot.

Through the whole onboard process (:class:`robot_app.service.app.App`: command multiplexer, control loop,
base driver), per backend: ``serial``, the simulated Jackal MCU over a virtual serial port in this process
(the figure ends at the first zero ``Drive`` frame it receives); ``ros2``, the simulated ROS 2 robot in a
child process (``robot-app sim ros2``, Cyclone DDS on the loopback interface, a random domain id; the
figure ends at the first zero ``Twist`` it receives, from its ``--cmd-log``; CLOCK_MONOTONIC is
system-wide on Linux, so both processes stamp on one clock). A stand-in navigator renews the autonomy slot
at 20 Hz at the given speed, then falls silent; the figure is the time from its last command to that
first zero command at the robot, per trial. The bound it is measured against: ``[robot] cmd_timeout_s``
(0.25 s, the stock ``cmd_vel_timeout`` of jackal_control) plus one control period (20 ms at 50 Hz), under
the 0.3 s target. The load average is printed beside the figures: the loop runs on asyncio, so a busy
machine adds its scheduling delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from firmware_bridge.errors import BridgeError
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import Source
from robot_app.service.app import App

TARGET_S = 0.3
BACKENDS = ("serial", "ros2")


@contextlib.asynccontextmanager
async def _serial_rig(config, tmp: str):
    """The simulated MCU on a pty; yields (config pointing at it, first_zero(after_s) -> receipt time)."""
    async with SimulatedDevices(tmp, gps=False, imu=False) as sim:
        cfg = dataclasses.replace(config, robot=dataclasses.replace(config.robot, backend="serial"),
                                  serial=dataclasses.replace(config.serial, base_port=str(sim.ports["jackal"]),
                                                             gps_source="none", imu_source="none"))

        def first_zero(after: float):
            return next((t for t, m in list(sim.mcu.drive_log) if t > after and m.left == 0.0 and m.right == 0.0),
                        None)
        yield cfg, first_zero


@contextlib.asynccontextmanager
async def _ros2_rig(config, tmp: str):
    """``robot-app sim ros2`` in a child process (loopback, random domain); yields as :func:`_serial_rig`."""
    from firmware_bridge.ros2.dds import loopback_config

    domain = random.randint(1, 200)
    cmd_log = Path(tmp) / "cmd.jsonl"
    argv = [sys.executable, "-m", "robot_app"] + (["--config", config.source] if config.source else []) + [
        "sim", "ros2", "--loopback", "--json", "--domain-id", str(domain), "--namespace", config.ros2.namespace,
        "--cmd-log", str(cmd_log)]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    try:
        try:
            json.loads(await asyncio.wait_for(proc.stdout.readline(), 30.0))
        except (asyncio.TimeoutError, ValueError) as exc:
            raise BridgeError(f"the simulated ROS 2 robot did not start: {exc!r}") from exc
        cfg = dataclasses.replace(
            config, robot=dataclasses.replace(config.robot, backend="ros2"),
            serial=dataclasses.replace(config.serial, gps_source="none", imu_source="none"),
            ros2=dataclasses.replace(config.ros2, domain_id=domain, cyclonedds_config=loopback_config()))

        def first_zero(after: float):
            try:
                lines = cmd_log.read_text().splitlines()
            except OSError:
                return None
            for rec in map(json.loads, lines):
                if rec["t_mono_s"] > after and rec["v_mps"] == 0.0 and rec["omega_radps"] == 0.0:
                    return rec["t_mono_s"]
            return None
        yield cfg, first_zero
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def _trials(config, speeds, trials: int, progress: Callable[[str], None], backend: str = "serial") -> dict:
    out: dict = {}
    rig = _ros2_rig if backend == "ros2" else _serial_rig
    with tempfile.TemporaryDirectory(prefix="robot-app-bench-") as tmp:
        async with rig(config, tmp) as (cfg, first_zero):
            cfg = dataclasses.replace(
                cfg, ui=dataclasses.replace(config.ui, enabled=False),
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
                        zero = first_zero(last)
                        lat.append(float("inf") if zero is None else zero - last)
                        await asyncio.sleep(0.2)
                    out[f"{v:g}"] = {"v_mps": v, "trials": trials, "median_s": statistics.median(lat),
                                     "max_s": max(lat), "min_s": min(lat),
                                     "within_target": sum(x <= TARGET_S for x in lat), "latencies_s": lat}
                    progress(f"{backend}, {v:g} m/s: median {statistics.median(lat):.3f} s, max {max(lat):.3f} s")
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)
    return out


def run(config, *, speeds=(1.0, 2.0), trials: int = 20, backend: str = "serial",
        progress: Callable[[str], None] = lambda _m: None) -> dict:
    """Measure through ``backend`` ("serial" or "ros2"; the latter needs the ros2 extra); returns
    ``{"backend", "load_avg": [1, 5, 15 min], "cmd_timeout_s", "control_rate_hz", "target_s",
    "speeds": {"1": {...}, "2": {...}}}`` with per-speed median / max / min seconds and the trials.

    Raises
    ------
    ValueError
        For an unknown backend or a speed outside (0, ``[robot] max_v_mps``].
    BridgeError
        When the simulated ROS 2 robot does not start.
    """
    if backend not in BACKENDS:
        raise ValueError(f"bench stale-stop: unknown backend {backend!r} ({', '.join(BACKENDS)})")
    robot = config.robot
    for v in speeds:
        if not 0.0 < v <= robot.max_v_mps:
            raise ValueError(f"bench stale-stop: speed {v} m/s is not within (0, [robot] max_v_mps = "
                             f"{robot.max_v_mps}]")
    res = asyncio.run(_trials(config, speeds, trials, progress, backend))
    return {"backend": backend, "load_avg": list(os.getloadavg()), "cmd_timeout_s": robot.cmd_timeout_s,
            "control_rate_hz": robot.control_rate_hz, "target_s": TARGET_S, "speeds": res}


def format_table(res: dict) -> str:
    la = ", ".join(f"{x:.2f}" for x in res["load_avg"])
    lines = [f"{res.get('backend', 'serial')} backend: stale autonomy command -> zero on the wire "
             f"(cmd_timeout_s {res['cmd_timeout_s']} s, control "
             f"{res['control_rate_hz']:g} Hz, target {res['target_s']} s; load average {la})",
             "| speed | trials | median | max | min | within target |", "| --- | --- | --- | --- | --- | --- |"]
    for r in res["speeds"].values():
        lines.append(f"| {r['v_mps']:g} m/s | {r['trials']} | {r['median_s']:.3f} s | {r['max_s']:.3f} s | "
                     f"{r['min_s']:.3f} s | {r['within_target']}/{r['trials']} |")
    return "\n".join(lines)
