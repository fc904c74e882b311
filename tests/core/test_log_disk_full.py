"""A full disk while a traversal log is written: the failing insert or commit rolls back to the last commit,
the hash chain only advances with a commit, the committed part verifies and reads, and the writer refuses
further samples. Two ways to fill the disk: SQLite's own page limit (every machine) and a real 1 MB tmpfs
(where the test may mount one: root on Linux)."""

from __future__ import annotations

import os

import pytest

from core.tlog import LogWriteError, TraversalLogWriter, count_rows, read_log, verify_log
from robot_app.cli import main
from robot_app.mapping.synthetic_logs import tiny_jpeg


def _fill(w: TraversalLogWriter, n_max: int = 100_000) -> int:
    """Add samples until the writer fails; returns how many frames were added before the failure."""
    for i in range(n_max):
        t = 0.25 * i
        try:
            w.add_frame(t, tiny_jpeg((i * 7 % 255, 100, 50), seed=i) + os.urandom(2000))
            w.add_gps(t, 37.0 + 1e-6 * i, -122.0, quality=1, hacc_m=1.0)
            if i % 4 == 3:
                w.commit()
        except LogWriteError as exc:
            assert exc.disk_full, exc
            return i
    raise AssertionError("the disk never filled")


def _check_committed_part(folder, capsys) -> None:
    counts = verify_log(folder)  # raises LogFormatError if the chain and the rows disagree
    assert counts["frames"] == count_rows(folder, "frames") >= 4
    assert counts["frames"] % 4 == 0  # whole commits only: the samples after the last commit are gone
    assert read_log(folder).frame_t_s.size == counts["frames"]
    assert main(["log", "verify", str(folder)]) == 0
    assert "ok" in capsys.readouterr().out.lower()


def test_a_full_database_keeps_every_committed_row_and_a_valid_chain(tmp_path, capsys):
    folder = tmp_path / "log"
    w = TraversalLogWriter(folder, metadata={"source": "test"})
    w._conn.execute("PRAGMA max_page_count = 60")  # SQLite answers SQLITE_FULL past 60 pages, as on a full disk
    w.commit_interval_s = 1e9  # commit only where _fill says
    added = _fill(w)
    assert added > 4
    with pytest.raises(LogWriteError, match="stopped taking samples"):
        w.add_gps(1e6, 37.0, -122.0, quality=1)
    w.close()  # no write, no error
    _check_committed_part(folder, capsys)
    assert count_rows(folder, "frames") <= added


def test_a_full_tmpfs_keeps_every_committed_row_and_a_valid_chain(tiny_tmpfs, tmp_path, capsys):
    folder = tiny_tmpfs / "log"
    w = TraversalLogWriter(folder, metadata={"source": "test"})
    w.commit_interval_s = 1e9
    added = _fill(w)
    assert added > 4
    w.close()
    # read it where there is space (a reader replays the WAL into the file on open)
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    _check_committed_part(copy, capsys)
