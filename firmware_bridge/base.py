"""Host side of the Jackal base MCU link (rosserial over USB serial), as rosserial_server does it.

Session (docs/protocols.md, "Handshake and link supervision"; rosserial_server): send "request topics"
(empty frame on topic 0) and repeat every 1 s until the device has announced its required endpoints
(``feedback``, ``status`` publishers; ``cmd_drive`` subscriber); answer each time request (topic 10)
with the host time; decode each topic by the type and md5 it announced, checked against the expected
type (a mismatch is a :class:`~firmware_bridge.errors.ProtocolMismatch` naming the topic, raised from
:meth:`recv`). A link that stays silent for ``handshake_timeout_s`` is dropped and reopened (stalled
device); a vanished port is reopened with backoff. On :meth:`close`: ``Drive(MODE_NONE)`` then tx-stop.

Drive path: :meth:`JackalBase.set_velocity` stores ``(v m/s, omega rad/s)``; a 50 Hz loop clips it to
the speed and acceleration limits, converts it to wheel rad/s (jackal_control kinematics) and sends
``jackal_msgs/Drive`` in MODE_VELOCITY. A command older than ``cmd_timeout_s`` (the app's 0.25 s, as the
stock ``cmd_vel_timeout``) is replaced by zero at once (not ramped), and so is a
:meth:`JackalBase.halt` (the host's command multiplexer has no live source); an e-stop (software
:meth:`estop`, or the MCU reporting its external stop loop open) writes a zero ``Drive`` frame from the
call itself, before the next drive tick, and latches zero until :meth:`reset_estop`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time

from firmware_bridge import ros1
from firmware_bridge.command_gate import DriveCommandGate
from firmware_bridge.driver import SerialDriver
from firmware_bridge.errors import FrameError, LinkLost, ProtocolMismatch
from firmware_bridge.faults import InputFaults
from firmware_bridge.kinematics import twist_to_wheels
from firmware_bridge.nmea import NmeaDecoder
from firmware_bridge.readings import BaseStatus, ImuReading, WheelFeedback, WheelState
from firmware_bridge.rosserial import (
    FIRST_USER_TOPIC,
    REQUEST_TOPICS,
    TOPIC_LOG,
    TOPIC_PUBLISHER,
    TOPIC_SUBSCRIBER,
    TOPIC_TIME,
    TX_STOP,
    FrameDecoder,
    encode_frame,
)

log = logging.getLogger(__name__)

__all__ = ["JackalBase", "DEVICE_PUBLISHERS", "DEVICE_SUBSCRIBERS"]

DEVICE_PUBLISHERS = {"status": ros1.Status, "feedback": ros1.Feedback, "imu/data_raw": ros1.Imu,
                     "imu/mag": ros1.MagneticField, "navsat/nmea_sentence": ros1.Sentence}
DEVICE_SUBSCRIBERS = {"cmd_drive": ros1.Drive, "wifi_connected": ros1.Bool}
REQUIRED_PUBLISHERS = ("feedback", "status")
REQUIRED_SUBSCRIBERS = ("cmd_drive",)
MAG_MAX_AGE_S = 0.1  # imu/mag older than this is not attached to an IMU sample (both ~50 Hz)
FEEDBACK_SILENCE_S = 1.0  # Feedback is 50 Hz: a second without it means the MCU is not publishing
_ROS_LOG_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 4: logging.WARNING, 8: logging.ERROR, 16: logging.CRITICAL}


class JackalBase(DriveCommandGate, SerialDriver):
    """Jackal base MCU driver. Readings: :class:`WheelFeedback`, :class:`BaseStatus`,
    :class:`ImuReading` (``imu/data_raw``, with the latest ``imu/mag`` field attached), GPS fixes from
    ``navsat/nmea_sentence``.

    Parameters
    ----------
    port : str
        ``/dev/jackal`` on the robot.
    robot : robot_app.config.RobotConfig-like
        Anything with ``wheel_radius_m``, ``wheel_separation_m``, ``max_v_mps``, ``max_accel_mps2``,
        ``max_omega_radps``, ``max_alpha_radps2``, ``control_rate_hz``, ``cmd_timeout_s``.
    baud : int
        115200 on the Jackal.
    handshake_timeout_s : float
        Silence after which the session is dropped and the port reopened (rosserial_server: 5 s).
    nmea : NmeaDecoder, optional
        Decoder for ``navsat/nmea_sentence``.
    **kwargs
        Passed to :class:`~firmware_bridge.driver.SerialDriver`.
    """

    name = "jackal-base"

    def __init__(self, port: str, *, robot, baud: int = 115200, handshake_timeout_s: float = 5.0,
                 nmea: NmeaDecoder | None = None, wifi_connected: bool = False, **kwargs) -> None:
        super().__init__(port, baud=baud, **kwargs)
        self._init_gate(robot)
        self.handshake_timeout_s = handshake_timeout_s
        self.nmea = nmea or NmeaDecoder()
        self.wifi_connected = wifi_connected
        self.frames = FrameDecoder(validate=self._frame_valid)
        self._decoded: tuple | None = None  # (topic id, payload, message) decoded by _frame_valid
        self.frame_errors: dict[str, int] = {}  # topic name -> frames skipped (malformed or unusable)
        self.faults = InputFaults(self.name, log, counts=self.frame_errors)
        self.sent_log: collections.deque = collections.deque(maxlen=10000)  # (monotonic, before the write; Drive)
        self.last_drive: ros1.Drive | None = None
        self._mag: tuple | None = None  # (t_mono_s, field in tesla) of the last imu/mag message
        self._reset_session()

    # -- public drive API -------------------------------------------------------------------------
    def halt(self) -> None:
        """Zero velocity now, not ramped through the acceleration limiter: for a host whose command
        source went stale or away (a deliberate ``set_velocity(0, 0)`` still decelerates within the
        limits). When the last frame sent was not already zero, a zero ``Drive`` frame goes out at once
        instead of at the next drive tick; later ticks keep sending zero until the next
        :meth:`set_velocity`. Never raises (a latched e-stop already sends zero)."""
        self._halt_command()
        last = self.last_drive
        if last is not None and (last.left != 0.0 or last.right != 0.0) and not self._closing:
            self._write_zero()

    def _send_zero_now(self) -> None:
        """The e-stop's zero, written from :meth:`estop` itself (the touchscreen's handler, the Status
        frame's receive callback) whatever was sent before; nothing once :meth:`close` has begun."""
        if not self._closing:
            self._write_zero()

    def _write_zero(self) -> bool:
        """Write ``Drive(MODE_VELOCITY, 0, 0)`` now when ``cmd_drive`` is negotiated; True when written."""
        if "cmd_drive" not in self._subs:
            return False
        zero = ros1.Drive(ros1.Drive.MODE_VELOCITY, 0.0, 0.0)
        t_send = time.monotonic()  # stamped before the write: latency measured from here is never < 0
        if not self._write(encode_frame(self._subs["cmd_drive"], zero.serialize())):
            return False
        self.last_drive = zero
        self.sent_log.append((t_send, zero))
        return True

    def _engaged_estop(self) -> str | None:
        st = self.latest(BaseStatus)  # the MCU's latest status: the external stop loop still open
        return "hardware e-stop" if st is not None and st.estop_stopped else None

    @property
    def topics(self) -> dict:
        """Negotiated endpoints: ``{"publishers": {id: name}, "subscribers": {name: id}}``."""
        return {"publishers": {k: v[0] for k, v in self._pubs.items()}, "subscribers": dict(self._subs)}

    # -- session ----------------------------------------------------------------------------------
    def _reset_session(self) -> None:
        self._pubs: dict[int, tuple] = {}   # topic id -> (name, message class)
        self._announced: set = set()        # every topic id the device announced, used or not
        self._subs: dict[str, int] = {}     # name -> topic id
        self._mismatch_reported: set = set()
        self._last_rx = time.monotonic()
        self.frames.clear()

    def _frame_valid(self, topic_id: int, payload: bytes) -> bool:
        """A frame whose checksums matched is taken as real when its payload decodes as its topic's message
        (the decoded message is kept for :meth:`_on_frame`); reserved topics are checked for their shape.
        A false frame (noise, or a damaged frame whose 8-bit checksum matched by chance) is refused, so the
        deframer resyncs and the real frames inside its length are still handled."""
        if topic_id >= FIRST_USER_TOPIC:
            entry = self._pubs.get(topic_id)
            if entry is None:
                return topic_id in self._announced
            try:
                self._decoded = (topic_id, payload, entry[1].deserialize(payload))
            except FrameError as exc:
                self.faults.record(entry[0], str(exc))
                return False
            return True
        if topic_id == TOPIC_TIME:
            return len(payload) in (0, 8)  # a time request (empty) or a Time
        if topic_id in (TOPIC_PUBLISHER, TOPIC_SUBSCRIBER):
            try:
                ros1.TopicInfo.deserialize(payload)
            except FrameError as exc:
                self.faults.record("topic_info", str(exc))
                return False
            return True
        if topic_id == TOPIC_LOG:
            return len(payload) >= 5 and 5 + struct.unpack_from("<I", payload, 1)[0] == len(payload)
        return True

    def _handshake_done(self) -> bool:
        names = {v[0] for v in self._pubs.values()}
        return all(n in names for n in REQUIRED_PUBLISHERS) and all(n in self._subs for n in REQUIRED_SUBSCRIBERS)

    async def _session(self) -> None:
        self._reset_session()
        self._write(REQUEST_TOPICS)
        last_request = last_wifi = time.monotonic()
        drive = None
        try:
            while True:
                await asyncio.sleep(0.05)
                now = time.monotonic()
                if now - self._last_rx > self.handshake_timeout_s:
                    raise LinkLost(f"{self.name}: no valid frame from {self.port} for "
                                   f"{self.handshake_timeout_s} s (stalled device)")
                if not self._handshake_done():
                    if now - last_request >= 1.0:
                        self._write(REQUEST_TOPICS)
                        last_request = now
                    continue
                if drive is None:
                    log.info("%s: handshake done: %s", self.name, self.topics)
                    drive = asyncio.get_running_loop().create_task(self._drive_loop(), name="jackal-drive")
                    self._connected.set()
                fb = self._latest.get(WheelFeedback)
                if (fb is None or now - fb.t_mono_s > FEEDBACK_SILENCE_S) and now - last_request >= 1.0:
                    # Frames still arrive (time requests) but no feedback: the MCU reset or dropped to
                    # unconfigured. Negotiate again, as rosserial_server does for missing topics.
                    log.warning("%s: no feedback for %.1f s: requesting topics again", self.name, FEEDBACK_SILENCE_S)
                    self._write(REQUEST_TOPICS)
                    last_request = now
                if now - last_wifi >= 1.0 and "wifi_connected" in self._subs:
                    self._write(encode_frame(self._subs["wifi_connected"], ros1.Bool(self.wifi_connected).serialize()))
                    last_wifi = now
        finally:
            self._connected.clear()
            if drive is not None:
                drive.cancel()
                try:
                    await drive
                except asyncio.CancelledError:
                    pass

    def _send_drive(self, now: float, dt_s: float) -> None:
        if self._closing:  # close() has sent MODE_NONE and tx-stop: nothing more
            return
        v, w = self._gate_step(now, dt_s)  # stale or e-stopped: zero at once; the MCU brakes to it
        left, right = twist_to_wheels(v, w, wheel_radius_m=self.robot.wheel_radius_m,
                                      wheel_separation_m=self.robot.wheel_separation_m)
        msg = ros1.Drive(ros1.Drive.MODE_VELOCITY, left, right)
        t_send = time.monotonic()  # before the write: the MCU may read the frame before write() returns
        if self._write(encode_frame(self._subs["cmd_drive"], msg.serialize())):
            self.last_drive = msg
            self.sent_log.append((t_send, msg))

    async def _goodbye(self) -> None:
        if "cmd_drive" in self._subs:
            # zero velocity first (the robot brakes even if the MCU ignores MODE_NONE), then MODE_NONE
            self._write_zero()
            self._write(encode_frame(self._subs["cmd_drive"], ros1.Drive(ros1.Drive.MODE_NONE, 0.0, 0.0).serialize()))
        self._write(TX_STOP)
        await asyncio.sleep(0.02)  # let the transport flush before the port closes

    # -- receive ----------------------------------------------------------------------------------
    def _on_bytes(self, data: bytes, t_mono_s: float) -> None:
        """Handle every frame in ``data`` in order; a frame that fails (a payload that does not decode, or
        values its handler cannot use) is counted in :attr:`frame_errors`, logged at a limited rate and
        skipped: the frames after it in the same chunk (a Status with the hardware e-stop) are always
        handled."""
        for frame in self.frames.feed_iter(data):
            self._last_rx = t_mono_s
            try:
                self._on_frame(frame, t_mono_s)
            except Exception as exc:  # noqa: BLE001 - wire data: never let one frame hide the next
                name = self._pubs[frame.topic_id][0] if frame.topic_id in self._pubs else f"topic {frame.topic_id}"
                self.faults.record(name, f"{type(exc).__name__}: {exc}")

    def _on_frame(self, frame, t_mono_s: float) -> None:
        tid = frame.topic_id
        if tid == TOPIC_TIME:
            self._write(encode_frame(TOPIC_TIME, ros1.Time.from_seconds(time.time()).serialize()))
        elif tid in (TOPIC_PUBLISHER, TOPIC_SUBSCRIBER):
            self._on_topic_info(tid, frame.payload)
        elif tid == TOPIC_LOG:
            self._on_log(frame.payload)
        elif tid in self._pubs:
            name, cls = self._pubs[tid]
            dec, self._decoded = self._decoded, None
            msg = dec[2] if dec is not None and dec[0] == tid and dec[1] == frame.payload else None
            if msg is None:
                try:
                    msg = cls.deserialize(frame.payload)
                except FrameError as exc:
                    self.faults.record(name, str(exc))
                    return
            self._on_message(name, msg, t_mono_s)

    def _on_topic_info(self, kind: int, payload: bytes) -> None:
        try:
            info = ros1.TopicInfo.deserialize(payload)
        except FrameError as exc:
            self.faults.record("topic_info", str(exc))
            return
        self._announced.add(info.topic_id)
        table = DEVICE_PUBLISHERS if kind == TOPIC_PUBLISHER else DEVICE_SUBSCRIBERS
        expected = table.get(info.topic_name) or ros1.MESSAGE_TYPES.get(info.message_type)
        if expected is None:
            log.info("%s: ignoring unknown topic %r of type %s", self.name, info.topic_name, info.message_type)
            return
        if info.message_type != expected.TYPE or info.md5sum != expected.MD5:
            key = (info.topic_name, info.message_type, info.md5sum)
            if key not in self._mismatch_reported:
                self._mismatch_reported.add(key)
                self._report(ProtocolMismatch(
                    f"topic {info.topic_name!r}: device announced {info.message_type} md5 {info.md5sum}, "
                    f"expected {expected.TYPE} md5 {expected.MD5}"))
            return
        if kind == TOPIC_PUBLISHER:
            self._pubs[info.topic_id] = (info.topic_name, expected)
        else:
            self._subs[info.topic_name] = info.topic_id

    def _on_log(self, payload: bytes) -> None:
        if len(payload) < 5:
            return
        (n,) = struct.unpack_from("<I", payload, 1)
        text = payload[5:5 + n].decode("utf-8", "replace")
        log.log(_ROS_LOG_LEVELS.get(payload[0], logging.INFO), "%s (MCU): %s", self.name, text)

    def _on_message(self, name: str, msg, t: float) -> None:
        if name == "feedback":
            ws = [WheelState(d.measured_velocity, d.measured_travel, d.current, d.duty_cycle,
                             d.bridge_temperature, d.motor_temperature, d.driver_fault) for d in msg.drivers]
            self._publish(WheelFeedback(t, ws[0], ws[1], msg.pcb_temperature, msg.mcu_temperature,
                                        msg.commanded_mode, msg.actual_mode))
        elif name == "status":
            if msg.driver_external_stop_stopped:  # latch first: nothing below may keep the stop from holding
                self.estop("hardware e-stop reported by the MCU")
            st = BaseStatus(t, msg.hardware_id, msg.mcu_uptime[0] + msg.mcu_uptime[1] * 1e-9, msg.measured_battery,
                            msg.measured_12v, msg.measured_5v, msg.drive_current, msg.total_current,
                            msg.drivers_active, msg.driver_external_stop_present, msg.driver_external_stop_stopped)
            self._publish(st)
        elif name == "imu/data_raw":
            q = None if msg.orientation_covariance[0] == -1.0 else msg.orientation
            mag = self._mag if self._mag is not None and t - self._mag[0] <= MAG_MAX_AGE_S else None
            self._publish(ImuReading(t, msg.header.frame_id, msg.angular_velocity, msg.linear_acceleration, q,
                                     magnetic_field_t=mag[1] if mag else None, source="mcu"))
        elif name == "imu/mag":
            # Not a reading of its own: attached to the next imu/data_raw sample, so that every
            # ImuReading from the MCU has gyro and accelerometer (latest(ImuReading) stays useful).
            self._mag = (t, msg.magnetic_field)
        elif name == "navsat/nmea_sentence":
            for reading in self.nmea.decode(msg.sentence, t):  # one reading per receiver epoch
                self._publish(reading)

    def _on_disconnect(self) -> None:
        self._limiter.reset()
        self.nmea.reset_stream()
