"""A simulated environment for LASP evaluation: executes actions against the complete ("oracle")
domain, turns the precondition that failed into a natural-language observation, answers property
queries with true values, and lists the objects it contains.

This is the environment side of the LASP experiments (Chen et al., RSS 2024, Sec. V): the robot
never sees the oracle's PDDL, only observations (templates with varied wording, never the PDDL
itself), property values and object names. Preconditions are evaluated directly on the state, so a
failing *static* precondition is found even though a grounding simulator would have pruned the
action.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Mapping

from core.lasp.model import GroundAction, PddlError, State, Task, describe_name
from core.lasp.sexpr import fluent_names, fnode_text, fnode_to_sexpr, to_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """Result of executing one action in the environment.

    ``failed_condition`` is the oracle's PDDL of the precondition that did not hold; it is kept for
    evaluation logs only and is never shown to a diagnoser.
    """

    ok: bool
    action: GroundAction
    observation: str = ""
    failed_condition: str = ""


@dataclass(frozen=True)
class PropertyInfo:
    """A property the environment can report: predicate (``numeric=False``) or numeric function."""

    name: str
    numeric: bool
    param_types: tuple
    description: str


@dataclass(frozen=True)
class PropertyEffect:
    """How one of the environment's actions changes a property (PDDL text over the action's
    parameters, which are listed in order so the robot can map them onto its own action)."""

    action: str
    params: tuple
    kind: str          # "assign" | "increase" | "decrease"
    fluent: str
    value: str


class SimulatedEnvironment:
    """The world as the oracle task says it is.

    Parameters
    ----------
    oracle : Task
        Complete domain and the environment's problem (objects, true initial state, goal).
    templates : mapping
        ``{"templates": {"action|names": [text, ...]}, "generic": [text, ...]}``: observation
        wordings keyed by action and the sorted names in the failed precondition (``not `` in
        front when it is negated); ``{param}`` placeholders use the oracle action's parameter names.
    seed : int
        Seeds the choice of wording (the only randomness of the environment).
    """

    def __init__(self, oracle: Task, *, templates: Mapping | None = None, seed: int = 0):
        self.oracle = oracle
        self.templates = dict((templates or {}).get("templates", {}))
        self.generic = list((templates or {}).get("generic", [])) or [
            "The robot could not {action} the {args}; the attempt failed."]
        self.seed = seed
        self._rng = random.Random(seed)
        self.state: State = oracle.initial_state()
        self.executed: list = []

    def reset(self) -> None:
        """Back to the initial state (wording choices continue from the same seed)."""
        self.state = self.oracle.initial_state()
        self.executed = []

    # ------------------------------------------------------------------------ acting
    def execute(self, step: GroundAction) -> Outcome:
        """Execute one action; on failure the state is unchanged and the outcome says why, in words.

        An action the environment does not know, or with unknown or wrongly typed objects, fails
        with an observation saying so.
        """
        try:
            failed = self.oracle.failed_conjunct(step.name, step.args, self.state)
        except PddlError as exc:
            return Outcome(False, step, f"The robot cannot do {step}: {exc}.", "")
        if failed is None:
            self.state = self.oracle.apply(step.name, step.args, self.state)
            self.executed.append(step)
            return Outcome(True, step)
        return Outcome(False, step, self._observation(step, failed), fnode_text(failed))

    def goal_reached(self) -> bool:
        """Whether the environment's goal holds in the true state."""
        return self.oracle.goal_holds(self.state)

    def _observation(self, step: GroundAction, failed) -> str:
        names = sorted(fluent_names(fnode_to_sexpr(failed)))
        neg = "not " if failed.is_not() else ""
        key = f"{step.name}|{neg}{','.join(names)}"
        params = [p.name for p in self.oracle.action(step.name).parameters]
        fill = dict(zip(params, step.args))
        fill.update(action=describe_name(step.name), args=" and ".join(step.args[1:] or step.args))
        options = self.templates.get(key)
        if not options:
            log.debug("no observation template for %s; using a generic one", key)
            options = self.generic
        text = self._rng.choice(options)
        try:
            return text.format(**fill)
        except (KeyError, IndexError):
            return text

    # ------------------------------------------------------------------------ sensing
    def properties(self) -> list:
        """The properties (predicates and functions) the environment can report, with descriptions."""
        out = []
        for f in self.oracle.problem.fluents:
            out.append(PropertyInfo(f.name, not f.type.is_bool_type(),
                                    tuple(p.type.name for p in f.signature),
                                    self.oracle.describe(f.name)))
        return out

    def property(self, name: str) -> PropertyInfo | None:
        for p in self.properties():
            if p.name == name:
                return p
        return None

    def value(self, name: str, args) -> object:
        """True current value of a property for objects ``args``; None when the property does not
        apply to them (unknown name, unknown object, wrong arity or type)."""
        info = self.property(name)
        if info is None or len(args) != len(info.param_types):
            return None
        for a, t in zip(args, info.param_types):
            if not self.oracle.problem.has_object(a) or not self.oracle.is_subtype(
                    self.oracle.object_type(a), t):
                return None
        atom = (name, tuple(args))
        if not info.numeric:
            return self.state.holds(atom)
        return self.state.get(atom)

    def objects(self) -> dict:
        """Object name -> type name, for every object in the environment."""
        return {o.name: o.type.name for o in self.oracle.problem.all_objects}

    def describe_object(self, name: str) -> str:
        """Words about an object: its name, its type and what its true one-argument properties say."""
        words = [describe_name(name), describe_name(self.objects().get(name, ""))]
        for info in self.properties():
            if len(info.param_types) == 1 and not info.numeric and self.value(info.name, (name,)):
                words.append(info.description or describe_name(info.name))
        return "; ".join(w for w in words if w)

    def facts_about(self, name: str, fluents) -> dict:
        """True values of the atoms over the given fluent names that mention object ``name``."""
        out = {}
        for (fl, args), v in self.state.items():
            if fl in fluents and name in args:
                out[(fl, args)] = v
        return out

    def property_effects(self, name: str) -> list:
        """How the environment's actions change property ``name`` (see :class:`PropertyEffect`)."""
        out = []
        for a in self.oracle.problem.actions:
            for e in a.effects:
                if e.fluent.fluent().name != name or e.is_conditional():
                    continue
                kind = "increase" if e.is_increase() else "decrease" if e.is_decrease() else "assign"
                out.append(PropertyEffect(a.name, tuple(p.name for p in a.parameters), kind,
                                          fnode_text(e.fluent), to_text(fnode_to_sexpr(e.value))))
        return out
