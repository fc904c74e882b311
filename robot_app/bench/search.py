"""``robot-app bench search``: numba walk search vs. pure Python (heapq) vs. scipy, on random graphs.

Random geometric graphs (:func:`core.synthetic.random_geometric_graph`, mean degree ~6) of the given
sizes, K landmarks with Dirichlet-random log-likelihoods; median wall time per plan over ``repeats``:
``numba_s`` on a graph checked once (:func:`core.search.check_graph`, what an opened map plans on),
``numba_with_graph_check_s`` on raw arrays checked on every plan, ``graph_check_s`` the check itself (paid
once per opened map); with ``compiled`` (:class:`core._search_aot.CompiledKernels`) also ``compiled_s``, the
same plans on the ahead-of-time compiled kernels, timed interleaved with ``numba_s`` (one plan of each in
turn, same background load).
Compile time is measured in a fresh interpreter with an empty numba cache (cold) and with the cache
just written (warm load), so it is reported apart from planning time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import numpy as np

from core import search as search_mod
from core.search import DEFAULT_ALPHA, check_graph, plan_walk, warm_up
from core.search_reference import dp_values_python, dp_values_scipy
from core.synthetic import random_geometric_graph

_COMPILE_PROBE = (
    "import time; t = time.perf_counter(); import core.search as s; s.warm_up(); print(time.perf_counter() - t)"
)


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _with_kernels(kernels, fn):
    """``fn`` run with ``kernels`` as core.search's kernels (bench only: one thread)."""
    def call():
        old, search_mod.kern = search_mod.kern, kernels
        try:
            return fn()
        finally:
            search_mod.kern = old
    return call


def compile_times() -> dict[str, float]:
    """Seconds to import + warm up the kernels: cold (empty cache) and warm (cache on disk)."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold_s", "warm_s"):
            res = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, capture_output=True,
                                 text=True, check=True)
            out[label] = float(res.stdout.strip().splitlines()[-1])
    return out


def run(sizes=(1_000, 10_000, 100_000), *, landmarks: int = 5, repeats: int = 5, python_max_nodes: int = 10_000,
        seed: int = 0, progress: Callable[[str], None] | None = None, compile_time: bool = True,
        compiled=None) -> dict:
    """Run the benchmark; returns a JSON-ready dict (seconds, medians)."""
    warm_up()
    aot = None
    if compiled is not None:
        aot = search_mod._Kernels()
        aot.use(compiled, "compiled", str(compiled.directory))
    result = {
        "landmarks": landmarks,
        "repeats": repeats,
        "alpha": DEFAULT_ALPHA,
        "compile": compile_times() if compile_time else None,
        "sizes": [],
    }
    for n in sizes:
        if progress:
            progress(f"graph of {n} nodes")
        indptr, indices, weights, _ = random_geometric_graph(n, degree=6, seed=seed)
        rng = np.random.default_rng(seed)
        logp = np.log(rng.dirichlet(np.ones(n), size=landmarks).T)
        start = int(rng.integers(n))
        args = (indptr, indices, weights, logp, start)
        checked = check_graph(indptr, indices, weights)  # what an opened map plans on (TopoMap.csr)
        plan = (lambda: plan_walk(*checked, logp, start, alpha=DEFAULT_ALPHA))
        if aot is not None:
            both = _interleaved({"numba_s": plan, "compiled_s": _with_kernels(aot, plan)}, repeats)
        else:
            both = {"numba_s": _median_time(plan, repeats)}
        row = {"nodes": n, "edges": int(indices.size), **both,
               "numba_with_graph_check_s": _median_time(lambda: plan_walk(*args, alpha=DEFAULT_ALPHA), repeats),
               # what opening a map pays once: the check and the copy into read-only arrays
               "graph_check_s": _median_time(lambda: check_graph(indptr, indices, weights), repeats),
               "scipy_s": _median_time(lambda: dp_values_scipy(*args, alpha=DEFAULT_ALPHA), max(1, repeats // 2))}
        if n <= python_max_nodes:
            row["python_s"] = _median_time(lambda: dp_values_python(*args, alpha=DEFAULT_ALPHA), 3)
            row["speedup_vs_python"] = row["python_s"] / row["numba_s"]
        row["speedup_vs_scipy"] = row["scipy_s"] / row["numba_s"]
        result["sizes"].append(row)
    return result


def format_table(res: dict) -> str:
    c = res["compile"]
    aot_col = any("compiled_s" in r for r in res["sizes"])
    lines = [
        f"walk search, {res['landmarks']} landmarks, median of {res['repeats']} "
        + (f"(numba compile: cold {c['cold_s']:.2f} s, cached {c['warm_s']:.2f} s)" if c else ""),
        f"{'nodes':>8} {'edges':>8} {'numba ms':>10} {'+check ms':>10} {'check ms':>9} {'scipy ms':>10} "
        f"{'python ms':>10} {'x python':>9} {'x scipy':>8}" + (f" {'compiled ms':>12}" if aot_col else ""),
    ]
    for r in res["sizes"]:
        py = f"{r['python_s'] * 1e3:10.1f}" if "python_s" in r else f"{'-':>10}"
        sp = f"{r['speedup_vs_python']:9.0f}" if "speedup_vs_python" in r else f"{'-':>9}"
        lines.append(f"{r['nodes']:>8} {r['edges']:>8} {r['numba_s'] * 1e3:10.2f} "
                     f"{r['numba_with_graph_check_s'] * 1e3:10.2f} {r['graph_check_s'] * 1e3:9.2f} "
                     f"{r['scipy_s'] * 1e3:10.1f} "
                     f"{py} {sp} {r['speedup_vs_scipy']:8.1f}"
                     + (f" {r['compiled_s'] * 1e3:12.2f}" if aot_col else ""))
    return "\n".join(lines)
