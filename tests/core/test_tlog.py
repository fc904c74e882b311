"""Traversal log storage: round trip, GPS interpolation, bad samples, crash safety under kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from core.tlog import LogFormatError, TraversalLogWriter, frame_positions, read_log

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32 + b"\xff\xd9"


def test_round_trip_and_interpolated_positions(tmp_path):
    with TraversalLogWriter(tmp_path / "log", metadata={"robot": "j100"}) as w:
        for i in range(8):
            w.add_frame(i * 0.25, JPEG + bytes([i]))
        w.add_gps(0.0, 37.0, -122.0, quality=1, hacc_m=1.5)
        w.add_gps(1.0, 37.0001, -122.0, quality=4)
        w.add_gps(1.5, None, None, quality=0)
        w.add_odom(0.5, 1.0, 2.0, 0.1, 0.5, 0.0)
        w.add_imu(0.5, (0, 0, 9.81), (0, 0, 0.1))
        w.add_event(0.7, "collision", "bumper")
    tl = read_log(tmp_path / "log")
    assert tl.meta["robot"] == "j100" and tl.meta["format_version"] == 1
    assert tl.frame_t_s.tolist() == [i * 0.25 for i in range(8)]
    assert tl.frame_jpeg(tl.frame_id[[3, 1]]) == [JPEG + b"\x03", JPEG + b"\x01"]
    lat, lon, valid = frame_positions(tl)
    assert valid[:5].all()  # 0 .. 1.0 s lie between two fixes
    assert lat[2] == pytest.approx(37.00005)
    # after the last fix nothing brackets the frame (the quality-0 sample is not a position)
    assert not valid[5:].any()
    assert tl.odom["x_m"].tolist() == [1.0]


def test_no_position_is_invented_across_a_dropout(tmp_path):
    with TraversalLogWriter(tmp_path / "log") as w:
        for i in range(20):
            w.add_frame(float(i), JPEG)
        w.add_gps(0.0, 37.0, -122.0, quality=1)
        w.add_gps(19.0, 37.001, -122.0, quality=1)
    _, _, valid = frame_positions(read_log(tmp_path / "log"))
    assert valid.tolist() == [True] + [False] * 18 + [True]


def test_bad_samples_are_refused(tmp_path):
    with TraversalLogWriter(tmp_path / "log") as w:
        with pytest.raises(ValueError, match="not JPEG"):
            w.add_frame(0.0, b"PNG...")
        with pytest.raises(ValueError, match="t_s must be a finite number"):
            w.add_cmd(float("nan"), 0.0, 0.0)
    assert read_log(tmp_path / "log").frame_t_s.size == 0


def test_not_a_log(tmp_path):
    with pytest.raises(LogFormatError, match="not a traversal log"):
        read_log(tmp_path)
    (tmp_path / "log.sqlite").write_bytes(b"garbage" * 100)
    with pytest.raises(LogFormatError, match="unreadable"):
        read_log(tmp_path)


def test_kill_9_mid_write_loses_at_most_the_uncommitted_samples(tmp_path):
    folder = tmp_path / "log"
    child = textwrap.dedent(f"""
        import sys, time
        from core.tlog import TraversalLogWriter
        JPEG = {JPEG!r}
        w = TraversalLogWriter({str(folder)!r})
        w.commit_interval_s = 0.05
        i = 0
        while True:
            w.add_frame(float(i), JPEG + i.to_bytes(4, "little"))
            w.add_gps(float(i), 37.0, -122.0, quality=1)
            if w._pending == 0:          # the add above committed
                print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                            cwd=os.getcwd(), env=dict(os.environ, PYTHONPATH=os.getcwd()))
    committed = []
    try:
        while len(committed) < 5:
            line = proc.stdout.readline()
            assert line, "the recording process died"
            committed.append(int(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    tl = read_log(folder)  # reopens after the crash (WAL replayed)
    n = tl.frame_t_s.size
    assert n >= committed[-1] + 1
    assert tl.frame_t_s.tolist() == [float(i) for i in range(n)]       # no hole, no torn row
    last = tl.frame_jpeg([tl.frame_id[-1]])[0]
    assert last == JPEG + (n - 1).to_bytes(4, "little")
    # and the log can be continued after the crash
    with TraversalLogWriter(folder) as w:
        w.add_frame(float(n), JPEG)
    assert read_log(folder).frame_t_s.size == n + 1
