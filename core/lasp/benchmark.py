"""The LASP benchmark: the paper's nine kitchen cases (Chen et al., RSS 2024, Tables I-III) run
through :func:`core.lasp.loop.run_lasp` with a chosen diagnoser.

A case directory holds ``cases.json`` (which files make each case), the oracle ``domain.pddl``,
the environment problems, the robot's incomplete domain/problem per case and ``observations.json``
(the environment's wording). Runs differ only by the environment's seed, i.e. by the wording of
its observations.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.lasp.diagnosis import OfflineDiagnoser
from core.lasp.environment import SimulatedEnvironment
from core.lasp.loop import LaspRun, LoopConfig, run_lasp
from core.lasp.model import Task
from core.lasp.planner import solve

log = logging.getLogger(__name__)

# Published LASP (GPT-4) success rates per case, Table II of the paper; and per task (Table III).
PAPER_CASE_SUCCESS = {"1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0, "5": 0.8, "6": 1.0, "7": 1.0,
                      "8": 1.0, "9": 0.6}
PAPER_TASK_SUCCESS = {"serve-fruit": 1.0, "store-fruit": 1.0, "heat-sandwich": 1.0,
                      "heat-milk": 0.85}
TASK_TEXT = {"serve-fruit": "Place a fruit on the plate.",
             "store-fruit": "Store an apple in a closed fridge.",
             "heat-sandwich": "Heat the sandwich and place it on a plate.",
             "heat-milk": "Heat the milk and place it on the table."}


class CaseError(ValueError):
    """A case directory or manifest is missing or inconsistent."""


@dataclass(frozen=True)
class Case:
    """One benchmark case: the robot's task, the environment's oracle task, wording, task name."""

    case_id: str
    task_name: str
    robot_domain: str
    robot_problem: str
    env_domain: str
    env_problem: str
    templates: dict

    def robot_task(self) -> Task:
        return Task.from_pddl(self.robot_domain, self.robot_problem, where=f"case {self.case_id}")

    def environment(self, seed: int) -> SimulatedEnvironment:
        oracle = Task.from_pddl(self.env_domain, self.env_problem, where=f"case {self.case_id} env")
        return SimulatedEnvironment(oracle, templates=self.templates, seed=seed)


def load_cases(directory: str | Path) -> dict:
    """Read ``cases.json`` and the files it names.

    Raises
    ------
    CaseError
        When the manifest or a file it names cannot be read.
    """
    d = Path(directory)
    try:
        manifest = json.loads((d / "cases.json").read_text(encoding="utf-8"))
        env_domain = (d / manifest["domain"]).read_text(encoding="utf-8")
        tp = d / "observations.json"
        templates = json.loads(tp.read_text(encoding="utf-8")) if tp.exists() else {}
        out = {}
        for cid, c in manifest["cases"].items():
            out[cid] = Case(cid, c["task"], (d / c["domain"]).read_text(encoding="utf-8"),
                            (d / c["problem"]).read_text(encoding="utf-8"), env_domain,
                            (d / c["env_problem"]).read_text(encoding="utf-8"), templates)
    except (OSError, KeyError, json.JSONDecodeError) as exc:
        raise CaseError(f"{d}: cannot load the LASP cases: {exc}") from exc
    return out


def evaluate(cases: dict, make_diagnoser: Callable, *, runs: int = 5,
             config: LoopConfig | None = None, case_ids=None, progress=None) -> dict:
    """Run every case ``runs`` times (seeds 0..runs-1) and summarise.

    Parameters
    ----------
    make_diagnoser : callable
        ``make_diagnoser() -> Diagnoser``, called once per run (fresh LLM-call counts).
    progress : callable, optional
        ``progress(case_id, seed, result)`` after each run.

    Returns
    -------
    dict
        ``{"cases": {id: {...}}, "tasks": {name: {...}}, "runs": runs, "paper": {...}}``; per case:
        success_rate, failed_executions (mean per run), replans, llm_calls, planner_calls (means),
        wall_s (mean), meets_paper.
    """
    config = config or LoopConfig()
    per_case, per_task = {}, {}
    for cid in (case_ids or sorted(cases, key=int)):
        case = cases[cid]
        rows = []
        for seed in range(runs):
            t0 = time.perf_counter()
            res = run_lasp(case.robot_task(), case.environment(seed), make_diagnoser(), config,
                           goal_text=TASK_TEXT.get(case.task_name, ""))
            rows.append((res, time.perf_counter() - t0))
            if progress:
                progress(cid, seed, res)
        n = len(rows)
        mean = lambda f: sum(f(r) for r, _ in rows) / n  # noqa: E731
        rate = mean(lambda r: 1.0 if r.success else 0.0)
        # the paper's figure only for the paper's tasks (the Jackal job's case "1" is not kitchen case 1)
        paper = PAPER_CASE_SUCCESS.get(cid) if case.task_name in PAPER_TASK_SUCCESS else None
        per_case[cid] = {"task": case.task_name, "success_rate": rate,
                         "failed_executions": mean(lambda r: r.failed_executions),
                         "max_failed_executions": max(r.failed_executions for r, _ in rows),
                         "replans": mean(lambda r: r.replans), "llm_calls": mean(lambda r: r.llm_calls),
                         "planner_calls": mean(lambda r: r.planner_calls),
                         "wall_s": sum(w for _, w in rows) / n,
                         "paper_success_rate": paper,
                         "meets_paper": rate >= (paper or 0.0) - 1e-9,
                         "failures": [r.reason for r, _ in rows if not r.success]}
        per_task.setdefault(case.task_name, []).append(rate)
    tasks = {t: {"success_rate": sum(v) / len(v), "paper_success_rate": PAPER_TASK_SUCCESS.get(t)}
             for t, v in per_task.items()}
    return {"runs": runs, "cases": per_case, "tasks": tasks}


def run_bench(cases: dict, *, repeats: int = 5, config: LoopConfig | None = None,
              case_ids=("2", "3", "5")) -> dict:
    """Time the parts of a replanning round on real failures of the given cases.

    For each case: parse the robot's PDDL, plan, execute until the first failure, then time
    ``repeats`` replanning rounds from that failure: diagnosis (offline, lexical similarity) plus
    the refining step of the first-ranked reason (knowledge edit, planner call(s), object expansion
    when needed). Planner-only time is reported apart.

    Returns
    -------
    dict
        ``{case_id: {"parse_ms", "plan_ms", "diagnose_ms", "round_ms", "round_planner_calls"}}``
        with medians over the repeats (milliseconds).
    """
    import statistics

    config = config or LoopConfig()
    out = {}
    for cid in case_ids:
        case = cases[cid]
        t0 = time.perf_counter()
        task = case.robot_task()
        parse_ms = (time.perf_counter() - t0) * 1000
        plan_ms = []
        for _ in range(repeats):
            plan_ms.append(solve(task, engine=config.engine, timeout_s=config.planner_timeout_s).wall_s * 1000)
        run = LaspRun(task, case.environment(0), OfflineDiagnoser(), config)
        plan = run._plan(run.knowledge, "bench")
        error = run._execute(plan)
        if error is None:
            out[cid] = {"parse_ms": parse_ms, "plan_ms": statistics.median(plan_ms),
                        "note": "the first plan did not fail"}
            continue
        diag_ms, round_ms, calls = [], [], []
        for _ in range(repeats):
            t1 = time.perf_counter()
            ctx = run._context(error)
            reasons = run.diagnoser.diagnose(ctx)
            t2 = time.perf_counter()
            before = run.planner_calls
            refined = run._refining_step(reasons[0], ctx)
            t3 = time.perf_counter()
            diag_ms.append((t2 - t1) * 1000)
            round_ms.append((t3 - t1) * 1000)
            calls.append(run.planner_calls - before)
            if refined is None:
                break
        out[cid] = {"task": case.task_name, "failed_action": error.key,
                    "parse_ms": round(parse_ms, 1), "plan_ms": round(statistics.median(plan_ms), 1),
                    "diagnose_ms": round(statistics.median(diag_ms), 1),
                    "round_ms": round(statistics.median(round_ms), 1),
                    "round_planner_calls": int(statistics.median(calls)),
                    "candidates_ranked": len(reasons)}
    return out


def format_bench(res: dict) -> str:
    """A text table of :func:`run_bench` results."""
    lines = [f"{'case':>4} {'parse ms':>9} {'plan ms':>8} {'diagnose ms':>11} {'round ms':>9} "
             f"{'planner calls':>13}  failed action"]
    for cid, r in res.items():
        if "round_ms" not in r:
            lines.append(f"{cid:>4} {r['parse_ms']:>9.1f} {r['plan_ms']:>8.1f}  ({r['note']})")
            continue
        lines.append(f"{cid:>4} {r['parse_ms']:>9.1f} {r['plan_ms']:>8.1f} {r['diagnose_ms']:>11.1f} "
                     f"{r['round_ms']:>9.1f} {r['round_planner_calls']:>13}  {r['failed_action']}")
    lines.append("round = diagnosis + refining step (knowledge edit, planner calls, object expansion); "
                 "medians")
    return "\n".join(lines)
