"""Map content hashes (core.mapstore): an altered node, edge, image or embedding row is refused with a
one-line error naming the table; of bit-flipped and truncated copies of a map none is read with content
other than the original's."""

from __future__ import annotations

import logging
import random
import shutil
import sqlite3

import numpy as np
import pytest

from core.mapstore import MapError, MapFormatError, MapWriter, open_map
from robot_app.cli import main
from robot_app.mapping.synthetic_logs import tiny_jpeg

MODEL = "clip:test"


def _build(path, n: int = 40):
    rng = np.random.default_rng(0)
    w = MapWriter.create(path)
    ids = w.add_nodes(timestamp_s=np.arange(n, dtype=float), lat_deg=37.0 + 1e-5 * np.arange(n),
                      lon_deg=np.full(n, -122.0), heading_rad=np.zeros(n))
    w.add_images(ids.tolist(), [tiny_jpeg((10 * k % 255, 80, 160), seed=k) for k in range(n)],
                 embeddings={MODEL: rng.normal(size=(n, 8))})
    w.add_edges(ids[:-1], ids[1:], np.full(n - 1, 4.0), source="temporal")
    w.set_metadata({"build": {"note": "test"}})
    return w.close()


def _content(path):
    """Everything a reader gets from the map (raises what the reader raises)."""
    with open_map(path) as m:
        vecs, nodes = m.embeddings(MODEL)
        images = [m.images(v) for v in range(len(m.nodes))]
        return (m.nodes.lat_deg.tobytes(), m.nodes.easting_m.tobytes(), m.edges.src.tobytes(), m.edges.dst.tobytes(),
                m.edges.weight_steps.tobytes(), vecs.tobytes(), nodes.tobytes(), images,
                {k: v for k, v in m.metadata.items() if k != "created_utc"})


@pytest.mark.parametrize("sql, table", [
    ("UPDATE nodes SET lat_deg = lat_deg + 0.003 WHERE id = 5", "nodes"),
    ("UPDATE nodes SET heading_rad = 1.0 WHERE id = 7", "nodes"),
    ("UPDATE edges SET weight_steps = 0.5 WHERE rowid = 3", "edges"),
    ("DELETE FROM edges WHERE rowid = 2", "edges"),
    ("UPDATE images SET node_id = 3 WHERE id = 9", "images"),
])
def test_an_altered_row_is_refused_on_open_naming_the_table(tmp_path, sql, table):
    path = _build(tmp_path / "m.map")
    with sqlite3.connect(path) as c:
        c.execute(sql)
    with pytest.raises(MapError, match=f"the {table} table") as exc:
        open_map(path)
    assert "\n" not in str(exc.value)


def test_an_altered_image_or_embedding_is_refused_when_read(tmp_path):
    path = _build(tmp_path / "m.map")
    with sqlite3.connect(path) as c:
        c.execute("UPDATE images SET jpeg = ? WHERE id = 4", (tiny_jpeg((1, 2, 3), seed=99),))
        c.execute("UPDATE embeddings SET vec = ? WHERE image_id = 6", (np.zeros(8, "<f2").tobytes(),))
    with open_map(path) as m:
        m.images(0)  # an untouched row reads
        with pytest.raises(MapError, match="the images table row 4"):
            m.images(3)
        with pytest.raises(MapError, match="the embeddings table"):
            m.embeddings(MODEL)


def test_a_map_without_hashes_is_refused_unless_explicitly_allowed_as_unverified(tmp_path, caplog, capsys):
    """The break-it attack: delete the content hashes and move a node 300 m. Format 2 refuses it; written
    down to format 1 (which cannot tell it from a map made before the hashes) it opens only when asked, and
    then shows as unverified."""
    path = _build(tmp_path / "m.map")
    with sqlite3.connect(path) as c:
        c.execute("DELETE FROM meta WHERE key = 'content_sha256'")
        c.execute("UPDATE nodes SET northing_m = northing_m + 300.0 WHERE id = 7")
    with pytest.raises(MapFormatError, match="map format 2 without its content hashes"):
        open_map(path)
    with pytest.raises(MapFormatError, match="map format 2 without"):
        open_map(path, allow_unverified=True)
    with sqlite3.connect(path) as c:
        c.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    with pytest.raises(MapFormatError, match="--allow-unverified"):
        open_map(path)
    assert main(["map", "info", str(path)]) == 2
    assert "cannot be verified" in capsys.readouterr().err
    with caplog.at_level(logging.WARNING):
        with open_map(path, allow_unverified=True) as m:
            assert len(m.nodes) == 40 and m.images(1) and not m.verified
    assert "UNVERIFIED" in caplog.text
    assert main(["map", "info", str(path), "--allow-unverified", "--json"]) == 0
    assert '"verified": false' in capsys.readouterr().out
    # a format-1 map that kept its hashes is checked as before and counts as verified
    path2 = _build(tmp_path / "m2.map")
    with sqlite3.connect(path2) as c:
        c.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    with open_map(path2) as m2:
        assert m2.verified


def test_an_edited_map_gets_fresh_hashes(tmp_path):
    path = _build(tmp_path / "m.map")
    w = MapWriter.edit(path)
    w.add_edges([0], [5], [9.0], source="manual")
    w.close()
    with open_map(path) as m:
        assert len(m.edges) == 2 * 39 + 2 and m.metadata["format_version"] == 2 and m.verified


def test_no_bit_flip_or_truncation_is_read_with_other_content(tmp_path):
    path = _build(tmp_path / "m.map")
    original = _content(path)
    data = path.read_bytes()
    rng = random.Random(1)
    variants = []
    for k in range(48):  # single bit flips anywhere in the file
        pos = rng.randrange(len(data))
        b = bytearray(data)
        b[pos] ^= 1 << rng.randrange(8)
        variants.append((f"flip {pos}", bytes(b)))
    for frac in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99):  # truncations
        variants.append((f"truncated to {frac:.0%}", data[:int(len(data) * frac)]))
    accepted_altered, refused = [], 0
    for k, (what, blob) in enumerate(variants):
        p = tmp_path / f"v{k}.map"
        p.write_bytes(blob)
        try:
            got = _content(p)
        except (MapError, FileNotFoundError):
            refused += 1
            continue
        if got != original:
            accepted_altered.append(what)
    assert accepted_altered == [], accepted_altered
    assert refused >= 6  # every truncation at least; flips in unused space change nothing and read as the map
    shutil.rmtree(tmp_path, ignore_errors=True)
