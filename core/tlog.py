"""Traversal log: what the robot records while an operator drives it (storage module).

A log is a folder holding one SQLite file, ``log.sqlite``, in WAL mode with ``synchronous=FULL``:
the writer commits at least once a second (:attr:`TraversalLogWriter.commit_interval_s`), so a power
cut or ``kill -9`` loses at most the samples of the last second and never earlier data (SQLite's
write-ahead log makes every commit atomic and durable).

Tables (times: ``t_s`` = the robot's monotonic receive time in seconds, the control clock; ``t_utc_s``
= UTC epoch seconds from the GPS receiver where known, for logs only)::

    meta(key TEXT PRIMARY KEY, value TEXT)        -- JSON: format_version, source, frame_rate_hz, ...
    frames(t_s REAL, t_utc_s REAL, jpeg BLOB)     -- camera frames, raw JPEG as captured
    gps(t_s, t_utc_s, lat_deg, lon_deg, quality INTEGER, hacc_m REAL)   -- quality 0 = no fix
    imu(t_s, ax_mps2, ay_mps2, az_mps2, gx_radps, gy_radps, gz_radps)   -- body frame, REP-103
    odom(t_s, x_m, y_m, yaw_rad, v_mps, omega_radps)                  -- wheel odometry, odom frame
    cmd(t_s, v_mps, omega_radps)                                       -- commanded velocity
    events(t_s, kind TEXT, detail TEXT)                                -- e.g. collision, e-stop

Content hashes: every table carries a hash chain over its rows in insertion order (SHA-256 of the previous
link and the row's canonical bytes), kept in ``meta`` ``content_sha256`` = {table: {"rows", "sha256"}} and
committed in the same transaction as the rows, so a log cut off by a power loss still verifies up to its
last commit. :func:`read_log` and :func:`verify_log` (``robot-app log verify LOG``) refuse a log whose rows
do not match with a :class:`LogFormatError` naming the table; a log written before the hashes reads with
a warning.

A write that fails (a full disk: SQLITE_FULL) rolls back to the last commit, rows and chain alike, and
raises :class:`LogWriteError`; the log keeps every committed row and still verifies (the chain never
advances ahead of what is committed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
LOG_FILE = "log.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS frames(t_s REAL NOT NULL, t_utc_s REAL, jpeg BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS gps(t_s REAL NOT NULL, t_utc_s REAL, lat_deg REAL, lon_deg REAL,
                               quality INTEGER NOT NULL, hacc_m REAL);
CREATE TABLE IF NOT EXISTS imu(t_s REAL NOT NULL, ax_mps2 REAL, ay_mps2 REAL, az_mps2 REAL,
                               gx_radps REAL, gy_radps REAL, gz_radps REAL);
CREATE TABLE IF NOT EXISTS odom(t_s REAL NOT NULL, x_m REAL, y_m REAL, yaw_rad REAL, v_mps REAL, omega_radps REAL);
CREATE TABLE IF NOT EXISTS cmd(t_s REAL NOT NULL, v_mps REAL, omega_radps REAL);
CREATE TABLE IF NOT EXISTS events(t_s REAL NOT NULL, kind TEXT NOT NULL, detail TEXT);
"""
_COLUMNS = {
    "frames": ("t_s", "t_utc_s", "jpeg"),
    "gps": ("t_s", "t_utc_s", "lat_deg", "lon_deg", "quality", "hacc_m"),
    "imu": ("t_s", "ax_mps2", "ay_mps2", "az_mps2", "gx_radps", "gy_radps", "gz_radps"),
    "odom": ("t_s", "x_m", "y_m", "yaw_rad", "v_mps", "omega_radps"),
    "cmd": ("t_s", "v_mps", "omega_radps"),
    "events": ("t_s", "kind", "detail"),
}


# column kinds per table, for the rows' canonical bytes: R real (None allowed), I integer, T text, B blob
_KINDS = {"frames": "RRB", "gps": "RRRRIR", "imu": "RRRRRRR", "odom": "RRRRRR", "cmd": "RRR", "events": "RTT"}


def _normalise(table: str, row: tuple) -> tuple:
    """The row as SQLite stores it (so the writer hashes what a reader reads back)."""
    out = []
    for kind, v in zip(_KINDS[table], row):
        if v is None:
            out.append(None)
        elif kind == "R":
            out.append(float(v))
        elif kind == "I":
            out.append(int(v))
        elif kind == "T":
            out.append(str(v))
        else:
            out.append(bytes(v))
    return tuple(out)


def _row_bytes(row: tuple) -> bytes:
    parts = []
    for v in row:
        b = (b"N" if v is None else v if isinstance(v, bytes) else float.hex(v).encode() if isinstance(v, float)
             else str(v).encode("utf-8"))
        parts.append(b"%d:" % len(b) + b)
    return b"|".join(parts)


def _link(prev: str, row: tuple) -> str:
    return hashlib.sha256(prev.encode() + b"|" + _row_bytes(row)).hexdigest()


class LogFormatError(Exception):
    """A folder is not a readable traversal log (missing, corrupt, or a newer format)."""


class LogWriteError(OSError):
    """A write or commit of a traversal log failed (disk full, I/O error, read-only medium).

    The rows added since the last successful commit are lost; every committed row, and the hash chain that
    covers it, stays as it was, so the log verifies and builds up to its last commit. The writer refuses
    further samples (``disk_full`` says whether SQLite reported the disk or database full).
    """

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


class TraversalLogWriter:
    """Appends samples to a log; commits every ``commit_interval_s`` (and on :meth:`close`).

    Opening an existing log continues it (a recording resumed after a restart).

    The hash chain advances with the commit that writes its rows, never before: a failed insert or commit
    (a full disk) rolls the transaction back, restores the chain of the last commit and raises
    :class:`LogWriteError`; the writer then refuses further samples and :meth:`close` closes it without
    writing.

    Raises
    ------
    LogFormatError
        If the folder holds a log of a newer format version.
    LogWriteError
        When SQLite cannot write a sample or commit (see above), and on every sample after that.
    ValueError
        On a sample with a NaN time or a non-JPEG frame (the sample is not written).
    """

    commit_interval_s = 1.0

    def __init__(self, folder: str | Path, *, metadata: dict[str, Any] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.folder / LOG_FILE, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        with self._conn:
            self._conn.executescript(_SCHEMA)
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
        if row is not None and json.loads(row[0]) > FORMAT_VERSION:
            self._conn.close()
            raise LogFormatError(f"{self.folder}: log format {json.loads(row[0])} is newer than supported "
                                 f"({FORMAT_VERSION})")
        meta = {"format_version": FORMAT_VERSION} if row is None else {}
        if row is None:
            meta["created_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta.update(metadata or {})
        hashes = self._conn.execute("SELECT value FROM meta WHERE key = 'content_sha256'").fetchone()
        counts = {t: int(self._conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in _KINDS}
        if hashes is None and any(counts.values()):  # continuing a log written before the hashes: none now
            self._chain = None
        else:
            chain = json.loads(hashes[0]) if hashes is not None else {}
            self._chain = {t: (int(chain.get(t, {}).get("rows", 0)), str(chain.get(t, {}).get("sha256", "")))
                           for t in _KINDS}
            meta["content_sha256"] = self._chain_meta()
        with self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                   [(k, json.dumps(v)) for k, v in meta.items()])
        self._last_commit = time.monotonic()
        self._pending = 0
        self._committed_chain = None if self._chain is None else dict(self._chain)
        self.failed: LogWriteError | None = None
        self.rows_committed = sum(counts.values())  # rows durable in the file (all tables)

    def _chain_meta(self) -> dict:
        return {t: {"rows": n, "sha256": h} for t, (n, h) in self._chain.items()}

    def _add(self, table: str, row: tuple) -> None:
        if row[0] is None or not np.isfinite(row[0]):
            raise ValueError(f"{table}: sample time t_s must be a finite number, got {row[0]!r}")
        if self.failed is not None:
            raise LogWriteError(f"{self.folder}: the log stopped taking samples: {self.failed}",
                                disk_full=self.failed.disk_full)
        cols = _COLUMNS[table]
        row = _normalise(table, row)
        try:
            self._conn.execute(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                               row)
        except sqlite3.Error as exc:
            self._write_failed(exc)
        if self._chain is not None:
            n, h = self._chain[table]
            self._chain[table] = (n + 1, _link(h, row))
        self._pending += 1
        if time.monotonic() - self._last_commit >= self.commit_interval_s:
            self.commit()

    def add_frame(self, t_s: float, jpeg: bytes, *, t_utc_s: float | None = None) -> None:
        if not isinstance(jpeg, (bytes, bytearray)) or bytes(jpeg[:2]) != b"\xff\xd8":
            raise ValueError(f"frames: sample at t={t_s} is not JPEG data")
        self._add("frames", (float(t_s), t_utc_s, bytes(jpeg)))

    def add_gps(self, t_s: float, lat_deg: float | None, lon_deg: float | None, *, quality: int,
                hacc_m: float | None = None, t_utc_s: float | None = None) -> None:
        self._add("gps", (float(t_s), t_utc_s, lat_deg, lon_deg, int(quality), hacc_m))

    def add_imu(self, t_s: float, accel_mps2, gyro_radps) -> None:
        a, g = [float(x) for x in accel_mps2], [float(x) for x in gyro_radps]
        self._add("imu", (float(t_s), *a, *g))

    def add_odom(self, t_s: float, x_m: float, y_m: float, yaw_rad: float, v_mps: float, omega_radps: float) -> None:
        self._add("odom", (float(t_s), x_m, y_m, yaw_rad, v_mps, omega_radps))

    def add_cmd(self, t_s: float, v_mps: float, omega_radps: float) -> None:
        self._add("cmd", (float(t_s), v_mps, omega_radps))

    def add_event(self, t_s: float, kind: str, detail: str = "") -> None:
        self._add("events", (float(t_s), kind, detail))

    def commit(self) -> None:
        """Make everything added so far durable (the rows and their tables' hashes in one transaction).

        Raises
        ------
        LogWriteError
            When the commit fails (the pending rows are rolled back and lost; see the class docstring).
        """
        if self.failed is not None:
            return
        try:
            if self._chain is not None and self._pending:
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('content_sha256', ?)",
                                   (json.dumps(self._chain_meta()),))
            self._conn.commit()
        except sqlite3.Error as exc:
            self._write_failed(exc)
        self._committed_chain = None if self._chain is None else dict(self._chain)
        self.rows_committed += self._pending
        self._last_commit = time.monotonic()
        self._pending = 0

    def _write_failed(self, exc: sqlite3.Error):
        """Roll back to the last commit (rows and chain), remember the failure and raise it."""
        try:
            self._conn.rollback()
        except sqlite3.Error:  # pragma: no cover - SQLite rolled back by itself already
            pass
        self._chain = None if self._committed_chain is None else dict(self._committed_chain)
        lost, self._pending = self._pending, 0
        full = getattr(exc, "sqlite_errorcode", None) == 13 or "full" in str(exc).lower()  # 13: SQLITE_FULL
        what = "the disk is full" if full else f"SQLite could not write ({exc})"
        self.failed = LogWriteError(f"{self.folder}: {what}; the last {lost} uncommitted sample(s) are lost, "
                                    f"{self.rows_committed} committed sample(s) are kept", disk_full=full)
        log.error("%s", self.failed)
        raise self.failed from exc

    def close(self) -> None:
        """Commit what is pending and close the file. A writer that failed closes without writing; a commit
        that fails here raises :class:`LogWriteError` after closing the file."""
        if self._conn is not None:
            try:
                self.commit()
            finally:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "TraversalLogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def count_rows(folder: str | Path, table: str) -> int:
    """Rows of ``table`` (one of frames, gps, imu, odom, cmd, events) committed in the log at ``folder``.

    Raises
    ------
    LogFormatError
        If there is no readable log there.
    ValueError
        For an unknown table.
    """
    if table not in _KINDS:
        raise ValueError(f"unknown log table {table!r}: one of {', '.join(_KINDS)}")
    conn = _connect_ro(Path(folder))
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.Error as exc:
        raise LogFormatError(f"{folder}: {exc}") from exc
    finally:
        conn.close()


@dataclass(frozen=True)
class TraversalLog:
    """A log read into memory, except the JPEG bytes (read on demand with :meth:`frame_jpeg`).

    ``frame_t_s`` (F,) float64 monotonic times of the frames, ``frame_id`` (F,) int64 row ids;
    ``gps`` dict of (G,) arrays (t_s, lat_deg, lon_deg, quality, hacc_m); ``odom`` dict of arrays;
    ``meta`` dict.
    """

    folder: Path
    meta: dict
    frame_t_s: np.ndarray
    frame_id: np.ndarray
    gps: dict
    odom: dict

    def frame_jpeg(self, frame_ids) -> list[bytes]:
        """JPEG bytes of the given frame row ids, in the order given."""
        ids = [int(i) for i in np.atleast_1d(frame_ids)]
        conn = _connect_ro(self.folder)
        try:
            found = {}
            for chunk in range(0, len(ids), 500):
                part = ids[chunk:chunk + 500]
                q = f"SELECT rowid, jpeg FROM frames WHERE rowid IN ({', '.join('?' * len(part))})"
                found.update(conn.execute(q, part).fetchall())
        finally:
            conn.close()
        missing = [i for i in ids if i not in found]
        if missing:
            raise LogFormatError(f"{self.folder}: frames {missing[:5]} are missing")
        return [found[i] for i in ids]


def _connect_ro(folder: Path) -> sqlite3.Connection:
    path = folder / LOG_FILE
    if not path.is_file():
        raise LogFormatError(f"{folder}: not a traversal log (no {LOG_FILE})")
    # not mode=ro: a log still being written has a WAL that a reader must be able to replay
    return sqlite3.connect(path)


def read_log(folder: str | Path) -> TraversalLog:
    """Read a traversal log folder.

    Raises
    ------
    LogFormatError
        Not a log, corrupt, or a newer format version.
    """
    folder = Path(folder)
    conn = _connect_ro(folder)
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        if meta.get("format_version", 0) > FORMAT_VERSION:
            raise LogFormatError(f"{folder}: log format {meta['format_version']} is newer than supported")
        _verify(folder, conn, meta)
        fr = np.array(conn.execute("SELECT rowid, t_s FROM frames ORDER BY t_s").fetchall(), dtype=np.float64).reshape(
            -1, 2
        )
        g = np.array(conn.execute("SELECT t_s, lat_deg, lon_deg, quality, hacc_m FROM gps ORDER BY t_s").fetchall(),
                     dtype=np.float64).reshape(-1, 5)
        o = np.array(
            conn.execute("SELECT t_s, x_m, y_m, yaw_rad, v_mps, omega_radps FROM odom ORDER BY t_s").fetchall(),
            dtype=np.float64,
        ).reshape(-1, 6)
    except (sqlite3.DatabaseError, json.JSONDecodeError, TypeError) as exc:
        raise LogFormatError(f"{folder}: unreadable traversal log ({exc})") from exc
    finally:
        conn.close()
    gps = {k: g[:, j] for j, k in enumerate(("t_s", "lat_deg", "lon_deg", "quality", "hacc_m"))}
    odom = {k: o[:, j] for j, k in enumerate(("t_s", "x_m", "y_m", "yaw_rad", "v_mps", "omega_radps"))}
    return TraversalLog(folder, meta, fr[:, 1].copy(), fr[:, 0].astype(np.int64), gps, odom)


def _verify(folder: Path, conn, meta: dict) -> dict:
    """Recompute each table's hash chain and compare it with the log's; returns the row counts."""
    chain = meta.get("content_sha256")
    counts = {}
    if chain is None:
        log.warning("%s: traversal log has no content hashes (written before them): altered rows cannot be "
                    "detected", folder)
        return {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in _KINDS}
    if not isinstance(chain, dict):
        raise LogFormatError(f"{folder}: the content hashes in meta are not readable")
    for table, cols in _COLUMNS.items():
        n, h = 0, ""
        for row in conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY rowid"):
            n, h = n + 1, _link(h, row)
        want = chain.get(table) or {"rows": 0, "sha256": ""}
        if (n, h) != (want.get("rows"), want.get("sha256")):
            raise LogFormatError(f"{folder}: the {table} table does not match its content hash ({n} rows, the log "
                                 f"says {want.get('rows')}; altered or corrupt)")
        counts[table] = n
    return counts


def verify_log(folder: str | Path) -> dict:
    """Check every table of a traversal log against its content hashes; returns {table: rows}.

    Raises
    ------
    LogFormatError
        Not a log, unreadable, or a table that does not match (the message names it).
    """
    folder = Path(folder)
    conn = _connect_ro(folder)
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        return _verify(folder, conn, meta)
    except (sqlite3.DatabaseError, json.JSONDecodeError, TypeError) as exc:
        raise LogFormatError(f"{folder}: unreadable traversal log ({exc})") from exc
    finally:
        conn.close()


def frame_positions(log: TraversalLog, *, max_gap_s: float = 2.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPS position of every frame, linearly interpolated between fixes (quality > 0) in time.

    Returns ``(lat_deg, lon_deg, valid)``, (F,) arrays; ``valid`` is False for frames farther than
    ``max_gap_s`` from a fix on either side (no position is invented across a GPS dropout).
    """
    g = log.gps
    ok = (g["quality"] > 0) & np.isfinite(g["lat_deg"]) & np.isfinite(g["lon_deg"])
    t, lat, lon = g["t_s"][ok], g["lat_deg"][ok], g["lon_deg"][ok]
    ft = log.frame_t_s
    if t.size == 0:
        nan = np.full(ft.shape, np.nan)
        return nan, nan.copy(), np.zeros(ft.shape, dtype=bool)
    la = np.interp(ft, t, lat)
    lo = np.interp(ft, t, lon)
    idx = np.searchsorted(t, ft)
    before = np.where(idx > 0, ft - t[np.maximum(idx - 1, 0)], np.inf)
    after = np.where(idx < t.size, t[np.minimum(idx, t.size - 1)] - ft, np.inf)
    exact = np.isclose(before, 0) | np.isclose(after, 0)
    valid = exact | ((before <= max_gap_s) & (after <= max_gap_s))
    return la, lo, valid
