"""How well a diagnoser names the missing precondition from observations in other words.

The LASP benchmark (:mod:`core.lasp.benchmark`) scores whole runs whose observations come from the
environment's templates, which often reuse the words of the predicate names. This evaluation isolates
the diagnosis step: every failure along the ideal path of each case is reached once (the loop driven
by an oracle that names the true cause, so later failures are reached too), then each observation of
a development set written *without* the domain's predicate and function words replaces the
environment's wording, and the diagnoser's ranked candidates are searched for the true missing
precondition. The figures are top-1 and top-3 accuracy (LASP, Chen et al., RSS 2024, Sec. IV-B:
the diagnoser proposes a ranked list of reasons that the loop tries in turn, so the rank of the right
one is the number of failed executions it costs).

Development-set file (JSON)::

    {"failures": [{"domain": "kitchen", "action": "pick",
                   "missing": "(<= (weight ?o) (lift-capacity ?r))",
                   "observations": ["The arm stalled; the {o} never left the {l}.", ...]}, ...]}

``domain`` names a case directory (``cases.json`` there), ``missing`` is the precondition as the
complete domain writes it, placeholders are the action's parameter names.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.lasp.benchmark import TASK_TEXT
from core.lasp.diagnosis import Candidate, DiagnosisContext, Failure, OfflineDiagnoser
from core.lasp.loop import LaspRun, LoopConfig
from core.lasp.sexpr import PddlSyntaxError, fluent_names, parse_sexpr, to_text

# Words that carry no content (articles, pronouns, prepositions, auxiliaries) for the "other words"
# check; a predicate name's parts like "is", "in", "on", "at" are among them.
STOPWORDS = frozenset("""
a an the and or not no nor but so of to in on at by for from with without into onto off over under up
down out is are was were be been being has have had do does did it its it's this that these those
there here than then as if while when can could would will should must may might also still already
just only very too more most what which who whom whose where why how all any some none each every
""".split())


class DevSetError(ValueError):
    """The development-set file is missing, malformed or names what its domain lacks."""


@dataclass(frozen=True)
class DevFailure:
    """One labelled failure kind: ``missing`` (canonical PDDL text) is what ``action`` lacked."""

    domain: str
    action: str
    missing: str
    observations: tuple

    @property
    def key(self) -> tuple:
        return (self.domain, self.action, self.missing)


@dataclass
class CapturedFailure:
    """A failure reached on a case's ideal path: the diagnoser's context then, and the true cause."""

    domain: str
    case_id: str
    ctx: DiagnosisContext
    missing: str

    @property
    def key(self) -> tuple:
        return (self.domain, self.ctx.failure.step.name, self.missing)


def canonical(pddl: str) -> str:
    """One spelling of a PDDL condition (whitespace and case normalised)."""
    return to_text(parse_sexpr(pddl.lower()))


def load_devset(path: str | Path) -> list:
    """Read a development set (module doc).

    Raises
    ------
    DevSetError
        Unreadable file, missing fields, an empty observation list, a ``missing`` that is not PDDL,
        or a failure listed twice.
    """
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
        rows = raw["failures"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DevSetError(f"{p}: cannot read the development set: {exc}") from exc
    out, seen = [], set()
    for i, r in enumerate(rows):
        where = f"{p}: failures[{i}]"
        try:
            obs = tuple(str(o) for o in r["observations"])
            f = DevFailure(str(r["domain"]), str(r["action"]), canonical(str(r["missing"])), obs)
        except (KeyError, TypeError) as exc:
            raise DevSetError(f"{where}: needs domain, action, missing and observations ({exc})") from exc
        except PddlSyntaxError as exc:
            raise DevSetError(f"{where}: missing is not a PDDL condition: {exc}") from exc
        if not obs or any(not o.strip() for o in obs):
            raise DevSetError(f"{where}: observations must be a non-empty list of texts")
        if f.key in seen:
            raise DevSetError(f"{where}: {f.action} {f.missing} in {f.domain} is listed twice")
        seen.add(f.key)
        out.append(f)
    return out


def _stem(word: str) -> str:
    for suf in ("ing", "ed", "es", "s", "er"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            return word[: -len(suf)]
    return word


def content_words(text: str) -> set:
    """Lower-case stems of the words of ``text`` that are not :data:`STOPWORDS`."""
    return {_stem(w) for w in re.findall(r"[a-z]+", text.lower()) if w not in STOPWORDS}


def shared_words(text: str, names) -> set:
    """Stems of the content words of ``text`` that match a word of the hyphenated ``names`` (same stem, or one stem a
    prefix of the other when both have at least 4 letters: "heater" shares "heat")."""
    name_words = set()
    for n in names:
        name_words |= content_words(n.replace("-", " "))
    hits = set()
    for w in content_words(text):
        for n in name_words:
            if w == n or (min(len(w), len(n)) >= 4 and (w.startswith(n) or n.startswith(w))):
                hits.add(w)
    return hits


class _OracleDiagnoser:
    """Names the true cause (the environment's failed condition) as the only reason, so the loop
    follows the ideal path of a case; objects are ranked by the offline diagnoser."""

    name = "oracle"
    llm_calls = 0

    def __init__(self, env, on_failure: Callable):
        self._env = env
        self._on_failure = on_failure
        self._offline = OfflineDiagnoser()

    def diagnose(self, ctx: DiagnosisContext) -> list:
        cause = self._env.last_outcome.failed_condition
        known = {f.name for f in ctx.task.problem.fluents}
        new = tuple(sorted(n for n in fluent_names(parse_sexpr(cause)) if n not in known))
        self._on_failure(ctx, cause)
        return [Candidate("precondition", cause, ctx.failure.step.name, new_properties=new)]

    def rank_objects(self, ctx: DiagnosisContext, cause: Candidate) -> list:
        return self._offline.rank_objects(ctx, cause)


class _RecordingEnv:
    """The case's environment, remembering the last outcome (the oracle reads the true cause there)."""

    def __init__(self, env):
        self._env = env
        self.last_outcome = None

    def execute(self, step):
        self.last_outcome = self._env.execute(step)
        return self.last_outcome

    def snapshot(self):
        """The environment frozen as it is now (its state is replaced, never mutated, on execution)."""
        return copy.copy(self._env)

    def __getattr__(self, name):
        return getattr(self._env, name)


def capture_failures(cases_by_domain: dict, *, config: LoopConfig | None = None) -> list:
    """Reach every failure on the ideal path of each case.

    Parameters
    ----------
    cases_by_domain : dict
        ``{domain: {case_id: Case}}`` (:func:`core.lasp.benchmark.load_cases` per directory).

    Returns
    -------
    list of CapturedFailure, in case order; each context holds the robot's knowledge, belief and
    history at that failure and a frozen copy of the environment as its sensing.
    """
    out = []
    for domain, cases in cases_by_domain.items():
        for cid in sorted(cases, key=lambda c: (len(c), c)):
            case = cases[cid]
            env = _RecordingEnv(case.environment(0))

            def record(ctx, cause, domain=domain, cid=cid, env=env):
                frozen = DiagnosisContext(ctx.task.copy(), ctx.state, ctx.failure, env.snapshot(),
                                          list(ctx.history), ctx.goal_text)
                out.append(CapturedFailure(domain, cid, frozen, canonical(cause)))

            LaspRun(case.robot_task(), env, _OracleDiagnoser(env, record), config,
                    goal_text=TASK_TEXT.get(case.task_name, "")).run()
    return out


def _fill(text: str, ctx: DiagnosisContext) -> str:
    step = ctx.failure.step
    params = list(ctx.task.binding(step.name, step.args))
    try:
        return text.format(**dict(zip(params, step.args)))
    except (KeyError, IndexError) as exc:
        raise DevSetError(f"observation {text!r}: placeholder {exc} is not a parameter of {step.name} "
                          f"({', '.join(params)})") from exc


def rank_of(ranked: list, missing: str) -> int | None:
    """1-based rank of the candidate equal to ``missing`` (canonical text), None when absent."""
    for i, c in enumerate(ranked, 1):
        try:
            if canonical(c.pddl) == missing:
                return i
        except PddlSyntaxError:
            continue
    return None


def evaluate(devset: list, captured: list, make_diagnoser: Callable, *, progress=None) -> dict:
    """Diagnose every (captured failure, observation) pair of the same action and cause.

    Parameters
    ----------
    make_diagnoser : callable
        ``make_diagnoser() -> Diagnoser``, called once per case.
    progress : callable, optional
        ``progress(done, total)`` after each diagnosis.

    Returns
    -------
    dict
        ``{"overall": {"n", "top1", "top3", "mean_rank"}, "cases": {"domain/case": {...}},
        "failures": {"action missing": {...}}, "rows": [...], "uncovered": [...]}``; accuracies are
        fractions in [0, 1]; a cause outside the returned candidates counts as a miss (rank None).

    Raises
    ------
    DevSetError
        A development-set failure that no case reaches (its label would never be tested), or an
        observation with a placeholder its action lacks.
    """
    by_key = {}
    for c in captured:
        by_key.setdefault(c.key, []).append(c)
    uncovered = [f"{f.domain}: {f.action} {f.missing}" for f in devset if f.key not in by_key]
    if uncovered:
        raise DevSetError("no case reaches these labelled failures: " + "; ".join(uncovered))
    total = sum(len(f.observations) * len(by_key[f.key]) for f in devset)
    rows, done, diagnosers = [], 0, {}
    for f in devset:
        for cap in by_key[f.key]:
            case = f"{cap.domain}/{cap.case_id}"
            diag = diagnosers.setdefault(case, make_diagnoser())
            for obs in f.observations:
                text = _fill(obs, cap.ctx)
                ctx = copy.copy(cap.ctx)
                ctx.failure = Failure(cap.ctx.failure.step, text)
                ctx.history = list(cap.ctx.history)
                ranked = diag.diagnose(ctx)
                r = rank_of(ranked, f.missing)
                rows.append({"case": case, "action": str(cap.ctx.failure.step), "missing": f.missing,
                             "observation": text, "rank": r,
                             "top": [c.pddl for c in ranked[:3]]})
                done += 1
                if progress:
                    progress(done, total)
    def case_order(name: str) -> tuple:
        domain, cid = name.split("/", 1)
        return (domain, int(cid) if cid.isdigit() else 0, cid)

    cases = _group(rows, lambda r: r["case"])
    return {"overall": _summary(rows), "cases": {k: cases[k] for k in sorted(cases, key=case_order)},
            "failures": _group(rows, lambda r: f"{r['action'].split()[0][1:]} {r['missing']}"),
            "rows": rows, "llm_calls": sum(getattr(d, "llm_calls", 0) for d in diagnosers.values())}


def _summary(rows: list) -> dict:
    n = len(rows)
    ranks = [r["rank"] for r in rows]
    hit = lambda k: sum(1 for x in ranks if x is not None and x <= k) / n if n else 0.0  # noqa: E731
    found = [x for x in ranks if x is not None]
    return {"n": n, "top1": hit(1), "top3": hit(3),
            "mean_rank": sum(found) / len(found) if found else None, "not_found": n - len(found)}


def _group(rows: list, key: Callable) -> dict:
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return {k: _summary(v) for k, v in groups.items()}


def format_report(res: dict, *, misses: int = 10) -> str:
    """Text tables of :func:`evaluate`: per case, per failure kind, overall, and the first misses."""
    def line(name, s):
        mr = f"{s['mean_rank']:.2f}" if s["mean_rank"] is not None else "-"
        return f"{name:<58} {s['n']:>4} {s['top1']:>6.0%} {s['top3']:>6.0%} {mr:>9}"

    head = f"{'':<58} {'n':>4} {'top-1':>6} {'top-3':>6} {'mean rank':>9}"
    out = [head]
    out += [line(k, s) for k, s in res["cases"].items()]
    out += ["", head]
    out += [line(k, s) for k, s in res["failures"].items()]
    out += ["", line("all", res["overall"])]
    missed = [r for r in res["rows"] if r["rank"] is None or r["rank"] > 3]
    if missed:
        out += ["", f"outside the top 3 ({len(missed)}):"]
        for r in missed[:misses]:
            out.append(f"  {r['case']} {r['action']}: rank {r['rank'] or '-'}  \"{r['observation']}\"")
            out.append(f"      top: {', '.join(r['top'])}")
    return "\n".join(out)
