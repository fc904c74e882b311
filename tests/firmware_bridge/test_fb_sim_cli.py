"""``robot-app sim devices`` and ``robot-app bench serial`` (short runs), and the bench functions."""

from __future__ import annotations

import json

import pytest

from firmware_bridge.base import JackalBase
from firmware_bridge.bench import decoder_throughput, drive_link_bench, percentile
from firmware_bridge.gps import NmeaGps
from firmware_bridge.imu import MipImu
from firmware_bridge.readings import GpsFix, ImuReading
from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.config import RobotConfig


def test_sim_devices_cli_prints_ports(tmp_path, capsys):
    assert main(["sim", "devices", "--dir", str(tmp_path), "--duration", "0.2", "--json",
                 "--drive-log", str(tmp_path / "drive.jsonl")]) == 0
    assert (tmp_path / "drive.jsonl").exists()
    ports = json.loads(capsys.readouterr().out)
    assert set(ports) == {"jackal", "gps", "imu"}
    assert ports["jackal"] == str(tmp_path / "jackal")
    assert not (tmp_path / "jackal").exists()  # links removed on exit


@pytest.mark.parametrize("argv,match", [
    (["--world", "mars"], "unknown world"),
    (["--world", "no_such_module:make"], "cannot load"),
    (["--world", "builtins:repr"], "did not return a plant"),
    (["--origin", "north"], "lat,lon"),
    (["--origin", "95,0"], "not a valid"),
    (["--gps-log", "/nonexistent.log"], "gps-log"),
    (["--dir", "/proc/robot-app-test"], "cannot create the folder"),
    (["--drive-log", "/nonexistent-dir/x.jsonl"], "drive-log"),
])
def test_sim_devices_bad_arguments(capsys, argv, match):
    assert main(["sim", "devices", "--duration", "0.1", *argv]) == 2
    assert match in capsys.readouterr().err


def test_all_drivers_against_all_simulators(tmp_path, dev_data, arun):
    from firmware_bridge.sim.gps import read_nmea_log

    async def body():
        lines = read_nmea_log(dev_data / "nmea" / "gr8013-w.log")
        async with SimulatedDevices(tmp_path, gps_lines=lines) as sims:
            async with JackalBase(sims.ports["jackal"], robot=RobotConfig()) as base, \
                    NmeaGps(sims.ports["gps"]) as gps, MipImu(sims.ports["imu"]) as imu:
                for drv in (base, gps, imu):
                    await drv.wait_connected(3.0)
                fix = None
                while not isinstance(fix, GpsFix):
                    fix = await gps.recv(timeout_s=2.0)
                assert fix.latitude_deg == pytest.approx(52.5148, abs=1e-3)
                assert isinstance(await imu.recv(timeout_s=1.0), ImuReading)
    arun(body)


def test_bench_functions_short_run(arun):
    tp = decoder_throughput(seconds=0.05)
    assert tp["rosserial_feedback_frames_per_s"] > 0 and tp["nmea_lines_per_s"] > 0
    for separate in (False, True):
        out = arun(lambda: drive_link_bench(RobotConfig(), seconds=0.5, separate_process=separate))
        assert out["commands_sent"] > 5 and out["commands_matched"] == out["commands_sent"]
        # the figures themselves are not asserted (timing); their order and causality are: the send time is
        # stamped before the write, so no frame can arrive before it was sent
        assert 0 <= out["latency_ms_min"] <= out["latency_ms_p50"] <= out["latency_ms_p99"] <= out["latency_ms_max"]
        assert out["loadavg_1m"] is None or out["loadavg_1m"] >= 0
    assert percentile([1, 2, 3, 4], 50) == 2.5


def test_bench_serial_cli_short_run(capsys):
    """The CLI end to end on the simulators (a fraction of a second of drive link): the --json figures'
    structure, latencies never negative and ordered, the load average stored beside them; the text form
    prints p50/p99/max and the load average. No timing thresholds."""
    assert main(["bench", "serial", "--seconds", "0.3", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert {"rosserial_feedback_frames_per_s", "nmea_lines_per_s", "loadavg_1m", "seconds", "simulator",
            "commands_sent", "commands_matched", "latency_ms_p50", "latency_ms_p99", "latency_ms_min",
            "latency_ms_max", "drive_jitter_ms_p50", "drive_jitter_ms_p99", "drive_jitter_ms_max"} <= set(fig)
    assert fig["simulator"] == "separate process"
    assert fig["commands_sent"] > 0 and fig["commands_matched"] == fig["commands_sent"]
    # every latency >= 0 (the minimum is), and p50 <= p99 <= max
    assert 0 <= fig["latency_ms_min"] <= fig["latency_ms_p50"] <= fig["latency_ms_p99"] <= fig["latency_ms_max"]
    assert fig["loadavg_1m"] is None or fig["loadavg_1m"] >= 0
    assert main(["bench", "serial", "--seconds", "0.3", "--same-loop"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("command latency"))
    assert all(s in line for s in ("p50 ", "p99 ", "max ", "load average (1 min) ", "same event loop"))


def test_bench_serial_cli_usage(capsys):
    assert main(["bench", "serial", "--seconds", "0"]) == 2
    assert main(["bench", "serial", "--seconds", "1", "--nmea-log", "/nonexistent"]) == 2


def make_test_plant(config):
    from firmware_bridge.sim.plant import KinematicPlant

    return KinematicPlant(tau_s=0.0)


def test_sim_devices_with_a_plugged_in_world(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    argv = ["sim", "devices", "--dir", str(tmp_path), "--duration", "0.1", "--no-gps", "--no-imu", "--json",
            "--world", "test_fb_sim_cli:make_test_plant"]
    assert main(argv) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"jackal"}
