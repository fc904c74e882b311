"""NmeaGps driver <-> GPS receiver simulator over a virtual serial port: real logs and dropouts."""

from __future__ import annotations

import asyncio
import time

import pytest

from firmware_bridge.gps import NmeaGps
from firmware_bridge.nmea import NmeaDecoder
from firmware_bridge.readings import GpsFix, GpsNoFix
from firmware_bridge.sim.gps import GpsReceiverSim, read_nmea_log
from firmware_bridge.sim.plant import KinematicPlant
from firmware_bridge.sim.vport import VirtualPort


@pytest.mark.parametrize("name", ["garmin15x.log", "gr8013-w.log", "ublox-lea-5q.log"])
def test_real_log_replayed_through_a_virtual_port(tmp_path, dev_data, arun, name):
    lines = read_nmea_log(dev_data / "nmea" / name)
    offline = NmeaDecoder()  # as the driver: no finish(), a last epoch cut by the end stays open
    expected = [r for ln in lines for r in offline.decode(ln, 0.0) if isinstance(r, GpsFix)]

    async def body():
        port = VirtualPort(tmp_path / "gps")
        async with port:
            async with NmeaGps(port.path, reconnect_min_s=0.05) as gps:
                await gps.wait_connected(2.0)
                sim = GpsReceiverSim(port, lines=lines, lines_per_s=500.0)
                await sim.start()
                try:
                    await asyncio.wait_for(sim.finished.wait(), 5.0)
                    end = time.monotonic() + 2.0
                    while gps.decoder.stats.lines < len(lines) and time.monotonic() < end:
                        await asyncio.sleep(0.02)
                finally:
                    await sim.close()
                s = gps.decoder.stats
                assert s.lines == len(lines)
                assert s.used + s.ignored + s.bad_total == s.lines
                got = []
                while True:
                    try:
                        r = await gps.recv(timeout_s=0.05)
                    except TimeoutError:
                        break
                    if isinstance(r, GpsFix):
                        got.append(r)
                assert [(f.latitude_deg, f.longitude_deg, f.quality) for f in got] == \
                    [(f.latitude_deg, f.longitude_deg, f.quality) for f in expected]
    arun(body)


def test_trajectory_dropout_and_recovery(tmp_path, arun):
    async def body():
        plant = KinematicPlant()
        port = VirtualPort(tmp_path / "gps")
        async with GpsReceiverSim(port, plant=plant, rate_hz=20.0) as sim:
            async with NmeaGps(port.path, reconnect_min_s=0.05) as gps:
                fix = await gps.recv(timeout_s=2.0)
                assert isinstance(fix, GpsFix) and fix.latitude_deg == pytest.approx(52.5148, abs=1e-6)
                sim.dropout = True
                end = time.monotonic() + 2.0
                while gps.latest(GpsFix, max_age_s=0.3) is not None and time.monotonic() < end:
                    await asyncio.sleep(0.02)
                assert gps.latest(GpsFix, max_age_s=0.3) is None
                assert gps.latest(GpsNoFix, max_age_s=0.3) is not None
                sim.dropout = False
                end = time.monotonic() + 2.0
                while gps.latest(GpsFix, max_age_s=0.3) is None and time.monotonic() < end:
                    await asyncio.sleep(0.02)
                assert gps.latest(GpsFix, max_age_s=0.3) is not None
    arun(body)
