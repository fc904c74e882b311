"""Microstrain IMU (MIP protocol) on its own serial port (``/dev/microstrain``, 115200 baud).

The session sends "resume" (start the configured data stream) and waits for its ACK, repeating every
``ack_timeout_s``; data packets become :class:`~firmware_bridge.readings.ImuReading` (REP-103 axes,
SI units). A link that delivers no valid packet for ``stall_timeout_s`` is reopened; :meth:`close`
puts the device back to idle.
"""

from __future__ import annotations

import asyncio
import time

from firmware_bridge import mip
from firmware_bridge.driver import SerialDriver
from firmware_bridge.errors import LinkLost

__all__ = ["MipImu"]


class MipImu(SerialDriver):
    """MIP IMU driver. Parameters as :class:`~firmware_bridge.driver.SerialDriver`, plus
    ``frame_id`` for the readings and the two timeouts (seconds)."""

    name = "imu"

    def __init__(self, port: str, *, baud: int = 115200, frame_id: str = "imu_link", ack_timeout_s: float = 0.5,
                 stall_timeout_s: float = 1.0, **kwargs) -> None:
        super().__init__(port, baud=baud, **kwargs)
        self.frame_id = frame_id
        self.ack_timeout_s, self.stall_timeout_s = ack_timeout_s, stall_timeout_s
        self.packets = mip.PacketDecoder()
        self._acked = asyncio.Event()
        self._last_rx = time.monotonic()
        self.nacks = 0

    async def _session(self) -> None:
        self.packets.clear()
        self._acked.clear()
        self._last_rx = time.monotonic()
        while not self._acked.is_set():
            self._write(mip.command(mip.CMD_RESUME))
            try:
                await asyncio.wait_for(self._acked.wait(), self.ack_timeout_s)
            except asyncio.TimeoutError:
                if time.monotonic() - self._last_rx > self.stall_timeout_s * 3:
                    raise LinkLost(f"{self.name}: no reply to 'resume' from {self.port}") from None
        self._connected.set()
        while True:
            await asyncio.sleep(0.05)
            if time.monotonic() - self._last_rx > self.stall_timeout_s:
                raise LinkLost(f"{self.name}: no packet from {self.port} for {self.stall_timeout_s} s")

    def _on_bytes(self, data: bytes, t_mono_s: float) -> None:
        for pkt in self.packets.feed(data):
            self._last_rx = t_mono_s
            reply = mip.ack_of(pkt)
            if reply is not None:
                if reply[0] == mip.CMD_RESUME:
                    if reply[1] == 0:
                        self._acked.set()
                    else:
                        self.nacks += 1
                continue
            reading = mip.packet_to_reading(pkt, t_mono_s, frame_id=self.frame_id)
            if reading is not None:
                self._publish(reading)

    async def _goodbye(self) -> None:
        self._write(mip.command(mip.CMD_IDLE))
        await asyncio.sleep(0.02)
