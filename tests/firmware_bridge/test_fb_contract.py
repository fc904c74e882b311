"""Contract tests of the Jackal base link, run against the simulated MCU in-process (loopback) and on a
virtual serial port (pty), and, when marked ``hil`` and given ``--port /dev/jackal``, against a real
robot (after python-can's Back2BackTestCase). Only zero velocity is ever commanded, so the real robot does not move.

    pytest -m hil --port /dev/jackal tests/firmware_bridge/test_fb_contract.py
"""

from __future__ import annotations

import asyncio
import contextlib
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
async def _device(kind: str, tmp_path, port_option):
    if kind in ("pty", "loopback"):
        port = VirtualPort(tmp_path / "jackal") if kind == "pty" else LoopbackPort("jackal-contract")
        async with JackalMcuSim(port, KinematicPlant()) as sim:
            yield sim.port.path
    else:
        yield port_option


@pytest.fixture(params=["loopback", "pty", pytest.param("hil", marks=pytest.mark.hil)])
def backend(request, tmp_path):
    return request.param, tmp_path, request.config.getoption("--port")


def _run(backend, check, arun):
    kind, tmp_path, port_option = backend

    async def body():
        async with _device(kind, tmp_path, port_option) as path:
            async with JackalBase(path, robot=RobotConfig()) as base:
                await base.wait_connected(6.0)
                await check(base)
    arun(body)


def test_contract_handshake_and_feedback_rate(backend, arun):
    async def check(base):
        assert {"feedback", "status"} <= set(base.topics["publishers"].values())
        assert "cmd_drive" in base.topics["subscribers"]
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
        while base.latest(BaseStatus) is None and time.monotonic() < end:
            await asyncio.sleep(0.05)
        st = base.latest(BaseStatus)
        assert st is not None and 10.0 < st.battery_v < 40.0
        for _ in range(10):
            base.set_velocity(0.0, 0.0)
            await asyncio.sleep(0.02)
        assert base.last_drive is not None and base.last_drive.left == 0.0 and base.last_drive.right == 0.0
        fb = base.latest(WheelFeedback, max_age_s=0.2)
        assert fb is not None and abs(fb.left.velocity_radps) < 0.5 and abs(fb.right.velocity_radps) < 0.5
    _run(backend, check, arun)
