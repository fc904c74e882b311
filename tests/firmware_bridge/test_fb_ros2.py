"""The ``ros2`` backend: topic names, conversions, the drive path's staleness and e-stop, the
sensors, the camera, against the simulated ROS 2 robot sharing the test's DDS participant (loopback
interface only, a random domain id). The two-process runs are in test_fb_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import subprocess
import sys
import time

import pytest

from firmware_bridge.errors import EStopLatched
from firmware_bridge.readings import BaseStatus, CameraImage, GpsFix, GpsNoFix, ImuReading, WheelFeedback
from firmware_bridge.ros2.dds import DdsNode, loopback_config, ros_topic
from firmware_bridge.sim.plant import KinematicPlant
from robot_app.config import RobotConfig, Ros2Config

NS = "/j100_0000"


def test_topic_names_follow_the_ros2_dds_mapping():
    assert ros_topic(NS, "cmd_vel") == "rt/j100_0000/cmd_vel"
    assert ros_topic("/j100_0000/", "sensors/gps_0/fix") == "rt/j100_0000/sensors/gps_0/fix"
    assert ros_topic(NS, "/cmd_vel") == "rt/cmd_vel"
    assert ros_topic("", "cmd_vel") == "rt/cmd_vel"
    for bad in ("", "cmd vel", "a//b", "0abc", "cmd-vel"):
        with pytest.raises(ValueError, match="not a valid ROS 2 topic name"):
            ros_topic(NS, bad)


def test_factory_builds_ros2_drivers_without_importing_cyclonedds():
    code = ("import sys\nfrom firmware_bridge.factory import drivers_from_config\n"
            "from robot_app.config import Config, RobotConfig\nimport dataclasses\n"
            "c = Config()\nr = dataclasses.replace(c.robot, backend='ros2')\n"
            "d = drivers_from_config(c.serial, r, c.ros2, camera=True)\n"
            "print(sorted(d), type(d['base']).__name__, 'cyclonedds' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["['base',", "'gps',", "'imu',", "'ros2_camera']", "Ros2Base", "False"]


def test_factory_refuses_an_unknown_backend_and_bad_topics():
    from firmware_bridge.factory import drivers_from_config, ros2_drivers

    with pytest.raises(ValueError, match="unknown backend 'can'"):
        drivers_from_config(None, type("R", (), {"backend": "can"})())
    with pytest.raises(ValueError, match="not a valid ROS 2 topic name"):
        ros2_drivers(Ros2Config(odom_topic="odom filtered"), RobotConfig())
    with pytest.raises(ValueError, match="cmd_type"):
        ros2_drivers(Ros2Config(cmd_type="ackermann"), RobotConfig())


def test_navsatfix_and_imu_conversions():
    pytest.importorskip("cyclonedds")
    from firmware_bridge.ros2 import msgs
    from firmware_bridge.ros2.sensors import imu_to_reading, navsatfix_to_reading

    fix = msgs.NavSatFix(msgs.Header(msgs.Time(1700000000, 500000000), "gps_0_link"), msgs.NavSatStatus(2, 1),
                         52.5, 13.4, math.nan, [0.04, 0, 0, 0, 0.09, 0, 0, 0, 0.25], 2)
    r = navsatfix_to_reading(fix, 12.0)
    assert isinstance(r, GpsFix)
    assert (r.t_mono_s, r.latitude_deg, r.longitude_deg, r.altitude_m, r.quality) == (12.0, 52.5, 13.4, None, 4)
    assert r.covariance_enu_m2 == (0.04, 0.09, 0.25) and r.covariance_type == 2
    assert r.utc.timestamp() == 1700000000.5 and r.source == "NavSatFix"
    nofix = navsatfix_to_reading(msgs.NavSatFix(status=msgs.NavSatStatus(-1, 1)), 3.0)
    assert isinstance(nofix, GpsNoFix) and nofix.utc_time is None
    imu = msgs.Imu(msgs.Header(frame_id="imu_0_link"), msgs.Quaternion(0, 0, 0, 1), [-1.0] + [0.0] * 8,
                   msgs.Vector3(0.1, 0.2, 0.3), [0.0] * 9, msgs.Vector3(0, 0, 9.8), [0.0] * 9)
    ir = imu_to_reading(imu, 5.0)
    assert ir == ImuReading(5.0, "imu_0_link", (0.1, 0.2, 0.3), (0.0, 0.0, 9.8), None, source="ros2")


@contextlib.asynccontextmanager
async def _robot(**sim_kwargs):
    """The simulated robot and the backend's drivers on one DDS participant (loopback, random domain)."""
    pytest.importorskip("cyclonedds")
    from firmware_bridge.factory import ros2_drivers
    from firmware_bridge.sim.ros2_robot import Ros2RobotSim

    cfg = Ros2Config(domain_id=random.randint(1, 200), cmd_type=sim_kwargs.pop("cmd_type", "twist"),
                     **sim_kwargs.pop("ros2", {}))
    drivers = ros2_drivers(cfg, RobotConfig(), camera=True, dds_config=loopback_config())
    node = drivers["base"].node
    sim = Ros2RobotSim(node, KinematicPlant(), namespace=cfg.namespace, cmd_type=cfg.cmd_type,
                       camera_topic=cfg.camera_topic, **sim_kwargs)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(sim)
        for d in drivers.values():
            await stack.enter_async_context(d)
        for d in drivers.values():
            await d.wait_connected(5.0)
        yield sim, drivers


async def _until(pred, timeout_s: float = 3.0) -> None:
    end = time.monotonic() + timeout_s
    while not pred() and time.monotonic() < end:
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("cmd_type", ["twist", "twist_stamped"])
def test_drive_then_stale_command_stops_at_once(arun, cmd_type):
    async def body():
        async with _robot(cmd_type=cmd_type) as (sim, d):
            base = d["base"]
            for _ in range(25):
                base.set_velocity(0.5, 0.2)
                await asyncio.sleep(0.02)
            t_last = time.monotonic()
            await asyncio.sleep(0.6)  # silent: the command goes stale after cmd_timeout_s
            log = list(sim.cmd_log)
            moving = [(t, v, w) for t, v, w in log if t <= t_last + 0.01 and v > 0]
            assert moving and max(v for _, v, _ in moving) == pytest.approx(0.5)
            after = [(v, w) for t, v, w in log if t > t_last + RobotConfig().cmd_timeout_s + 0.1]
            assert after and set(after) == {(0.0, 0.0)}  # zero, not ramped down
            fb = base.latest(WheelFeedback, max_age_s=0.2)
            assert fb is not None and abs(fb.left.velocity_radps) < 0.05 and fb.left.travel_rad > 0
            assert sim.plant.state().x_m > 0.05
    arun(body)


def test_platform_estop_latches_and_blocks_reset(arun):
    async def body():
        async with _robot() as (sim, d):
            base = d["base"]
            await _until(lambda: base.latest(BaseStatus) is not None and base.latest(BaseStatus).battery_v > 0)
            assert base.latest(BaseStatus).battery_v == pytest.approx(26.5) and not base.estop_latched
            sim.estop_engaged = True
            await _until(lambda: base.estop_latched)
            assert base.estop_latched
            with pytest.raises(EStopLatched):
                base.set_velocity(0.3, 0.0)
            await _until(lambda: base.latest(BaseStatus).estop_stopped)
            assert base.latest(BaseStatus).estop_stopped
            with pytest.raises(EStopLatched, match="still engaged"):
                base.reset_estop()
            sim.estop_engaged = False
            await _until(lambda: not base.latest(BaseStatus).estop_stopped)
            base.reset_estop()
            base.set_velocity(0.3, 0.0)
            assert not base.estop_latched
    arun(body)


def test_estop_publishes_zero_from_the_call_not_at_the_next_drive_tick(arun):
    async def body():
        async with _robot() as (sim, d):
            base = d["base"]
            for _ in range(10):
                base.set_velocity(0.5, 0.0)
                await asyncio.sleep(0.02)
            assert base.last_twist == (0.5, 0.0)
            ticks = len(base.tick_lateness_s)
            base.estop("test STOP")
            assert len(base.tick_lateness_s) == ticks and base.sent_log[-1][1] == (0.0, 0.0)  # no tick ran
            t_stop = base.sent_log[-1][0]
            await _until(lambda: any(t >= t_stop and (v, w) == (0.0, 0.0) for t, v, w in sim.cmd_log))
            got = [(v, w) for t, v, w in sim.cmd_log]
            k = max(i for i, c in enumerate(got) if c != (0.0, 0.0))
            assert got[k + 1:] and set(got[k + 1:]) == {(0.0, 0.0)}  # reliable QoS: nothing moving after it
    arun(body)


def test_estop_reaches_the_safety_monitor_without_a_battery_topic(arun):
    """A robot that publishes no battery state: the e-stop still gives a BaseStatus (battery NaN), so the
    safety monitor reports the hardware e-stop and no battery fault."""
    from robot_app.config import SafetyConfig
    from robot_app.sensing.safety import SafetyMonitor

    async def body():
        async with _robot(ros2={"battery_topic": ""}) as (sim, d):
            base = d["base"]
            sim.estop_engaged = True
            await _until(lambda: base.latest(BaseStatus) is not None and base.latest(BaseStatus).estop_stopped)
            st = base.latest(BaseStatus)
            assert st.estop_stopped and math.isnan(st.battery_v) and base.estop_latched
            fault = SafetyMonitor(SafetyConfig()).check(base)
            assert fault is not None and fault.kind == "hardware-estop"
    arun(body)


def test_gps_imu_and_camera_readings(arun):
    async def body():
        async with _robot() as (sim, d):
            gps, imu, cam = d["gps"], d["imu"], d["ros2_camera"]
            fix = await gps.recv(timeout_s=2.0)
            assert isinstance(fix, GpsFix) and fix.latitude_deg == pytest.approx(52.5148, abs=1e-3)
            sim.gps_dropout = True
            await _until(lambda: isinstance(gps.latest(GpsNoFix), GpsNoFix))
            assert gps.latest(GpsNoFix) is not None
            r = await imu.recv(timeout_s=2.0)
            assert isinstance(r, ImuReading) and r.linear_acceleration_mps2[2] == pytest.approx(9.80665)
            img = await cam.recv(timeout_s=2.0)
            assert isinstance(img, CameraImage) and img.jpeg[:2] == b"\xff\xd8" and img.frame_id == "camera_0_link"
    arun(body)


def test_raw_image_becomes_jpeg():
    pytest.importorskip("cyclonedds")
    import cv2
    import numpy as np

    from firmware_bridge.ros2 import msgs
    from firmware_bridge.ros2.sensors import Ros2Camera

    cam = Ros2Camera(DdsNode(7), image_type="raw")
    rgb = np.zeros((4, 6, 3), np.uint8)
    rgb[..., 0] = 255  # red in RGB
    padded = np.concatenate([rgb.reshape(4, 18), np.zeros((4, 2), np.uint8)], axis=1)  # step 20 > 18
    cam._on_raw(msgs.Image(msgs.Header(frame_id="cam"), 4, 6, "rgb8", 0, 20, padded.tobytes()), 1.0)
    r = cam.latest(CameraImage)
    assert (r.width, r.height, r.frame_id) == (6, 4, "cam")
    bgr = cv2.imdecode(np.frombuffer(r.jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert bgr.shape == (4, 6, 3) and bgr[..., 2].min() > 200 and bgr[..., 0].max() < 50
    cam._on_raw(msgs.Image(msgs.Header(), 4, 6, "yuv422", 0, 12, bytes(48)), 2.0)
    assert cam.dropped_frames == 1


def test_config_selects_the_backend_and_checks_ros2_names():
    from robot_app.config import ConfigError, config_from_mapping

    cfg = config_from_mapping({"robot": {"backend": "ros2"}, "ros2": {"namespace": "/a200_0042", "domain_id": 7,
                                                                       "cmd_type": "twist_stamped"}})
    assert (cfg.robot.backend, cfg.ros2.namespace, cfg.ros2.domain_id, cfg.ros2.cmd_type) == \
        ("ros2", "/a200_0042", 7, "twist_stamped")
    assert config_from_mapping({}).robot.backend == "serial"  # the serial backend stays the default
    bad = [({"robot": {"backend": "can"}}, r"\[robot\] backend: 'can' is not one of serial, ros2"),
           ({"ros2": {"namespace": "j100 0000"}}, r"\[ros2\] namespace"),
           ({"ros2": {"gps_topic": "sensors//fix"}}, r"\[ros2\] gps_topic"),
           ({"ros2": {"cmd_topic": ""}}, r"\[ros2\] cmd_topic must not be empty"),
           ({"ros2": {"domain_id": 300}}, r"\[ros2\] domain_id: 300 is above the maximum 232"),
           ({"camera": {"source": "ros2"}}, r"needs \[robot\] backend = 'ros2'")]
    for data, msg in bad:
        with pytest.raises(ConfigError, match=msg):
            config_from_mapping(data, origin="x.toml")
