"""Diagnosis of a failed action: the common interface, candidate generation, and the offline
(no-LLM) diagnoser.

LASP (Chen et al., RSS 2024, Sec. IV-B) asks an LLM for the cause of a failure, a missing
precondition, missing properties and missing objects. The offline diagnoser replaces the LLM with
search: it enumerates candidate preconditions over the failed action's parameters — literals over
the robot's predicates and the properties the environment reports, their negations, and
comparisons ``(<= f g)`` between numeric fluents — keeps those that are FALSE in the state where the
action failed (a missing precondition must be violated there) and that were TRUE whenever the same
action succeeded before (a precondition holds at every successful execution), and ranks them by the
similarity between the failure observation and a description of each candidate. Objects the
environment lists but the robot does not know are ranked the same way.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from core.lasp.environment import SimulatedEnvironment
from core.lasp.model import GroundAction, State, Task, describe_name
from core.lasp.sexpr import build_fnode, fnode_text, parse_sexpr, to_text
from core.lasp.similarity import Similarity, check_similarity_output, lexical_similarity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Failure:
    """An action that failed in execution, with what the robot observed."""

    step: GroundAction
    observation: str

    @property
    def key(self) -> str:
        """Identity of the error: the ground action (the same error = the same action fails again)."""
        return str(self.step)


@dataclass(frozen=True)
class Candidate:
    """One explanation of a failure.

    ``kind`` is ``"precondition"`` (``pddl`` is a condition over the failed action's parameters;
    ``new_properties`` are the environment properties it needs that the robot's domain lacks, whose
    values come from the environment) or ``"object"`` (``pddl`` is an object name to add).
    """

    kind: str
    pddl: str
    action: str = ""
    score: float = 0.0
    new_properties: tuple = ()
    description: str = ""
    reasons: tuple = ()

    def as_dict(self) -> dict:
        return {"kind": self.kind, "pddl": self.pddl, "action": self.action,
                "score": round(float(self.score), 4), "new_properties": list(self.new_properties),
                "description": self.description, "reasons": list(self.reasons)}


class Sensing(Protocol):
    """What a diagnoser may ask the world (a :class:`~core.lasp.environment.SimulatedEnvironment`,
    the robot's perception, or :class:`BeliefSensing`)."""

    def properties(self) -> list: ...
    def value(self, name: str, args) -> object: ...
    def objects(self) -> dict: ...
    def describe_object(self, name: str) -> str: ...


class BeliefSensing:
    """Sensing answered from the robot's own model and belief state (no environment at hand:
    ``robot-app lasp diagnose`` without ``--env-domain``)."""

    def __init__(self, task: Task, state: State):
        self._env = SimulatedEnvironment(task)
        self._env.state = state

    def properties(self) -> list:
        return self._env.properties()

    def value(self, name: str, args) -> object:
        return self._env.value(name, args)

    def objects(self) -> dict:
        return self._env.objects()

    def describe_object(self, name: str) -> str:
        return self._env.describe_object(name)


@dataclass
class DiagnosisContext:
    """Everything a diagnoser may use about one failure.

    ``history`` holds ``(step, belief state before it)`` for every action that succeeded so far;
    ``goal_text`` is the task in words when known (for the LLM prompts).
    """

    task: Task
    state: State
    failure: Failure
    sensing: Sensing
    history: list = field(default_factory=list)
    goal_text: str = ""


class Diagnoser(Protocol):
    """Behind this interface: :class:`OfflineDiagnoser` and the LLM diagnoser (models.lasp_llm)."""

    name: str
    llm_calls: int

    def diagnose(self, ctx: DiagnosisContext) -> list:
        """Ranked precondition candidates (best first)."""

    def rank_objects(self, ctx: DiagnosisContext, cause: Candidate) -> list:
        """Ranked object candidates to add when the planner finds no plan after ``cause``."""


# ---------------------------------------------------------------------------- candidate space
@dataclass(frozen=True)
class _Prop:
    name: str
    numeric: bool
    param_types: tuple
    description: str
    known: bool


def _properties(task: Task, sensing: Sensing) -> list:
    known = {f.name for f in task.problem.fluents}
    out = [_Prop(f.name, not f.type.is_bool_type(), tuple(p.type.name for p in f.signature),
                 task.describe(f.name), True) for f in task.problem.fluents]
    for p in sensing.properties():
        if p.name not in known:
            out.append(_Prop(p.name, p.numeric, tuple(p.param_types),
                             p.description or describe_name(p.name), False))
    return out


def _value(task: Task, state: State, sensing: Sensing, prop: _Prop, objs: tuple):
    """Value of ``prop`` on ``objs``: robot belief for known fluents (None if ill-typed), the
    environment's report for the others."""
    if prop.known:
        for o, t in zip(objs, prop.param_types):
            if not task.is_subtype(task.object_type(o), t):
                return None
        atom = (prop.name, objs)
        return state.get(atom) if prop.numeric else state.holds(atom)
    return sensing.value(prop.name, objs)


def _atom_text(prop: _Prop, params: tuple) -> str:
    return "(" + " ".join((prop.name,) + tuple("?" + p for p in params)) + ")"


def _type_words(task: Task, sensing: Sensing, obj: str) -> list:
    """The object's type and its ancestors, most specific first (robot's types, else the world's)."""
    tname = task.object_type(obj) if task.problem.has_object(obj) else sensing.objects().get(obj)
    out = []
    try:
        t = task.problem.user_type(tname) if tname else None
    except Exception:  # noqa: BLE001 - a type only the world knows
        return [tname] if tname else []
    while t is not None:
        out.append(t.name)
        t = t.father
    return out


def _atom_words(prop: _Prop, objs: tuple, types: list | None = None) -> str:
    """The property's description about these objects: "the item is ..." -> "the plate is ..."
    (for each argument, the first "the <type>" naming its type or a supertype); objects not placed
    that way are listed after."""
    import re

    text, rest = prop.description, []
    for i, o in enumerate(objs):
        words = (types[i] if types else []) or [prop.param_types[i]]
        new = text
        for t in words:
            new = re.sub(rf"\bthe {re.escape(t)}\b", f"the {o}", text, count=1)
            if new != text:
                break
        if new == text:
            rest.append(o)
        text = new
    return text + (f" ({' '.join(rest)})" if rest else "")


def ruled_out_by_definition(task: Task, action_name: str) -> set:
    """Candidate texts the action's own definition contradicts (LASP's candidates must be consistent with
    the domain the robot has): the negation of one of its precondition conjuncts, a literal it makes true
    unconditionally (requiring what the action achieves) and the negation of one it makes false (it
    removes what it expects to hold)."""
    out = set()
    for pre in task.precondition_texts(action_name):
        e = parse_sexpr(pre)
        if isinstance(e, list) and e and e[0] == "not" and len(e) == 2:
            out.add(to_text(e[1]))
        else:
            out.add(f"(not {pre})")
    for eff in task.action(action_name).effects:
        if eff.is_conditional() or not eff.value.is_bool_constant():
            continue
        atom = fnode_text(eff.fluent)
        out.add(atom if eff.value.bool_constant_value() else f"(not {atom})")
    return out


def _first_clause(text: str) -> str:
    """The part of a description before its first comma or semicolon ("how heavy the plate is, its weight
    in kilograms" -> "how heavy the plate is"): the domain comments put what a quantity is first and its
    unit after."""
    import re

    return re.split(r"[,;]", text, maxsplit=1)[0].strip()


def _comparison_words(f: str, g: str, v1: float, v2: float) -> str:
    """A violated ``(<= f g)`` in words, as the failure shows it: ``f`` exceeds ``g``, with the values (short
    clauses read closer to an observation in a sentence embedding than the whole descriptions do)."""
    return f"{_first_clause(f)} exceeds {_first_clause(g)} ({v1:g} > {v2:g})"


def enumerate_preconditions(ctx: DiagnosisContext, *, max_arity: int = 3) -> list:
    """All candidate preconditions that are false where the action failed and that the action's own
    definition does not contradict (:func:`ruled_out_by_definition`), unscored.

    Returns
    -------
    list of Candidate (``kind`` "precondition", over the action's parameters; ``new_properties`` names
    the environment-only properties a candidate needs).
    """
    task, step = ctx.task, ctx.failure.step
    binding = task.binding(step.name, step.args)
    params = tuple(binding)  # parameter names in order
    declared = {p.name: p.type.name for p in task.action(step.name).parameters}
    existing = set(task.precondition_texts(step.name)) | ruled_out_by_definition(task, step.name)
    props = [p for p in _properties(task, ctx.sensing) if len(p.param_types) <= max_arity]
    tw = {o: _type_words(task, ctx.sensing, o) for o in binding.values()}
    words_of = lambda prop, objs: _atom_words(prop, objs, [tw[o] for o in objs])  # noqa: E731
    out = []
    terms = []
    for prop in props:
        for combo in itertools.permutations(params, len(prop.param_types)):
            if prop.known and not all(task.is_subtype(declared[c], t) for c, t in zip(combo, prop.param_types)):
                continue  # a precondition over the parameters must type-check for every binding, not just this one
            objs = tuple(binding[p] for p in combo)
            v = _value(task, ctx.state, ctx.sensing, prop, objs)
            if v is None:
                continue
            atom = _atom_text(prop, combo)
            if prop.numeric:
                terms.append((prop, combo, objs, float(v), atom))
                continue
            pddl = f"(not {atom})" if v else atom
            words = ("it is not so that " if v else "") + words_of(prop, objs)
            if pddl not in existing:
                out.append(Candidate("precondition", pddl, step.name,
                                     new_properties=() if prop.known else (prop.name,),
                                     description=words))
    for (p1, c1, o1, v1, a1), (p2, c2, o2, v2, a2) in itertools.permutations(terms, 2):
        if p1.name == p2.name or not v1 > v2 + 1e-9:
            continue
        pddl = f"(<= {a1} {a2})"
        if pddl in existing:
            continue
        new = tuple(p.name for p in (p1, p2) if not p.known)
        words = _comparison_words(words_of(p1, o1), words_of(p2, o2), v1, v2)
        out.append(Candidate("precondition", pddl, step.name, new_properties=new, description=words))
    return out


def consistent_with_history(task: Task, cand: Candidate, history: Sequence) -> bool:
    """False when the candidate (over known fluents only) was false at an earlier successful
    execution of the same action: a true precondition held every time the action succeeded."""
    if cand.new_properties:
        return True

    action = task.action(cand.action)
    node = build_fnode(parse_sexpr(cand.pddl), task.problem, {p.name: p for p in action.parameters})
    for step, state in history:
        if step.name != cand.action:
            continue
        if not task.evaluate(node, state, task.binding(step.name, step.args)):
            return False
    return True


# Share of the object-masked similarity in a candidate's score (OfflineDiagnoser._property_scores), and
# the factor for a candidate that held when the same ground action succeeded before (held_before).
MASKED_SHARE = 0.5
HISTORY_BOOST = 1.15


def mask_objects(text: str, types: dict) -> str:
    """``text`` with each object name in ``types`` replaced by its type ("the plate is a vessel" -> "the
    item is a vessel") and a trailing parenthesised list of names or values dropped."""
    import re

    for o in sorted(types, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(o)}(?![\w-])", types[o], text)
    return re.sub(r"\s*\([^()]*\)\s*$", "", text)


def held_before(task: Task, cand: Candidate, history: Sequence, step: GroundAction) -> str:
    """The earlier successful execution of the same ground action (same objects) in whose state the
    candidate (over known fluents) held, as text; "" when there is none. A condition that was true when
    this very action worked and is false now is what changed (LASP: the history of executed actions is
    part of the diagnoser's input, Chen et al., RSS 2024, Sec. IV-B)."""
    if cand.new_properties:
        return ""
    same = [(h, st) for h, st in history if h.name == step.name and tuple(h.args) == tuple(step.args)]
    if not same:
        return ""
    action = task.action(cand.action)
    node = build_fnode(parse_sexpr(cand.pddl), task.problem, {p.name: p for p in action.parameters})
    binding = task.binding(step.name, step.args)
    for h, st in same:
        if task.evaluate(node, st, binding):
            return str(h)
    return ""


def _inversions(pddl: str, order: dict) -> int:
    """How many parameter pairs appear in the opposite of the action's order."""
    import re

    idx = [order[p] for p in re.findall(r"\?([\w-]+)", pddl) if p in order]
    return sum(1 for i in range(len(idx)) for j in range(i + 1, len(idx)) if idx[i] > idx[j])


def unknown_objects(ctx: DiagnosisContext) -> list:
    """Objects the world lists whose type the robot knows but which its problem lacks."""
    known_types = {t.name for t in ctx.task.problem.user_types}
    return [o for o, t in ctx.sensing.objects().items()
            if not ctx.task.problem.has_object(o) and t in known_types]


class OfflineDiagnoser:
    """Diagnosis without an LLM: search over candidate preconditions ranked by text similarity.

    Parameters
    ----------
    similarity : callable
        ``similarity(queries, candidates) -> (Q, C)`` array; :func:`lexical_similarity` by default
        (the application passes the MiniLM embedding similarity when the model is installed).
    max_candidates : int
        How many ranked candidates :meth:`diagnose` returns.
    """

    name = "offline"

    def __init__(self, similarity: Similarity | None = None, *, max_candidates: int = 12):
        self.similarity = similarity or lexical_similarity
        self.max_candidates = max_candidates
        self.llm_calls = 0

    def _scores(self, query: str, texts: list) -> np.ndarray:
        if not texts:
            return np.zeros(0)
        sim = check_similarity_output(self.similarity([query], texts), 1, len(texts))
        return sim[0]

    def _property_scores(self, ctx: DiagnosisContext, texts: list) -> np.ndarray:
        """Similarity of the observation to each candidate text: the mean of the texts as they are and
        of both with the failed action's object names replaced by their types (:func:`mask_objects`).
        The names are shared by the observation and every candidate about the same object, so on
        their own they say which object failed but not which of its properties."""
        named = self._scores(ctx.failure.observation, texts)
        if not texts:
            return named
        step = ctx.failure.step
        types = {o: (_type_words(ctx.task, ctx.sensing, o) or ["object"])[0]
                 for o in ctx.task.binding(step.name, step.args).values()}
        masked = self._scores(mask_objects(ctx.failure.observation, types),
                              [mask_objects(t, types) for t in texts])
        return (1.0 - MASKED_SHARE) * named + MASKED_SHARE * masked

    def diagnose(self, ctx: DiagnosisContext) -> list:
        """Ranked candidate preconditions (see module doc)."""
        cands = [c for c in enumerate_preconditions(ctx)
                 if consistent_with_history(ctx.task, c, ctx.history)]
        cands, weights = self._commensurable(ctx, cands)
        sims = self._property_scores(ctx, [c.description for c in cands])
        step = ctx.failure.step
        ranked = []
        for c, sim, w in zip(cands, sims, weights):
            held = held_before(ctx.task, c, ctx.history, step)
            boost = HISTORY_BOOST if held else 1.0
            s = sim * w * boost
            reasons = [f"false in the state where {step} failed",
                       f"similarity {sim:.2f} between the observation and: {c.description}"]
            if w < 1.0:
                reasons.append(f"comparison of quantities alike by {w:.2f} (weight)")
            if held:
                reasons.append(f"held when {held} succeeded before and is false now "
                               f"(x{HISTORY_BOOST:g})")
            elif any(h[0].name == c.action for h in ctx.history) and not c.new_properties:
                reasons.append(f"held every time {c.action} succeeded before")
            for p in c.new_properties:
                reasons.append(f"new property {p}: values reported by the environment's {p}")
            ranked.append(Candidate(c.kind, c.pddl, c.action, float(s), c.new_properties,
                                    c.description, tuple(reasons)))
        # Ties: fewer new properties first, then arguments in the order the action lists its
        # parameters ((path-clear ?from ?to) before (path-clear ?to ?from)), then the PDDL text.
        order = {p: i for i, p in enumerate(ctx.task.binding(step.name, step.args))}
        ranked.sort(key=lambda c: (-round(c.score, 6), len(c.new_properties),
                                   _inversions(c.pddl, order), c.pddl))
        return ranked[: self.max_candidates]

    def _commensurable(self, ctx: DiagnosisContext, cands: list):
        """Weight comparisons ``(<= f g)`` by how alike the descriptions of ``f`` and ``g`` are
        (comparing a temperature with a weight makes no sense); drop the ones with nothing in
        common. Other candidates weigh 1."""
        desc = {p.name: p.description for p in _properties(ctx.task, ctx.sensing)}
        pairs = {}
        for c in cands:
            if c.pddl.startswith("(<= "):
                e = parse_sexpr(c.pddl)
                pairs[c.pddl] = (e[1][0], e[2][0])
        names = sorted({n for pr in pairs.values() for n in pr})
        if names:
            texts = [desc.get(n, describe_name(n)) for n in names]
            sim = check_similarity_output(self.similarity(texts, texts), len(names), len(names))
            idx = {n: i for i, n in enumerate(names)}
        keep, weights = [], []
        for c in cands:
            w = 1.0
            if c.pddl in pairs:
                a, b = pairs[c.pddl]
                alike = float(sim[idx[a], idx[b]])
                if alike < 0.05:
                    continue
                w = min(1.0, 0.3 + alike)
            keep.append(c)
            weights.append(w)
        return keep, np.asarray(weights, dtype=np.float64)

    def rank_objects(self, ctx: DiagnosisContext, cause: Candidate) -> list:
        """Unknown objects ranked by similarity to the observation and the cause's description."""
        objs = unknown_objects(ctx)
        texts = [ctx.sensing.describe_object(o) for o in objs]
        query = f"{ctx.failure.observation} {cause.description} {ctx.goal_text}"
        scores = self._scores(query, texts)
        out = [Candidate("object", o, cause.action, float(s), (), t,
                         (f"listed by the environment, unknown to the robot; similarity {s:.2f}",))
               for o, s, t in zip(objs, scores, texts)]
        out.sort(key=lambda c: (-c.score, c.pddl))
        return out
