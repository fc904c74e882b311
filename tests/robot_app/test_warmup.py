"""The service's warm start: the planning stack loads in a worker thread after READY, the loop keeps running."""

from __future__ import annotations

import asyncio
import logging
import threading
import types

from robot_app.service.warmup import WarmUp, default_steps


def test_the_real_steps_load_the_route_and_task_planners_off_the_event_loop():
    config = types.SimpleNamespace(lasp=types.SimpleNamespace(engine="kairos"))
    threads, ticks = [], []

    def traced(fn):
        def step():
            threads.append(threading.get_ident())
            fn()
        return step

    steps = [(name, traced(fn)) for name, fn in default_steps(config)]
    warm = WarmUp(steps)
    assert warm.status() == {"state": "pending", "current": None, "steps": []}

    async def main():
        loop_thread = threading.get_ident()
        task = asyncio.create_task(warm.run())
        await asyncio.sleep(0)
        assert warm.status()["state"] == "warming" and warm.status()["current"] == steps[0][0]
        while not task.done():  # the event loop keeps turning while the steps run
            ticks.append(1)
            await asyncio.sleep(0.005)
        await task
        return loop_thread

    loop_thread = asyncio.run(main())
    st = warm.status()
    assert st["state"] == "done" and st["current"] is None
    assert [s["step"] for s in st["steps"]] == ["route planner (walk search kernels)", "task planner"]
    assert all(s["error"] is None and s["seconds"] >= 0 for s in st["steps"])
    assert len(threads) == 2 and loop_thread not in threads
    assert ticks


def test_a_failing_step_is_reported_and_the_rest_still_run():
    ran = []

    def broken():
        raise RuntimeError("no kernels here")

    warm = WarmUp([("route planner", broken), ("task planner", lambda: ran.append("task"))])
    asyncio.run(warm.run())
    st = warm.status()
    assert st["state"] == "done" and ran == ["task"]
    assert st["steps"][0]["error"] == "RuntimeError: no kernels here" and st["steps"][1]["error"] is None


def test_an_unknown_planner_engine_fails_its_step_with_the_engine_named():
    warm = WarmUp(default_steps(types.SimpleNamespace(lasp=types.SimpleNamespace(engine="no-such-planner"))))
    asyncio.run(warm.run())
    assert "no-such-planner" in warm.status()["steps"][1]["error"]


def test_jit_kernels_chosen_by_an_earlier_plan_are_logged_as_a_fact(tmp_path, caplog, monkeypatch):
    """A process that planned before the app asked for compiled kernels (the demo plans in-process first)
    keeps numba's JIT kernels: INFO, not a warning; a stale build would still warn."""
    from core import search
    from robot_app.config import load_config
    from robot_app.service.warmup import use_search_kernels

    monkeypatch.setattr(search.kern, "backend", "jit")
    monkeypatch.setattr(search.kern, "detail", "numba JIT kernels (no compiled kernels asked for)")
    cfg = load_config(None)
    with caplog.at_level(logging.INFO, logger="robot_app.service.warmup"):
        info = use_search_kernels(cfg)
    assert info["backend"] == "jit"
    rec = [r for r in caplog.records if r.name == "robot_app.service.warmup"]
    assert rec and all(r.levelno == logging.INFO for r in rec)
