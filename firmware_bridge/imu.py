"""Microstrain IMU (MIP protocol) on its own serial port (``/dev/microstrain``, 115200 baud).

Session: set the device to idle, set the IMU message format (scaled accel, gyro, mag at
``base_rate_hz / rate_hz`` decimation), resume streaming; each command is retried until its ACK
arrives (``ack_timeout_s``, at most ``retries`` times; a NACK is a
:class:`~firmware_bridge.errors.ProtocolMismatch`). Data packets become
:class:`~firmware_bridge.readings.ImuReading` (REP-103 axes, SI units). A link that delivers no
valid packet for ``stall_timeout_s`` is reopened; :meth:`close` puts the device back to idle.
"""

from __future__ import annotations

import asyncio
import logging
import time

from firmware_bridge import mip
from firmware_bridge.driver import SerialDriver
from firmware_bridge.errors import LinkLost, ProtocolMismatch
from firmware_bridge.faults import InputFaults

log = logging.getLogger(__name__)

__all__ = ["MipImu"]


class MipImu(SerialDriver):
    """MIP IMU driver.

    Parameters
    ----------
    port : str
        Serial device.
    baud : int
        115200 (Microstrain default).
    rate_hz : float
        Requested IMU data rate.
    base_rate_hz : float
        The device's IMU base rate (1000 Hz on 3DM-GX5 class devices; see its datasheet).
    frame_id : str
        ``frame_id`` of the readings.
    ack_timeout_s, stall_timeout_s : float
        Per-try command timeout and the silence after which the port is reopened.
    retries : int
        Tries per command before the session is dropped.
    **kwargs
        Passed to :class:`~firmware_bridge.driver.SerialDriver`.
    """

    name = "imu"

    def __init__(self, port: str, *, baud: int = 115200, rate_hz: float = 100.0, base_rate_hz: float = 1000.0,
                 frame_id: str = "imu_link", ack_timeout_s: float = 0.3, stall_timeout_s: float = 1.0,
                 retries: int = 5, **kwargs) -> None:
        super().__init__(port, baud=baud, **kwargs)
        if not 0 < rate_hz <= base_rate_hz:
            raise ValueError(f"IMU rate_hz must be in (0, base_rate_hz={base_rate_hz}], got {rate_hz}")
        self.decimation = max(1, min(0xFFFF, round(base_rate_hz / rate_hz)))
        self.frame_id = frame_id
        self.ack_timeout_s, self.stall_timeout_s, self.retries = ack_timeout_s, stall_timeout_s, retries
        self.packets = mip.PacketDecoder()
        self.faults = InputFaults(self.name, log)
        self._pending: dict[tuple, asyncio.Future] = {}
        self._last_rx = time.monotonic()

    async def _command(self, packet: bytes, descriptor_set: int, cmd: int, what: str) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(self.retries):
            fut = loop.create_future()
            self._pending[(descriptor_set, cmd)] = fut
            self._write(packet)
            try:
                err = await asyncio.wait_for(fut, self.ack_timeout_s)
            except asyncio.TimeoutError:
                continue
            finally:
                self._pending.pop((descriptor_set, cmd), None)
            if err:
                raise ProtocolMismatch(f"{self.name} on {self.port}: device refused {what} (NACK error 0x{err:02X})")
            return
        raise LinkLost(f"{self.name}: no reply to {what} from {self.port} after {self.retries} tries")

    async def _session(self) -> None:
        self.packets.clear()
        self._last_rx = time.monotonic()
        await self._command(mip.command(mip.CMD_IDLE), mip.SET_BASE, mip.CMD_IDLE, "set-to-idle")
        await self._command(mip.imu_format(self.decimation), mip.SET_3DM, mip.CMD_IMU_FORMAT, "IMU message format")
        await self._command(mip.command(mip.CMD_RESUME), mip.SET_BASE, mip.CMD_RESUME, "resume")
        self._connected.set()
        while True:
            await asyncio.sleep(0.05)
            if time.monotonic() - self._last_rx > self.stall_timeout_s:
                raise LinkLost(f"{self.name}: no packet from {self.port} for {self.stall_timeout_s} s")

    def _on_bytes(self, data: bytes, t_mono_s: float) -> None:
        """Handle every packet in ``data`` in order; one that its handler cannot use is counted in
        ``faults`` (logged at a limited rate) and skipped, and the packets after it are still handled."""
        for pkt in self.packets.feed(data):
            self._last_rx = t_mono_s
            try:
                self._on_packet(pkt, t_mono_s)
            except Exception as exc:  # noqa: BLE001 - wire data: never let one packet hide the next
                self.faults.record(f"descriptor set 0x{pkt.descriptor_set:02X}", f"{type(exc).__name__}: {exc}")

    def _on_packet(self, pkt, t_mono_s: float) -> None:
        reply = mip.ack_of(pkt)
        if reply is not None:
            fut = self._pending.get(reply[:2])
            if fut is not None and not fut.done():
                fut.set_result(reply[2])
            return
        reading = mip.packet_to_reading(pkt, t_mono_s, frame_id=self.frame_id)
        if reading is not None:
            self._publish(reading)

    async def _goodbye(self) -> None:
        self._write(mip.command(mip.CMD_IDLE))
        await asyncio.sleep(0.02)
