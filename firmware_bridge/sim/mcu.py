"""Simulated Jackal base MCU: the device end of rosserial on a :class:`VirtualPort`.

Behaviour after the rosserial client (ros_lib NodeHandle; docs/protocols.md, "Handshake and link
supervision"): on "request topics" it sends a time request and one TopicInfo per endpoint; it publishes
only once the host has answered a time request, asks for the time again every 2.5 s and falls back to
unconfigured after 11 s without an answer or on tx-stop. Configured, it steps the
:class:`~firmware_bridge.sim.plant.Plant` at 50 Hz with the last ``cmd_drive`` (its own command timeout
zeroes stale commands), and publishes Feedback (50 Hz), IMU and magnetometer (50 Hz), Status (1 Hz) and
an RMC sentence (10 Hz).

Fault injection (attributes and methods): ``drop_probability`` (frames silently lost),
``noise_probability`` (per-byte corruption, as a baud mismatch gives), :meth:`inject_garbage`,
``stalled`` (hung firmware: silent, deaf), :meth:`unplug` / :meth:`replug` (USB port vanishing),
``estop_engaged`` (external stop loop open; :meth:`JackalMcuSim.send_status` reports it at once rather than
with the next 1 Hz Status), ``gps_dropout`` (void RMC sentences).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import logging
import math
import random
import time

from firmware_bridge import ros1
from firmware_bridge.rosserial import (
    TOPIC_PUBLISHER,
    TOPIC_SUBSCRIBER,
    TOPIC_TIME,
    TOPIC_TX_STOP,
    FrameDecoder,
    encode_frame,
)
from firmware_bridge.sim.nmea_gen import enu_to_latlon, format_rmc
from firmware_bridge.sim.plant import Plant
from firmware_bridge.sim.vport import VirtualPort

log = logging.getLogger(__name__)

__all__ = ["JackalMcuSim", "PUBLISHERS", "SUBSCRIBERS"]

PUBLISHERS = ((100, "status", ros1.Status), (101, "feedback", ros1.Feedback), (102, "imu/data_raw", ros1.Imu),
              (103, "imu/mag", ros1.MagneticField), (104, "navsat/nmea_sentence", ros1.Sentence))
SUBSCRIBERS = ((105, "cmd_drive", ros1.Drive), (106, "wifi_connected", ros1.Bool))
GRAVITY_MPS2 = 9.80665
EARTH_FIELD_ENU_T = (0.0, 2.0e-5, -4.4e-5)  # a mid-latitude northern field (east, north, up), tesla


class JackalMcuSim:
    """Jackal MCU simulator.

    Parameters
    ----------
    port : VirtualPort
        Opened by :meth:`start` if needed; the driver connects to ``port.path``.
    plant : Plant
        Physics (wheel rad/s in, state out).
    rate_hz : float
        Feedback/IMU rate (50 Hz on the Jackal).
    cmd_timeout_s : float
        The simulated firmware's own command timeout (the real one is undocumented).
    origin_latlon : tuple
        Where the plant's (0, 0) is, degrees.
    publishers, subscribers : tuple
        Endpoints announced (override to test type or md5 mismatches).
    seed : int
        For the fault injection's random choices.
    """

    def __init__(self, port: VirtualPort, plant: Plant, *, rate_hz: float = 50.0, cmd_timeout_s: float = 0.5,
                 origin_latlon: tuple = (52.5148, 13.4643), publishers=PUBLISHERS, subscribers=SUBSCRIBERS,
                 hardware_id: str = "jackal-sim", seed: int = 0) -> None:
        self.port, self.plant = port, plant
        self.rate_hz, self.cmd_timeout_s, self.origin = rate_hz, cmd_timeout_s, origin_latlon
        self.publishers, self.subscribers = publishers, subscribers
        self.hardware_id = hardware_id
        self.rng = random.Random(seed)
        self.drop_probability = 0.0
        self.noise_probability = 0.0
        self.stalled = False
        self.estop_engaged = False
        self.gps_dropout = False
        self.configured = False
        self.wheel_cmd = (0.0, 0.0)
        self.drive_mode = ros1.Drive.MODE_NONE
        self.drive_log: collections.deque = collections.deque(maxlen=10000)  # (t_mono, Drive)
        self.drive_sink = None  # optional callable(t_mono_s, Drive) for every command received
        self.tx_stops = 0
        self.handshakes = 0
        self._t_cmd = -math.inf
        self._t_time_reply = -math.inf
        self._t_time_req = -math.inf
        self._seq = 0
        self._t0 = time.monotonic()
        self._frames = FrameDecoder()
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> "JackalMcuSim":
        self.port.open()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._rx_loop(), name="mcu-sim-rx"),
                       loop.create_task(self._tick_loop(), name="mcu-sim-tick")]
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

    def unplug(self) -> None:
        """The USB device vanishes (the driver gets EIO, the port name disappears)."""
        self.port.unplug()
        self.configured = False

    def replug(self) -> None:
        """The device comes back under the same name, unconfigured."""
        self.port.replug()
        self._frames.clear()

    async def inject_garbage(self, n: int) -> None:
        """Write ``n`` random bytes (no 0xFF so as not to look like a sync byte by chance)."""
        await self.port.write(bytes(self.rng.randrange(0, 255) for _ in range(n)))

    # -- host -> device ---------------------------------------------------------------------------
    async def _rx_loop(self) -> None:
        while True:
            data = await self.port.read()
            if self.stalled:
                continue
            for frame in self._frames.feed(data):
                await self._on_frame(frame.topic_id, frame.payload)

    async def _on_frame(self, tid: int, payload: bytes) -> None:
        if tid == TOPIC_PUBLISHER and not payload:
            self.handshakes += 1
            await self._send(TOPIC_TIME, ros1.Time().serialize())
            self._t_time_req = time.monotonic()
            for topic_id, name, cls in self.publishers:
                await self._send(TOPIC_PUBLISHER, ros1.TopicInfo(topic_id, name, cls.TYPE, cls.MD5, 512).serialize())
            for topic_id, name, cls in self.subscribers:
                await self._send(TOPIC_SUBSCRIBER, ros1.TopicInfo(topic_id, name, cls.TYPE, cls.MD5, 512).serialize())
        elif tid == TOPIC_TIME:
            self._t_time_reply = time.monotonic()
            self.configured = True
        elif tid == TOPIC_TX_STOP:
            self.tx_stops += 1
            self.configured = False
            self.wheel_cmd, self.drive_mode = (0.0, 0.0), ros1.Drive.MODE_NONE
        elif tid == self._sub_id("cmd_drive"):
            try:
                msg = ros1.Drive.deserialize(payload)
            except Exception:  # noqa: BLE001 - firmware drops what it cannot parse
                return
            now = time.monotonic()
            self.drive_log.append((now, msg))
            if self.drive_sink is not None:
                self.drive_sink(now, msg)
            self.drive_mode = msg.mode
            self.wheel_cmd = (msg.left, msg.right) if msg.mode == ros1.Drive.MODE_VELOCITY else (0.0, 0.0)
            self._t_cmd = now

    def _sub_id(self, name: str) -> int | None:
        return next((tid for tid, n, _ in self.subscribers if n == name), None)

    def _pub_id(self, name: str) -> int | None:
        return next((tid for tid, n, _ in self.publishers if n == name), None)

    # -- device -> host ---------------------------------------------------------------------------
    async def _send(self, tid: int | None, payload: bytes) -> None:
        if tid is None or self.stalled or not self.port.is_open:
            return
        if self.drop_probability and self.rng.random() < self.drop_probability:
            return
        wire = encode_frame(tid, payload)
        if self.noise_probability:
            wire = bytes(self.rng.randrange(256) if self.rng.random() < self.noise_probability else b for b in wire)
        await self.port.write(wire)

    async def _tick_loop(self) -> None:
        period = 1.0 / self.rate_hz
        loop = asyncio.get_running_loop()
        t_next, k = loop.time(), 0
        while True:
            t_next += period
            await asyncio.sleep(max(0.0, t_next - loop.time()))
            k += 1
            now = time.monotonic()
            fresh = now - self._t_cmd <= self.cmd_timeout_s
            cmd = self.wheel_cmd if fresh and not self.estop_engaged else (0.0, 0.0)
            self.plant.step(cmd[0], cmd[1], period)
            if self.stalled or not self.port.is_open:
                continue
            if self.configured and now - self._t_time_reply > 11.0:
                self.configured = False  # rosserial client: no time answer for too long
            if now - self._t_time_req >= 2.5:
                self._t_time_req = now
                await self._send(TOPIC_TIME, ros1.Time().serialize())
            if not self.configured:
                continue
            await self._publish_tick(k, fresh)

    def _header(self, frame_id: str) -> ros1.Header:
        self._seq += 1
        t = time.time()
        return ros1.Header(self._seq, int(t), int((t % 1.0) * 1e9), frame_id)

    async def _publish_tick(self, k: int, fresh: bool) -> None:
        st = self.plant.state()
        drivers = tuple(ros1.DriveFeedback(current=abs(w) * 0.1, duty_cycle=max(-1.0, min(1.0, w / 20.0)),
                                           bridge_temperature=30.0, motor_temperature=32.0,
                                           measured_velocity=w, measured_travel=tr)
                        for w, tr in zip(st.wheel_radps, st.wheel_travel_rad))
        mode = self.drive_mode if fresh else ros1.Drive.MODE_NONE
        await self._send(
            self._pub_id("feedback"),
            ros1.Feedback(self._header("base_link"), drivers, 35.0, 40.0, self.drive_mode, mode).serialize(),
        )
        half = st.yaw_rad / 2.0
        cov_unknown = (-1.0,) + (0.0,) * 8
        await self._send(self._pub_id("imu/data_raw"), ros1.Imu(
            self._header("imu_link"), (0.0, 0.0, math.sin(half), math.cos(half)), cov_unknown,
            (0.0, 0.0, st.omega_radps), (0.0,) * 9, (st.accel_mps2[0], st.accel_mps2[1], GRAVITY_MPS2),
            (0.0,) * 9).serialize())
        e, n, u = EARTH_FIELD_ENU_T  # rotate the world field into the body frame (yaw only)
        c, s = math.cos(st.yaw_rad), math.sin(st.yaw_rad)
        await self._send(self._pub_id("imu/mag"), ros1.MagneticField(
            self._header("imu_link"), (c * e + s * n, -s * e + c * n, u)).serialize())
        if k % max(1, round(self.rate_hz / 10.0)) == 0:
            utc = _dt.datetime.now(_dt.timezone.utc)
            if self.gps_dropout:
                line = format_rmc(utc, None, None)
            else:
                lat, lon = enu_to_latlon(st.x_m, st.y_m, *self.origin)
                line = format_rmc(utc, lat, lon, speed_mps=abs(st.v_mps), course_deg=90.0 - math.degrees(st.yaw_rad))
            await self._send(self._pub_id("navsat/nmea_sentence"), ros1.Sentence(self._header("gps"), line).serialize())
        if k % max(1, round(self.rate_hz)) == 0:
            await self.send_status()

    async def send_status(self) -> float | None:
        """Publish a ``Status`` frame now (the tick loop sends one a second), e.g. right after
        ``estop_engaged`` changed, as firmware that reports a stop loop change at once would. Returns the
        monotonic time stamped just before the write (the benchmarks measure from it), or None when
        nothing was sent (not configured, stalled, port closed)."""
        if not self.configured or self.stalled or not self.port.is_open:
            return None
        up = time.monotonic() - self._t0
        payload = ros1.Status(self._header(""), self.hardware_id, (int(up), int((up % 1) * 1e9)), (int(up), 0),
                              True, True, self.estop_engaged, 26.5, 12.0, 5.0, 1.0, 0.2, 1.5, 2.7, 5.0,
                              10.0).serialize()
        t_send = time.monotonic()
        await self._send(self._pub_id("status"), payload)
        return t_send
