"""``robot-app lasp run|diagnose``, ``eval lasp`` and ``bench lasp``: LASP task planning with
incomplete PDDL knowledge (Chen et al., RSS 2024). See docs/lasp.md."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from robot_app.errors import UsageError
from robot_app.jobs.lasp_setup import (
    DIAGNOSERS,
    LLM_DIAGNOSERS,
    build_diagnoser,
    loop_config,
    make_similarity,
    resolve_diagnoser,
)

log = logging.getLogger(__name__)

KITCHEN_DIR = Path(__file__).resolve().parents[1] / "data" / "lasp" / "kitchen"
JACKAL_DIR = Path(__file__).resolve().parents[1] / "data" / "lasp" / "jackal"


def register(sub, groups) -> None:
    lasp = groups["lasp"]
    p = lasp.add_parser("run", help="plan, execute in the simulated environment, diagnose failures, replan")
    _task_args(p)
    p.add_argument("--env-domain", required=True, metavar="PDDL",
                   help="the environment's complete (oracle) domain")
    p.add_argument("--env-problem", metavar="PDDL",
                   help="the environment's objects and true initial state (default: --problem)")
    p.add_argument("--observations", metavar="JSON",
                   help="observation wordings of the environment (default: next to --env-domain if present)")
    p.add_argument("--seed", type=int, default=0, help="seed of the environment's wording")
    p.add_argument("--knowledge", metavar="FILE",
                   help="learned-knowledge file to load before and update after the run "
                        "(default: [lasp] knowledge_file)")
    p.set_defaults(func=_run)

    d = lasp.add_parser("diagnose", help="rank explanations of a failed action without executing anything")
    _task_args(d)
    d.add_argument("--failed-action", required=True, metavar='"(ACTION ARGS...)"')
    d.add_argument("--observation", required=True, metavar="TEXT", help="what went wrong, in words")
    d.add_argument("--history", action="append", default=[], metavar='"(ACTION ARGS...)"',
                   help="actions that succeeded before the failure, in order (repeatable)")
    d.add_argument("--env-domain", metavar="PDDL", help="domain of the properties the world can report")
    d.add_argument("--env-problem", metavar="PDDL", help="objects and values the world reports")
    d.add_argument("--top", type=int, default=10, help="how many candidates to show")
    d.set_defaults(func=_diagnose)

    e = groups["eval"].add_parser("lasp", help="the LASP paper's nine kitchen cases: success per case and task")
    e.add_argument("--runs", type=int, default=5, help="runs per case (seeds 0..runs-1, wording only)")
    e.add_argument("--cases", default="", help="comma-separated case ids (default: all nine)")
    e.add_argument("--cases-dir", default=str(KITCHEN_DIR), help="directory with cases.json")
    e.add_argument("--diagnoser", choices=DIAGNOSERS, default=None)
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_eval)

    b = groups["bench"].add_parser("lasp", help="time of one replanning round (diagnose + refine + plan)")
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench)


def _task_args(p) -> None:
    p.add_argument("--domain", required=True, metavar="PDDL", help="the robot's (incomplete) domain")
    p.add_argument("--problem", required=True, metavar="PDDL", help="the robot's problem")
    p.add_argument("--diagnoser", choices=DIAGNOSERS, default=None,
                   help="default: [lasp] diagnoser")
    p.add_argument("--json", action="store_true", help="machine-readable output")


# ----------------------------------------------------------------------------- helpers
def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc


def _task(domain: str, problem: str):
    from core.lasp.model import PddlError, Task

    try:
        return Task.from_pddl(_read(domain, "--domain"), _read(problem, "--problem"),
                              where=f"{domain} + {problem}")
    except PddlError as exc:
        raise UsageError(str(exc)) from exc


def make_diagnoser(config, choice: str | None):
    """Build the diagnoser ``choice`` (default ``[lasp] diagnoser``); returns ``(factory, description, closer)``.

    The choices are those of :func:`robot_app.jobs.lasp_setup.build_diagnoser`; ``auto`` is the
    constrained ``llm-pmi`` when ``<models_dir>/<llm.model_file>`` exists, else ``offline``. An LLM choice
    opens the model with the ``[llm]`` settings (context, threads, worker process) and raises
    :class:`UsageError` when it cannot be opened; ``auto`` then falls back to ``offline`` with a warning.
    """
    from robot_app.route.landmark_parsing import llm_model_path, open_configured_llm

    choice = choice or config.lasp.diagnoser
    sim, sim_name = make_similarity(config)
    llm_path = llm_model_path(config)
    resolved = resolve_diagnoser(choice, llm_path.is_file())
    if resolved in LLM_DIAGNOSERS:
        from models.llm import LlmError

        try:
            llm = open_configured_llm(config)
        except LlmError as exc:
            if choice != "auto":
                raise UsageError(f"--diagnoser {choice}: cannot open {llm_path}: {exc}") from exc
            log.warning("LASP: LLM unavailable (%s); using the offline diagnoser", exc)
        else:
            return ((lambda: build_diagnoser(config, resolved, sim, llm)),
                    f"{resolved} ({llm_path.name}), similarity {sim_name}", llm.close)
    elif choice == "auto":
        log.info("LASP: no LLM at %s; using the offline diagnoser", llm_path)
    return (lambda: build_diagnoser(config, "offline", sim)), f"offline, similarity {sim_name}", (lambda: None)


def _load_templates(env_domain: str, explicit: str | None) -> dict:
    path = Path(explicit) if explicit else Path(env_domain).with_name("observations.json")
    if not path.exists():
        if explicit:
            raise UsageError(f"--observations {explicit}: no such file")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable observations file: {exc}") from exc


# ----------------------------------------------------------------------------- lasp run
def _run(args, config) -> int:
    from core.lasp.environment import SimulatedEnvironment
    from core.lasp.knowledge import apply_edits, parse_pddl_diff
    from core.lasp.loop import run_lasp
    from core.lasp.model import PddlError, Task
    from core.lasp.sexpr import PddlSyntaxError

    task = _task(args.domain, args.problem)
    env_problem = args.env_problem or args.problem
    try:
        oracle = Task.from_pddl(_read(args.env_domain, "--env-domain"),
                                _read(env_problem, "--env-problem"), where=args.env_domain)
    except PddlError as exc:
        raise UsageError(str(exc)) from exc
    env = SimulatedEnvironment(oracle, templates=_load_templates(args.env_domain, args.observations),
                               seed=args.seed)
    kfile = args.knowledge or config.lasp.knowledge_file
    prior = []
    if kfile and Path(kfile).exists():
        try:
            prior = apply_edits(task, parse_pddl_diff(_read(kfile, "knowledge file")), sensing=env)
        except PddlSyntaxError as exc:
            raise UsageError(f"knowledge file {kfile}: {exc}") from exc
    factory, desc, close = make_diagnoser(config, args.diagnoser)
    try:
        res = run_lasp(task, env, factory(), loop_config(config))
    finally:
        close()
    if kfile and res.learned:
        from core.lasp.knowledge import to_pddl_diff

        Path(kfile).parent.mkdir(parents=True, exist_ok=True)
        Path(kfile).write_text(to_pddl_diff(prior + res.learned), encoding="utf-8")
    out = res.as_dict()
    out["diagnoser"] = desc
    out["prior_knowledge"] = [e.as_dict() for e in prior]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_run(out)
    return 0 if res.success else 1


def _print_run(out: dict) -> None:
    print(f"diagnoser: {out['diagnoser']}")
    for t in out["trace"]:
        k = t["kind"]
        if k == "plan":
            print(f"plan ({t['why']}): {t['status']} in {t['planner_s'] * 1000:.0f} ms"
                  + (f", {len(t['plan'])} steps" if t["plan"] else ""))
        elif k == "execute":
            print(f"  {'ok  ' if t['ok'] else 'FAIL'} {t['step']}" +
                  ("" if t["ok"] else f"\n       observed: {t['observation']}"))
        elif k == "diagnose":
            print(f"diagnose {t['error']}: " + ", ".join(
                f"{c['pddl']} ({c['score']:.2f})" for c in t["candidates"][:4]))
        elif k == "refine":
            print(f"refine: {t['candidate']['action']} += {t['candidate']['pddl']}")
        elif k == "expand":
            print(f"expand: object {t['object']['pddl']}")
        elif k == "same-error":
            print(f"same error again: dropping {t['dropped']}")
    print(f"{'SUCCESS' if out['success'] else 'FAILED'}: {len(out['plan'])}-step final plan, "
          f"{out['replans']} replans, {out['failed_executions']} failed executions"
          + (f" ({out['reason']})" if out["reason"] else ""))
    for s in out["plan"]:
        print(f"  {s}")
    if out["learned"]:
        print("learned:")
        print("  " + out["knowledge_diff"].strip().replace("\n", "\n  "))


# ----------------------------------------------------------------------------- lasp diagnose
def _diagnose(args, config) -> int:
    from core.lasp.diagnosis import BeliefSensing, DiagnosisContext, Failure
    from core.lasp.environment import SimulatedEnvironment
    from core.lasp.model import GroundAction, PddlError, Task
    from core.lasp.sexpr import PddlSyntaxError

    task = _task(args.domain, args.problem)
    try:
        failed = GroundAction.parse(args.failed_action)
        history = [GroundAction.parse(h) for h in args.history]
        state, hist = task.initial_state(), []
        for h in history:
            hist.append((h, state))
            state = task.apply(h.name, h.args, state)
        task.binding(failed.name, failed.args)
    except (PddlSyntaxError, PddlError) as exc:
        raise UsageError(f"--failed-action/--history: {exc}") from exc
    if args.env_problem and not args.env_domain:
        raise UsageError("--env-problem needs --env-domain")
    if args.env_domain:
        try:
            oracle = Task.from_pddl(_read(args.env_domain, "--env-domain"),
                                    _read(args.env_problem or args.problem, "--env-problem"),
                                    where=args.env_domain)
        except PddlError as exc:
            raise UsageError(str(exc)) from exc
        sensing = SimulatedEnvironment(oracle)
        for h in history:
            sensing.execute(h)
    else:
        sensing = BeliefSensing(task, state)
    factory, desc, close = make_diagnoser(config, args.diagnoser)
    try:
        diag = factory()
        ctx = DiagnosisContext(task, state, Failure(failed, args.observation), sensing, hist)
        cands = diag.diagnose(ctx)[: max(1, args.top)]
        objs = diag.rank_objects(ctx, cands[0]) if cands else []
    finally:
        close()
    out = {"diagnoser": desc, "failed_action": str(failed),
           "candidates": [c.as_dict() for c in cands] + [o.as_dict() for o in objs[: args.top]]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"diagnoser: {desc}\nfailed: {failed}\nobservation: {args.observation}")
    for c in out["candidates"]:
        print(f"{c['score']:.3f}  {c['kind']:<12} {c['pddl']}")
        for r in c["reasons"]:
            print(f"        - {r}")
    return 0


# ----------------------------------------------------------------------------- eval / bench
def _eval(args, config) -> int:
    from core.lasp.benchmark import CaseError, evaluate, load_cases

    if args.runs < 1:
        raise UsageError("--runs must be >= 1")
    try:
        cases = load_cases(args.cases_dir)
    except CaseError as exc:
        raise UsageError(str(exc)) from exc
    ids = [c.strip() for c in args.cases.split(",") if c.strip()] or None
    for c in ids or []:
        if c not in cases:
            raise UsageError(f"--cases: unknown case {c!r} (known: {', '.join(sorted(cases, key=int))})")
    factory, desc, close = make_diagnoser(config, args.diagnoser)
    try:
        res = evaluate(cases, factory, runs=args.runs, config=loop_config(config), case_ids=ids,
                       progress=lambda cid, seed, r: print(
                           f"eval lasp: case {cid} run {seed + 1}/{args.runs}: "
                           f"{'ok' if r.success else 'FAILED'}", file=sys.stderr))
    finally:
        close()
    res["diagnoser"] = desc
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"diagnoser: {desc}; {args.runs} runs per case")
    print(f"{'case':>4}  {'task':<14} {'success':>7} {'paper':>6} {'failed ex.':>10} {'replans':>7} "
          f"{'LLM calls':>9} {'wall s':>7}")
    def pct(x, width):  # the Jackal cases have no paper figure
        return f"{x:>{width}.0%}" if x is not None else f"{'-':>{width}}"

    for cid, c in res["cases"].items():
        print(f"{cid:>4}  {c['task']:<14} {c['success_rate']:>7.0%} {pct(c['paper_success_rate'], 6)} "
              f"{c['failed_executions']:>10.1f} {c['replans']:>7.1f} {c['llm_calls']:>9.1f} "
              f"{c['wall_s']:>7.2f}")
    for t, v in res["tasks"].items():
        print(f"task {t:<14} {v['success_rate']:>7.0%} (paper {pct(v['paper_success_rate'], 0)})")
    return 0


def _bench(args, config) -> int:
    from core.lasp.benchmark import format_bench, load_cases, run_bench

    if args.repeats < 1:
        raise UsageError("--repeats must be >= 1")
    res = run_bench(load_cases(KITCHEN_DIR), repeats=args.repeats, config=loop_config(config))
    print(json.dumps(res, indent=2) if args.json else format_bench(res))
    return 0
