"""The drive-command rules every base driver applies, whatever carries the command (rosserial or DDS).

:meth:`DriveCommandGate.set_velocity` stores ``(v m/s, omega rad/s)`` with its time; each drive tick asks
:meth:`DriveCommandGate._gate_step` for the twist to send: the command clipped to the speed and
acceleration limits (:class:`~firmware_bridge.kinematics.VelocityLimiter`), or zero at once (not ramped)
when it is older than ``cmd_timeout_s`` (the app's ``[robot] cmd_timeout_s``, 0.25 s, as the stock Jackal
``cmd_vel_timeout``) or an e-stop is latched. :meth:`estop` sends a zero command at once and latches
zero until :meth:`reset_estop`, which a driver refuses while its platform still reports the stop engaged
(:meth:`_engaged_estop`). docs/protocols.md, "Drive commands, timeout and e-stop".
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time

from firmware_bridge.errors import EStopLatched
from firmware_bridge.kinematics import VelocityLimiter

log = logging.getLogger(__name__)

__all__ = ["DriveCommandGate"]


class DriveCommandGate:
    """Mixin of the base drivers: the command, its staleness and the e-stop latch.

    A driver calls :meth:`_init_gate` in its constructor (``robot``: anything with ``max_v_mps``,
    ``max_omega_radps``, ``max_accel_mps2``, ``max_alpha_radps2``, ``cmd_timeout_s``, ``control_rate_hz``),
    runs :meth:`_drive_loop` as a task while its link is up, implements ``_send_drive(now, dt_s)`` (which
    sends :meth:`_gate_step`'s twist) and :meth:`_send_zero_now` (a zero command at once, for :meth:`estop`),
    and overrides :meth:`_engaged_estop`; it has a ``name``.
    """

    name = "base"

    def _init_gate(self, robot) -> None:
        self.robot = robot
        self._limiter = VelocityLimiter(max_v_mps=robot.max_v_mps, max_omega_radps=robot.max_omega_radps,
                                        max_accel_mps2=robot.max_accel_mps2, max_alpha_radps2=robot.max_alpha_radps2)
        self._cmd = (0.0, 0.0, -math.inf)  # v, omega, monotonic time
        self._estop_reason: str | None = None
        self._stale_logged = False
        self.tick_lateness_s: collections.deque = collections.deque(maxlen=5000)  # drive tick vs schedule, s

    def set_velocity(self, v_mps: float, omega_radps: float) -> None:
        """Command body velocity (m/s forward, rad/s CCW); it must be renewed within ``cmd_timeout_s``.

        Raises
        ------
        EStopLatched
            While the e-stop latch is set.
        ValueError
            For NaN or infinite values.
        """
        if not (math.isfinite(v_mps) and math.isfinite(omega_radps)):
            raise ValueError(f"velocity command must be finite, got v={v_mps}, omega={omega_radps}")
        if self._estop_reason is not None:
            raise EStopLatched(f"drive command refused: e-stop latched ({self._estop_reason}); call reset_estop()")
        self._cmd = (float(v_mps), float(omega_radps), time.monotonic())

    def _halt_command(self) -> None:
        """Zero the command now and forget the ramp (the drivers' ``halt`` then sends a zero at once)."""
        self._cmd = (0.0, 0.0, time.monotonic())
        self._limiter.reset()

    def estop(self, reason: str = "software e-stop") -> None:
        """Latch zero velocity and send a zero command at once; only :meth:`reset_estop` clears the latch.

        The zero goes out from this call (:meth:`_send_zero_now`: written to the port, or published), not at
        the next drive tick and not through a queued task: STOP from the touchscreen's handler and the MCU's
        hardware e-stop from the receive callback of its ``Status`` frame put zero on the wire before they
        return. Later ticks keep sending zero while the latch holds. Never raises.
        """
        first = self._estop_reason is None
        self._estop_reason = self._estop_reason or reason
        self._cmd = (0.0, 0.0, -math.inf)
        self._limiter.reset()
        try:
            self._send_zero_now()
        except Exception:  # noqa: BLE001 - the latch holds and every drive tick sends zero anyway
            log.exception("%s: could not send the e-stop's zero command at once", self.name)
        if first:  # logged after the write: the log's I/O must not delay the stop
            log.warning("%s: e-stop latched: %s", self.name, reason)

    def _send_zero_now(self) -> None:
        """Send a zero velocity command now, outside the drive loop, when the link is up (driver hook;
        :meth:`estop` calls it after latching)."""

    def _engaged_estop(self) -> str | None:
        """What still holds the robot stopped (a hardware or platform e-stop), or None."""
        return None

    def reset_estop(self) -> None:
        """Clear the e-stop latch.

        Raises
        ------
        EStopLatched
            If the platform still reports its e-stop engaged (:meth:`_engaged_estop`).
        """
        engaged = self._engaged_estop()
        if engaged:
            raise EStopLatched(f"cannot reset: the {engaged} is still engaged")
        self._estop_reason = None
        self._cmd = (0.0, 0.0, -math.inf)
        log.info("%s: e-stop reset", self.name)

    @property
    def estop_latched(self) -> bool:
        return self._estop_reason is not None

    def _gate_step(self, now: float, dt_s: float) -> tuple:
        """The twist ``(v m/s, omega rad/s)`` to send on this drive tick (``now``: monotonic s; ``dt_s``: the
        tick's period): zero at once when the command is stale or an e-stop is latched (a stale command
        must not keep the robot rolling for the ramp time), else the command through the limiter."""
        v_cmd, w_cmd, t_cmd = self._cmd
        stale = now - t_cmd > self.robot.cmd_timeout_s
        if stale and not self._stale_logged and t_cmd > -math.inf and self._estop_reason is None:
            log.warning("%s: no drive command for %.2f s: stopping", self.name, now - t_cmd)
        self._stale_logged = stale
        if self._estop_reason is not None or stale:
            self._limiter.reset()
            return 0.0, 0.0
        return self._limiter.step(v_cmd, w_cmd, dt_s)

    async def _drive_loop(self) -> None:
        """Call ``_send_drive(now, dt_s)`` at ``control_rate_hz`` on a fixed schedule (lateness in
        ``tick_lateness_s``); a loop that fell more than a period behind (suspend, debugger) re-anchors
        instead of bursting. Runs until cancelled."""
        period = 1.0 / self.robot.control_rate_hz
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        last = time.monotonic()
        while True:
            t_next += period
            delay = t_next - loop.time()
            if delay < -period:
                t_next = loop.time()
                delay = 0.0
            await asyncio.sleep(max(delay, 0.0))
            now = time.monotonic()
            self.tick_lateness_s.append(loop.time() - t_next)
            self._send_drive(now, now - last)
            last = now
