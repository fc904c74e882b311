"""The robot base over ROS 2: velocity commands out (``cmd_vel``), odometry, e-stop and battery in.

Drive path, the same as :class:`firmware_bridge.base.JackalBase`'s: :meth:`Ros2Base.set_velocity` stores
``(v m/s, omega rad/s)``; a loop at ``control_rate_hz`` clips it to the speed and acceleration limits and
publishes ``geometry_msgs/Twist`` (or ``TwistStamped``) on the command topic, reliable QoS. A command
older than ``cmd_timeout_s`` is replaced by zero at once (not ramped), and so is a :meth:`halt`; an
e-stop (software :meth:`estop`, or ``True`` on the platform's e-stop topic) publishes a zero command from
the call itself and latches zero until :meth:`reset_estop`. :meth:`close` publishes a last zero command.

Readings, the kinds the serial base gives, so the safety monitor, state estimator and recorder work
unchanged:

- :class:`~firmware_bridge.readings.WheelFeedback` from ``nav_msgs/Odometry``: wheel speeds are the
  odometry twist (``twist.twist.linear.x``, ``angular.z``) through the differential-drive kinematics
  (:func:`~firmware_bridge.kinematics.twist_to_wheels`), travel their integral; currents, duty cycles and
  temperatures are NaN (ROS 2 odometry carries none), ``fault`` False, both modes ``MODE_VELOCITY``.
- :class:`~firmware_bridge.readings.BaseStatus` from ``sensor_msgs/BatteryState`` (``voltage`` V,
  ``|current|`` A as total current) and ``std_msgs/Bool`` e-stop (``data`` True: stopped), published on
  each battery message once one has arrived; rails and drive current NaN.

``connected`` is true while the command topic has a matched subscriber (the robot's velocity
controller or twist_mux).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time

from firmware_bridge.command_gate import DriveCommandGate
from firmware_bridge.kinematics import twist_to_wheels
from firmware_bridge.readings import BaseStatus, WheelFeedback, WheelState
from firmware_bridge.ros2.dds import DEFAULT, SENSOR_DATA
from firmware_bridge.ros2.driver import Ros2Driver

log = logging.getLogger(__name__)

__all__ = ["Ros2Base", "CMD_TYPES"]

CMD_TYPES = ("twist", "twist_stamped")
MODE_VELOCITY = 0
_NAN = float("nan")


class Ros2Base(DriveCommandGate, Ros2Driver):
    """Base driver of the ``ros2`` backend (see the module doc).

    Parameters
    ----------
    node : DdsNode
        The process's DDS participant.
    robot : robot_app.config.RobotConfig-like
        ``wheel_radius_m``, ``wheel_separation_m``, ``max_v_mps``, ``max_accel_mps2``, ``max_omega_radps``,
        ``max_alpha_radps2``, ``control_rate_hz``, ``cmd_timeout_s``.
    namespace : str
        The robot's ROS namespace (Clearpath: ``/j100_0000``).
    cmd_topic, odom_topic, estop_topic, battery_topic : str
        ROS topic names (relative to ``namespace`` unless they start with ``/``); an empty name
        subscribes nothing for that reading.
    cmd_type : str
        ``"twist"`` (geometry_msgs/Twist; ROS 2 Humble) or ``"twist_stamped"`` (TwistStamped; Jazzy).
    frame_id : str
        ``header.frame_id`` of TwistStamped commands.

    Raises
    ------
    ValueError
        For an unknown ``cmd_type`` or an invalid topic name.
    """

    name = "ros2-base"

    def __init__(self, node, *, robot, namespace: str = "", cmd_topic: str = "cmd_vel", cmd_type: str = "twist",
                 odom_topic: str = "platform/odom/filtered", estop_topic: str = "platform/emergency_stop",
                 battery_topic: str = "platform/bms/state", frame_id: str = "base_link", **kwargs) -> None:
        super().__init__(node, namespace=namespace, **kwargs)
        if cmd_type not in CMD_TYPES:
            raise ValueError(f"cmd_type must be one of {', '.join(CMD_TYPES)}, got {cmd_type!r}")
        for t in (cmd_topic, odom_topic, estop_topic, battery_topic):
            if t:
                self.topic(t)  # validates
        if not cmd_topic:
            raise ValueError("the base needs a command topic")
        self._init_gate(robot)
        self.cmd_topic, self.cmd_type, self.frame_id = cmd_topic, cmd_type, frame_id
        self.odom_topic, self.estop_topic, self.battery_topic = odom_topic, estop_topic, battery_topic
        self._cmd_writer = None
        self._msgs = None
        self._travel = [0.0, 0.0]
        self._last_odom_t: float | None = None
        self._estop_state: bool | None = None
        self._battery: tuple | None = None  # (V, A) of the last BatteryState
        self._t_first = None
        self.sent_log: collections.deque = collections.deque(maxlen=10000)  # (monotonic before write, (v, w))
        self.last_twist: tuple | None = None  # (v m/s, omega rad/s) last published

    # -- public drive API (as JackalBase) ---------------------------------------------------------
    def halt(self) -> None:
        """Zero velocity now, not ramped; a zero command is published at once when the last one was not
        zero. Never raises."""
        self._halt_command()
        if self.last_twist not in (None, (0.0, 0.0)) and not self._closing:
            self._publish_twist(0.0, 0.0)

    def _send_zero_now(self) -> None:
        """The e-stop's zero, published from :meth:`estop` itself whatever was published before."""
        if not self._closing:
            self._publish_twist(0.0, 0.0)

    def _engaged_estop(self) -> str | None:
        return "platform e-stop" if self._estop_state else None  # the e-stop topic still reports it

    @property
    def topics(self) -> dict:
        """DDS topics: ``{"publishers": [...], "subscribers": [...]}`` as seen from the robot."""
        subs = [self.topic(self.cmd_topic)]
        pubs = [self.topic(t) for t in (self.odom_topic, self.estop_topic, self.battery_topic) if t]
        return {"publishers": pubs, "subscribers": subs}

    async def close(self) -> None:
        """Publish a last zero command, then leave the domain."""
        if self._cmd_writer is not None and self.connected:
            self._publish_twist(0.0, 0.0)
            await asyncio.sleep(0.02)
        await super().close()

    # -- session ----------------------------------------------------------------------------------
    def _open_endpoints(self) -> None:
        from firmware_bridge.ros2 import msgs

        self._msgs = msgs
        cls = msgs.TwistStamped if self.cmd_type == "twist_stamped" else msgs.Twist
        self._cmd_writer = self._writer(self.cmd_topic, cls, qos=DEFAULT)
        if self.odom_topic:
            self._reader(self.odom_topic, msgs.Odometry, self._on_odom, qos=SENSOR_DATA)
        if self.estop_topic:
            self._reader(self.estop_topic, msgs.Bool, self._on_estop, qos=SENSOR_DATA)
        if self.battery_topic:
            self._reader(self.battery_topic, msgs.BatteryState, self._on_battery, qos=SENSOR_DATA)

    def _matched(self) -> bool:
        return self._cmd_writer is not None and self._cmd_writer.get_publication_matched_status().current_count > 0

    async def _run_session(self) -> None:
        drive = asyncio.get_running_loop().create_task(self._drive_loop(), name="ros2-drive")
        try:
            await super()._run_session()
        finally:
            drive.cancel()
            try:
                await drive
            except asyncio.CancelledError:
                pass
            self._cmd_writer = None

    def _send_drive(self, now: float, dt_s: float) -> None:
        if self._closing:
            return
        self._publish_twist(*self._gate_step(now, dt_s))  # stale or e-stopped: zero at once (as the serial base)

    def _publish_twist(self, v: float, w: float) -> None:
        m = self._msgs
        if self._cmd_writer is None or m is None:
            return
        twist = m.Twist(m.Vector3(v, 0.0, 0.0), m.Vector3(0.0, 0.0, w))
        if self.cmd_type == "twist_stamped":
            sample = m.TwistStamped(m.Header(m.Time.from_seconds(time.time()), self.frame_id), twist)
        else:
            sample = twist
        t_send = time.monotonic()
        try:
            self._cmd_writer.write(sample)
        except Exception as exc:  # noqa: BLE001 - a refused write must not stop the drive loop
            log.warning("%s: could not publish the velocity command: %s", self.name, exc)
            return
        self.last_twist = (v, w)
        self.sent_log.append((t_send, (v, w)))

    # -- receive ----------------------------------------------------------------------------------
    def _on_odom(self, msg, t: float) -> None:
        tw = msg.twist.twist
        left, right = twist_to_wheels(tw.linear.x, tw.angular.z, wheel_radius_m=self.robot.wheel_radius_m,
                                      wheel_separation_m=self.robot.wheel_separation_m)
        if self._last_odom_t is not None:
            dt = max(0.0, min(t - self._last_odom_t, 0.5))
            self._travel[0] += left * dt
            self._travel[1] += right * dt
        self._last_odom_t = t
        ws = [WheelState(w, tr, _NAN, _NAN, _NAN, _NAN, False) for w, tr in zip((left, right), self._travel)]
        self._publish(WheelFeedback(t, ws[0], ws[1], _NAN, _NAN, MODE_VELOCITY, MODE_VELOCITY))

    def _on_estop(self, msg, t: float) -> None:
        stopped = bool(msg.data)
        if stopped and not self._estop_state:
            self.estop("platform e-stop engaged (ROS 2 e-stop topic)")
        self._estop_state = stopped
        self._publish_status(t)  # every e-stop message: the safety monitor sees it even with no battery topic

    def _on_battery(self, msg, t: float) -> None:
        current = abs(msg.current) if math.isfinite(msg.current) else _NAN
        self._battery = (float(msg.voltage), current)
        self._publish_status(t)

    def _publish_status(self, t: float) -> None:
        if self._t_first is None:
            self._t_first = t
        stopped = bool(self._estop_state)
        voltage, current = self._battery if self._battery is not None else (_NAN, _NAN)  # NaN: no battery topic
        self._publish(BaseStatus(t, self.namespace.strip("/") or "ros2", t - self._t_first, voltage,
                                 _NAN, _NAN, _NAN, current, not stopped, self._estop_state is not None, stopped))

    def _on_disconnect(self) -> None:
        self._limiter.reset()
        self._last_odom_t = None
