"""``robot-app eval lasp-diagnose``: top-1 / top-3 of a diagnoser on failure observations written in other
words than the domain's predicate names (core.lasp.diagnose_eval). See docs/lasp.md."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from robot_app.errors import UsageError

LASP_DATA = Path(__file__).resolve().parents[1] / "data" / "lasp"
DEVSET = LASP_DATA / "diagnose_devset.json"


def _diagnoser_choices() -> tuple:
    """The values ``[lasp] diagnoser`` accepts (one list for the config file and the command line)."""
    from robot_app.config import LaspConfig

    return next(f.metadata["choices"] for f in dataclasses.fields(LaspConfig) if f.name == "diagnoser")


def register(sub, groups) -> None:
    from robot_app.cli import JSON_HELP

    e = groups["eval"].add_parser(
        "lasp-diagnose", help="top-1/top-3 of the diagnoser on failure observations in other words "
        "(kitchen + Jackal development set)")
    e.add_argument("--devset", default=str(DEVSET), metavar="JSON",
                   help="development set (default: the shipped one, %(default)s)")
    e.add_argument("--cases-root", default=str(LASP_DATA), metavar="DIR",
                   help="folder holding one case directory per domain the development set names")
    e.add_argument("--diagnoser", choices=_diagnoser_choices(), default=None,
                   help="default: [lasp] diagnoser")
    e.add_argument("--misses", type=int, default=10, help="how many misses (outside the top 3) to list")
    e.add_argument("--json", action="store_true", help=JSON_HELP)
    e.set_defaults(func=_eval_diagnose)


def _eval_diagnose(args, config) -> int:
    from core.lasp.benchmark import CaseError, load_cases
    from core.lasp.diagnose_eval import DevSetError, capture_failures, evaluate, format_report, load_devset
    from robot_app.cli.lasp_cmd import make_diagnoser
    from robot_app.jobs.lasp_setup import loop_config

    try:
        devset = load_devset(args.devset)
    except DevSetError as exc:
        raise UsageError(str(exc)) from exc
    root = Path(args.cases_root)
    domains = sorted({f.domain for f in devset})
    try:
        cases = {d: load_cases(root / d) for d in domains}
    except CaseError as exc:
        raise UsageError(f"--devset {args.devset} names domain(s) {', '.join(domains)}: {exc}") from exc
    # the diagnoser first: a missing or broken model is reported before minutes of planning
    factory, desc, close = make_diagnoser(config, args.diagnoser)
    step = [0]

    def progress(done: int, total: int) -> None:
        if done * 10 // total != step[0] or done == total:
            step[0] = done * 10 // total
            print(f"eval lasp-diagnose: {done}/{total} diagnoses", file=sys.stderr)

    try:
        print(f"eval lasp-diagnose: reaching the failures of {sum(len(c) for c in cases.values())} cases",
              file=sys.stderr)
        captured = capture_failures(cases, config=loop_config(config))
        res = evaluate(devset, captured, factory, progress=progress)
    except DevSetError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        close()
    res["diagnoser"] = desc
    res["devset"] = str(args.devset)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    n_obs = sum(len(f.observations) for f in devset)
    print(f"diagnoser: {desc}")
    print(f"development set: {n_obs} observations of {len(devset)} failure kinds, {res['overall']['n']} diagnoses "
          f"(an observation is diagnosed at every case where its failure occurs)\n")
    print(format_report(res, misses=args.misses))
    return 0
