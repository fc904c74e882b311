"""The in-process loopback backend (``inproc://NAME``): same simulators, no pty."""

from __future__ import annotations

import asyncio
import time

import pytest

from firmware_bridge.base import JackalBase
from firmware_bridge.errors import BridgeTimeout, DeviceNotFound
from firmware_bridge.gps import NmeaGps
from firmware_bridge.loopback import LoopbackPort, connect
from firmware_bridge.readings import GpsFix
from firmware_bridge.sim.gps import GpsReceiverSim
from firmware_bridge.sim.mcu import JackalMcuSim
from firmware_bridge.sim.plant import KinematicPlant
from robot_app.config import RobotConfig


def test_reconnect_and_drive_over_loopback(arun):
    async def body():
        sim = JackalMcuSim(LoopbackPort("jackal-lb"), KinematicPlant())
        async with sim, JackalBase("inproc://jackal-lb", robot=RobotConfig(), reconnect_min_s=0.05) as drv:
            await drv.wait_connected(3.0)
            drv.set_velocity(0.4, 0.0)
            await asyncio.sleep(0.1)
            assert sim.wheel_cmd[0] > 0
            sim.unplug()
            end = time.monotonic() + 2.0
            while drv.connected and time.monotonic() < end:
                await asyncio.sleep(0.01)
            assert not drv.connected
            sim.replug()
            await drv.wait_connected(3.0)
            assert drv.sessions == 2
    arun(body)


def test_gps_replay_over_loopback(arun, dev_data):
    from firmware_bridge.sim.gps import read_nmea_log

    async def body():
        lines = read_nmea_log(dev_data / "nmea" / "garmin15x.log")
        port = LoopbackPort("gps-lb")
        async with port, NmeaGps(port.path) as gps:
            await gps.wait_connected(1.0)
            async with GpsReceiverSim(port, lines=lines, lines_per_s=1000.0) as sim:
                await asyncio.wait_for(sim.finished.wait(), 3.0)
                await asyncio.sleep(0.05)
            assert gps.decoder.stats.lines == len(lines) and gps.decoder.stats.fixes == 7
            assert isinstance(gps.latest(GpsFix), GpsFix)
    arun(body)


def test_missing_and_busy_ports(arun):
    async def body():
        with pytest.raises(DeviceNotFound, match="no in-process device"):
            connect("inproc://nobody", asyncio.Protocol())
        async with LoopbackPort("busy") as port:
            with pytest.raises(DeviceNotFound, match="already in use"):
                LoopbackPort("busy").open()
            async with NmeaGps(port.path) as first:
                await first.wait_connected(1.0)
                async with NmeaGps(port.path, reconnect_min_s=0.05) as second:
                    with pytest.raises(BridgeTimeout, match="already open"):
                        await second.wait_connected(0.2)
    arun(body)


def test_subscribers_each_get_every_reading_of_their_kinds(arun):
    from firmware_bridge.readings import BaseStatus, WheelFeedback

    async def body():
        sim = JackalMcuSim(LoopbackPort("jackal-sub"), KinematicPlant())
        async with sim, JackalBase("inproc://jackal-sub", robot=RobotConfig()) as drv:
            everything = drv.subscribe()
            wheels = drv.subscribe(kinds=(WheelFeedback,), maxsize=5)
            await drv.wait_connected(3.0)
            await asyncio.sleep(0.5)
            assert wheels.qsize() == 5 and drv.dropped_readings > 0  # drop-oldest, bounded
            got = [wheels.get_nowait() for _ in range(5)]
            assert all(isinstance(r, WheelFeedback) for r in got)
            assert [r.t_mono_s for r in got] == sorted(r.t_mono_s for r in got)
            kinds = set()
            while not everything.empty():
                kinds.add(type(everything.get_nowait()))
            assert WheelFeedback in kinds and len(kinds) >= 3
            drv.unsubscribe(wheels)
            await asyncio.sleep(0.1)
            assert wheels.empty()
            assert BaseStatus not in {type(r) for r in got}
    arun(body)
