"""Simulated Microstrain MIP IMU on a :class:`VirtualPort`, following a plant.

Answers ping / set-to-idle / resume and "IMU message format" (fields and decimation of the 1000 Hz
base rate) with ACKs, anything else with a NACK; while streaming it sends IMU data packets (scaled
accel in g, gyro in rad/s, mag in gauss; sensor frame x forward, y right, z down) at the rate the
host configured.
``stalled = True`` makes it silent and deaf.
"""

from __future__ import annotations

import asyncio
import math

from firmware_bridge import mip
from firmware_bridge.sim.plant import Plant
from firmware_bridge.sim.vport import VirtualPort

__all__ = ["MipImuSim"]


class MipImuSim:
    """MIP IMU simulator (see module doc). ``streaming`` starts False, as after power-up in idle."""

    def __init__(
        self, port: VirtualPort, plant: Plant, *, rate_hz: float = 100.0, base_rate_hz: float = 1000.0
    ) -> None:
        self.port, self.plant, self.rate_hz, self.base_rate_hz = port, plant, rate_hz, base_rate_hz
        self.fields = (mip.IMU_ACCEL, mip.IMU_GYRO, mip.IMU_MAG)
        self.streaming = False
        self.stalled = False
        self.commands: list[int] = []
        self._decoder = mip.PacketDecoder()
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> "MipImuSim":
        self.port.open()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._rx(), name="imu-sim-rx"), loop.create_task(self._tx(), name="imu-sim-tx")]
        return self

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks = []
        self.port.close()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _rx(self) -> None:
        while True:
            data = await self.port.read()
            if self.stalled:
                continue
            for pkt in self._decoder.feed(data):
                if not pkt.fields:
                    continue
                await self._on_command(pkt.descriptor_set, *pkt.fields[0])

    async def _on_command(self, dset: int, desc: int, data: bytes) -> None:
        self.commands.append(desc)
        err = 0
        if dset == mip.SET_BASE and desc in (mip.CMD_PING, mip.CMD_IDLE, mip.CMD_RESUME):
            self.streaming = {mip.CMD_IDLE: False, mip.CMD_RESUME: True}.get(desc, self.streaming)
        elif dset == mip.SET_3DM and desc == mip.CMD_IMU_FORMAT:
            try:
                function, fields = mip.parse_imu_format(data)
            except ValueError:
                function, fields = 0, []
            if function != 1 or not fields or any(f not in (mip.IMU_ACCEL, mip.IMU_GYRO, mip.IMU_MAG)
                                                   for f, _ in fields):
                err = 0x03  # NACK: invalid parameter
            else:
                self.fields = tuple(f for f, _ in fields)
                self.rate_hz = self.base_rate_hz / max(1, fields[0][1])
        else:
            err = 0x01  # NACK: unknown command
        await self.port.write(mip.ack(desc, err, descriptor_set=dset))

    async def _tx(self) -> None:
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        while True:
            t_next += 1.0 / self.rate_hz  # the rate the host configured
            await asyncio.sleep(max(0.0, t_next - loop.time()))
            if not self.streaming or self.stalled or not self.port.is_open:
                continue
            st = self.plant.state()
            g = mip.STANDARD_GRAVITY_MPS2
            accel = (st.accel_mps2[0] / g, -st.accel_mps2[1] / g, -1.0)
            gyro = (0.0, 0.0, -st.omega_radps)
            mag = (0.2 * math.sin(st.yaw_rad), -0.2 * math.cos(st.yaw_rad), 0.44)  # gauss, FRD
            f = self.fields
            await self.port.write(mip.imu_data(accel if mip.IMU_ACCEL in f else None,
                                               gyro if mip.IMU_GYRO in f else None,
                                               mag if mip.IMU_MAG in f else None))
