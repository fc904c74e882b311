"""Traversal log content hashes (core.tlog): each table's hash chain is committed with its rows, a log
cut off after a commit still verifies, an altered row is refused naming its table, and no bit flip or
truncation of a log reads as other content. ``robot-app log verify``."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3

import pytest

from core.tlog import LOG_FILE, LogFormatError, TraversalLogWriter, read_log, verify_log
from robot_app.cli import main
from robot_app.mapping.synthetic_logs import tiny_jpeg


def _write(folder, n: int = 30):
    with TraversalLogWriter(folder, metadata={"source": "test"}) as w:
        for i in range(n):
            t = 0.25 * i
            w.add_frame(t, tiny_jpeg((i * 7 % 255, 100, 50), seed=i))
            w.add_gps(t, 37.0 + 1e-6 * i, -122.0, quality=1 if i % 5 else 0, hacc_m=1.0)
            w.add_imu(t, (0.0, 0.1, 9.8), (0.0, 0.0, 0.01 * i))
            w.add_odom(t, 0.25 * i, 0.0, 0.0, 1.0, 0.0)
            w.add_cmd(t, 1, 0)  # ints: stored and hashed as reals
        w.add_event(7.0, "e-stop", "operator")
    return folder


def _content(folder):
    tl = read_log(folder)
    return (tl.frame_t_s.tobytes(), tl.gps["lat_deg"].tobytes(), tl.odom["x_m"].tobytes(),
            tl.frame_jpeg(tl.frame_id), {k: v for k, v in tl.meta.items() if k != "created_utc"})


def test_a_log_verifies_and_cli_says_ok(tmp_path, capsys):
    folder = _write(tmp_path / "log")
    assert verify_log(folder) == {"frames": 30, "gps": 30, "imu": 30, "odom": 30, "cmd": 30, "events": 1}
    assert main(["log", "verify", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert main(["log", "verify", str(tmp_path / "nope")]) == 2


@pytest.mark.parametrize("sql, table", [
    ("UPDATE gps SET lat_deg = lat_deg + 0.01 WHERE rowid = 4", "gps"),
    ("UPDATE frames SET t_s = 99 WHERE rowid = 2", "frames"),
    ("DELETE FROM imu WHERE rowid = 30", "imu"),
    ("INSERT INTO cmd VALUES (9.0, 2.0, 0.0)", "cmd"),
    ("UPDATE events SET detail = 'nothing' WHERE rowid = 1", "events"),
])
def test_an_altered_row_is_refused_naming_the_table(tmp_path, capsys, sql, table):
    folder = _write(tmp_path / "log")
    with sqlite3.connect(folder / LOG_FILE) as c:
        c.execute(sql)
    with pytest.raises(LogFormatError, match=f"the {table} table"):
        read_log(folder)
    assert main(["log", "verify", str(folder)]) == 1
    err = capsys.readouterr().err
    assert f"the {table} table" in err and "Traceback" not in err


def test_a_continued_log_and_a_log_cut_off_after_a_commit_verify(tmp_path):
    folder = _write(tmp_path / "log", n=10)
    with TraversalLogWriter(folder) as w:  # a recording resumed after a restart
        w.add_cmd(9.0, 0.5, 0.0)
    assert verify_log(folder)["cmd"] == 11
    w = TraversalLogWriter(folder)
    w.add_odom(10.0, 1.0, 0.0, 0.0, 0.0, 0.0)
    w.commit()
    w.add_odom(10.5, 1.5, 0.0, 0.0, 0.0, 0.0)  # never committed: the power is cut here
    w._conn.close()
    assert verify_log(folder)["odom"] == 11  # up to the last commit


def test_no_bit_flip_or_truncation_of_a_log_reads_as_other_content(tmp_path):
    folder = _write(tmp_path / "log")
    original = _content(folder)
    data = (folder / LOG_FILE).read_bytes()
    rng = random.Random(2)
    variants = []
    for _ in range(40):
        pos = rng.randrange(len(data))
        b = bytearray(data)
        b[pos] ^= 1 << rng.randrange(8)
        variants.append(bytes(b))
    variants += [data[:int(len(data) * f)] for f in (0.2, 0.5, 0.8, 0.95)]
    altered = []
    for k, blob in enumerate(variants):
        v = tmp_path / f"v{k}"
        v.mkdir()
        (v / LOG_FILE).write_bytes(blob)
        try:
            got = _content(v)
        except LogFormatError:
            continue
        if got != original:
            altered.append(k)
    assert altered == []
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_bad_metadata_is_a_one_line_error_not_a_traceback(tmp_path, capsys):
    folder = _write(tmp_path / "log")
    with sqlite3.connect(folder / LOG_FILE) as c:
        c.execute("UPDATE meta SET value = '{not json' WHERE key = 'source'")
    assert main(["log", "info", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "unreadable traversal log" in err and "Traceback" not in err
