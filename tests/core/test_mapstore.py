"""Map store: round trip, CSR, embeddings, crash safety, refusal of corrupt / foreign / future files."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from core.mapstore import FORMAT_VERSION, MapFormatError, MapWriteError, MapWriter, open_map

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16 + b"\xff\xd9"


def write_small_map(path, **kw):
    with MapWriter.create(path, metadata={"build": {"tau_steps": 20.0, "models": {"clip": "tiny"}}}, **kw) as w:
        ids = w.add_nodes(timestamp_s=[100.0, 101.0, 102.5], lat_deg=[37.0, 37.0001, 37.0002],
                          lon_deg=[-122.0, -122.0, -122.0001], heading_rad=[0.0, np.nan, 1.5])
        w.add_edges([0, 1], [1, 2], [4.0, 5.5], source="temporal")
        w.add_edges([2], [0], [12.0], source="vnm", undirected=False)
        w.add_image(0, JPEG, embeddings={"clip-tiny": np.array([1.0, 0.0, 0.0])})
        w.add_image(0, JPEG, camera="rear", embeddings={"clip-tiny": np.array([0.0, 1.0, 0.0])})
        w.add_image(2, JPEG, embeddings={"clip-tiny": np.array([0.0, 0.0, 1.0])})
    return ids


def test_round_trip(tmp_path):
    path = tmp_path / "m.map"
    ids = write_small_map(path)
    assert ids.tolist() == [0, 1, 2]
    assert not (tmp_path / "m.map.partial").exists()
    with open_map(path) as m:
        assert m.metadata["format_version"] == FORMAT_VERSION
        assert m.metadata["build"]["tau_steps"] == 20.0
        assert len(m.nodes) == 3 and len(m.edges) == 5
        np.testing.assert_allclose(m.nodes.lat_deg, [37.0, 37.0001, 37.0002])
        assert np.isnan(m.nodes.heading_rad[1]) and m.nodes.heading_rad[2] == 1.5
        assert set(m.nodes.utm_zone.tolist()) == {10} and m.nodes.utm_band[0] == "S"
        # 0.0001 deg of latitude is ~11.1 m north
        assert m.nodes.northing_m[1] - m.nodes.northing_m[0] == pytest.approx(11.09, abs=0.05)
        indptr, indices, weights = m.csr()
        assert indptr.tolist() == [0, 1, 3, 5]
        assert sorted(zip(indices[1:3].tolist(), weights[1:3].tolist())) == [(0, 4.0), (2, 5.5)]
        assert indices.dtype == np.int64 and weights.dtype == np.float32
        assert set(m.edges.source.tolist()) == {"temporal", "vnm"}
        vecs, node_of = m.embeddings("clip-tiny")
        assert vecs.dtype == np.float16 and vecs.shape == (3, 3) and node_of.tolist() == [0, 0, 2]
        assert m.embedding_models() == ["clip-tiny"]
        assert len(m.images(0)) == 2 and m.images(1) == [] and m.image_count() == 3
        with pytest.raises(Exception, match="no image embeddings for model 'other'.*clip-tiny"):
            m.embeddings("other")


def test_reader_is_read_only(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    with open_map(path) as m:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            m._conn.execute("DELETE FROM nodes")


def test_existing_map_is_not_overwritten_unless_asked(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    with pytest.raises(FileExistsError, match="overwrite"):
        MapWriter.create(path)
    write_small_map(path, overwrite=True)
    assert len(open_map(path).nodes) == 3


def test_failed_build_never_publishes_a_half_map(tmp_path):
    path = tmp_path / "m.map"
    with pytest.raises(RuntimeError):
        with MapWriter.create(path) as w:
            w.add_nodes(timestamp_s=[1.0], lat_deg=[1.0], lon_deg=[1.0])
            raise RuntimeError("power cut stand-in")
    assert not path.exists() and not (tmp_path / "m.map.partial").exists()


def test_partial_file_of_a_crashed_build_is_not_the_map(tmp_path):
    path = tmp_path / "m.map"
    w = MapWriter.create(path)
    w.add_nodes(timestamp_s=[1.0], lat_deg=[1.0], lon_deg=[1.0])
    # the process dies here: only the .partial file exists
    assert not path.exists() and (tmp_path / "m.map.partial").exists()
    w._conn.close()


@pytest.mark.parametrize("call, message", [
    (lambda w: w.add_nodes(timestamp_s=[1.0, 2.0], lat_deg=[1.0], lon_deg=[1.0]), "equal-length"),
    (lambda w: w.add_nodes(timestamp_s=[np.nan], lat_deg=[1.0], lon_deg=[1.0]), "NaN"),
    (lambda w: w.add_nodes(timestamp_s=[1.0], lat_deg=[89.0], lon_deg=[1.0]), "UTM"),
    (lambda w: w.add_edges([0], [5], [1.0], source="vnm"), "out of range"),
    (lambda w: w.add_edges([0], [1], [-1.0], source="vnm"), ">= 0"),
    (lambda w: w.add_edges([0], [1], [1.0], source="teleport"), "source 'teleport'"),
    (lambda w: w.add_image(0, b"GIF89a"), "not JPEG"),
    (lambda w: w.add_image(7, JPEG), "node 7 does not exist"),
    (lambda w: w.add_image(0, JPEG, embeddings={"m": [np.nan]}), "not finite"),
    (lambda w: w.set_metadata({"x": object()}), "JSON"),
])
def test_bad_writes_raise_and_write_nothing(tmp_path, call, message):
    path = tmp_path / "m.map"
    w = MapWriter.create(path)
    w.add_nodes(timestamp_s=[1.0, 2.0], lat_deg=[1.0, 1.0], lon_deg=[1.0, 1.00001])
    with pytest.raises(MapWriteError, match=message):
        call(w)
    w.close()
    with open_map(path) as m:
        assert len(m.nodes) == 2 and len(m.edges) == 0 and m.image_count() == 0


def test_future_format_version_is_refused(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    with sqlite3.connect(path) as c:
        c.execute("UPDATE meta SET value = ? WHERE key = 'format_version'", (json.dumps(FORMAT_VERSION + 1),))
    with pytest.raises(MapFormatError, match="newer than this software supports"):
        open_map(path)


def test_corrupted_file_is_refused(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    data = bytearray(path.read_bytes())
    page = 4096
    for off in range(page + 100, min(len(data), 3 * page), 7):  # scribble over b-tree pages
        data[off] ^= 0xA5
    path.write_bytes(bytes(data))
    with pytest.raises(MapFormatError):
        open_map(path)


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""])
def test_foreign_files_are_refused(tmp_path, content):
    path = tmp_path / "x.map"
    path.write_bytes(content)
    with pytest.raises(MapFormatError):
        open_map(path)


def test_sqlite_file_that_is_not_a_map_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t(x)")
    with pytest.raises(MapFormatError, match="missing tables"):
        open_map(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such map file"):
        open_map(tmp_path / "none.map")


def test_edit_appends_in_a_transaction(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    w = MapWriter.edit(path)
    w.add_edges([0], [2], [30.0], source="manual")
    w.close()
    with open_map(path) as m:
        assert len(m.edges) == 7 and "manual" in m.edges.source.tolist()


def test_an_opened_map_checks_its_graph_once_and_hands_out_read_only_arrays(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    with open_map(path) as m:
        a, b = m.csr(), m.csr()
        assert all(x is y for x, y in zip(a, b))
        assert not any(x.flags.writeable for x in a)
        assert a[0].dtype == np.int64 and a[2].dtype == np.float32


def test_graph_key_names_the_verified_graph_and_changes_with_it(tmp_path):
    path = tmp_path / "m.map"
    write_small_map(path)
    with open_map(path) as a, open_map(path) as b:
        assert a.graph_key() == b.graph_key() == (3, a.metadata["content_sha256"]["edges"])
    w = MapWriter.edit(path)
    w.add_edges([0], [2], [30.0], source="manual")
    w.close()
    with open_map(path) as c:
        assert c.graph_key() != a.graph_key() and c.graph_key()[0] == 3
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta WHERE key = 'content_sha256'")  # a map written before content hashes
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    conn.commit()
    conn.close()
    with open_map(path, allow_unverified=True) as d:
        assert d.graph_key() is None and not d.verified  # nothing verifies its rows: no identity to cache by
