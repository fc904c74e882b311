"""Gamepad teleoperation with a deadman button (Linux input events through ``evdev``).

The Jackal ships a PS4-style pad. While the deadman button is held, the sticks command (v, omega):
the linear axis scales to ``[teleop] max_v_mps`` (``turbo_v_mps`` with the turbo button), the angular
axis to ``max_omega_radps`` (``turbo_omega_radps``), both clipped to the ``[robot]`` limits, with a dead
zone around the centre. Holding the deadman overrides autonomy at once: the app's command is taken
(source ``"teleop"``) and a running route ends, counted as a disengagement (LM-Nav Sec. 5 metric).
Releasing the deadman sends zero at once; from then on the pad writes nothing, so the control loop's
command timeout keeps the robot stopped. The pad vanishing (unplugged, out of Bluetooth range) stops the
robot the same way; the component then waits for the pad to come back (an absent pad is not a fault:
autonomy goes on without one).

Axis values are normalised with the device's own ``absinfo`` range (PS4 sticks: 0..255, centre 128).
Linux pads report "stick up" as negative Y, hence ``invert_linear``; "stick right" positive X, while a
right turn is negative omega (REP-103), hence ``invert_angular``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from dataclasses import dataclass

from robot_app.commands import Source

log = logging.getLogger(__name__)

__all__ = ["AxisRange", "GamepadMapper", "TeleopComponent", "TeleopCommand"]

EV_KEY, EV_ABS = 0x01, 0x03  # linux/input-event-codes.h (also evdev.ecodes.EV_KEY / EV_ABS)
PAD_POLL_S = 0.5  # how often a missing pad's device node is looked for


@dataclass(frozen=True)
class AxisRange:
    """Raw range of one absolute axis (evdev ``AbsInfo.min`` / ``max``)."""

    min: int
    max: int


@dataclass(frozen=True)
class TeleopCommand:
    """What the pad asks for now: ``active`` while the deadman is held; (v m/s, omega rad/s CCW)."""

    active: bool
    v_mps: float
    omega_radps: float


class GamepadMapper:
    """Input events -> :class:`TeleopCommand`. Pure: no device, no clock.

    Parameters
    ----------
    teleop : TeleopConfig
        ``[teleop]`` section (button and axis codes, scaling, dead zone).
    robot : RobotConfig
        ``[robot]`` section: the hard limits every command is clipped to.
    axes : dict of int to AxisRange
        Ranges of the linear and angular axes; a missing one defaults to -32768..32767 (Xbox-style).
    """

    def __init__(self, teleop, robot, axes: dict | None = None):
        self.cfg, self.robot = teleop, robot
        self.axes = dict(axes or {})
        self.pressed: set[int] = set()
        self.values: dict[int, float] = {}

    def on_event(self, event) -> None:
        """Fold in one ``evdev.InputEvent`` (``type``, ``code``, ``value``); other types are ignored."""
        if event.type == EV_KEY:
            if event.value:  # 1 press, 2 autorepeat
                self.pressed.add(event.code)
            else:
                self.pressed.discard(event.code)
        elif event.type == EV_ABS:
            self.values[event.code] = self._normalise(event.code, event.value)

    def _normalise(self, code: int, raw: int) -> float:
        rng = self.axes.get(code) or AxisRange(-32768, 32767)
        half = (rng.max - rng.min) / 2.0
        if half <= 0:
            return 0.0
        x = max(-1.0, min(1.0, (raw - (rng.min + half)) / half))
        dz = self.cfg.deadzone
        if abs(x) <= dz:
            return 0.0
        return math.copysign((abs(x) - dz) / (1.0 - dz), x)  # continuous at the dead-zone edge

    def release_all(self) -> None:
        """Forget held buttons and axis positions (the device went away)."""
        self.pressed.clear()
        self.values.clear()

    def command(self) -> TeleopCommand:
        """The command for the current pad state (zero and inactive without the deadman)."""
        c = self.cfg
        if c.deadman_button not in self.pressed:
            return TeleopCommand(False, 0.0, 0.0)
        turbo = c.turbo_button in self.pressed
        lin = self.values.get(c.linear_axis, 0.0) * (-1.0 if c.invert_linear else 1.0)
        ang = self.values.get(c.angular_axis, 0.0) * (-1.0 if c.invert_angular else 1.0)
        vmax = min(c.turbo_v_mps if turbo else c.max_v_mps, self.robot.max_v_mps)
        wmax = min(c.turbo_omega_radps if turbo else c.max_omega_radps, self.robot.max_omega_radps)
        return TeleopCommand(True, lin * vmax, ang * wmax)


def open_gamepad(path: str):
    """Open the evdev device and read its axis ranges.

    Raises
    ------
    FileNotFoundError
        If the device does not exist (pad not connected).
    PermissionError
        If the process lacks access (the service user needs the ``input`` group).
    """
    import evdev

    dev = evdev.InputDevice(path)
    ranges = {}
    for code, info in dev.capabilities(absinfo=True).get(EV_ABS, []):
        ranges[code] = AxisRange(info.min, info.max)
    return dev, ranges


class TeleopComponent:
    """Supervised component (``teleop``): reads the pad, drives the teleop command slot while the deadman is held.

    ``config`` gives ``[teleop]`` and ``[robot]``; ``commands`` is the command multiplexer; ``mission``
    (:class:`robot_app.jobs.mission.MissionExecutive`, or None) is the route job a deadman press takes over
    from (counted as a disengagement).
    """

    name = "teleop"

    def __init__(self, config, commands, mission=None):
        self.config, self.commands, self.mission = config, commands, mission
        self.mapper: GamepadMapper | None = None
        self.engaged = False
        self.takeovers = 0

    def handle(self, events) -> None:
        """Apply a batch of input events, then update the app's command at once."""
        for ev in events:
            self.mapper.on_event(ev)
        self.tick()

    def tick(self) -> None:
        """Renew the teleop slot while the deadman is held; release it when the deadman is released (the
        control loop then cuts the base to zero on its next tick, unless autonomy is live)."""
        cmd = self.mapper.command()
        if cmd.active:
            mission = self.mission
            if not self.engaged or (mission is not None and mission.state == "running"):
                # first press, or a route was started (Go) while the deadman is held: the pad wins
                self.engaged = True
                self._take_over()
            self.commands.submit(Source.TELEOP, cmd.v_mps, cmd.omega_radps, sender="gamepad")
        elif self.engaged:
            self.engaged = False
            self.commands.release(Source.TELEOP)
            log.info("teleop: deadman released, robot stopped")

    def _take_over(self) -> None:
        mission = self.mission
        if mission is not None and mission.state == "running":
            mission.abort("operator took over (gamepad)")
            if mission.state == "running":  # nothing was driving after all: no disengagement to count
                return
            mission.disengagements += 1
            log.warning("teleop: operator took over the running route (disengagement %d)", mission.disengagements)
        else:
            log.info("teleop: deadman held, operator driving")
        self.takeovers += 1

    def release(self) -> None:
        """The pad is gone: stop if it was driving."""
        if self.mapper is not None:
            self.mapper.release_all()
        if self.engaged:
            self.engaged = False
            self.commands.release(Source.TELEOP)

    @staticmethod
    async def _wait_for_device(path: str) -> None:
        """A pad that is off or out of range is normal: wait for it without failing the component
        (a failing component stops the robot, which would interrupt autonomy for an absent pad)."""
        if os.path.exists(path):
            return
        log.warning("teleop: no gamepad at %s yet; waiting for it", path)
        while not os.path.exists(path):
            await asyncio.sleep(PAD_POLL_S)
        await asyncio.sleep(PAD_POLL_S)  # udev sets the node's group after creating it

    async def run(self) -> None:
        """Wait for the pad, drive from it until it goes away, then wait for it again."""
        while True:
            await self._session()
            await asyncio.sleep(PAD_POLL_S)  # the node may linger a moment after an unplug

    async def _session(self) -> None:
        cfg = self.config
        await self._wait_for_device(cfg.teleop.device)
        dev, ranges = await asyncio.to_thread(open_gamepad, cfg.teleop.device)
        log.info("teleop: %s (%s)", dev.path, dev.name)
        self.mapper = GamepadMapper(cfg.teleop, cfg.robot, ranges)
        loop = asyncio.get_running_loop()
        gone: asyncio.Future = loop.create_future()

        def readable() -> None:
            try:
                self.handle(list(dev.read()))
            except BlockingIOError:
                pass
            except OSError as exc:  # ENODEV: unplugged
                loop.remove_reader(dev.fd)
                log.warning("teleop: gamepad %s went away (%s)", cfg.teleop.device, exc)
                if not gone.done():
                    gone.set_result(None)

        loop.add_reader(dev.fd, readable)
        try:
            period = 1.0 / cfg.teleop.rate_hz
            while not gone.done():
                self.tick()
                await asyncio.wait({gone}, timeout=period)
        finally:
            loop.remove_reader(dev.fd)
            self.release()
            dev.close()
