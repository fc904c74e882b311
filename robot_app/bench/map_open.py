"""``robot-app bench map-open``: how long opening a map takes with its content hashes checked.

A synthetic map of N nodes (a node every metre on a straight drive, one small JPEG and one 512-d
float16 embedding per node, two edge rows per consecutive pair) is written once per size with
:class:`core.mapstore.MapWriter` (which writes the content hashes), then opened with
:func:`core.mapstore.open_map` (``PRAGMA quick_check``, the nodes, edges and image-digest hashes), its
embeddings loaded (their hash checked) and one node's image read (its digest checked). Medians of
``repeats`` opens; the same without the hashes (the ``content_sha256`` key removed) for comparison.
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from core.mapstore import MapWriter, open_map
from robot_app.mapping.synthetic_logs import tiny_jpeg

DIM = 512


def _write(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    jpeg = tiny_jpeg((90, 120, 160))
    w = MapWriter.create(path)
    ids = w.add_nodes(timestamp_s=np.arange(n, dtype=float), lat_deg=37.0 + 9e-6 * np.arange(n) % 0.5,
                      lon_deg=np.full(n, -122.0))
    step = 5000
    for a in range(0, n, step):
        part = ids[a:a + step].tolist()
        w.add_images(part, [jpeg] * len(part), embeddings={"clip:bench": rng.normal(size=(len(part), DIM))})
    w.add_edges(ids[:-1], ids[1:], np.full(n - 1, 4.0), source="temporal")
    w.close()


def _open_times(path: Path, repeats: int) -> dict:
    opens, embeds = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with open_map(path) as m:
            t1 = time.perf_counter()
            m.embeddings("clip:bench")
            t2 = time.perf_counter()
            m.images(len(m.nodes) // 2)
        opens.append(t1 - t0)
        embeds.append(t2 - t1)
    return {"open_s": round(statistics.median(opens), 3), "embeddings_s": round(statistics.median(embeds), 3)}


def run(sizes=(10_000, 100_000), repeats: int = 3, progress=print) -> dict:
    out = {}
    with tempfile.TemporaryDirectory(prefix="robot-app-bench-map-") as d:
        for n in sizes:
            path = Path(d) / f"map-{n}.sqlite"
            progress(f"writing a map of {n} nodes")
            t0 = time.perf_counter()
            _write(path, n)
            write_s = time.perf_counter() - t0
            hashed = _open_times(path, repeats)
            with sqlite3.connect(path) as c:
                c.execute("DELETE FROM meta WHERE key = 'content_sha256'")
            import logging

            logging.getLogger("core.mapstore").setLevel(logging.ERROR)  # the "no content hashes" warning
            plain = _open_times(path, repeats)
            out[str(n)] = {"nodes": n, "file_mb": round(path.stat().st_size / 1e6, 1), "write_s": round(write_s, 2),
                           "with_hashes": hashed, "without_hashes": plain}
    return out
