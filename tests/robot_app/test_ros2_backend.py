"""The onboard process on the ``ros2`` backend: the simulated ROS 2 robot in a second process
(``robot-app sim ros2``, loopback only, a random domain id), the app's drivers, camera, safety monitor and
control loop on top of it, as on the serial backend."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import sys
import time

import pytest

pytest.importorskip("cyclonedds")

from firmware_bridge.readings import BaseStatus, GpsFix, ImuReading, WheelFeedback  # noqa: E402
from firmware_bridge.ros2.dds import loopback_config  # noqa: E402
from robot_app.commands import Source  # noqa: E402
from robot_app.config import Config  # noqa: E402
from robot_app.service.app import App  # noqa: E402


async def _until(pred, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not pred() and time.monotonic() < end:
        await asyncio.sleep(0.05)
    return bool(pred())


def test_app_runs_on_the_ros2_backend(tmp_path):
    domain = random.randint(1, 200)
    cmd_log = tmp_path / "cmd.jsonl"
    base = Config()
    cfg = dataclasses.replace(
        base, robot=dataclasses.replace(base.robot, backend="ros2"),
        serial=dataclasses.replace(base.serial, gps_source="serial", imu_source="mip"),
        ros2=dataclasses.replace(base.ros2, domain_id=domain, cyclonedds_config=loopback_config()),
        camera=dataclasses.replace(base.camera, source="ros2"),
        ui=dataclasses.replace(base.ui, enabled=False), teleop=dataclasses.replace(base.teleop, device=""),
        estimation=dataclasses.replace(base.estimation, enabled=False),
        paths=dataclasses.replace(base.paths, models_dir=os.path.join(tmp_path, "no-models")))

    async def body():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "robot_app", "sim", "ros2", "--loopback", "--json", "--camera", "--domain-id",
            str(domain), "--duration", "60", "--cmd-log", str(cmd_log), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        try:
            json.loads(await asyncio.wait_for(proc.stdout.readline(), 30.0))
            app = App(cfg)
            assert type(app.base).__name__ == "Ros2Base" and type(app.gps).__name__ == "Ros2Gps"
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                assert await _until(lambda: getattr(app.base.latest(BaseStatus), "battery_v", 0) > 0
                                    and app.camera.latest is not None
                                    and app.gps.latest(GpsFix) is not None)
                assert app.imu.latest(ImuReading) is not None and app.base.latest(WheelFeedback) is not None
                assert app.camera.latest.jpeg[:2] == b"\xff\xd8"
                status = app.status_dict()
                assert status["mcu_link"] and status["battery_v"] == pytest.approx(26.5)
                assert status["gps"]["lat_deg"] == pytest.approx(52.5148, abs=1e-3)
                assert app.safety.check(app.base, gps=app.gps, imu=app.imu) is None
                for _ in range(10):
                    cmd = app.commands.submit(Source.AUTONOMY, 0.4, 0.0, sender="test")
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.7)  # silent autonomy source: stale after cmd_timeout_s
                recs = [json.loads(x) for x in cmd_log.read_text().splitlines()]
                assert any(r["v_mps"] > 0.0 for r in recs if r["t_mono_s"] <= cmd.t_mono_s + 0.05)
                late = [(r["v_mps"], r["omega_radps"]) for r in recs if r["t_mono_s"] > cmd.t_mono_s + 0.35]
                assert late and set(late) == {(0.0, 0.0)}
                fb = app.base.latest(WheelFeedback, max_age_s=0.5)
                assert fb is not None and abs(fb.left.velocity_radps) < 0.05
            finally:
                app.request_stop()
                assert await asyncio.wait_for(task, 10.0) == 0
        finally:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()

    asyncio.run(body())
