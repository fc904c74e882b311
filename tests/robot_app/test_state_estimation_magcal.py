"""``robot-app imu calibrate-mag`` against the simulated Jackal (its MCU publishes imu/mag from the plant)."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.sensing.state_estimation import MagCalibration


class SimThread:
    """The simulated devices on their own event loop, so the CLI can run its own asyncio.run()."""

    def __init__(self, directory):
        self.directory = directory
        self.ready = threading.Event()
        self.sim = None
        self._loop = None
        self._stop = None
        self._thread = threading.Thread(target=self._main, name="sim-devices")

    def _main(self):
        async def run():
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with SimulatedDevices(self.directory, gps=False, imu=False) as sim:
                self.sim = sim
                self.ready.set()
                await self._stop.wait()
        asyncio.run(run())

    def __enter__(self):
        self._thread.start()
        assert self.ready.wait(10.0)
        return self.sim

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10.0)


def test_calibrate_mag_turns_the_robot_and_writes_the_file(tmp_path, capsys):
    out = tmp_path / "cal" / "mag.json"
    with SimThread(tmp_path) as sim:
        cfg = tmp_path / "robot.toml"
        cfg.write_text(f'[serial]\nbase_port = "{sim.ports["jackal"]}"\n')
        rc = main(["--config", str(cfg), "imu", "calibrate-mag", "--duration", "4", "--omega-radps", "2.0",
                   "--output", str(out)])
        turned = abs(sim.plant.state().wheel_travel_rad[0])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "wrote" in captured.out and turned > 5.0
    cal = MagCalibration.load(out)
    # the simulator's magnetometer is undistorted: no hard iron, a round soft-iron matrix
    assert np.allclose(cal.offset, 0.0, atol=5e-7)
    assert np.allclose(cal.matrix, np.eye(3), atol=0.03)
    assert cal.coverage_deg > 330 and json.loads(out.read_text())["samples"] > 50


@pytest.mark.parametrize("argv, msg", [(["--duration", "0.1"], "--duration"),
                                       (["--omega-radps", "9"], "--omega-radps"),
                                       (["--omega-radps", "0"], "--omega-radps")])
def test_calibrate_mag_refuses_bad_arguments(tmp_path, capsys, argv, msg):
    assert main(["imu", "calibrate-mag", *argv, "--output", str(tmp_path / "m.json")]) == 2
    assert msg in capsys.readouterr().err


def test_calibrate_mag_without_a_robot_fails_cleanly(tmp_path, capsys):
    cfg = tmp_path / "robot.toml"
    cfg.write_text(f'[serial]\nbase_port = "{tmp_path / "no-such-port"}"\n')
    rc = main(["--config", str(cfg), "imu", "calibrate-mag", "--duration", "1", "--connect-timeout", "0.5",
               "--output", str(tmp_path / "m.json")])
    assert rc == 1 and "cannot reach the robot" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()
