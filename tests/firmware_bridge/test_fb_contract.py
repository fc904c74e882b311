"""Contract tests of the base link, run against the simulated MCU in-process (loopback) and on a
virtual serial port (pty), against the ``ros2`` backend with the simulated ROS 2 robot in a second process
(``robot-app sim ros2``, Cyclone DDS on the loopback interface, a random domain id), and, when marked
``hil`` and given ``--port /dev/jackal``, against a real robot (after python-can's Back2BackTestCase).
Only zero velocity is ever commanded, so the real robot does not move.

    pytest -m hil --port /dev/jackal tests/firmware_bridge/test_fb_contract.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time

import pytest

from firmware_bridge.base import JackalBase
from firmware_bridge.loopback import LoopbackPort
from firmware_bridge.readings import BaseStatus, WheelFeedback
from firmware_bridge.sim.mcu import JackalMcuSim
from firmware_bridge.sim.plant import KinematicPlant
from firmware_bridge.sim.vport import VirtualPort
from robot_app.config import RobotConfig


@contextlib.asynccontextmanager
async def _ros2_sim_process(domain_id: int):
    """``robot-app sim ros2`` in a child process on ``domain_id`` (loopback only); yields its ready line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "robot_app", "sim", "ros2", "--loopback", "--json", "--domain-id", str(domain_id),
        "--duration", "60", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30.0)
        yield json.loads(line)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


@contextlib.asynccontextmanager
async def _base(kind: str, tmp_path, port_option):
    if kind == "ros2":
        pytest.importorskip("cyclonedds")
        from firmware_bridge.factory import ros2_drivers
        from firmware_bridge.ros2.dds import loopback_config
        from robot_app.config import Ros2Config

        domain = random.randint(1, 200)
        async with _ros2_sim_process(domain) as info:
            cfg = Ros2Config(namespace=info["namespace"], domain_id=domain, gps_topic="", imu_topic="")
            async with ros2_drivers(cfg, RobotConfig(), dds_config=loopback_config())["base"] as base:
                yield base
        return
    async with _device(kind, tmp_path, port_option) as path:
        async with JackalBase(path, robot=RobotConfig()) as base:
            yield base


@contextlib.asynccontextmanager
async def _device(kind: str, tmp_path, port_option):
    if kind in ("pty", "loopback"):
        port = VirtualPort(tmp_path / "jackal") if kind == "pty" else LoopbackPort("jackal-contract")
        async with JackalMcuSim(port, KinematicPlant()) as sim:
            yield sim.port.path
    else:
        yield port_option


@pytest.fixture(params=["loopback", "pty", "ros2", pytest.param("hil", marks=pytest.mark.hil)])
def backend(request, tmp_path):
    return request.param, tmp_path, request.config.getoption("--port")


def _run(backend, check, arun):
    kind, tmp_path, port_option = backend

    async def body():
        async with _base(kind, tmp_path, port_option) as base:
            await base.wait_connected(6.0)
            await check(base)
    arun(body)


def _last_command(base) -> tuple:
    """The last command on the wire: wheel rad/s of a Drive frame (serial), (v, omega) of a Twist (ros2)."""
    if isinstance(base, JackalBase):
        return None if base.last_drive is None else (base.last_drive.left, base.last_drive.right)
    return base.last_twist


def test_contract_handshake_and_feedback_rate(backend, arun):
    async def check(base):
        if isinstance(base, JackalBase):
            assert {"feedback", "status"} <= set(base.topics["publishers"].values())
            assert "cmd_drive" in base.topics["subscribers"]
        else:
            assert base.topics == {"publishers": ["rt/j100_0000/platform/odom/filtered",
                                                  "rt/j100_0000/platform/emergency_stop",
                                                  "rt/j100_0000/platform/bms/state"],
                                   "subscribers": ["rt/j100_0000/cmd_vel"]}
        t0, stamps = time.monotonic(), []
        while time.monotonic() - t0 < 1.0:
            r = await base.recv(timeout_s=0.5)
            if isinstance(r, WheelFeedback):
                stamps.append(r.t_mono_s)
        assert stamps == sorted(stamps)
        assert 35 <= len(stamps) <= 65  # ~50 Hz
    _run(backend, check, arun)


def test_contract_status_and_zero_command(backend, arun):
    async def check(base):
        end = time.monotonic() + 2.5
        # the first status may carry no battery yet (ros2: an e-stop message before the battery state)
        while not getattr(base.latest(BaseStatus), "battery_v", 0) > 0 and time.monotonic() < end:
            await asyncio.sleep(0.05)
        st = base.latest(BaseStatus)
        assert st is not None and 10.0 < st.battery_v < 40.0
        for _ in range(10):
            base.set_velocity(0.0, 0.0)
            await asyncio.sleep(0.02)
        assert _last_command(base) == (0.0, 0.0)
        fb = base.latest(WheelFeedback, max_age_s=0.2)
        assert fb is not None and abs(fb.left.velocity_radps) < 0.5 and abs(fb.right.velocity_radps) < 0.5
    _run(backend, check, arun)
