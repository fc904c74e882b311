"""Velocity commands and the command multiplexer: one slot per source, the highest live slot wins.

Every source of motion writes only its own slot; the control loop reads only :meth:`CommandMux.select`.
This is the ``twist_mux`` pattern of ROS navigation stacks (one input per source, a timeout and a
priority each, the highest-priority input that is not stale drives), reduced to the three sources the
onboard process has:

=========  ========  ==========================================================================
source     priority  live while
=========  ========  ==========================================================================
STOP       3         latched (the touchscreen's STOP, ``latch_stop``) until ``release_stop``: zero
TELEOP     2         the gamepad renewed its slot within the teleop timeout (deadman held)
AUTONOMY   1         a navigator renewed its slot within the autonomy timeout
=========  ========  ==========================================================================

With no live slot :meth:`CommandMux.select` gives ``None``: the control loop then cuts the base to zero
on that tick (no ramp through the acceleration limiter), so a navigator that stops renewing its command
(hung, cancelled, crashed) stops the robot ``timeout + one control period`` after its last command.

A source writes and releases only its own slot: a cancelled navigator's clean-up (a zero command in the
autonomy slot) cannot overwrite what the gamepad commands. Nothing here does I/O or imports project code; times are
``time.monotonic()`` seconds unless a clock is given.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping


class Source(enum.IntEnum):
    """Command sources; the value is the priority (higher wins)."""

    AUTONOMY = 1
    TELEOP = 2
    STOP = 3


@dataclass(frozen=True)
class Command:
    """A body velocity command: ``v_mps`` forward (m/s), ``omega_radps`` CCW yaw rate (rad/s), both in the
    robot's base_link frame (REP 103), stamped with the monotonic time it was issued and who issued it
    (``source`` a :class:`Source` name in lower case, or ``"none"``; ``sender`` the component)."""

    v_mps: float = 0.0
    omega_radps: float = 0.0
    t_mono_s: float = -math.inf
    source: str = "none"
    sender: str = ""


#: what :attr:`CommandMux.current` gives while no slot is live
IDLE = Command()


class CommandMux:
    """Per-source command slots with their own timeouts and a fixed priority.

    Parameters
    ----------
    timeouts_s : mapping of Source to float
        How long a submitted command stays live, per source (s, > 0). STOP needs none (latched).
        The app gives ``[robot] cmd_timeout_s`` to both AUTONOMY and TELEOP.
    clock : callable, optional
        Monotonic clock (s); ``time.monotonic`` by default.

    Raises
    ------
    ValueError
        A timeout that is missing, not finite or not positive for AUTONOMY or TELEOP.
    """

    def __init__(self, timeouts_s: Mapping[Source, float], *, clock: Callable[[], float] = time.monotonic):
        self.timeouts_s: dict[Source, float] = {}
        for src in (Source.AUTONOMY, Source.TELEOP):
            t = timeouts_s.get(src)
            if t is None or not math.isfinite(t) or t <= 0:
                raise ValueError(f"command mux: the {src.name.lower()} timeout must be a positive number of "
                                 f"seconds, got {t!r}")
            self.timeouts_s[src] = float(t)
        self._clock = clock
        self._slots: dict[Source, Command] = {}
        self._stop_reason: str | None = None

    # -- writers (each source its own slot) ------------------------------------------------------
    def submit(self, source: Source, v_mps: float, omega_radps: float, *, sender: str = "") -> Command:
        """Renew ``source``'s slot with a command stamped now and return it.

        Raises
        ------
        ValueError
            A non-finite velocity, or ``source`` STOP (use :meth:`latch_stop`).
        """
        if source is Source.STOP:
            raise ValueError("command mux: STOP is latched with latch_stop(), not submitted")
        if not (math.isfinite(v_mps) and math.isfinite(omega_radps)):
            raise ValueError(f"command mux: {source.name.lower()} command must be finite, "
                             f"got v={v_mps}, omega={omega_radps}")
        cmd = Command(float(v_mps), float(omega_radps), self._clock(), source.name.lower(), sender)
        self._slots[source] = cmd
        return cmd

    def release(self, source: Source, *, sender: str | None = None) -> None:
        """Empty ``source``'s slot at once (the robot stops on the next control tick unless a higher or
        other live slot drives). With ``sender`` only a command from that sender is released."""
        cmd = self._slots.get(source)
        if cmd is not None and (sender is None or cmd.sender == sender):
            del self._slots[source]

    def latch_stop(self, reason: str) -> None:
        """STOP: zero wins over every other slot until :meth:`release_stop`."""
        self._stop_reason = self._stop_reason or reason

    def release_stop(self) -> None:
        self._stop_reason = None

    def clear(self) -> None:
        """Empty every slot (a component went down); a latched STOP stays latched."""
        self._slots.clear()

    # -- the reader (the control loop) ----------------------------------------------------------
    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def live(self, source: Source, now: float | None = None) -> bool:
        """Whether ``source``'s slot holds a command that is not stale (STOP: latched)."""
        if source is Source.STOP:
            return self._stop_reason is not None
        cmd = self._slots.get(source)
        now = self._clock() if now is None else now
        return cmd is not None and now - cmd.t_mono_s <= self.timeouts_s[source]

    def select(self, now: float | None = None) -> Command | None:
        """The command of the highest-priority live slot, or None when no slot is live.

        A latched STOP gives a zero command with ``source == "stop"``; stale commands are never
        returned (their slot is emptied).
        """
        now = self._clock() if now is None else now
        if self._stop_reason is not None:
            return Command(0.0, 0.0, now, "stop", self._stop_reason)
        for src in (Source.TELEOP, Source.AUTONOMY):
            if self.live(src, now):
                return self._slots[src]
            self._slots.pop(src, None)
        return None

    @property
    def current(self) -> Command:
        """What drives now (:data:`IDLE` when nothing does): for the status screen and the recorder."""
        return self.select() or IDLE
