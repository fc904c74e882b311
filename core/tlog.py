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
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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


class LogFormatError(Exception):
    """A folder is not a readable traversal log (missing, corrupt, or a newer format)."""


class TraversalLogWriter:
    """Appends samples to a log; commits every ``commit_interval_s`` (and on :meth:`close`).

    Opening an existing log continues it (a recording resumed after a restart).

    Raises
    ------
    LogFormatError
        If the folder holds a log of a newer format version.
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
        with self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                   [(k, json.dumps(v)) for k, v in meta.items()])
        self._last_commit = time.monotonic()
        self._pending = 0

    def _add(self, table: str, row: tuple) -> None:
        if row[0] is None or not np.isfinite(row[0]):
            raise ValueError(f"{table}: sample time t_s must be a finite number, got {row[0]!r}")
        cols = _COLUMNS[table]
        self._conn.execute(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", row)
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
        """Make everything added so far durable."""
        self._conn.commit()
        self._last_commit = time.monotonic()
        self._pending = 0

    def close(self) -> None:
        if self._conn is not None:
            self.commit()
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "TraversalLogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
        fr = np.array(conn.execute("SELECT rowid, t_s FROM frames ORDER BY t_s").fetchall(), dtype=np.float64).reshape(-1, 2)
        g = np.array(conn.execute("SELECT t_s, lat_deg, lon_deg, quality, hacc_m FROM gps ORDER BY t_s").fetchall(),
                     dtype=np.float64).reshape(-1, 5)
        o = np.array(conn.execute("SELECT t_s, x_m, y_m, yaw_rad, v_mps, omega_radps FROM odom ORDER BY t_s").fetchall(),
                     dtype=np.float64).reshape(-1, 6)
    except sqlite3.DatabaseError as exc:
        raise LogFormatError(f"{folder}: unreadable traversal log ({exc})") from exc
    finally:
        conn.close()
    gps = {k: g[:, j] for j, k in enumerate(("t_s", "lat_deg", "lon_deg", "quality", "hacc_m"))}
    odom = {k: o[:, j] for j, k in enumerate(("t_s", "x_m", "y_m", "yaw_rad", "v_mps", "omega_radps"))}
    return TraversalLog(folder, meta, fr[:, 1].copy(), fr[:, 0].astype(np.int64), gps, odom)


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
