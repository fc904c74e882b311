"""Counting and rate-limited logging of malformed input, one counter per kind.

Every place where bytes or samples come in from a device (rosserial frames, NMEA sentences, MIP packets,
DDS samples) isolates each frame: a frame that does not decode, or whose handler fails on its values, is
recorded here and skipped, and the next frame of the same chunk is handled as usual. The robot must keep
hearing its e-stop whatever came before it on the wire.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

__all__ = ["InputFaults"]


class InputFaults:
    """Per-kind counts of rejected input, with at most one warning per kind per ``interval_s``.

    Parameters
    ----------
    owner : str
        Who received the input (a driver's name); starts each log line.
    logger : logging.Logger
        Where the warnings go.
    interval_s : float
        Minimum seconds between two warnings of the same kind (default 10 s); the warning says how many
        of that kind were skipped since the previous one.
    clock : callable
        Monotonic seconds (``time.monotonic``; a simulated clock in tests).
    counts : dict, optional
        An existing ``{kind: count}`` dict to count into (kept by reference).
    """

    def __init__(self, owner: str, logger: logging.Logger, *, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, counts: dict | None = None) -> None:
        self.owner, self._log, self.interval_s, self._clock = owner, logger, float(interval_s), clock
        self.counts: dict[str, int] = {} if counts is None else counts
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}
        self.logged = 0  # warnings written (for tests of the rate limit)

    @property
    def total(self) -> int:
        """Rejected frames of every kind since creation."""
        return sum(self.counts.values())

    def record(self, kind: str, detail: str = "") -> None:
        """Count one rejected frame of ``kind``; log it unless a warning of that kind was written less than
        ``interval_s`` ago. Never raises (``detail`` is cut to 200 characters)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._since[kind] = self._since.get(kind, 0) + 1
        now = self._clock()
        if now - self._last.get(kind, -math.inf) < self.interval_s:
            return
        n, self._since[kind], self._last[kind] = self._since[kind], 0, now
        self.logged += 1
        self._log.warning("%s: skipped %d malformed %s frame(s)%s", self.owner, n, kind,
                          f"; latest: {str(detail)[:200]}" if detail else "")
