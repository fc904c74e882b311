"""Pure algorithms on numpy arrays: topological map, walk search, grounding math, metrics, LASP.

No device or network I/O and no asyncio here; file formats live in dedicated storage modules
(:mod:`core.mapstore`).
"""
