"""All simulated devices of a Jackal at once, on virtual ports with stable names in one directory.

``jackal`` (base MCU, rosserial), optionally ``gps`` (separate NMEA receiver: replaying a log or
following the plant) and ``imu`` (Microstrain MIP). One plant drives them all.
"""

from __future__ import annotations

from pathlib import Path

from firmware_bridge.sim.gps import GpsReceiverSim
from firmware_bridge.sim.imu import MipImuSim
from firmware_bridge.sim.mcu import JackalMcuSim
from firmware_bridge.sim.plant import KinematicPlant, Plant
from firmware_bridge.sim.vport import VirtualPort

__all__ = ["SimulatedDevices"]


class SimulatedDevices:
    """Start/stop the simulators together.

    Parameters
    ----------
    directory : str or Path
        Where the port links ``jackal``, ``gps``, ``imu`` are created (must exist).
    plant : Plant, optional
        Default :class:`KinematicPlant` with the Jackal's kinematics.
    gps : bool
        Also simulate a separate NMEA receiver (``gps_lines`` to replay a log, else the plant).
    imu : bool
        Also simulate a Microstrain IMU.
    """

    def __init__(self, directory: str | Path, *, plant: Plant | None = None, gps: bool = True,
                 gps_lines: list | None = None, imu: bool = True, origin_latlon: tuple = (52.5148, 13.4643)) -> None:
        d = Path(directory)
        if not d.is_dir():
            raise FileNotFoundError(f"simulated device directory {d} does not exist")
        self.plant = plant or KinematicPlant()
        self.mcu = JackalMcuSim(VirtualPort(d / "jackal"), self.plant, origin_latlon=origin_latlon)
        self.gps = (GpsReceiverSim(VirtualPort(d / "gps"), lines=gps_lines, plant=None if gps_lines else self.plant,
                                   origin_latlon=origin_latlon, loop=True, lines_per_s=20.0) if gps else None)
        self.imu = MipImuSim(VirtualPort(d / "imu"), self.plant) if imu else None

    @property
    def ports(self) -> dict:
        """Device name -> path a driver (or a serial terminal) opens."""
        out = {"jackal": self.mcu.port.path}
        if self.gps is not None:
            out["gps"] = self.gps.port.path
        if self.imu is not None:
            out["imu"] = self.imu.port.path
        return out

    async def start(self) -> "SimulatedDevices":
        for sim in (self.mcu, self.gps, self.imu):
            if sim is not None:
                await sim.start()
        return self

    async def close(self) -> None:
        for sim in (self.mcu, self.gps, self.imu):
            if sim is not None:
                await sim.close()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()
