"""``robot-app kernels build|info``: the walk-search kernels compiled ahead of time (core._search_aot).

The service plans with the compiled kernels in ``[paths] kernels_dir`` when they are current and with
numba's JIT kernels otherwise (same walks; the JIT costs about 100 MiB of the service's RSS and its load at start).
``build`` runs on the robot itself (numba, a C compiler and the Python headers); the systemd unit runs
``kernels build --if-stale`` before each start, so an upgrade of the product, numba, numpy or Python
rebuilds them once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from robot_app.cli import JSON_HELP
from robot_app.errors import UsageError


def register(sub, groups) -> None:
    g = groups["kernels"]
    b = g.add_parser("build", help="compile the walk-search kernels for this CPU (5-30 s; numba and a C compiler)")
    b.add_argument("--dir", default=None, metavar="DIR", help="where to write them (default: [paths] kernels_dir)")
    b.add_argument("--if-stale", action="store_true",
                   help="do nothing when the kernels there are current (the systemd unit's ExecStartPre)")
    b.add_argument("--json", action="store_true", help=JSON_HELP)
    b.set_defaults(func=_build)

    i = g.add_parser("info", help="whether the compiled kernels are there and current, and what they were built with")
    i.add_argument("--dir", default=None, metavar="DIR", help="folder to look in (default: [paths] kernels_dir)")
    i.add_argument("--json", action="store_true", help=JSON_HELP)
    i.set_defaults(func=_info)

    m = groups["bench"].add_parser("service-memory", help="the idle service's RSS with the compiled and with the JIT "
                                                          "walk-search kernels (sim devices in a child process)")
    m.add_argument("--kernels", choices=("both", "compiled", "jit"), default="both")
    m.add_argument("--idle-s", type=float, default=10.0, help="seconds of idle sampling per run (default %(default)s)")
    m.add_argument("--json", action="store_true", help=JSON_HELP)
    m.set_defaults(func=_bench_memory)


def _bench_memory(args, config) -> int:
    from robot_app.bench import service_memory as sm

    if args.idle_s <= 0:
        raise UsageError(f"--idle-s: must be > 0, got {args.idle_s}")
    models = sm.default_models_dir()  # the idle service opens no model (first use does): any folder measures the same
    backends = ("compiled", "jit") if args.kernels == "both" else (args.kernels,)
    kdir = config.paths.kernels_dir if Path(config.paths.kernels_dir).is_dir() else None
    try:
        res = sm.run(models, backends=backends, kernels_dir=kdir, idle_s=args.idle_s,
                     progress=lambda msg: print(f"bench service-memory: {msg}", file=sys.stderr))
    except sm.BenchError as exc:
        print(f"bench service-memory: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(res, indent=2) if args.json else sm.format_table(res))
    return 0


def _dir(args, config) -> str:
    if args.dir is not None and not args.dir.strip():
        raise UsageError("--dir: empty path (leave --dir out for [paths] kernels_dir)")
    return args.dir if args.dir is not None else config.paths.kernels_dir


def _build(args, config) -> int:
    from core import _search_aot

    d = _dir(args, config)
    problem = _search_aot.stamp_problem(d)
    if args.if_stale and problem is None:
        _search_aot.sweep_stale(d)  # what a killed build left, when no build is running
        out = {"built": False, "dir": d, "reason": "current"}
        print(json.dumps(out) if args.json else f"kernels build: the compiled kernels in {d} are current")
        return 0
    if not args.json:
        print(f"kernels build: compiling the walk-search kernels into {d} ({problem or 'rebuild asked for'}) ...",
              file=sys.stderr)
    try:
        stamp, built = _search_aot.build(d, only_if_stale=args.if_stale)
    except _search_aot.KernelBuildError as exc:
        print(f"kernels build: {exc}; the service plans with numba's JIT kernels meanwhile", file=sys.stderr)
        return 1
    if not built:
        out = {"built": False, "dir": d, "reason": "current"}
        print(json.dumps(out) if args.json else f"kernels build: another build made the kernels in {d} current")
        return 0
    out = {"built": True, "dir": d, "file": stamp["file"], "build_s": stamp["build_s"], "numba": stamp["numba"]}
    print(json.dumps(out) if args.json else
          f"kernels build: wrote {d}/{stamp['file']} in {stamp['build_s']:.1f} s (numba {stamp['numba']})")
    return 0


def _info(args, config) -> int:
    from core import _search_aot

    d = _dir(args, config)
    problem = _search_aot.stamp_problem(d)
    out = {"dir": d, "current": problem is None, "problem": problem}
    if problem is None:
        stamp = _search_aot.read_stamp(d)
        out.update({k: stamp.get(k) for k in ("file", "numba", "numpy", "python", "machine", "built_unix_s",
                                               "build_s")})
        out["kernels"] = sorted({e["kernel"] for e in stamp["exports"].values()})
    if args.json:
        print(json.dumps(out, indent=2))
    elif problem is None:
        import time

        t = out["built_unix_s"]
        built = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "?"
        print(f"compiled walk-search kernels in {d}: current (built {built} with numba {out['numba']}, "
              f"numpy {out['numpy']}, {out['python']} on {out['machine']}); the service plans with them")
    else:
        print(f"compiled walk-search kernels in {d}: not usable: {problem}; the service plans with numba's JIT "
              "kernels (robot-app kernels build)")
    return 0 if problem is None else 1
