"""``robot-app sim ros2``: a simulated ROS 2 robot on a DDS domain (the far end of ``[robot] backend = "ros2"``)."""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


def register(sub, groups) -> None:
    p = groups["sim"].add_parser(
        "ros2", help="run a simulated ROS 2 robot (cmd_vel in; odometry, IMU, GPS, e-stop, battery out) over DDS",
        description="Join a DDS domain as a Clearpath-style ROS 2 robot with the topic names of [ros2]: it "
                    "drives a kinematic plant with the velocity commands it receives and publishes odometry, "
                    "IMU, NavSatFix, e-stop and battery state. Point the app at it with [robot] backend = "
                    "\"ros2\" and the same domain id and namespace. Runs until interrupted or --duration has "
                    "passed.")
    p.add_argument("--domain-id", type=int, default=None, help="DDS domain (default: [ros2] domain_id)")
    p.add_argument("--namespace", default=None, help="ROS namespace (default: [ros2] namespace)")
    p.add_argument("--loopback", action="store_true",
                   help="bind Cyclone DDS to the loopback interface, no multicast (only this machine sees it)")
    p.add_argument("--camera", action="store_true", help="also publish a small JPEG on [ros2] camera_topic")
    p.add_argument("--world", default="kinematic", help="plant, as for 'sim devices' (default: kinematic)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--json", action="store_true", help="print the domain and namespace as one JSON line once up")
    p.add_argument("--cmd-log", metavar="FILE", default=None,
                   help="append every velocity command received to FILE as JSON lines (t_mono_s = this "
                        "machine's monotonic clock at receipt, v_mps, omega_radps)")
    p.set_defaults(func=_run)


def _run(args, config) -> int:
    import asyncio

    from firmware_bridge.errors import BridgeError
    from firmware_bridge.ros2.dds import DdsNode, loopback_config
    from firmware_bridge.sim.ros2_robot import Ros2RobotSim
    from robot_app.cli.sim_devices_cmd import _make_plant
    from robot_app.errors import UsageError

    r2 = config.ros2
    domain = r2.domain_id if args.domain_id is None else args.domain_id
    if not 0 <= domain <= 232:
        raise UsageError(f"--domain-id must be in 0..232, got {domain}")
    ns = r2.namespace if args.namespace is None else args.namespace
    plant = _make_plant(args.world, config)
    cmd_log = None
    if args.cmd_log:
        try:
            cmd_log = open(args.cmd_log, "a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--cmd-log {args.cmd_log}: {exc.strerror or exc}") from exc

    async def run() -> None:
        node = DdsNode(domain, config=loopback_config() if args.loopback else r2.cyclonedds_config)
        try:
            sim = Ros2RobotSim(node, plant, namespace=ns, cmd_topic=r2.cmd_topic, cmd_type=r2.cmd_type,
                               odom_topic=r2.odom_topic, imu_topic=r2.imu_topic, gps_topic=r2.gps_topic,
                               estop_topic=r2.estop_topic, battery_topic=r2.battery_topic,
                               camera_topic=r2.camera_topic if args.camera else "",
                               wheel_radius_m=config.robot.wheel_radius_m,
                               wheel_separation_m=config.robot.wheel_separation_m)
        except ValueError as exc:
            raise UsageError(f"[ros2]: {exc}") from exc
        async with sim:
            if cmd_log is not None:
                sim.cmd_sink = lambda t, v, w: (cmd_log.write(json.dumps(
                    {"t_mono_s": t, "v_mps": v, "omega_radps": w}) + "\n"), cmd_log.flush())
            info = {"domain_id": domain, "namespace": ns, "loopback": bool(args.loopback), "topics": sim.topics}
            print(json.dumps(info) if args.json else f"simulated ROS 2 robot on domain {domain}, namespace {ns!r}",
                  flush=True)
            if args.duration is None:
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(args.duration)

    try:
        asyncio.run(run())
    except BridgeError as exc:
        raise UsageError(f"sim ros2: {exc}") from exc
    finally:
        if cmd_log is not None:
            cmd_log.close()
    return 0
