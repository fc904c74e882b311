"""``robot-app bench search``: walk-search benchmark (numba vs. pure Python vs. scipy)."""

from __future__ import annotations

import json
import sys

from robot_app.cli import UsageError


def register(sub, groups) -> None:
    p = groups["bench"].add_parser("search", help="walk search: numba kernel vs. pure Python vs. scipy")
    p.add_argument("--sizes", default="1000,10000,100000", help="comma-separated node counts")
    p.add_argument("--landmarks", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--python-max-nodes", type=int, default=10_000,
                   help="skip the pure-Python reference above this size (it takes minutes)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_bench_search)


def _bench_search(args, config) -> int:
    from robot_app.bench import search

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError as exc:
        raise UsageError(f"--sizes: expected comma-separated integers, got {args.sizes!r}") from exc
    if not sizes or min(sizes) < 2 or args.landmarks < 1 or args.repeats < 1:
        raise UsageError("--sizes must be >= 2 nodes, --landmarks and --repeats >= 1")
    res = search.run(sizes, landmarks=args.landmarks, repeats=args.repeats, python_max_nodes=args.python_max_nodes,
                     progress=lambda msg: print(f"bench search: {msg}", file=sys.stderr))
    print(json.dumps(res, indent=2) if args.json else search.format_table(res))
    return 0
