"""With a separate GPS receiver configured, the app's fixes come from it, not from the base MCU."""

from __future__ import annotations

import asyncio
import dataclasses

from firmware_bridge.sim.devices import SimulatedDevices
from firmware_bridge.sim.gps import read_nmea_log
from robot_app.config import Config
from robot_app.service.app import App


def test_status_reads_the_separate_receiver(tmp_path, dev_data):
    lines = read_nmea_log(dev_data / "nmea" / "garmin15x.log")
    base = Config()

    async def main_():
        async with SimulatedDevices(tmp_path, gps=True, gps_lines=lines, imu=False,
                                    origin_latlon=(37.8719, -122.2585)) as sim:
            serial = dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"]), gps_source="serial",
                                         gps_port=str(sim.ports["gps"]))
            app = App(dataclasses.replace(base, serial=serial, ui=dataclasses.replace(base.ui, enabled=False)))
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                for _ in range(100):
                    st = app.status_dict()
                    if st["gps"] is not None:
                        break
                    await asyncio.sleep(0.1)
                return st["gps"]
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    gps = asyncio.run(main_())
    assert gps is not None
    # the Garmin capture is near 32.65 N, 108.37 W (the MCU's own fix would be at 37.87 N, 122.26 W)
    assert abs(gps["lat_deg"] - 32.65) < 0.01 and abs(gps["lon_deg"] + 108.37) < 0.01 and gps["quality"] == 2
