"""``robot-app sim devices`` (simulated Jackal MCU, GPS, IMU on virtual serial ports) and
``robot-app bench serial`` (decoder throughput, command latency, drive-loop jitter)."""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)

WORLDS = ("kinematic",)


def register(sub, groups) -> None:
    p = groups["sim"].add_parser(
        "devices", help="run the simulated Jackal MCU, GPS and IMU on virtual serial ports",
        description="Start the device simulators on pty pairs with stable link names in --dir and print "
                    "the port names; connect the app (or a serial terminal) to them as to a robot. "
                    "Runs until interrupted or --duration has passed.")
    p.add_argument("--world", default="kinematic",
                   help="plant that moves the robot: 'kinematic' (default), a simulated world (a shipped "
                        "world's name such as 'campus', or a world .toml file; extra 'sim'), or "
                        "MODULE:FUNCTION returning a firmware_bridge.sim.plant.Plant given the config")
    p.add_argument("--dir", default=None, help="directory for the port links (default: a new temporary directory)")
    p.add_argument("--gps-log", default=None, help="NMEA log for the separate GPS receiver to replay (looped)")
    p.add_argument("--no-gps", action="store_true", help="no separate GPS receiver (NMEA still comes via the MCU)")
    p.add_argument("--no-imu", action="store_true", help="no separate Microstrain IMU")
    p.add_argument(
        "--origin",
        default=None,
        help="lat,lon (degrees) of the plant's origin (default: the world's GPS anchor, else 52.5148,13.4643)",
    )
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--json", action="store_true", help="print the port names as one JSON object")
    p.add_argument("--drive-log", metavar="FILE", default=None,
                   help="append every Drive command the simulated MCU receives to FILE as JSON lines "
                        "(t_mono_s = this machine's monotonic clock at receipt, mode, left, right in rad/s)")
    p.set_defaults(func=_devices)

    b = groups["bench"].add_parser(
        "serial", help="serial link figures: decoder throughput, command latency, drive-loop jitter",
        description="Decoder throughput (rosserial frames/s, NMEA lines/s), host -> simulated MCU command "
                    "latency over a pty (p50/p99), and the 50 Hz drive loop's jitter while the decoders run.")
    b.add_argument("--seconds", type=float, default=5.0, help="length of the drive-link run (default 5)")
    b.add_argument("--nmea-log", default=None, help="NMEA log to time the decoder on (default: a built-in mix)")
    b.add_argument("--same-loop", action="store_true",
                   help="run the simulators in this process's event loop instead of a child process")
    b.add_argument("--json", action="store_true", help="print the figures as JSON")
    b.set_defaults(func=_bench)

    f = groups["bench"].add_parser(
        "fuzz", help="fuzz every wire decoder (NMEA, rosserial with the e-stop check, MIP, ROS 2 samples)",
        description="Feed mutated sentences, frames, packets and samples to the decoders the drivers run on "
                    "received bytes; count exceptions that escape (must be 0), decoder failures counted as "
                    "'internal' (must be 0) and e-stop frames that did not latch (must be 0). Exits 1 on any.")
    f.add_argument("--targets", default="nmea,rosserial,mip,dds", help="comma-separated (default: all four)")
    f.add_argument("--count", type=int, default=100_000, help="inputs per target (default 100000)")
    f.add_argument("--seed", type=int, default=0, help="random seed (default 0); the same seed feeds the same inputs")
    f.add_argument("--json", action="store_true", help="print the reports as JSON")
    f.set_defaults(func=_bench_fuzz)


def _parse_origin(text: str) -> tuple:
    from robot_app.errors import UsageError

    try:
        lat, lon = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--origin: expected 'lat,lon' in degrees, got {text!r}") from None
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        raise UsageError(f"--origin: {text!r} is not a valid latitude,longitude")
    return lat, lon


def _make_plant(world: str, config):
    import importlib

    from firmware_bridge.sim.plant import KinematicPlant
    from robot_app.errors import UsageError

    if world == "kinematic":
        return KinematicPlant(wheel_radius_m=config.robot.wheel_radius_m,
                              wheel_separation_m=config.robot.wheel_separation_m)
    if ":" not in world:  # a simulated world: shipped name or .toml file
        import dataclasses
        from pathlib import Path

        try:
            from robot_app.sim.camera import world_plant_from_config
            from robot_app.sim.world import WorldError, shipped_worlds
        except ImportError as exc:
            raise UsageError(f"--world {world}: the simulated world needs the 'sim' extra ({exc})") from exc
        if world not in shipped_worlds() and not Path(world).is_file():
            raise UsageError(f"--world: unknown world {world!r} (known: {', '.join(WORLDS + tuple(shipped_worlds()))}, "
                             "a world .toml file, or MODULE:FUNCTION)")
        try:
            return world_plant_from_config(
                dataclasses.replace(config, sim=dataclasses.replace(config.sim, world=world))
            )
        except ImportError as exc:
            raise UsageError(f"--world {world}: the simulated world needs the 'sim' extra ({exc})") from exc
        except (WorldError, ValueError) as exc:
            raise UsageError(f"--world {world}: {exc}") from exc
    module, _, func = world.partition(":")
    if not module or not func:
        raise UsageError(f"--world: unknown world {world!r} (known: {', '.join(WORLDS)}, or MODULE:FUNCTION)")
    try:
        factory = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--world {world}: cannot load it: {exc}") from exc
    plant = factory(config)
    if not (callable(getattr(plant, "step", None)) and callable(getattr(plant, "state", None))):
        raise UsageError(f"--world {world}: {func}() did not return a plant (needs step() and state())")
    return plant


def _devices(args, config) -> int:
    import asyncio
    import tempfile
    from pathlib import Path

    from firmware_bridge.sim.devices import SimulatedDevices
    from firmware_bridge.sim.gps import read_nmea_log
    from robot_app.errors import UsageError

    plant = _make_plant(args.world, config)
    world = getattr(plant, "world", None)
    origin = _parse_origin(args.origin) if args.origin else tuple(getattr(world, "anchor_latlon", (52.5148, 13.4643)))
    lines = None
    if args.gps_log:
        try:
            lines = read_nmea_log(args.gps_log)
        except OSError as exc:
            raise UsageError(f"--gps-log {args.gps_log}: {exc.strerror or exc}") from exc
    if args.dir:
        try:
            Path(args.dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--dir {args.dir}: cannot create the folder ({exc.strerror or exc})") from exc

    async def run(directory: str) -> None:
        async with SimulatedDevices(directory, plant=plant, gps=not args.no_gps, gps_lines=lines,
                                    imu=not args.no_imu, origin_latlon=origin) as sims:
            if callable(getattr(plant, "attach", None)):  # a world plant: GPS noise and dropout zones
                plant.attach(sims, gps_noise_m=config.sim.gps_noise_m, seed=config.sim.seed)
            if drive_log is not None:
                sims.mcu.drive_sink = lambda t, m: (drive_log.write(json.dumps(
                    {"t_mono_s": t, "mode": m.mode, "left": m.left, "right": m.right}) + "\n"), drive_log.flush())
            if args.json:
                print(json.dumps(sims.ports), flush=True)
            else:
                for name, path in sims.ports.items():
                    print(f"{name:7s} {path}", flush=True)
            if args.duration is None:
                await asyncio.Event().wait()  # until Ctrl-C
            else:
                await asyncio.sleep(args.duration)

    drive_log = None
    if args.drive_log:
        try:
            drive_log = open(args.drive_log, "a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--drive-log {args.drive_log}: {exc.strerror or exc}") from exc
    try:
        if args.dir:
            asyncio.run(run(args.dir))
        else:
            with tempfile.TemporaryDirectory(prefix="robot-app-sim-") as d:
                asyncio.run(run(d))
    finally:
        if drive_log is not None:
            drive_log.close()
    return 0


def _bench(args, config) -> int:
    import asyncio

    from firmware_bridge.bench import decoder_throughput, drive_link_bench
    from firmware_bridge.sim.gps import read_nmea_log
    from robot_app.errors import UsageError

    if not 0 < args.seconds <= 120:
        raise UsageError("--seconds must be in (0, 120]")
    lines = None
    if args.nmea_log:
        try:
            lines = read_nmea_log(args.nmea_log)
        except OSError as exc:
            raise UsageError(f"--nmea-log {args.nmea_log}: {exc.strerror or exc}") from exc
    figures = decoder_throughput(seconds=1.0, nmea_lines=lines)
    figures.update(asyncio.run(drive_link_bench(config.robot, seconds=args.seconds,
                                                separate_process=not args.same_loop)))
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(f"rosserial decode (Feedback frames): {figures['rosserial_feedback_frames_per_s']:,.0f} frames/s")
    print(f"NMEA decode:                        {figures['nmea_lines_per_s']:,.0f} lines/s")
    print(f"command latency host -> sim MCU:    p50 {figures['latency_ms_p50']:.2f} ms, "
          f"p99 {figures['latency_ms_p99']:.2f} ms, max {figures['latency_ms_max']:.2f} ms "
          f"({figures['commands_matched']}/{figures['commands_sent']} matched, simulator: {figures['simulator']}; "
          f"load average (1 min) {figures['loadavg_1m']})")
    print(f"drive loop jitter ({config.robot.control_rate_hz:g} Hz):      p50 {figures['drive_jitter_ms_p50']:.2f} ms, "
          f"p99 {figures['drive_jitter_ms_p99']:.2f} ms, max {figures['drive_jitter_ms_max']:.2f} ms")
    return 0


def _bench_fuzz(args, config) -> int:
    from firmware_bridge.fuzz import TARGETS, fuzz
    from robot_app.errors import UsageError

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if not targets or unknown:
        raise UsageError(f"--targets: {', '.join(unknown) or 'none given'}: choose from {', '.join(TARGETS)}")
    if not 1 <= args.count <= 100_000_000:
        raise UsageError(f"--count must be in 1..100000000, got {args.count}")
    reports = []
    for t in targets:
        reports.append(fuzz(t, count=args.count, seed=args.seed))
        if not args.json:
            r = reports[-1]
            estop = f", e-stop frames not latched {r.estop_missed}/{r.estop_checked}" if r.estop_checked else ""
            print(f"{t:10s} {r.inputs:>10,} inputs  escaped {r.escaped}  internal {r.internal}{estop}  "
                  f"({r.seconds:.1f} s){'' if r.ok else '  FAILED'}")
            for ex in r.examples:
                print(f"    {ex}")
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=1))
    return 0 if all(r.ok for r in reports) else 1
