"""firmware_bridge test helpers: run coroutines with leak checks (tasks, file descriptors, ptys)."""

from __future__ import annotations

import asyncio
import os

import pytest


def _open_fds() -> set:
    try:
        return set(os.listdir("/proc/self/fd"))
    except OSError:  # pragma: no cover - not Linux
        return set()


@pytest.fixture(autouse=True)
def _no_leaked_fds():
    before = _open_fds()
    yield
    leaked = []
    for fd in _open_fds() - before:
        try:
            leaked.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
    assert not leaked, f"test leaked file descriptors: {leaked}"


def run_async(coro_fn, *args, timeout_s: float = 30.0):
    """Run ``coro_fn(*args)`` in a fresh event loop; fail if it leaves tasks behind."""

    async def wrapper():
        result = await asyncio.wait_for(coro_fn(*args), timeout_s)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        assert not others, f"test leaked asyncio tasks: {[t.get_name() for t in others]}"
        return result

    return asyncio.run(wrapper())


@pytest.fixture
def arun():
    """``arun(coro_fn, *args)``: run an async test body with task-leak checking."""
    return run_async
