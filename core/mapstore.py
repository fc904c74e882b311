"""The topological map file: one SQLite database (storage only; the algorithms never touch SQL).

Layout (format version :data:`FORMAT_VERSION`)::

    meta(key TEXT PRIMARY KEY, value TEXT)                  -- JSON values; "format_version", "created_utc",
                                                             -- "build" (thresholds, models used), ...
    nodes(id INTEGER PRIMARY KEY,                           -- dense 0..N-1, the search's node index
          timestamp_s REAL, lat_deg REAL, lon_deg REAL,     -- capture time (UTC epoch s), WGS-84
          easting_m REAL, northing_m REAL,                  -- UTM, zone number + latitude band
          utm_zone INTEGER, utm_band TEXT,
          heading_rad REAL, source_log TEXT)                -- yaw CCW from east (REP-103), NULL unknown
    images(id INTEGER PRIMARY KEY, node_id INTEGER, camera TEXT, jpeg BLOB)
    embeddings(image_id INTEGER, model TEXT, dim INTEGER, vec BLOB)   -- little-endian float16
    edges(src INTEGER, dst INTEGER, weight_steps REAL, source TEXT)   -- D in VNM time steps; source in
                                                                      -- temporal / vnm / gps / manual

    image_hashes(image_id INTEGER PRIMARY KEY, sha256 BLOB)           -- each image's JPEG digest

Content hashes (SHA-256, written by :class:`MapWriter` on close, in ``meta`` ``content_sha256``): the
nodes and the edges tables (their rows as loaded, in id / row order), the ``image_hashes`` table (which
holds each image row's digest: an image is checked when it is read) and each embedding model's
vectors (checked when they are loaded). :func:`open_map` refuses a map whose nodes, edges or image
digests do not match with a :class:`MapFormatError` naming the table.

Format version 2 makes the hashes mandatory: a version-2 map without them is refused (deleting the hashes
cannot turn an altered map into an unchecked one). Version 1 maps (the format before version 2) that carry
hashes are checked the same way; a version-1 map without hashes cannot be told from an altered one and
opens only with ``allow_unverified=True`` (``--allow-unverified`` on the command line, ``[mission]
allow_unverified_maps`` on the robot), as :attr:`TopoMap.verified` False. Writing to a map (new or edited)
writes version 2. A bit flip that SQLite's ``quick_check`` does not see (a value inside a row) is
refused this way; one in unused space changes no content.

Edges are directed rows; an undirected edge is stored as two rows. Writes go through
:class:`MapWriter`: a new map is written to ``<path>.partial`` and renamed over ``path`` only after
the final commit, so a power cut never leaves a half-built map under the real name; edits of an
existing map are single transactions (SQLite's journal makes them atomic). Readers
(:func:`open_map`) open read-only, check the format version, the schema and ``PRAGMA quick_check``,
and refuse the file with :class:`MapFormatError` rather than half-reading it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from core.search import check_graph

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
#: versions this software reads (1: content hashes optional; 2: mandatory)
READABLE_VERSIONS = (1, 2)
EDGE_SOURCES = ("temporal", "vnm", "gps", "manual")

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE nodes(
    id INTEGER PRIMARY KEY,
    timestamp_s REAL NOT NULL,
    lat_deg REAL NOT NULL, lon_deg REAL NOT NULL,
    easting_m REAL NOT NULL, northing_m REAL NOT NULL,
    utm_zone INTEGER NOT NULL, utm_band TEXT NOT NULL,
    heading_rad REAL,
    source_log TEXT
);
CREATE TABLE images(
    id INTEGER PRIMARY KEY,
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    camera TEXT NOT NULL DEFAULT 'front',
    jpeg BLOB NOT NULL
);
CREATE INDEX images_node ON images(node_id);
CREATE TABLE embeddings(
    image_id INTEGER NOT NULL REFERENCES images(id),
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vec BLOB NOT NULL,
    PRIMARY KEY(image_id, model)
);
CREATE TABLE edges(
    src INTEGER NOT NULL REFERENCES nodes(id),
    dst INTEGER NOT NULL REFERENCES nodes(id),
    weight_steps REAL NOT NULL CHECK(weight_steps >= 0),
    source TEXT NOT NULL CHECK(source IN ('temporal', 'vnm', 'gps', 'manual'))
);
CREATE INDEX edges_src ON edges(src);
"""
_HASH_SCHEMA = "CREATE TABLE IF NOT EXISTS image_hashes(image_id INTEGER PRIMARY KEY, sha256 BLOB NOT NULL)"
_TABLES = {"meta", "nodes", "images", "embeddings", "edges"}


class MapError(Exception):
    """Base class of map file errors."""


class MapFormatError(MapError):
    """The file is not a readable map of a supported format version (corrupt, foreign or too new)."""


class MapWriteError(MapError):
    """Data given to :class:`MapWriter` is invalid; nothing of the failed call was written."""


@dataclass(frozen=True)
class NodeTable:
    """All nodes as parallel arrays (index = node id).

    timestamp_s (N,) float64 UTC epoch seconds; lat_deg, lon_deg (N,) float64 WGS-84;
    easting_m, northing_m (N,) float64 UTM; utm_zone (N,) int64; utm_band (N,) str;
    heading_rad (N,) float64, NaN where unknown.
    """

    timestamp_s: np.ndarray
    lat_deg: np.ndarray
    lon_deg: np.ndarray
    easting_m: np.ndarray
    northing_m: np.ndarray
    utm_zone: np.ndarray
    utm_band: np.ndarray
    heading_rad: np.ndarray

    def __len__(self) -> int:
        return int(self.timestamp_s.shape[0])


@dataclass(frozen=True)
class EdgeTable:
    """All directed edges: src, dst (E,) int64; weight_steps (E,) float32 D; source (E,) str."""

    src: np.ndarray
    dst: np.ndarray
    weight_steps: np.ndarray
    source: np.ndarray

    def __len__(self) -> int:
        return int(self.src.shape[0])


@dataclass
class TopoMap:
    """A map loaded for planning: nodes, edges and metadata in memory; images and embeddings on demand."""

    path: Path
    metadata: dict[str, Any]
    nodes: NodeTable
    edges: EdgeTable
    _conn: sqlite3.Connection | None = field(default=None, repr=False)
    #: node -> [(image id, SHA-256 of its JPEG)] from the verified image_hashes table (None: a map without
    #: content hashes); images are found through it, not through SQLite's index
    _image_index: dict | None = field(default=None, repr=False)
    #: the checked CSR arrays, built by the first :meth:`csr` call
    _csr: tuple | None = field(default=None, repr=False)
    #: (N, SHA-256 of the edges table) once :func:`open_map` has verified the edges against their content
    #: hash (see :meth:`graph_key`); None otherwise
    _graph_key: tuple | None = field(default=None, repr=False)
    #: False for a version-1 map without content hashes opened with ``allow_unverified=True``: its rows could
    #: have been altered unseen (show it as unverified)
    verified: bool = True

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR adjacency by source for :mod:`core.search`: indptr (N+1,) int64, indices (E,) int64,
        weights (E,) float32 (D, VNM time steps).

        Built and checked (:func:`core.search.check_graph`) on the first call, then the same read-only
        arrays every time: the planners skip re-validating an unchanged map.

        Raises
        ------
        ValueError
            The map's edges do not form a valid graph (names the problem).
        """
        if self._csr is None:
            n = len(self.nodes)
            order = np.argsort(self.edges.src, kind="stable")
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.add.at(indptr, self.edges.src + 1, 1)
            self._csr = check_graph(np.cumsum(indptr), self.edges.dst[order], self.edges.weight_steps[order])
        return self._csr

    def graph_key(self) -> tuple[int, str] | None:
        """What :meth:`csr` is made of, as verified when the map was opened: ``(N, edges content hash)``.

        Two opened maps with the same key have the same CSR arrays (they are built from the node count and
        the edges table alone), so a caller that re-opens the same map for every plan can keep the checked
        arrays of the first open (``robot_app.jobs.mission``). None for a map without content hashes (written
        before them: nothing verifies its rows) or a TopoMap not made by :func:`open_map`.
        """
        return self._graph_key

    def embedding_models(self) -> list[str]:
        """Names of the embedding models with vectors in this map."""
        return [r[0] for r in self._db().execute("SELECT DISTINCT model FROM embeddings ORDER BY model")]

    def embeddings(self, model: str) -> tuple[np.ndarray, np.ndarray]:
        """All image embeddings of ``model``: (M, D) float16 and the node index of each (M,) int64.

        Raises
        ------
        MapError
            If the map holds no embeddings of that model (names the models it has).
        """
        rows = self._db().execute(
            "SELECT i.node_id, e.dim, e.vec FROM embeddings e JOIN images i ON i.id = e.image_id "
            "WHERE e.model = ? ORDER BY e.image_id", (model,)).fetchall()
        if not rows:
            raise MapError(f"{self.path}: no image embeddings for model {model!r} "
                           f"(the map has: {', '.join(self.embedding_models()) or 'none'})")
        want = (self.metadata.get("content_sha256") or {}).get("embeddings", {})
        if isinstance(self.metadata.get("content_sha256"), dict):
            got = embeddings_digest(self._db().execute(
                "SELECT image_id, dim, vec FROM embeddings WHERE model = ? ORDER BY image_id", (model,)))
            if want.get(model) != got:
                raise MapFormatError(f"{self.path}: the embeddings table ({model!r}) does not match its content "
                                     "hash (altered or corrupt)")
        dim = rows[0][1]
        vecs = np.empty((len(rows), dim), dtype=np.float16)
        for j, (_, d, blob) in enumerate(rows):
            if d != dim or len(blob) != 2 * dim:
                raise MapFormatError(f"{self.path}: embedding row {j} of {model!r} has a bad size")
            vecs[j] = np.frombuffer(blob, dtype="<f2")
        return vecs, np.array([r[0] for r in rows], dtype=np.int64)

    def images(self, node: int) -> list[bytes]:
        """JPEG bytes of every image of ``node`` (possibly empty). Each is checked against its digest in
        ``image_hashes`` (a map with content hashes).

        Raises
        ------
        MapFormatError
            An image that does not match its digest.
        """
        if self._image_index is None:
            return [r[0] for r in self._db().execute("SELECT jpeg FROM images WHERE node_id = ? ORDER BY id",
                                                     (int(node),))]
        out = []
        for image_id, digest in self._image_index.get(int(node), []):
            row = self._db().execute("SELECT node_id, jpeg FROM images WHERE id = ?", (image_id,)).fetchone()
            if row is None or row[0] != int(node) or hashlib.sha256(row[1]).digest() != digest:
                raise MapFormatError(f"{self.path}: the images table row {image_id} (node {node}) does not match "
                                     "its digest (altered or corrupt)")
            out.append(row[1])
        return out

    def image_count(self) -> int:
        return int(self._db().execute("SELECT COUNT(*) FROM images").fetchone()[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "TopoMap":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MapError(f"{self.path}: map is closed")
        return self._conn


def _digest_arrays(*parts) -> str:
    h = hashlib.sha256()
    for a in parts:
        if isinstance(a, np.ndarray) and a.dtype.kind == "U":
            h.update("\x1f".join(a.tolist()).encode("utf-8"))
        else:
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"\x1e")
    return h.hexdigest()


def nodes_digest(nodes: "NodeTable") -> str:
    """SHA-256 of the nodes table as loaded (every column but ``source_log``, in id order)."""
    return _digest_arrays(nodes.timestamp_s, nodes.lat_deg, nodes.lon_deg, nodes.easting_m, nodes.northing_m,
                          nodes.utm_zone, nodes.utm_band, nodes.heading_rad)


def edges_digest(edges: "EdgeTable") -> str:
    """SHA-256 of the edges table as loaded (row order)."""
    return _digest_arrays(edges.src, edges.dst, edges.weight_steps, edges.source)


def _image_hash_rows(conn) -> list:
    return conn.execute("SELECT h.image_id, i.node_id, i.camera, h.sha256 FROM image_hashes h "
                        "LEFT JOIN images i ON i.id = h.image_id ORDER BY h.image_id").fetchall()


def _rows_digest(rows) -> str:
    """SHA-256 over rows ``(field, ..., blob)``: each field's text then ``\\x1f``, the blob's bytes, ``\\x1e``."""
    h = hashlib.sha256()
    for *fields, blob in rows:
        h.update("".join(f"{f}\x1f" for f in fields).encode())
        h.update(bytes(blob or b""))
        h.update(b"\x1e")
    return h.hexdigest()


def image_hashes_digest(rows) -> str:
    """SHA-256 over the ``image_hashes`` rows (image id, node id, camera, the image's digest)."""
    return _rows_digest(rows)


def embeddings_digest(rows) -> str:
    """SHA-256 over one model's embedding rows (image id, dim, vector bytes) in image id order."""
    return _rows_digest(rows)


def _connect_ro(path: Path) -> sqlite3.Connection:
    # immutable=0, mode=ro: a reader never creates, locks out or modifies the file
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)


def open_map(path: str | Path, *, check: bool = True, allow_unverified: bool = False) -> TopoMap:
    """Open a map file read-only and load its nodes, edges and metadata.

    Parameters
    ----------
    path : the SQLite map file.
    check : run ``PRAGMA quick_check`` (default True; O(file size)).
    allow_unverified : open a version-1 map that has no content hashes (its :attr:`TopoMap.verified` is
        False); without it such a map is refused (module docstring).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    MapFormatError
        Not an SQLite file, corrupt (quick_check fails), a schema that is not a map, a format version
        newer than this software supports, inconsistent contents (node ids not 0..N-1, edges to unknown
        nodes, bad weights), contents that do not match their hashes, a version-2 map without hashes, or
        a version-1 map without hashes unless ``allow_unverified``. Nothing is returned half-read.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such map file")
    conn = _connect_ro(path)
    try:
        return _load(path, conn, check=check, allow_unverified=allow_unverified)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise MapFormatError(f"{path}: not a readable map file ({exc})") from exc
    except BaseException:
        conn.close()
        raise


def _load(path: Path, conn: sqlite3.Connection, *, check: bool, allow_unverified: bool = False) -> TopoMap:
    if check:
        problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            said = "; ".join(" ".join(str(p).split()) for p in problems[:3])  # SQLite's lines, on one line
            raise MapFormatError(f"{path}: integrity check failed: {said}")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not _TABLES <= tables:
        raise MapFormatError(f"{path}: not a map file (missing tables: {', '.join(sorted(_TABLES - tables))})")
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    except (json.JSONDecodeError, TypeError) as exc:
        raise MapFormatError(f"{path}: not a map file (unreadable metadata: {exc})") from exc
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise MapFormatError(f"{path}: map has no format_version")
    if version < min(READABLE_VERSIONS):
        raise MapFormatError(f"{path}: map format version {version} is not one this software reads "
                             f"({', '.join(map(str, READABLE_VERSIONS))})")
    if version > FORMAT_VERSION:
        raise MapFormatError(f"{path}: map format version {version} is newer than this software supports "
                             f"({FORMAT_VERSION}); upgrade robot-app to read it")
    nodes, edges = _read_tables(path, conn)
    n = len(nodes)
    if n and not (np.all(np.isfinite(nodes.lat_deg)) and np.all(np.isfinite(nodes.lon_deg))
                  and np.all(np.isfinite(nodes.easting_m)) and np.all(np.isfinite(nodes.northing_m))):
        raise MapFormatError(f"{path}: a node has a non-finite position")
    if len(edges) and (edges.src.min() < 0 or edges.dst.min() < 0 or max(edges.src.max(), edges.dst.max()) >= n):
        raise MapFormatError(f"{path}: an edge refers to a node that does not exist")
    if len(edges) and not np.all(np.isfinite(edges.weight_steps)):
        raise MapFormatError(f"{path}: an edge has a non-finite weight")
    hashes = meta.get("content_sha256")
    if hashes is None:
        if version >= 2:
            raise MapFormatError(f"{path}: map format {version} without its content hashes: it was altered or "
                                 "damaged; rebuild it (robot-app map build)")
        if not allow_unverified:
            raise MapFormatError(f"{path}: map format 1 without content hashes: its contents cannot be verified "
                                 "(a node could have been moved unseen); rebuild it (robot-app map build), or open "
                                 "it anyway with --allow-unverified ([mission] allow_unverified_maps on the robot)")
        log.warning("%s: map format 1 without content hashes, opened UNVERIFIED as asked: altered rows cannot "
                    "be detected; rebuild it (robot-app map build) to add them", path)
    else:
        if not isinstance(hashes, dict):
            raise MapFormatError(f"{path}: the content hashes in meta are not readable")
        if hashes.get("nodes") != nodes_digest(nodes):
            raise MapFormatError(f"{path}: the nodes table does not match its content hash (altered or corrupt)")
        if hashes.get("edges") != edges_digest(edges):
            raise MapFormatError(f"{path}: the edges table does not match its content hash (altered or corrupt)")
        image_rows = _image_hash_rows(conn) if "image_hashes" in tables else None
        if image_rows is None or hashes.get("image_hashes") != image_hashes_digest(image_rows):
            raise MapFormatError(f"{path}: the images table's digests do not match their content hash "
                                 "(altered or corrupt)")
        index: dict = {}
        for image_id, node_id, _camera, digest in image_rows:
            index.setdefault(int(node_id), []).append((int(image_id), bytes(digest)))
        return TopoMap(path, meta, nodes, edges, conn, index, _graph_key=(n, hashes["edges"]))
    return TopoMap(path, meta, nodes, edges, conn, verified=False)


def _read_tables(path: Path, conn) -> tuple["NodeTable", "EdgeTable"]:
    """The nodes and edges tables as arrays (the reader's and the writer's hashes see the same values)."""
    cols = "id, timestamp_s, lat_deg, lon_deg, easting_m, northing_m, utm_zone, utm_band, heading_rad"
    rows = conn.execute(f"SELECT {cols} FROM nodes ORDER BY id").fetchall()
    n = len(rows)
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    if n and not np.array_equal(ids, np.arange(n)):
        raise MapFormatError(f"{path}: node ids are not 0..{n - 1}")

    def col(j, dtype):
        return np.array([np.nan if r[j] is None else r[j] for r in rows], dtype=dtype).reshape(n)

    nodes = NodeTable(col(1, np.float64), col(2, np.float64), col(3, np.float64), col(4, np.float64),
                      col(5, np.float64), col(6, np.int64), np.array([r[7] for r in rows], dtype=str).reshape(n),
                      col(8, np.float64))
    erows = conn.execute("SELECT src, dst, weight_steps, source FROM edges ORDER BY rowid").fetchall()
    edges = EdgeTable(np.array([r[0] for r in erows], dtype=np.int64), np.array([r[1] for r in erows], dtype=np.int64),
                      np.array([r[2] for r in erows], dtype=np.float32),
                      np.array([r[3] for r in erows], dtype=str).reshape(len(erows)))
    return nodes, edges


class MapWriter:
    """Writes a map file; every public call is one transaction.

    Use :meth:`create` for a new map (written to ``<path>.partial``, renamed on :meth:`close`) or
    :meth:`edit` for an existing one. Node ids are assigned densely from 0 in insertion order.

    Raises
    ------
    MapWriteError
        On invalid data (the failed call's rows are rolled back).
    FileExistsError
        :meth:`create` on an existing path without ``overwrite=True``.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, final_path: Path | None):
        self._conn = conn
        self.path = path
        self._final = final_path

    @classmethod
    def create(cls, path: str | Path, *, metadata: dict[str, Any] | None = None,
               overwrite: bool = False) -> "MapWriter":
        final = Path(path)
        if final.exists() and not overwrite:
            raise FileExistsError(f"{final}: map exists (pass overwrite=True / --overwrite to replace it)")
        partial = final.with_name(final.name + ".partial")
        for p in (partial, Path(str(partial) + "-journal")):
            p.unlink(missing_ok=True)
        conn = sqlite3.connect(partial)
        conn.execute("PRAGMA foreign_keys = ON")
        with conn:
            conn.executescript(_SCHEMA)
        writer = cls(conn, partial, final)
        meta = {"format_version": FORMAT_VERSION,
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        meta.update(metadata or {})
        writer.set_metadata(meta)
        return writer

    @classmethod
    def edit(cls, path: str | Path) -> "MapWriter":
        """Open an existing map for writing (validates it first, like :func:`open_map`)."""
        open_map(path).close()
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA foreign_keys = ON")
        return cls(conn, Path(path), None)

    def set_metadata(self, items: dict[str, Any]) -> None:
        """Set metadata keys (values must be JSON-serialisable)."""
        try:
            rows = [(str(k), json.dumps(v, allow_nan=False)) for k, v in items.items()]
        except (TypeError, ValueError) as exc:
            raise MapWriteError(f"metadata: value is not JSON-serialisable: {exc}") from exc
        if "format_version" in items and items["format_version"] != FORMAT_VERSION:
            raise MapWriteError("metadata: format_version is set by the writer")
        with self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", rows)

    def add_nodes(
        self, *, timestamp_s, lat_deg, lon_deg, heading_rad=None, source_log: str | None = None
    ) -> np.ndarray:
        """Append nodes; UTM coordinates are computed with the ``utm`` package. Returns their ids (int64).

        Parameters are equal-length 1-D arrays: timestamp_s (UTC epoch s), lat_deg / lon_deg WGS-84,
        heading_rad (yaw CCW from east, NaN = unknown).
        """
        import utm

        ts = np.atleast_1d(np.asarray(timestamp_s, dtype=np.float64))
        lat = np.atleast_1d(np.asarray(lat_deg, dtype=np.float64))
        lon = np.atleast_1d(np.asarray(lon_deg, dtype=np.float64))
        hd = np.full(ts.shape, np.nan) if heading_rad is None else np.atleast_1d(np.asarray(heading_rad, np.float64))
        if not (ts.shape == lat.shape == lon.shape == hd.shape) or ts.ndim != 1:
            raise MapWriteError("add_nodes: timestamp_s, lat_deg, lon_deg, heading_rad must be equal-length 1-D")
        if not (np.all(np.isfinite(ts)) and np.all(np.isfinite(lat)) and np.all(np.isfinite(lon))):
            raise MapWriteError("add_nodes: NaN or inf in timestamp_s / lat_deg / lon_deg")
        if np.any(np.abs(lat) > 84) or np.any(np.abs(lon) > 180):
            raise MapWriteError("add_nodes: latitude outside UTM's [-84, 84] deg or longitude outside [-180, 180]")
        first = int(self._conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0])
        rows = []
        for j in range(ts.shape[0]):
            e, n_, zone, band = utm.from_latlon(lat[j], lon[j])
            rows.append((first + j, ts[j], lat[j], lon[j], float(e), float(n_), int(zone), band,
                         None if np.isnan(hd[j]) else float(hd[j]), source_log))
        with self._conn:
            self._conn.executemany("INSERT INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return np.arange(first, first + ts.shape[0], dtype=np.int64)

    def add_image(self, node: int, jpeg: bytes, *, camera: str = "front",
                  embeddings: dict[str, np.ndarray] | None = None) -> int:
        """Store one JPEG for ``node`` with optional embeddings {model name: (D,) vector -> float16}."""
        return self.add_images([node], [jpeg], camera=camera,
                               embeddings={k: np.asarray(v)[None] for k, v in (embeddings or {}).items()})[0]

    def add_images(self, nodes: Sequence[int], jpegs: Sequence[bytes], *, camera: str = "front",
                   embeddings: dict[str, np.ndarray] | None = None) -> list[int]:
        """Store one JPEG per node in one transaction; ``embeddings`` maps a model name to (len(nodes), D)."""
        if len(nodes) != len(jpegs):
            raise MapWriteError("add_images: nodes and jpegs must have equal lengths")
        embeddings = {k: np.asarray(v, dtype=np.float32) for k, v in (embeddings or {}).items()}
        for model, vecs in embeddings.items():
            if vecs.ndim != 2 or vecs.shape[0] != len(nodes) or vecs.shape[1] == 0:
                raise MapWriteError(f"add_images: embedding {model!r} must have shape ({len(nodes)}, D)")
        ids = []
        with self._conn:
            for j, (node, jpeg) in enumerate(zip(nodes, jpegs)):
                if not isinstance(jpeg, (bytes, bytearray)) or not bytes(jpeg[:2]) == b"\xff\xd8":
                    raise MapWriteError(f"add_image: node {node}: image is not JPEG data")
                try:
                    cur = self._conn.execute("INSERT INTO images(node_id, camera, jpeg) VALUES (?, ?, ?)",
                                             (int(node), camera, bytes(jpeg)))
                except sqlite3.IntegrityError as exc:
                    raise MapWriteError(f"add_image: node {node} does not exist") from exc
                image_id = int(cur.lastrowid)
                ids.append(image_id)
                for model, vecs in embeddings.items():
                    v = vecs[j]
                    if not np.all(np.isfinite(v)):
                        raise MapWriteError(f"add_image: node {node}: embedding {model!r} is empty or not finite")
                    self._conn.execute("INSERT INTO embeddings VALUES (?, ?, ?, ?)",
                                       (image_id, model, int(v.size), v.astype("<f2").tobytes()))
        return ids

    def add_edges(self, src: Sequence[int], dst: Sequence[int], weight_steps: Iterable[float], *,
                  source: str, undirected: bool = True) -> int:
        """Add edges with D = ``weight_steps`` (VNM time steps). Undirected edges become two rows.

        Returns the number of rows written.
        """
        if source not in EDGE_SOURCES:
            raise MapWriteError(f"add_edges: source {source!r} is not one of {', '.join(EDGE_SOURCES)}")
        s = np.asarray(src, dtype=np.int64).ravel()
        d = np.asarray(dst, dtype=np.int64).ravel()
        w = np.asarray(list(weight_steps) if not isinstance(weight_steps, np.ndarray) else weight_steps,
                       dtype=np.float64).ravel()
        if not (s.shape == d.shape == w.shape):
            raise MapWriteError("add_edges: src, dst and weight_steps must have equal lengths")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise MapWriteError("add_edges: weight_steps must be finite and >= 0")
        n = int(self._conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0])
        if s.size and (min(s.min(), d.min()) < 0 or max(s.max(), d.max()) >= n):
            raise MapWriteError(f"add_edges: node index out of range [0, {n})")
        rows = [(int(a), int(b), float(x), source) for a, b, x in zip(s, d, w)]
        if undirected:
            rows += [(b, a, x, source) for a, b, x, _ in rows]
        with self._conn:
            self._conn.executemany("INSERT INTO edges VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def _write_hashes(self) -> None:
        """Each image's digest (rows that lack one) and the tables' content hashes into ``meta``."""
        c = self._conn
        with c:
            c.execute(_HASH_SCHEMA)
            missing = c.execute("SELECT i.id, i.jpeg FROM images i LEFT JOIN image_hashes h ON h.image_id = i.id "
                                "WHERE h.image_id IS NULL").fetchall()
            c.executemany("INSERT INTO image_hashes VALUES (?, ?)",
                          [(image_id, hashlib.sha256(jpeg).digest()) for image_id, jpeg in missing])
            nodes, edges = _read_tables(self.path, c)
            models = [r[0] for r in c.execute("SELECT DISTINCT model FROM embeddings ORDER BY model")]
            hashes = {"nodes": nodes_digest(nodes), "edges": edges_digest(edges),
                      "image_hashes": image_hashes_digest(_image_hash_rows(c)),
                      "embeddings": {m: embeddings_digest(c.execute(
                          "SELECT image_id, dim, vec FROM embeddings WHERE model = ? ORDER BY image_id", (m,)))
                          for m in models}}
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                      ("content_sha256", json.dumps(hashes)))
            # the hashes are there now: an edited version-1 map becomes a version-2 one
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('format_version', ?)",
                      (json.dumps(FORMAT_VERSION),))

    def close(self) -> Path:
        """Write the content hashes, commit, close and (for a new map) atomically move the file to its final
        name."""
        self._write_hashes()
        self._conn.commit()
        self._conn.close()
        if self._final is not None:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.path, self._final)
            self.path, self._final = self._final, None
        return self.path

    def abort(self) -> None:
        """Close without publishing a new map (its partial file is removed)."""
        self._conn.close()
        if self._final is not None:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "MapWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
