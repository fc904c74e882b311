"""firmware_bridge.driver.queue_get: a queue read with a timeout whose cancellation is never lost."""

from __future__ import annotations

import asyncio

import pytest

from firmware_bridge.driver import queue_get


def test_queue_get_returns_items_in_order_and_times_out():
    async def main():
        q: asyncio.Queue = asyncio.Queue()
        q.put_nowait("a")
        q.put_nowait("b")
        got = [await queue_get(q, 0.5), await queue_get(q, None)]
        with pytest.raises(asyncio.TimeoutError):
            await queue_get(q, 0.05)
        q.put_nowait("c")  # the timed-out getter took nothing
        return got, await queue_get(q, 0.5)

    assert asyncio.run(main()) == (["a", "b"], "c")


def test_a_loop_over_queue_get_ends_when_cancelled_as_an_item_arrives():
    """The recording pump's loop: cancelled in the same tick as an item arrives. With
    ``asyncio.wait_for(q.get(), t)`` on Python 3.11 the cancellation is swallowed every time here
    (CPython gh-86296) and the loop runs forever; with queue_get the task ends cancelled (the item that
    arrived may go with it)."""

    async def main():
        outcomes = []
        for _ in range(50):
            q: asyncio.Queue = asyncio.Queue()

            async def pump():
                while True:
                    try:
                        await queue_get(q, 0.5)
                    except asyncio.TimeoutError:
                        pass

            task = asyncio.ensure_future(pump())
            await asyncio.sleep(0)  # the pump waits on the queue
            q.put_nowait(1)
            await asyncio.sleep(0)  # the queue's getter takes the item; the pump's wait has not resumed
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1.0)
            outcomes.append((task in done and task.cancelled(), q.qsize()))
            task.cancel()
        return outcomes

    outcomes = asyncio.run(main())
    assert all(ended for ended, _ in outcomes)
    assert {n for _, n in outcomes} <= {0, 1}
