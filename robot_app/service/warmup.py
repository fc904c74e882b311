"""Warm start: load the planning stack in a worker thread right after READY.

Without it the first route plan after boot pays the walk-search kernels' load (numba's JIT kernels:
0.8-1.0 s from the on-disk cache, about 11 s with a cold cache; the compiled kernels of
``robot-app kernels build``, chosen by :func:`use_search_kernels` before READY: milliseconds, and no numba
in the process) and the first task job pays the ``unified_planning.engines`` import
(about 1 s). :class:`WarmUp` runs those steps one after another in a worker thread
(``asyncio.to_thread``), never on the event loop: STOP, the watchdog and the control loop keep running
(the thread shares the GIL, which Python hands over every 5 ms). A request that arrives first simply
pays the remaining load itself; numba and Python's import lock make a concurrent first use safe.

The status screen shows :meth:`WarmUp.status` (``status_dict()["warm_up"]``) while it runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Sequence

from core import search
from core.lasp import planner

log = logging.getLogger(__name__)


def use_search_kernels(config) -> dict:
    """Plan with the compiled kernels in ``[paths] kernels_dir`` when they are current, else numba's JIT
    kernels (:func:`core.search.use_compiled_kernels`); logs which and why. Returns its dict."""
    info = search.use_compiled_kernels(config.paths.kernels_dir)
    if info["backend"] == "compiled":
        log.info("walk search: %s", info["detail"])
    else:  # none built (a desk, the simulator): INFO; a stale or broken build on the robot: WARNING
        none_built = any(m in info["detail"] for m in ("no compiled kernels in", "no compiled kernels asked for"))
        level = logging.INFO if none_built else logging.WARNING
        log.log(level, "walk search: %s (the compiled ones save about 100 MB: robot-app kernels build)",
                info["detail"])
    return info


def search_kernels_status() -> dict:
    """``{"backend": "compiled" | "jit" | None, "detail"}`` for the status JSON (None: not loaded yet)."""
    return search.kernels_info()


def default_steps(config) -> list[tuple[str, Callable[[], None]]]:
    """The service's warm-up steps, in order: (what the status screen says, the function to call)."""
    return [("route planner (walk search kernels)", search.warm_up),
            ("task planner", lambda: planner.warm_up(config.lasp.engine))]


class WarmUp:
    """Runs named warm-up steps once, in a worker thread; a failing step is logged and skipped.

    Attributes
    ----------
    state : str
        ``"pending"`` (not started), ``"warming"``, ``"done"`` (every step ran; some may have failed,
        see :meth:`status`).
    """

    def __init__(self, steps: Sequence[tuple[str, Callable[[], None]]]):
        self._steps = list(steps)
        self.state = "pending"
        self._current: str | None = None
        self._done: list[dict] = []

    async def run(self) -> None:
        """Run every step in turn in a worker thread (cancellable between steps)."""
        self.state = "warming"
        try:
            for name, fn in self._steps:
                self._current = name
                t0 = time.monotonic()
                try:
                    await asyncio.to_thread(fn)
                    err = None
                except Exception as exc:  # noqa: BLE001 - a failed warm-up only means the first use pays it
                    err = f"{type(exc).__name__}: {exc}"
                    log.warning("warm-up of the %s failed (its first use will load it): %s", name, err)
                dt = round(time.monotonic() - t0, 3)
                self._done.append({"step": name, "seconds": dt, "error": err})
                if err is None:
                    log.info("warm-up: %s loaded in %.2f s", name, dt)
        finally:
            self._current = None
            self.state = "done"

    def status(self) -> dict:
        """``{"state", "current", "steps": [{"step", "seconds", "error"}, ...]}``, JSON-ready."""
        return {"state": self.state, "current": self._current, "steps": list(self._done)}
