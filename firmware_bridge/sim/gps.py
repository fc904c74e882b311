"""Simulated NMEA GPS receiver on a :class:`VirtualPort`: replays a captured log, or follows a plant.

Replay writes the log's lines (``#`` comment lines skipped) at ``lines_per_s``, optionally looping;
trajectory mode writes GGA + RMC epochs at ``rate_hz`` from the plant's pose around
``origin_latlon``. ``dropout = True`` makes it print no-fix sentences (sky view lost) until cleared.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import math
from pathlib import Path

from firmware_bridge.sim.nmea_gen import enu_to_latlon, format_gga, format_rmc
from firmware_bridge.sim.plant import Plant
from firmware_bridge.sim.vport import VirtualPort

__all__ = ["GpsReceiverSim", "read_nmea_log"]


def read_nmea_log(path: str | Path) -> list[bytes]:
    """Lines of a captured NMEA log without line ends, skipping ``#`` comment lines (gpsd headers).

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    data = Path(path).read_bytes()
    return [ln.rstrip(b"\r") for ln in data.split(b"\n") if ln.strip() and not ln.lstrip().startswith(b"#")]


class GpsReceiverSim:
    """NMEA receiver simulator.

    Parameters
    ----------
    port : VirtualPort
        Device side; the driver opens ``port.path``.
    lines : list of bytes, optional
        Log lines to replay (see :func:`read_nmea_log`). Without it, ``plant`` is required.
    plant : Plant, optional
        Pose source for trajectory mode (the plant is stepped by whoever owns it, e.g. the MCU sim).
    lines_per_s : float
        Replay pace (a pty ignores baud: the simulator paces itself).
    rate_hz : float
        Trajectory-mode epoch rate.
    loop : bool
        Replay the log again when it ends.
    """

    def __init__(self, port: VirtualPort, *, lines: list | None = None, plant: Plant | None = None,
                 origin_latlon: tuple = (52.5148, 13.4643), lines_per_s: float = 200.0, rate_hz: float = 10.0,
                 loop: bool = False) -> None:
        if lines is None and plant is None:
            raise ValueError("GpsReceiverSim needs lines to replay or a plant to follow")
        self.port, self.lines, self.plant, self.origin = port, lines, plant, origin_latlon
        self.lines_per_s, self.rate_hz, self.loop = lines_per_s, rate_hz, loop
        self.dropout = False
        self.lines_sent = 0
        self.finished = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> "GpsReceiverSim":
        self.port.open()
        self._task = asyncio.get_running_loop().create_task(
            self._replay() if self.lines is not None else self._trajectory(), name="gps-sim")
        return self

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self.port.close()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _replay(self) -> None:
        period = 1.0 / self.lines_per_s
        while True:
            for line in self.lines:
                if self.dropout:
                    line = b"$GPGGA,,,,,,0,,,,,,,,*66"
                await self.port.write(line + b"\r\n")
                self.lines_sent += 1
                await asyncio.sleep(period)
            self.finished.set()
            if not self.loop:
                return

    async def _trajectory(self) -> None:
        period = 1.0 / self.rate_hz
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        while True:
            t_next += period
            await asyncio.sleep(max(0.0, t_next - loop.time()))
            st = self.plant.state()
            utc = _dt.datetime.now(_dt.timezone.utc)
            if self.dropout:
                text = format_gga(utc, 0.0, 0.0, quality=0) + "\r\n" + format_rmc(utc, None, None) + "\r\n"
            else:
                lat, lon = enu_to_latlon(st.x_m, st.y_m, *self.origin)
                text = (format_rmc(utc, lat, lon, speed_mps=abs(st.v_mps), course_deg=90.0 - math.degrees(st.yaw_rad))
                        + "\r\n" + format_gga(utc, lat, lon) + "\r\n")
            await self.port.write(text.encode())
            self.lines_sent += 2
