"""``robot-app gps decode`` over the three real logs, through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from robot_app.cli import main


@pytest.mark.parametrize("name,fixes", [("garmin15x.log", 7), ("gr8013-w.log", 3), ("ublox-lea-5q.log", 0)])
def test_decode_json_counts(dev_data, capsys, name, fixes):
    assert main(["gps", "decode", str(dev_data / "nmea" / name), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"lines", "fixes", "no_fix", "bad"} <= set(out)
    assert out["fixes"] == fixes == len(out["positions"])
    assert out["lines"] == out["used"] + out["ignored"] + out["bad"]
    assert out["bad"] == 0


def test_decode_human_output_and_bad_reasons(tmp_path, capsys):
    log = tmp_path / "bad.nmea"
    log.write_bytes(
        b"# header\n\x00\x00GGA,garbage\n$GPGGA,113258,3238.9148,N,10822.4466,W,2,08,1.1,1577.4,M,-24.6,M,,*00\n"
        b"$GPGGA,113258,3238.9148,N,10822.4466,W,2,08,1.1,1577.4,M,-24.6,M,,*4D\n"
    )
    assert main(["gps", "decode", str(log)]) == 0
    out = capsys.readouterr().out
    assert "32.6485800" in out and "fixes 1" in out and "bad 2" in out and "checksum" in out
    assert main(["gps", "decode", str(log), "--json", "--ignore-checksum-for", "GGA"]) == 0
    out = json.loads(capsys.readouterr().out)
    # both GGAs accepted now; they carry the same time: one epoch, one fix
    assert out["fixes"] == 1 and out["used"] == 2 and out["bad_by_reason"] == {"no_start": 1}


def test_decode_usage_errors(tmp_path, capsys):
    assert main(["gps", "decode", str(tmp_path / "missing.log")]) == 2
    assert "missing.log" in capsys.readouterr().err
    assert main(["gps", "decode"]) == 2
    assert main(["gps", "decode", "--port", str(tmp_path / "no-such-tty"), "--duration", "0.1"]) == 2
    assert "cannot open" in capsys.readouterr().err


def test_decode_from_a_serial_port(tmp_path, dev_data, capsys, arun):
    import asyncio

    from firmware_bridge.sim.gps import GpsReceiverSim, read_nmea_log
    from firmware_bridge.sim.vport import VirtualPort

    async def body():
        lines = read_nmea_log(dev_data / "nmea" / "garmin15x.log")
        port = VirtualPort(tmp_path / "gps")
        async with GpsReceiverSim(port, lines=lines, lines_per_s=200.0, loop=True):
            return await asyncio.to_thread(main, ["gps", "decode", "--port", port.path, "--duration", "1.0", "--json"])

    assert arun(body) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fixes"] >= 5 and out["lines"] >= 100
    assert all(abs(p["latitude_deg"] - 32.6486) < 0.001 for p in out["positions"])
