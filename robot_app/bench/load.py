"""CPU load for the timing benchmarks: ``--load N`` runs N busy child processes while a benchmark measures,
so that margins are shown under the load a robot's computer can have (other jobs, a model loading)."""

from __future__ import annotations

import contextlib
import subprocess
import sys

__all__ = ["cpu_hogs"]


@contextlib.contextmanager
def cpu_hogs(n: int):
    """Run ``n`` child processes that each keep one core busy (a pure-Python loop) for the duration of the
    ``with`` block; they are killed when it ends, also on an exception.

    Raises
    ------
    ValueError
        For ``n`` outside 0-64.
    """
    if not 0 <= int(n) <= 64:
        raise ValueError(f"--load {n}: expected 0-64 busy processes")
    procs = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(int(n))]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
