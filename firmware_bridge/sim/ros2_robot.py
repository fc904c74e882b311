"""Simulated ROS 2 robot: the DDS end of the ``ros2`` backend, as a Clearpath ROS 2 platform shows itself.

It subscribes the velocity command (``geometry_msgs/Twist`` or ``TwistStamped``, reliable), steps the
:class:`~firmware_bridge.sim.plant.Plant` at ``rate_hz`` with it (its own ``cmd_timeout_s`` zeroes a stale
command, as the platform's twist_mux / controller timeout does) and publishes, with the ROS 2 sensor-data
QoS: ``nav_msgs/Odometry`` and ``sensor_msgs/Imu`` at ``rate_hz``, ``sensor_msgs/NavSatFix`` at 10 Hz,
the e-stop ``std_msgs/Bool`` at 10 Hz (Clearpath's minimum is 5 Hz), ``sensor_msgs/BatteryState`` at 1 Hz
and, when ``camera_topic`` is set, a small ``CompressedImage`` JPEG at 5 Hz.

Fault injection: ``estop_engaged``, ``gps_dropout`` (NavSatFix with status -1), ``silent`` (publishes
nothing, still listens). Every command received is kept in ``cmd_log`` (monotonic receipt time, v m/s,
omega rad/s) and handed to ``cmd_sink`` if set.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time

from firmware_bridge.kinematics import twist_to_wheels
from firmware_bridge.ros2.dds import DEFAULT, SENSOR_DATA, DdsNode, ros_topic
from firmware_bridge.sim.mcu import GRAVITY_MPS2
from firmware_bridge.sim.nmea_gen import enu_to_latlon
from firmware_bridge.sim.plant import Plant

log = logging.getLogger(__name__)

__all__ = ["Ros2RobotSim"]


class Ros2RobotSim:
    """ROS 2 robot simulator (see the module doc).

    Parameters
    ----------
    node : DdsNode
        The simulator's DDS participant (its own process in the contract tests).
    plant : Plant
        Physics: wheel rad/s in, true state out.
    namespace, cmd_topic, odom_topic, imu_topic, gps_topic, estop_topic, battery_topic, camera_topic : str
        ROS names as on the robot (an empty topic name publishes nothing there).
    cmd_type : str
        ``"twist"`` or ``"twist_stamped"``.
    wheel_radius_m, wheel_separation_m : float
        Kinematics used to turn the commanded twist into wheel speeds (Jackal defaults).
    """

    def __init__(self, node: DdsNode, plant: Plant, *, namespace: str = "", cmd_topic: str = "cmd_vel",
                 cmd_type: str = "twist", odom_topic: str = "platform/odom/filtered",
                 imu_topic: str = "sensors/imu_0/data", gps_topic: str = "sensors/gps_0/fix",
                 estop_topic: str = "platform/emergency_stop", battery_topic: str = "platform/bms/state",
                 camera_topic: str = "", rate_hz: float = 50.0, cmd_timeout_s: float = 0.5,
                 origin_latlon: tuple = (52.5148, 13.4643), wheel_radius_m: float = 0.098,
                 wheel_separation_m: float = 0.563, battery_v: float = 26.5) -> None:
        if cmd_type not in ("twist", "twist_stamped"):
            raise ValueError(f"cmd_type must be 'twist' or 'twist_stamped', got {cmd_type!r}")
        self.node, self.plant, self.namespace = node, plant, namespace
        self.topics = {k: v for k, v in dict(cmd=cmd_topic, odom=odom_topic, imu=imu_topic, gps=gps_topic,
                                             estop=estop_topic, battery=battery_topic,
                                             camera=camera_topic).items() if v}
        for t in self.topics.values():
            ros_topic(namespace, t)  # validates
        self.cmd_type, self.rate_hz, self.cmd_timeout_s = cmd_type, rate_hz, cmd_timeout_s
        self.origin, self.r, self.ws, self.battery_v = origin_latlon, wheel_radius_m, wheel_separation_m, battery_v
        self.estop_engaged = False
        self.gps_dropout = False
        self.silent = False
        self.cmd = (0.0, 0.0)
        self.cmd_log: collections.deque = collections.deque(maxlen=20000)  # (t_mono_s, v, omega)
        self.cmd_sink = None
        self._t_cmd = -math.inf
        self._writers: dict = {}
        self._entities: list = []
        self._task: asyncio.Task | None = None
        self._jpeg = b""

    async def start(self) -> "Ros2RobotSim":
        from firmware_bridge.ros2 import msgs

        self._m = msgs
        self.node.acquire()
        loop = asyncio.get_running_loop()
        kinds = {"odom": msgs.Odometry, "imu": msgs.Imu, "gps": msgs.NavSatFix, "estop": msgs.Bool,
                 "battery": msgs.BatteryState, "camera": msgs.CompressedImage}
        for key, cls in kinds.items():
            if key in self.topics:
                w = self.node.writer(ros_topic(self.namespace, self.topics[key]), cls, qos=SENSOR_DATA)
                self._writers[key] = w
                self._entities.append(w)
        if "cmd" in self.topics:
            cls = msgs.TwistStamped if self.cmd_type == "twist_stamped" else msgs.Twist
            self._entities.append(self.node.reader(ros_topic(self.namespace, self.topics["cmd"]), cls, self._on_cmd,
                                                   loop=loop, qos=DEFAULT))
        if "camera" in self.topics:
            self._jpeg = _test_jpeg()
        self._task = loop.create_task(self._tick_loop(), name="ros2-robot-sim")
        return self

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for e in self._entities:
            self.node.delete(e)
        self._entities, self._writers = [], {}
        self.node.release()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _on_cmd(self, msg, t: float) -> None:
        tw = msg.twist if self.cmd_type == "twist_stamped" else msg
        self.cmd, self._t_cmd = (tw.linear.x, tw.angular.z), t
        self.cmd_log.append((t, tw.linear.x, tw.angular.z))
        if self.cmd_sink is not None:
            self.cmd_sink(t, tw.linear.x, tw.angular.z)

    async def _tick_loop(self) -> None:
        period = 1.0 / self.rate_hz
        loop = asyncio.get_running_loop()
        t_next, k = loop.time(), 0
        while True:
            t_next += period
            await asyncio.sleep(max(0.0, t_next - loop.time()))
            k += 1
            fresh = time.monotonic() - self._t_cmd <= self.cmd_timeout_s
            v, w = self.cmd if fresh and not self.estop_engaged else (0.0, 0.0)
            self.plant.step(*twist_to_wheels(v, w, wheel_radius_m=self.r, wheel_separation_m=self.ws), period)
            if not self.silent:
                try:
                    self._publish_tick(k)
                except Exception:  # noqa: BLE001 - keep simulating
                    log.exception("ros2 robot sim: publishing failed")

    def _write(self, key: str, sample) -> None:
        w = self._writers.get(key)
        if w is not None:
            w.write(sample)

    def _publish_tick(self, k: int) -> None:
        m, st = self._m, self.plant.state()
        stamp = m.Time.from_seconds(time.time())
        half = st.yaw_rad / 2.0
        quat = m.Quaternion(0.0, 0.0, math.sin(half), math.cos(half))
        self._write("odom", m.Odometry(
            m.Header(stamp, "odom"), "base_link", m.PoseWithCovariance(m.Pose(m.Point(st.x_m, st.y_m, 0.0), quat)),
            m.TwistWithCovariance(m.Twist(m.Vector3(st.v_mps, 0.0, 0.0), m.Vector3(0.0, 0.0, st.omega_radps)))))
        self._write("imu", m.Imu(
            m.Header(stamp, "imu_0_link"), quat, [0.01] + [0.0] * 8, m.Vector3(0.0, 0.0, st.omega_radps),
            [0.0] * 9, m.Vector3(st.accel_mps2[0], st.accel_mps2[1], GRAVITY_MPS2), [0.0] * 9))
        every = max(1, round(self.rate_hz / 10.0))
        if k % every == 0:
            if self.gps_dropout:
                fix = m.NavSatFix(m.Header(stamp, "gps_0_link"), m.NavSatStatus(-1, 1), math.nan, math.nan, math.nan)
            else:
                lat, lon = enu_to_latlon(st.x_m, st.y_m, *self.origin)
                fix = m.NavSatFix(m.Header(stamp, "gps_0_link"), m.NavSatStatus(0, 1), lat, lon, 40.0,
                                  [0.25, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 1.0], 2)
            self._write("gps", fix)
            self._write("estop", m.Bool(self.estop_engaged))
        if k % max(1, round(self.rate_hz / 5.0)) == 0 and self._jpeg:
            self._write("camera", m.CompressedImage(m.Header(stamp, "camera_0_link"), "jpeg", self._jpeg))
        if k % max(1, round(self.rate_hz)) == 0:
            self._write("battery", m.BatteryState(m.Header(stamp, ""), self.battery_v, 25.0, -2.7, math.nan,
                                                  math.nan, 20.0, 0.8, 2, 1, 2, True))


def _test_jpeg() -> bytes:
    """A small valid JPEG (64 x 48 grey gradient) for the simulated camera topic."""
    import cv2
    import numpy as np

    img = np.tile(np.linspace(0, 255, 64, dtype=np.uint8), (48, 1))
    return bytes(cv2.imencode(".jpg", img)[1])
