"""Supervised components: each runs as an asyncio task; a crash is logged and restarted with backoff.

A component is any object with a ``name`` and an ``async run()`` that runs until cancelled. When one
crashes the supervisor calls ``on_down(name, exc)`` (the app stops the robot there), waits
``min_backoff_s`` doubling up to ``max_backoff_s`` (reset after ``stable_s`` of healthy running), and
starts it again. Cancellation (shutdown) is never treated as a crash.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol

log = logging.getLogger(__name__)


class Component(Protocol):
    name: str

    async def run(self) -> None: ...


@dataclass
class ComponentState:
    """What the status screen and systemd's STATUS= show about a component."""

    name: str
    state: str = "starting"            # starting, running, restarting, stopped
    restarts: int = 0
    last_error: str | None = None
    since_mono_s: float = field(default_factory=time.monotonic)


class Supervisor:
    def __init__(self, *, min_backoff_s: float = 0.5, max_backoff_s: float = 30.0, stable_s: float = 60.0,
                 on_down: Callable[[str, BaseException], Awaitable[None] | None] | None = None):
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        self.on_down = on_down
        self.states: dict[str, ComponentState] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    def start(self, component: Component) -> None:
        if component.name in self._tasks:
            raise ValueError(f"component {component.name!r} already started")
        self.states[component.name] = ComponentState(component.name)
        self._tasks[component.name] = asyncio.ensure_future(self._keep_running(component))

    async def _keep_running(self, component: Component) -> None:
        st = self.states[component.name]
        backoff = self.min_backoff_s
        while True:
            st.state, st.since_mono_s = "running", time.monotonic()
            started = time.monotonic()
            try:
                await component.run()
                log.warning("component %s returned; restarting it", component.name)
                exc: BaseException = RuntimeError("returned")
            except asyncio.CancelledError:
                st.state = "stopped"
                raise
            except Exception as e:  # noqa: BLE001 - a component crash must not take the process down
                log.exception("component %s crashed", component.name)
                exc = e
            st.last_error = f"{type(exc).__name__}: {exc}"
            st.restarts += 1
            st.state, st.since_mono_s = "restarting", time.monotonic()
            if self.on_down is not None:
                try:
                    res = self.on_down(component.name, exc)
                    if asyncio.iscoroutine(res):
                        await res
                except Exception:  # noqa: BLE001
                    log.exception("on_down handler failed for %s", component.name)
            if time.monotonic() - started > self.stable_s:
                backoff = self.min_backoff_s
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2.0, self.max_backoff_s)

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Cancel every component and wait for them (at most ``timeout_s``)."""
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for t in pending:
                log.error("component task %s did not stop in %.1f s", t, timeout_s)
        self._tasks.clear()

    def summary(self) -> str:
        return ", ".join(f"{s.name} {s.state}" + (f" ({s.restarts} restarts)" if s.restarts else "")
                         for s in self.states.values())
