"""Facts about the machine that benchmarks print beside their figures (a latency means little without
the load it was measured under)."""

from __future__ import annotations

import os


def load_average_1m() -> float | None:
    """The 1-minute load average (``os.getloadavg``) rounded to 0.01; None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


__all__ = ["load_average_1m"]
