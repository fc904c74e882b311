"""The command multiplexer: priorities, per-slot timeouts, who may release a slot, STOP, bad input;
and the control loop cutting a stale autonomy command to zero on the wire without a ramp."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time

import pytest

from firmware_bridge.kinematics import twist_to_wheels
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import IDLE, CommandMux, Source
from robot_app.config import Config


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def mux(autonomy=0.25, teleop=0.5):
    clock = Clock()
    return CommandMux({Source.AUTONOMY: autonomy, Source.TELEOP: teleop}, clock=clock), clock


def test_nothing_live_selects_none_and_current_is_idle():
    m, _ = mux()
    assert m.select() is None and m.current is IDLE


def test_teleop_wins_over_autonomy_and_autonomy_returns_when_the_pad_goes_quiet():
    m, clock = mux(autonomy=0.25, teleop=0.5)
    m.submit(Source.AUTONOMY, 1.0, 0.1, sender="navigator")
    m.submit(Source.TELEOP, -0.5, 0.0, sender="gamepad")
    sel = m.select()
    assert (sel.source, sel.sender, sel.v_mps) == ("teleop", "gamepad", -0.5)
    clock.t += 0.2
    m.submit(Source.AUTONOMY, 0.8, 0.0, sender="navigator")  # the navigator keeps renewing
    clock.t += 0.35  # teleop last renewed 0.55 s ago (> 0.5): stale; autonomy 0.35 s ago (> 0.25): stale
    assert m.select() is None
    m.submit(Source.AUTONOMY, 0.8, 0.0, sender="navigator")
    assert m.select().source == "autonomy" and m.select().v_mps == 0.8


def test_each_slot_times_out_on_its_own_timeout():
    m, clock = mux(autonomy=0.25, teleop=0.5)
    m.submit(Source.AUTONOMY, 1.0, 0.0)
    clock.t += 0.25
    assert m.live(Source.AUTONOMY)  # inclusive: exactly the timeout is still live
    clock.t += 0.001
    assert not m.live(Source.AUTONOMY) and m.select() is None
    m.submit(Source.TELEOP, 1.0, 0.0)
    clock.t += 0.4
    assert m.select().source == "teleop"


def test_release_empties_only_the_given_slot_and_sender():
    m, _ = mux()
    m.submit(Source.TELEOP, 0.3, 0.0, sender="gamepad")
    m.submit(Source.AUTONOMY, 1.0, 0.0, sender="vnm-navigator")
    m.release(Source.AUTONOMY)  # a cancelled navigator's clean-up: the pad keeps driving
    assert m.select().sender == "gamepad"
    m.submit(Source.AUTONOMY, 1.0, 0.0, sender="vnm-navigator")
    m.release(Source.TELEOP)
    m.release(Source.AUTONOMY, sender="navigator")  # not its command: left alone
    assert m.select().sender == "vnm-navigator"
    m.release(Source.AUTONOMY, sender="vnm-navigator")
    assert m.select() is None


def test_stop_wins_over_everything_until_released_and_clear_keeps_it():
    m, _ = mux()
    m.submit(Source.TELEOP, 0.3, 0.0)
    m.latch_stop("operator STOP (touchscreen)")
    m.latch_stop("second press")  # the first reason is kept
    sel = m.select()
    assert (sel.source, sel.v_mps, sel.omega_radps, sel.sender) == ("stop", 0.0, 0.0, "operator STOP (touchscreen)")
    m.clear()
    assert m.stop_reason == "operator STOP (touchscreen)" and m.select().source == "stop"
    m.release_stop()
    assert m.select() is None  # clear() emptied the teleop slot


@pytest.mark.parametrize("v, w", [(math.nan, 0.0), (0.0, math.inf), (-math.inf, 0.0)])
def test_non_finite_commands_are_refused(v, w):
    m, _ = mux()
    with pytest.raises(ValueError, match="must be finite"):
        m.submit(Source.AUTONOMY, v, w)
    assert m.select() is None


def test_stop_cannot_be_submitted_and_bad_timeouts_are_refused():
    m, _ = mux()
    with pytest.raises(ValueError, match="latch_stop"):
        m.submit(Source.STOP, 0.0, 0.0)
    for bad in ({Source.AUTONOMY: 0.25}, {Source.AUTONOMY: 0.0, Source.TELEOP: 0.25},
                {Source.AUTONOMY: math.nan, Source.TELEOP: 0.25}):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            CommandMux(bad)


def test_a_stale_autonomy_command_is_cut_to_zero_on_the_wire_without_a_ramp(tmp_path):
    """Through the whole app on the simulated MCU: the navigator stops renewing at 2 m/s; the frames the MCU
    receives go from full speed straight to zero (the acceleration limiter would ramp 2 m/s down over
    0.1 s, five 50 Hz frames in between), and the robot stays stopped."""
    from robot_app.service.app import App

    base = Config()
    robot = dataclasses.replace(base.robot, max_accel_mps2=2.0)  # a ramp would take a whole second

    async def main():
        async with SimulatedDevices(tmp_path, gps=False, imu=False) as sim:
            cfg = dataclasses.replace(base, robot=robot, ui=dataclasses.replace(base.ui, enabled=False),
                                      serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                                      paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "none")))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                t_end = time.monotonic() + 2.0
                while time.monotonic() < t_end:  # up to speed (2 m/s at 2 m/s^2)
                    last = app.commands.submit(Source.AUTONOMY, 2.0, 0.0, sender="test").t_mono_s
                    await asyncio.sleep(0.05)
                await asyncio.sleep(1.0)
                return last, [m for t, m in sim.mcu.drive_log if t > last], sim.plant.state()
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    last, frames, after = asyncio.run(main())
    full, _ = twist_to_wheels(2.0, 0.0, wheel_radius_m=robot.wheel_radius_m,
                              wheel_separation_m=robot.wheel_separation_m)
    lefts = [round(m.left, 6) for m in frames if m.mode == m.MODE_VELOCITY]
    first_zero = lefts.index(0.0)
    assert all(abs(x - full) < 1e-6 for x in lefts[:first_zero])  # full speed until the cut ...
    assert all(x == 0.0 for x in lefts[first_zero:]) and len(lefts) - first_zero > 20  # ... zero after it
    assert abs(after.v_mps) < 0.05
