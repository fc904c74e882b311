"""Safety envelope: each fault from real reading types, and autonomy refused on the simulated robot."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from firmware_bridge.readings import BaseStatus, GpsFix, ImuReading, WheelFeedback, WheelState
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.config import Config, SafetyConfig
from robot_app.mapping.synthetic_logs import enu_to_latlon
from robot_app.sensing.safety import SafetyMonitor


class Readings:
    """The drivers' ``latest(kind, max_age_s)`` over a fixed set of readings (the monitor's only input)."""

    def __init__(self, *readings):
        self.by_kind = {type(r): r for r in readings}

    def latest(self, kind, *, max_age_s=None):
        return self.by_kind.get(kind)


def status(**kw):
    d = dict(t_mono_s=time.monotonic(), hardware_id="sim", mcu_uptime_s=1.0, battery_v=26.0, rail_12v_v=12.0,
             rail_5v_v=5.0, drive_current_a=2.0, total_current_a=3.0, drivers_active=True, estop_present=True,
             estop_stopped=False)
    d.update(kw)
    return BaseStatus(**d)


def imu(ax, ay, az):
    return ImuReading(time.monotonic(), "imu", (0.0, 0.0, 0.0), (ax, ay, az))


def wheel(fault=False):
    w = WheelState(0.0, 0.0, 1.0, 0.0, 30.0, 30.0, fault)
    return WheelFeedback(time.monotonic(), w, w, 30.0, 30.0, 0, 0)


def fix(lat, lon):
    return GpsFix(time.monotonic(), lat, lon, 10.0, 1, 9, 0.9, (1.0, 1.0, 4.0), 1, None, None)


def test_no_fault_when_level_and_charged():
    mon = SafetyMonitor(SafetyConfig())
    assert mon.check(Readings(status(), imu(0.0, 0.0, 9.81), wheel())) is None


@pytest.mark.parametrize("readings, kind", [
    ((status(battery_v=22.0),), "battery"),
    ((status(estop_stopped=True),), "hardware-estop"),
    ((status(), wheel(fault=True)), "driver-fault"),
])
def test_each_fault(readings, kind):
    f = SafetyMonitor(SafetyConfig()).check(Readings(*readings))
    assert f is not None and f.kind == kind and f.message


def test_tilt_must_persist_and_be_static():
    mon = SafetyMonitor(SafetyConfig(max_tilt_deg=25.0, tilt_s=0.5))
    tipped = Readings(imu(0.0, 6.0, 7.5))                  # 9.6 m/s^2, ~39 deg roll
    assert mon.check(tipped, now=1.0) is None
    f = mon.check(tipped, now=1.6)
    assert f.kind == "tilt" and "39 deg" in f.message
    braking = Readings(imu(-15.0, 0.0, 9.81))              # hard braking: not gravity alone
    mon2 = SafetyMonitor(SafetyConfig(tilt_s=0.0))
    assert mon2.check(braking, now=0.0) is None


def test_stall_needs_the_current_to_persist():
    mon = SafetyMonitor(SafetyConfig(max_drive_current_a=30.0, stall_s=1.0))
    hot = Readings(status(drive_current_a=45.0))
    assert mon.check(hot, now=10.0) is None
    assert mon.check(hot, now=10.5) is None
    assert mon.check(hot, now=11.1).kind == "stall"
    assert mon.check(Readings(status()), now=11.2) is None


def test_geofence_around_the_map():
    mon = SafetyMonitor(SafetyConfig(geofence_margin_m=20.0))
    lat, lon = enu_to_latlon([[0.0, 0.0], [30.0, 0.0]])
    mon.set_geofence(lat, lon)
    near_lat, near_lon = enu_to_latlon([[15.0, 10.0]])
    far_lat, far_lon = enu_to_latlon([[15.0, 40.0]])
    assert mon.check(Readings(fix(near_lat[0], near_lon[0]))) is None
    f = mon.check(Readings(fix(far_lat[0], far_lon[0])))
    assert f.kind == "geofence" and "43 m from the map" in f.message  # nearest node (0, 0) or (30, 0)


def test_low_battery_on_the_simulated_robot_refuses_autonomy(tmp_path):
    from robot_app.commands import Source
    from robot_app.jobs.mission import MissionError
    from robot_app.service.app import App

    base = Config()

    async def main_():
        async with SimulatedDevices(tmp_path, gps=False, imu=False) as sim:
            cfg = dataclasses.replace(base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                                      safety=dataclasses.replace(base.safety, battery_floor_v=27.0),
                                      ui=dataclasses.replace(base.ui, enabled=False))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                for _ in range(50):
                    if app.fault is not None:
                        break
                    await asyncio.sleep(0.1)
                assert app.fault is not None and app.fault.kind == "battery"
                assert app.status_dict()["safety"]["kind"] == "battery"
                app.mission.plan = {"id": 1, "nodes": [0]}
                app.mission.state = "confirm"
                with pytest.raises(MissionError, match="below the floor"):
                    await app.mission.go(1)
                t0 = time.monotonic()
                while time.monotonic() - t0 < 1.0:  # an autonomous command arrives anyway: the loop sends zero
                    app.commands.submit(Source.AUTONOMY, 1.0, 0.0, sender="navigator")
                    await asyncio.sleep(0.05)
                assert abs(sim.plant.state().v_mps) < 0.05
                t0 = time.monotonic()
                while time.monotonic() - t0 < 1.0:  # the operator may still drive it home on the pad
                    app.commands.submit(Source.TELEOP, 0.5, 0.0, sender="gamepad")
                    await asyncio.sleep(0.05)
                assert sim.plant.state().v_mps > 0.3
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    asyncio.run(main_())
