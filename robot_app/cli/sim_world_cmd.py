"""``robot-app sim worlds|check|generate|render|record|run`` and ``robot-app bench sim``: the simulated world.

``sim generate`` writes a world generated from a seed (:mod:`robot_app.sim.worldgen`) and, with
``--instructions``, an instruction set for it (:mod:`robot_app.sim.worldgen_instructions`).

``sim run`` is the whole closed loop in one process: the device simulators on virtual serial ports,
moved by the world plant, and the onboard app connected to those ports with the ``sim`` camera, at
real time. ``sim record`` drives a scripted exploration on the simulation clock (faster than real time)
into a traversal log that ``map build`` reads like a real recording.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

log = logging.getLogger(__name__)


def register(sub, groups) -> None:
    s = groups["sim"]
    p = s.add_parser("worlds", help="list the shipped simulated worlds and their landmarks",
                     description="Name, file, size and landmark counts of each shipped world.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_worlds)

    p = s.add_parser("check", help="validate a world file (errors name the file and the entry)")
    p.add_argument("world", help="world .toml file or shipped world name")
    p.set_defaults(func=_check)

    p = s.add_parser("generate", help="write a world generated from a seed (and its instruction set)",
                     description="Generate a world from a seed: streets (grid, ring or curved layout with "
                                 "junctions, loops and cul-de-sacs), every building and object category of the "
                                 "catalogue beside them with repeats and look-alike distractors, GPS dropout "
                                 "zones, a look ([render]) and an exploration route over every street "
                                 "([exploration]). The same seed gives the same file.")
    p.add_argument("--seed", type=int, required=True,
                   help="seed >= 0 (named ranges: train 1000-1999, dev 2000-2099, test 3000-3099)")
    p.add_argument("--out", required=True, help="world .toml file to write")
    p.add_argument("--name", default=None, help="the world's name (default gen-SEED)")
    p.add_argument("--layout", default=None, help="grid, ring or curves instead of the seed's choice")
    p.add_argument("--instructions", default=None, metavar="FILE",
                   help="also write an instruction set for the world (the eval sim format) to FILE")
    p.add_argument("--n", type=int, default=20, help="instructions in that set (default 20)")
    p.add_argument("--overwrite", action="store_true", help="replace existing files")
    p.add_argument("--json", action="store_true", help="print a summary as JSON")
    p.set_defaults(func=_generate)

    p = s.add_parser("render", help="render one first-person frame of a world to an image file",
                     description="Render the view from a pose (x, y in metres ENU of the world's anchor, yaw in "
                                 "degrees CCW from east) with pybullet's CPU TinyRenderer.")
    p.add_argument("--world", default=None, help="shipped world name or .toml file (default: [sim] world)")
    p.add_argument("--pose", default=None, help="x,y,yaw_deg (default: the world's start pose)")
    p.add_argument("--size", default=None, help="WIDTHxHEIGHT in pixels (default: [camera] width/height)")
    p.add_argument("--out", required=True, help="image file to write (.png or .jpg)")
    p.set_defaults(func=_render)

    p = s.add_parser("record", help="drive a scripted exploration in a world and write a traversal log",
                     description="Follow a route (path names of the world, or x,y waypoints) with pure pursuit on "
                                 "the simulation clock, rendering frames at --rate; writes a traversal log "
                                 "(frames, GPS with noise and dropouts, IMU, odometry, commands, collisions).")
    p.add_argument("--world", default=None, help="shipped world name or .toml file (default: [sim] world)")
    p.add_argument("--route", default=None,
                   help="path names joined by '+' (e.g. 'main+east loop'), or waypoints 'x,y;x,y;...' in metres "
                        "(default: the world's [exploration] route)")
    p.add_argument("--out", required=True, help="traversal log folder to write")
    p.add_argument("--rate", type=float, default=None, help="frame rate, Hz (default: [mapping] frame_rate_hz)")
    p.add_argument("--speed", type=float, default=1.0, help="driving speed, m/s (default 1.0)")
    p.add_argument("--size", default=None, help="WIDTHxHEIGHT of the frames (default: [camera] width/height)")
    p.add_argument("--seed", type=int, default=None, help="noise seed (default: [sim] seed)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_record)

    p = s.add_parser("run", help="run the app against the simulated world (devices + app in one process)",
                     description="Start the device simulators on virtual ports, moved by the world plant "
                                 "([sim] world), and the onboard app connected to them with the sim camera, "
                                 "in real time. Stops on SIGINT/SIGTERM or after --duration.")
    p.add_argument("--world", default=None, help="shipped world name or .toml file (default: [sim] world)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(func=_run)

    b = groups["bench"].add_parser("sim", help="simulated world: render time per frame, exploration speed-up",
                                   description="Time the TinyRenderer per frame at a few sizes and a scripted "
                                               "exploration (sim time / wall time).")
    b.add_argument("--world", default=None, help="shipped world name or .toml file (default: [sim] world)")
    b.add_argument("--frames", type=int, default=40, help="frames per size (default 40)")
    b.add_argument("--json", action="store_true", help="print the figures as JSON")
    b.set_defaults(func=_bench)


def _load(name, config):
    from robot_app.errors import UsageError

    try:
        from robot_app.sim.world import WorldError, load_world
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UsageError(f"the simulated world needs the 'sim' extra: {exc}") from exc
    try:
        return load_world(name or config.sim.world)
    except WorldError as exc:
        raise UsageError(str(exc)) from exc


def _size(text, config) -> tuple:
    from robot_app.errors import UsageError

    if text is None:
        return config.camera.width, config.camera.height
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size: expected WIDTHxHEIGHT, got {text!r}") from None
    if not (8 <= w <= 4096 and 8 <= h <= 4096):
        raise UsageError(f"--size {text}: each side must be 8-4096 px")
    return w, h


def _worlds(args, config) -> int:
    from collections import Counter

    from robot_app.sim.world import load_world, shipped_worlds

    rows = []
    for name, path in shipped_worlds().items():
        w = load_world(path)
        cats = Counter(c for _, c, _, _ in w.landmarks())
        rows.append(
            {
                "name": name,
                "file": str(path),
                "extent_m": list(w.extent_m),
                "anchor_latlon": list(w.anchor_latlon),
                "paths": [p.name for p in w.paths],
                "buildings": len(w.buildings),
                "objects": len(w.objects),
                "categories": dict(sorted(cats.items())),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['name']}: {r['extent_m'][0]:g} x {r['extent_m'][1]:g} m at {r['anchor_latlon']}, "
              f"{r['buildings']} buildings, {r['objects']} objects; paths: {', '.join(r['paths'])}")
        print("  " + ", ".join(f"{c} x{n}" for c, n in r["categories"].items()))
    return 0


def _check(args, config) -> int:
    w = _load(args.world, config)
    print(f"{w.source}: ok ({len(w.paths)} paths, {len(w.buildings)} buildings, {len(w.objects)} objects, "
          f"{len(w.gps_dropouts)} GPS dropout zones)")
    return 0


def _generate(args, config) -> int:
    from robot_app.errors import UsageError
    from robot_app.sim.worldgen import LAYOUTS, generate, split_of, write_text

    if args.seed < 0:
        raise UsageError(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.layout is not None and args.layout not in LAYOUTS:
        raise UsageError(f"--layout: expected one of {', '.join(LAYOUTS)}, got {args.layout!r}")
    if not 1 <= args.n <= 500:
        raise UsageError(f"--n: expected 1-500, got {args.n}")
    for flag, path in (("--out", args.out), ("--instructions", args.instructions)):
        if path is None:
            continue
        if Path(path).exists() and not args.overwrite:
            raise UsageError(f"{flag} {path}: exists (give --overwrite to replace it)")
        folder = Path(path).parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            why = "no such folder" if not folder.is_dir() else "the folder is not writable"
            raise UsageError(f"{flag} {path}: cannot write: {why}")
    try:
        gen = generate(args.seed, name=args.name, layout=args.layout)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    doc = None
    if args.instructions is not None:
        from robot_app.sim.worldgen_instructions import generate_instructions, write_instructions

        try:
            doc = generate_instructions(gen.world, args.seed, n=args.n)
        except ValueError as exc:
            raise UsageError(f"--instructions {args.instructions}: {exc}") from exc
    try:
        write_text(args.out, gen.text, overwrite=args.overwrite)
        if doc is not None:
            write_instructions(args.instructions, doc, overwrite=args.overwrite)
    except OSError as exc:
        bad = args.instructions if Path(args.out).is_file() and doc is not None else args.out
        raise UsageError(f"{bad}: cannot write: {exc.strerror or exc}") from exc
    w = gen.world
    route = w.exploration_route
    out = {"world": args.out, "name": w.name, "seed": args.seed, "split": split_of(args.seed), "layout": gen.layout,
           "paths": len(w.paths), "junctions": len(gen.graph.junctions()), "buildings": len(w.buildings),
           "objects": len(w.objects), "gps_dropouts": len(w.gps_dropouts),
           "exploration_m": round(sum(math.dist(a, b) for a, b in zip(route, route[1:])), 1),
           "instructions": args.instructions, "n_instructions": len(doc["instructions"]) if doc else 0}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{args.out}: world {w.name!r} (seed {args.seed}, {out['split'] or 'no named split'}, {gen.layout} "
              f"layout): {out['paths']} paths, {out['junctions']} junctions, {out['buildings']} buildings, "
              f"{out['objects']} objects, {out['gps_dropouts']} GPS dropout zones, exploration route "
              f"{out['exploration_m']:g} m"
              + (f"; {out['n_instructions']} instructions in {args.instructions}" if doc else ""))
    return 0


def _render(args, config) -> int:
    import math

    import cv2

    from robot_app.errors import UsageError
    from robot_app.sim.plant import obstacle_at
    from robot_app.sim.render import WorldRenderer

    w = _load(args.world, config)
    width, height = _size(args.size, config)
    if args.pose:
        try:
            x, y, yaw_deg = (float(v) for v in args.pose.split(","))
        except ValueError:
            raise UsageError(f"--pose: expected x,y,yaw_deg, got {args.pose!r}") from None
        pose = (x, y, math.radians(yaw_deg))
    else:
        pose = w.start
    hit = obstacle_at(w, pose[0], pose[1], 0.05)
    if hit is not None:
        raise UsageError(f"--pose {args.pose}: inside {hit[0]!r} ({hit[1]})")
    with WorldRenderer(w, width=width, height=height, hfov_deg=config.sim.hfov_deg, seed=config.sim.seed,
                       camera_height_m=config.sim.camera_height_m, noise_std=config.sim.image_noise) as ren:
        img = ren.render(*pose)
    if not cv2.imwrite(args.out, img[:, :, ::-1]):
        raise UsageError(f"--out {args.out}: cannot write the image (use .png or .jpg)")
    print(f"{args.out}: {width}x{height} view of {w.name} from ({pose[0]:g}, {pose[1]:g}) m, "
          f"yaw {math.degrees(pose[2]):g} deg")
    return 0


def _route(text: str):
    from robot_app.errors import UsageError

    if any(ch.isdigit() for ch in text) and "," in text:
        try:
            return [tuple(float(v) for v in pt.split(",")) for pt in text.split(";") if pt.strip()]
        except ValueError:
            raise UsageError(f"--route: expected 'x,y;x,y;...' in metres, got {text!r}") from None
    return [n.strip() for n in text.split("+") if n.strip()]


def _record(args, config) -> int:
    from robot_app.errors import UsageError
    from robot_app.sim.explore import record_exploration

    w = _load(args.world, config)
    width, height = _size(args.size, config)
    rate = args.rate or config.mapping.frame_rate_hz
    if args.route is None and not w.exploration_route:
        raise UsageError(f"--route: world {w.name!r} has no [exploration] route; give --route")
    route = _route(args.route) if args.route is not None else [list(p) for p in w.exploration_route]
    try:
        rep = record_exploration(w, route, args.out, rate_hz=rate, speed_mps=args.speed,
                                 seed=config.sim.seed if args.seed is None else args.seed, width=width, height=height,
                                 hfov_deg=config.sim.hfov_deg, gps_noise_m=config.sim.gps_noise_m,
                                 jpeg_quality=config.camera.jpeg_quality, robot_radius_m=config.sim.robot_radius_m)
    except ValueError as exc:
        where = args.route if args.route is not None else "(the world's [exploration] route)"
        raise UsageError(f"--route {where}: {exc}") from exc
    out = {"log": args.out, "world": w.name, "frames": rep.frames, "gps_fixes": rep.gps_fixes,
           "sim_time_s": round(rep.sim_time_s, 2), "distance_m": round(rep.distance_m, 2),
           "reached_end": rep.reached_end, "wall_s": round(rep.wall_s, 2), "speedup": round(rep.speedup, 1),
           "collisions": [f"{c.name} ({c.category})" for c in rep.collisions]}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{args.out}: {rep.frames} frames, {rep.distance_m:.1f} m in {rep.sim_time_s:.1f} s sim time "
              f"({rep.wall_s:.1f} s wall, {rep.speedup:.0f}x real time)"
              + ("" if rep.reached_end else "; did NOT reach the route's end")
              + (f"; collision with {out['collisions'][0]}" if rep.collisions else ""))
    return 0 if rep.reached_end else 1


def _run(args, config) -> int:
    import asyncio
    import dataclasses
    import tempfile

    from firmware_bridge.sim.devices import SimulatedDevices
    from robot_app.errors import UsageError
    from robot_app.service.app import App, announce_ui
    from robot_app.sim.camera import set_active_plant, world_plant_from_config
    from robot_app.sim.world import WorldError

    if args.world:
        config = dataclasses.replace(config, sim=dataclasses.replace(config.sim, world=args.world))
    try:
        plant = world_plant_from_config(config)
    except (WorldError, ValueError) as exc:
        raise UsageError(str(exc)) from exc

    async def main(directory: str) -> int:
        async with SimulatedDevices(directory, plant=plant, gps=True, imu=False,
                                    origin_latlon=plant.world.anchor_latlon) as sims:
            plant.attach(sims, gps_noise_m=config.sim.gps_noise_m, seed=config.sim.seed)
            cfg = dataclasses.replace(
                config, serial=dataclasses.replace(config.serial, base_port=str(sims.ports["jackal"]),
                                                   gps_port=str(sims.ports["gps"])),
                camera=dataclasses.replace(config.camera, source="sim"))
            app = App(cfg)
            log.info("simulated world %s: ports %s", plant.world.name, sims.ports)
            if args.duration is not None:
                asyncio.get_running_loop().call_later(args.duration, app.request_stop, "--duration passed")
            announce = asyncio.ensure_future(announce_ui(app, with_token=True))
            try:
                return await app.run()
            finally:
                announce.cancel()

    try:
        with tempfile.TemporaryDirectory(prefix="robot-app-sim-") as d:
            return asyncio.run(main(d))
    finally:
        set_active_plant(None)


def _bench(args, config) -> int:
    import tempfile
    import time

    from robot_app.errors import UsageError
    from robot_app.sim.explore import record_exploration
    from robot_app.sim.render import WorldRenderer

    if not 1 <= args.frames <= 10000:
        raise UsageError("--frames must be 1-10000")
    w = _load(args.world, config)
    figures: dict = {"world": w.name, "render_ms_per_frame": {}}
    x0, y0, yaw0 = w.start
    for width, height in ((85, 64), (160, 120), (320, 240), (640, 480)):
        with WorldRenderer(w, width=width, height=height) as ren:
            ren.render(x0, y0, yaw0)  # warm-up
            t = time.perf_counter()
            for i in range(args.frames):
                ren.render_jpeg(x0, y0 + 0.05 * i, yaw0 + 0.02 * i, index=i)
            figures["render_ms_per_frame"][f"{width}x{height}"] = round(
                1000 * (time.perf_counter() - t) / args.frames, 2
            )
    route = [w.paths[0].points[0], w.paths[0].points[1]]
    with tempfile.TemporaryDirectory() as d:
        rep = record_exploration(w, route, f"{d}/log", rate_hz=4.0, speed_mps=1.5, width=160, height=120,
                                 max_time_s=60.0)
    figures["exploration"] = {"sim_time_s": round(rep.sim_time_s, 1), "wall_s": round(rep.wall_s, 2),
                              "speedup": round(rep.speedup, 1), "frames": rep.frames, "size": "160x120"}
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    for size, ms in figures["render_ms_per_frame"].items():
        print(f"render + JPEG {size:>8s}: {ms:7.2f} ms/frame")
    e = figures["exploration"]
    print(f"exploration at 4 Hz, 160x120: {e['sim_time_s']} s sim in {e['wall_s']} s wall ({e['speedup']}x real time)")
    return 0
