"""Fixtures of the Ray tests (the fleet extra): one local Ray runtime of 2 CPUs per module, and the suite's
thread-leak check less the threads Ray's driver keeps. A test module imports both names::

    from tests.ray_support import _no_leaked_threads, ray_runtime  # noqa: F401
"""

from __future__ import annotations

import threading

import pytest


@pytest.fixture(scope="module")
def ray_runtime():
    """One local Ray runtime of 2 CPUs for the module (starting one takes seconds); its threads are Ray's."""
    ray = pytest.importorskip("ray", reason="the fleet extra (ray) runs the Ray engine")
    ray.init(num_cpus=2, object_store_memory=200 << 20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def _no_leaked_threads(ray_runtime):
    """The suite's leak check (tests/conftest.py), less the threads Ray's driver keeps for its runtime."""
    before = set(threading.enumerate())
    yield
    for t in threading.enumerate():
        if t not in before and t.is_alive():
            t.join(timeout=2.0)
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()
              and "ray" not in t.name.lower() and not t.daemon]
    assert not leaked, f"test leaked threads: {leaked}"
