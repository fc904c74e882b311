"""``robot-app bench search`` (walk search: numba vs. pure Python vs. scipy), ``bench map-build``,
``bench map-open`` (opening a map with its content hashes checked), ``bench stale-stop`` (a silent
autonomy source to zero on the wire, through the whole app) and ``bench estop`` (STOP to zero on the wire)."""

from __future__ import annotations

import json
import sys

from robot_app.errors import UsageError


def register(sub, groups) -> None:
    p = groups["bench"].add_parser("search", help="walk search: numba kernel vs. pure Python vs. scipy")
    p.add_argument("--sizes", default="1000,10000,100000", help="comma-separated node counts")
    p.add_argument("--landmarks", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--python-max-nodes", type=int, default=10_000,
                   help="skip the pure-Python reference above this size (it takes minutes)")
    p.add_argument("--no-compile-time", action="store_true",
                   help="skip measuring numba compile time (two fresh interpreters)")
    p.add_argument("--compiled", metavar="DIR", default=None,
                   help="also time the compiled kernels in DIR (robot-app kernels build), interleaved with the JIT")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_bench_search)
    mb = groups["bench"].add_parser("map-build", help="map building on synthetic drives of growing length")
    mb.add_argument("--sizes", default="1000,10000,50000", help="comma-separated frame counts")
    mb.add_argument("--models", metavar="DIR", help="models directory with a VNM (default: [paths] models_dir; "
                                                    "without one the GPS fallback is measured)")
    mb.add_argument("--frames", type=int, metavar="N", help="one drive of N frames (instead of --sizes)")
    mb.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="ray: build each drive once per --workers count on Ray (the fleet extra)")
    mb.add_argument("--workers", default="1,2", help="with --engine ray: comma-separated worker counts (default 1,2)")
    mb.add_argument("--ray-address", metavar="ADDR", help="with --engine ray: an existing cluster (default: local)")
    mb.add_argument("--json", action="store_true")
    mb.set_defaults(func=_bench_map_build)
    mo = groups["bench"].add_parser("map-open", help="opening a map with its content hashes checked (10k, 100k nodes)")
    mo.add_argument("--sizes", default="10000,100000", help="node counts, comma-separated")
    mo.add_argument("--repeats", type=int, default=3)
    mo.add_argument("--json", action="store_true")
    mo.set_defaults(func=_bench_map_open)
    ss = groups["bench"].add_parser("stale-stop", help="a silent autonomy command to zero on the wire, through the "
                                                       "app on the simulated MCU (serial) or ROS 2 robot (ros2)")
    ss.add_argument("--backend", default="serial", choices=("serial", "ros2", "both"),
                    help="serial: the simulated MCU on a pty (default); ros2: the simulated ROS 2 robot in a child "
                         "process over DDS on the loopback interface (the ros2 extra); both: one after the other")
    ss.add_argument("--speeds", default="1,2", help="comma-separated speeds in m/s (default 1,2)")
    ss.add_argument("--trials", type=int, default=20, help="trials per speed (default 20)")
    ss.add_argument("--load", type=int, default=0, metavar="N",
                    help="run N busy processes (one core each) while measuring, e.g. 2 on the robot's 2 cores")
    ss.add_argument("--json", action="store_true", help="print the figures as JSON")
    ss.set_defaults(func=_bench_stale_stop)
    es = groups["bench"].add_parser("estop", help="STOP (touchscreen and hardware e-stop) to a zero Drive frame on "
                                                  "the wire, through the app on the simulated MCU",
                                    description="Press STOP through POST /api/stop (as the touchscreen) and as the "
                                                "MCU's Status frame reporting the hardware e-stop, while the robot "
                                                "drives at 1 m/s, and measure the time until the simulated MCU "
                                                "receives a zero Drive frame. Goal: max <= 100 ms with --load 2.")
    es.add_argument("--path", default="both", choices=("touchscreen", "hardware", "both"),
                    help="which STOP to press (default both)")
    es.add_argument("--trials", type=int, default=20, help="presses per path (default 20)")
    es.add_argument("--load", type=int, default=0, metavar="N",
                    help="run N busy processes (one core each) while measuring, e.g. 2 on the robot's 2 cores")
    es.add_argument("--json", action="store_true", help="print the figures as JSON")
    es.set_defaults(func=_bench_estop)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise UsageError(f"--sizes: expected comma-separated integers, got {text!r}") from exc
    if not sizes or min(sizes) < 2:
        raise UsageError("--sizes: every size must be >= 2")
    return sizes


def _bench_map_build(args, config) -> int:
    from robot_app.bench import map_build

    sizes = _sizes(args.sizes if args.frames is None else str(args.frames))
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError as exc:
        raise UsageError(f"--workers: expected comma-separated integers, got {args.workers!r}") from exc
    if not workers or min(workers) < 1:
        raise UsageError("--workers: every count must be >= 1")
    if args.engine == "ray":
        from robot_app.extras import require

        require("fleet", what="bench map-build --engine ray")
        from robot_app.fleet import check_ray_address

        check_ray_address(args.ray_address)
    res = map_build.run(sizes, config=config, models_dir=args.models, engine=args.engine, workers=workers,
                        ray_address=args.ray_address,
                        progress=lambda msg: print(f"bench map-build: {msg}", file=sys.stderr))
    print(json.dumps(res, indent=2) if args.json else map_build.format_table(res))
    return 0


def _bench_search(args, config) -> int:
    from robot_app.bench import search

    sizes = _sizes(args.sizes)
    if args.landmarks < 1 or args.repeats < 1:
        raise UsageError("--landmarks and --repeats must be >= 1")
    compiled = None
    if args.compiled:
        from core import _search_aot

        try:
            compiled = _search_aot.load(args.compiled)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--compiled: {exc}") from exc
    res = search.run(sizes, landmarks=args.landmarks, repeats=args.repeats, python_max_nodes=args.python_max_nodes,
                     compile_time=not args.no_compile_time, compiled=compiled,
                     progress=lambda msg: print(f"bench search: {msg}", file=sys.stderr))
    print(json.dumps(res, indent=2) if args.json else search.format_table(res))
    return 0


def _bench_map_open(args, config) -> int:
    from robot_app.bench import map_open

    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--sizes {args.sizes!r}: comma-separated node counts expected") from exc
    if not sizes or any(not 2 <= n <= 2_000_000 for n in sizes) or not 1 <= args.repeats <= 100:
        raise UsageError("--sizes: 2-2000000 nodes each; --repeats: 1-100")
    out = map_open.run(sizes, args.repeats, progress=lambda msg: print(f"bench map-open: {msg}", file=sys.stderr))
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in out.values():
            print(f"{r['nodes']:>8} nodes ({r['file_mb']} MB): open {r['with_hashes']['open_s']:.3f} s with the "
                  f"hashes ({r['without_hashes']['open_s']:.3f} s without), embeddings "
                  f"{r['with_hashes']['embeddings_s']:.3f} s ({r['without_hashes']['embeddings_s']:.3f} s)")
    return 0


def _bench_stale_stop(args, config) -> int:
    from robot_app.bench import stale_stop

    try:
        speeds = [float(x) for x in args.speeds.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--speeds: expected comma-separated numbers (m/s), got {args.speeds!r}") from exc
    if not speeds or args.trials < 1:
        raise UsageError("--speeds needs at least one speed and --trials must be >= 1")
    backends = ("serial", "ros2") if args.backend == "both" else (args.backend,)
    if "ros2" in backends:
        from robot_app.extras import require

        require("ros2", what="bench stale-stop --backend ros2")
    from robot_app.bench.load import cpu_hogs

    if not 0 <= args.load <= 64:
        raise UsageError(f"--load {args.load}: expected 0-64 busy processes")
    results = []
    with cpu_hogs(args.load):
        for backend in backends:
            try:
                results.append(stale_stop.run(config, speeds=speeds, trials=args.trials, backend=backend,
                                              progress=lambda msg: print(f"bench stale-stop: {msg}", file=sys.stderr)))
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
            results[-1]["cpu_hogs"] = args.load
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else {r["backend"]: r for r in results}, indent=2))
    else:
        print("\n\n".join(stale_stop.format_table(r) for r in results))
    return 0


def _bench_estop(args, config) -> int:
    from robot_app.bench import estop
    from robot_app.bench.load import cpu_hogs

    if args.trials < 1 or args.trials > 10000:
        raise UsageError(f"--trials {args.trials}: expected 1-10000")
    if not 0 <= args.load <= 64:
        raise UsageError(f"--load {args.load}: expected 0-64 busy processes")
    paths = estop.PATHS if args.path == "both" else (args.path,)
    with cpu_hogs(args.load):
        res = estop.run(config, paths=paths, trials=args.trials,
                        progress=lambda msg: print(f"bench estop: {msg}", file=sys.stderr))
    res["cpu_hogs"] = args.load
    print(json.dumps(res, indent=2) if args.json else estop.format_table(res))
    return 0
