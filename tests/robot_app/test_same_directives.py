"""One loop, two shells: the robot's shell (robot_app.nav.shell.WalkShell, asyncio, the command multiplexer)
and eval sim's driver (robot_app.sim.eval_drive.PolicyRunner, the simulation clock) step the same policy;
fed one scripted observation sequence they give the same directives, and the robot shell puts each
directive's command into the autonomy slot."""

from __future__ import annotations

import asyncio
import math

import numpy as np

from robot_app.commands import CommandMux, Source
from robot_app.config import Config, nav_options
from robot_app.interfaces import Sensors
from robot_app.nav.policy import Driver, NavPolicy, Outcome, Phase, Walk
from robot_app.nav.shell import WalkShell
from tests.robot_app.test_nav_policy import RANGE_STEPS, RATE_HZ, Robot, drive

OPTS = nav_options(Config())


def _walk() -> Walk:
    """East 0..6 m (images facing east), then back west to 2 m (images still facing east: GPS drives it),
    then north 2 m (facing north: the VNM again)."""
    xy = [(float(i), 0.0) for i in range(7)] + [(float(i), 0.0) for i in range(5, 1, -1)] + [(2.0, 1.0), (2.0, 2.0),
                                                                                            (2.0, 3.0)]
    heading = [0.0] * 7 + [0.0] * 4 + [math.pi / 2] * 3
    return Walk(len(xy), np.array(xy), np.array(heading))


def _policy() -> NavPolicy:
    return NavPolicy(OPTS.replace(goal_confirm_steps=2, min_vnm_nodes=2), _walk(), vnm_frame_rate_hz=RATE_HZ,
                     vnm_range_steps=RANGE_STEPS)


def _reference():
    """A point robot 7 m south-west of the walk's start: the approach leg, a turn, the VNM, GPS back, a turn,
    the VNM to the end."""
    pol = _policy()
    run = drive(pol, Robot(-5.0, -5.0, 0.0), _walk().xy_m, max_steps=4000)
    return pol, run


def test_the_reference_run_passes_through_every_driver():
    pol, run = _reference()
    assert run.directives[-1].outcome is Outcome.REACHED
    seen = {d.phase for d in run.directives}
    assert {Phase.APPROACH, Phase.ALIGN, Phase.VNM, Phase.GPS, Phase.DONE} <= seen
    assert {d.driver for d in run.directives} >= {Driver.GPS, Driver.TURN, Driver.VNM, Driver.STOP}
    assert [m for m, _lo, _hi in pol.stretches][:4] == ["gps", "vnm", "gps", "vnm"]


def test_robot_shell_and_eval_driver_give_the_same_directives():
    _pol, run = _reference()
    script = run.observations

    # the robot's shell, with the app's command multiplexer; held commands recorded instead of waited out
    commands = CommandMux({Source.AUTONOMY: 1.0, Source.TELEOP: 1.0})
    held = []

    class RecordingShell(WalkShell):
        async def _hold(self, v, omega, duration_s, refresh_s):
            self._command(v, omega)
            live = self.commands.select()
            held.append((v, omega, duration_s, live.source, live.sender))

    feed = iter(script)

    async def observe(policy):
        return next(feed)

    robot_policy = _policy()
    shell = RecordingShell(Sensors(), commands, pose_source=None, sender="vnm-navigator", observe=observe)
    final = asyncio.run(shell.run(robot_policy))

    # eval sim's driver, its sensors replaced by the same script
    from robot_app.sim.eval_drive import PolicyRunner

    feed2 = iter(script)
    runner = PolicyRunner(plant=None, gps=None, options=OPTS)
    runner.sense = lambda policy, t: next(feed2)
    eval_policy = _policy()
    d_eval, _t = runner.run(eval_policy, 0.0, lambda d: (d.hold_s, False))

    assert shell.directives == runner.directives == run.directives
    assert final == d_eval == run.directives[-1] and final.outcome is Outcome.REACHED
    assert robot_policy.stretches == eval_policy.stretches
    assert [(r.driver, r.walk_index, r.v_mps) for r in robot_policy.trace] == \
        [(r.driver, r.walk_index, r.v_mps) for r in eval_policy.trace]
    # every held directive went into the autonomy slot, as the directive says
    moving = [d for d in run.directives if d.outcome is None and d.hold_s > 0]
    assert [(v, w, h) for v, w, h, _src, _snd in held] == [(d.v_mps, d.omega_radps, d.hold_s) for d in moving]
    assert all(src == "autonomy" and snd == "vnm-navigator" for *_x, src, snd in held)
    # and the robot shell stopped the robot when the walk ended
    last = commands.select()
    assert last.source == "autonomy" and (last.v_mps, last.omega_radps) == (0.0, 0.0)
