"""The compiled walk-search kernels' self test (:func:`self_test`), run in a child process by
:func:`core._search_aot.build` before a new build replaces the old one.

Apart from :mod:`core._search_aot` because it plans through :mod:`core.search`, which imports that module.
"""

from __future__ import annotations

import os

import numpy as np

from core import _search_aot, _search_kernels, search
from core.synthetic import random_geometric_graph


def self_test(directory: str | os.PathLike) -> None:
    """Plan test walks with the compiled kernels in ``directory`` and with the JIT kernels; raises
    :class:`AssertionError` when they differ (run by :func:`core._search_aot.build` in a child process
    before a new build replaces the old one, so a module that crashes or computes other walks is never
    installed)."""
    compiled, jit = search._Kernels(), search._Kernels()
    compiled.use(_search_aot.load(directory), "compiled", str(directory))
    jit.use(_search_kernels, "jit", "self test")
    saved = search.kern
    try:
        for seed, alpha in ((0, 0.005), (1, 0.0), (2, 0.02)):
            ip, ix, w, _ = random_geometric_graph(300, degree=6, seed=seed)
            rng = np.random.default_rng(seed)
            logp = np.log(rng.dirichlet(np.ones(300), size=3).T)
            walks = []
            for k in (compiled, jit):
                search.kern = k
                r = search.plan_walk(ip, ix, w, logp, 7, alpha=alpha)
                m = search.plan_max_likelihood(ip, ix, w, logp, 7, alpha=alpha)
                walks.append((r.nodes.tolist(), r.objective, r.length, m.nodes.tolist()))
            if walks[0] != walks[1]:  # not an assert: python -O would drop it
                raise AssertionError(f"compiled and JIT walks differ (seed {seed}, alpha {alpha})")
    finally:
        search.kern = saved
