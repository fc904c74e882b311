"""Simulated Microstrain MIP IMU on a :class:`VirtualPort`, following a plant.

Answers ping / set-to-idle / resume with ACKs; while streaming it sends IMU data packets (scaled
accel in g, gyro in rad/s, mag in gauss; sensor frame x forward, y right, z down) at ``rate_hz``.
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

    def __init__(self, port: VirtualPort, plant: Plant, *, rate_hz: float = 100.0) -> None:
        self.port, self.plant, self.rate_hz = port, plant, rate_hz
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
                if pkt.descriptor_set != mip.SET_BASE or not pkt.fields:
                    continue
                desc = pkt.fields[0][0]
                self.commands.append(desc)
                if desc in (mip.CMD_PING, mip.CMD_IDLE, mip.CMD_RESUME):
                    self.streaming = {mip.CMD_IDLE: False, mip.CMD_RESUME: True}.get(desc, self.streaming)
                    await self.port.write(mip.ack(desc))
                else:
                    await self.port.write(mip.ack(desc, 0x03))  # NACK: unknown command

    async def _tx(self) -> None:
        period = 1.0 / self.rate_hz
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        while True:
            t_next += period
            await asyncio.sleep(max(0.0, t_next - loop.time()))
            if not self.streaming or self.stalled or not self.port.is_open:
                continue
            st = self.plant.state()
            g = mip.STANDARD_GRAVITY_MPS2
            accel = (st.accel_mps2[0] / g, -st.accel_mps2[1] / g, -1.0)
            gyro = (0.0, 0.0, -st.omega_radps)
            mag = (0.2 * math.sin(st.yaw_rad), -0.2 * math.cos(st.yaw_rad), 0.44)  # gauss, FRD
            await self.port.write(mip.imu_data(accel, gyro, mag))
