"""Knowledge edits learned by LASP and their storage as a PDDL diff.

Three kinds of edit (Chen et al., RSS 2024, Sec. IV-B): a new property (predicate or numeric
function, with values taken from the environment and, where the environment describes them, the
effects its actions have on it), a new precondition of an action, and a new object. They are
applied to a :class:`~core.lasp.model.Task` in memory and saved as a small PDDL-like text so the
same error does not happen again on later tasks::

    ; robot-app LASP learned knowledge, format 1
    (:function (temperature ?a0 - item))
    (:effect heat increase (temperature ?o) 60)
    (:precondition pick (<= (temperature ?o) (tolerance-temperature ?r)))
    (:object glove item)
    (:init (is-heat-insulation glove) (= (temperature glove) 20))
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

from core.lasp.model import State, Task
from core.lasp.sexpr import PddlSyntaxError, fluent_names, parse_many, parse_sexpr, to_text

log = logging.getLogger(__name__)

HEADER = "; robot-app LASP learned knowledge, format 1"


@dataclass
class LearnedFluent:
    name: str
    param_types: tuple
    numeric: bool
    values: dict = field(default_factory=dict)
    effects: list = field(default_factory=list)  # (action, kind, fluent pddl, value pddl)
    description: str = ""
    source: str = ""

    def as_dict(self) -> dict:
        return {"kind": "property", "name": self.name, "numeric": self.numeric,
                "params": list(self.param_types), "values_from": self.source,
                "effects": [f"{a}: {k} {f} {v}" for a, k, f, v in self.effects]}


@dataclass
class LearnedPrecondition:
    action: str
    pddl: str

    def as_dict(self) -> dict:
        return {"kind": "precondition", "action": self.action, "pddl": self.pddl}


@dataclass
class LearnedObject:
    name: str
    type_name: str
    values: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": "object", "name": self.name, "type": self.type_name}


def _types_in(task: Task, pddl: str, name: str, action: str) -> tuple | None:
    """Parameter types of fluent ``name`` as used in ``pddl`` over ``action``'s parameters."""
    ptypes = {p.name: p.type.name for p in task.action(action).parameters}

    def walk(e):
        if isinstance(e, list) and e:
            if e[0] == name:
                return tuple(ptypes.get(a[1:], None) if isinstance(a, str) and a.startswith("?")
                             else None for a in e[1:])
            for sub in e[1:]:
                r = walk(sub)
                if r:
                    return r
        return None
    return walk(parse_sexpr(pddl))


def adopt_property(task: Task, sensing, name: str, *, pddl: str, action: str) -> LearnedFluent:
    """Declare environment property ``name`` in ``task`` with the environment's values.

    The argument types are those of the action parameters the property is applied to in ``pddl``;
    values are read from ``sensing`` for every tuple of the task's objects of those types; effects
    the environment reports (``sensing.property_effects``) are copied onto the task's actions of the
    same name and arity, parameters mapped by position.

    Raises
    ------
    PddlSyntaxError
        When the property is not applied to parameters of ``action`` in ``pddl``.
    """
    info = next((p for p in sensing.properties() if p.name == name), None)
    if info is None:
        raise PddlSyntaxError(f"the environment reports no property {name!r}")
    types = _types_in(task, pddl, name, action)
    if not types or any(t is None for t in types):
        raise PddlSyntaxError(f"{name} must be applied to parameters of {action} in {pddl}")
    values = {}
    for objs in itertools.product(*[task.objects_of(t) for t in types]):
        v = sensing.value(name, objs)
        if v is not None and v is not False:
            values[objs] = v
    task.add_fluent(name, list(types), numeric=info.numeric, values=values,
                    description=info.description)
    learned = LearnedFluent(name, types, info.numeric, values, [], info.description,
                            f"environment property {name}")
    effects = getattr(sensing, "property_effects", None)
    for eff in (effects(name) if effects else []):
        if not task.problem.has_action(eff.action):
            continue
        mine = [p.name for p in task.action(eff.action).parameters]
        if len(mine) != len(eff.params):
            continue
        ren = dict(zip(eff.params, mine))

        def rename(e):
            if isinstance(e, str):
                return "?" + ren[e[1:]] if e.startswith("?") and e[1:] in ren else e
            return [rename(x) for x in e]
        fl, val = to_text(rename(parse_sexpr(eff.fluent))), to_text(rename(parse_sexpr(eff.value)))
        if not all(task.problem.has_fluent(n) for n in fluent_names(parse_sexpr(val))):
            continue
        task.add_effect(eff.action, eff.kind, fl, val)
        learned.effects.append((eff.action, eff.kind, fl, val))
    return learned


def add_object(task: Task, sensing, name: str) -> LearnedObject:
    """Add an object the environment lists, with the true values of every known fluent on it.

    Raises
    ------
    PddlSyntaxError
        When the environment does not list the object or its type is unknown to the task.
    """
    type_name = sensing.objects().get(name)
    if type_name is None:
        raise PddlSyntaxError(f"the environment lists no object {name!r}")
    if type_name not in {t.name for t in task.problem.user_types}:
        raise PddlSyntaxError(f"object {name} is a {type_name}, a type the robot's domain lacks")
    values = {}
    pending = {}
    task.add_object(name, type_name, {})
    for f in task.problem.fluents:
        sig = [p.type.name for p in f.signature]
        for objs in itertools.product(*[task.objects_of(t) for t in sig]):
            if name not in objs:
                continue
            v = sensing.value(f.name, objs)
            if v is not None and v is not False:
                pending[(f.name, objs)] = v
    values.update(pending)

    task.set_initial_state(State(values))
    return LearnedObject(name, type_name, values)


# ---------------------------------------------------------------------------- text diff
def _init_text(values: dict) -> str:
    parts = []
    for (fl, args), v in sorted(values.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        atom = "(" + " ".join((fl,) + tuple(args)) + ")"
        parts.append(atom if v is True else f"(= {atom} {float(v):g})")
    return " ".join(parts)


def to_pddl_diff(edits) -> str:
    """Write learned edits (in the order they were learned) as the knowledge text (module doc)."""
    lines = [HEADER]
    for e in edits:
        if isinstance(e, LearnedFluent):
            kw = ":function" if e.numeric else ":predicate"
            sig = " ".join(f"?a{i} - {t}" for i, t in enumerate(e.param_types))
            if e.description:
                lines.append(f"; {e.name}: {e.description}")
            lines.append(f"({kw} ({e.name} {sig}))".replace(" )", ")"))
            for a, k, f, v in e.effects:
                lines.append(f"(:effect {a} {k} {f} {v})")
            vals = {(e.name, tuple(args)): v for args, v in e.values.items()}
            if vals:
                lines.append(f"(:init {_init_text(vals)})")
        elif isinstance(e, LearnedPrecondition):
            lines.append(f"(:precondition {e.action} {e.pddl})")
        elif isinstance(e, LearnedObject):
            lines.append(f"(:object {e.name} {e.type_name})")
            if e.values:
                lines.append(f"(:init {_init_text(e.values)})")
    return "\n".join(lines) + "\n"


def parse_pddl_diff(text: str) -> list:
    """Read a knowledge text into edits.

    Raises
    ------
    PddlSyntaxError
        On a malformed entry (the message quotes it).
    """
    edits: list = []
    for entry in parse_many(text):
        if not entry or not isinstance(entry[0], str):
            raise PddlSyntaxError(f"malformed entry {to_text(entry)}")
        head = entry[0]
        try:
            if head in (":predicate", ":function"):
                decl = entry[1]
                types = tuple(decl[i + 2] for i in range(1, len(decl) - 1, 3))
                edits.append(LearnedFluent(decl[0], types, head == ":function"))
            elif head == ":effect":
                _, action, kind, fl, val = entry
                if not edits or not isinstance(edits[-1], LearnedFluent):
                    raise PddlSyntaxError("an :effect must follow its :predicate or :function")
                edits[-1].effects.append((action, kind, to_text(fl), to_text(val)))
            elif head == ":precondition":
                _, action, cond = entry
                edits.append(LearnedPrecondition(action, to_text(cond)))
            elif head == ":object":
                _, name, tp = entry
                edits.append(LearnedObject(name, tp))
            elif head == ":init":
                if not edits or isinstance(edits[-1], LearnedPrecondition):
                    raise PddlSyntaxError(":init must follow a :predicate, :function or :object")
                target = edits[-1]
                for atom in entry[1:]:
                    if atom[0] == "=":
                        key, v = (atom[1][0], tuple(atom[1][1:])), float(atom[2])
                    else:
                        key, v = (atom[0], tuple(atom[1:])), True
                    if isinstance(target, LearnedFluent):
                        target.values[key[1]] = v
                    else:
                        target.values[key] = v
            else:
                raise PddlSyntaxError(f"unknown entry {head}")
        except (ValueError, IndexError, TypeError) as exc:
            raise PddlSyntaxError(f"malformed entry {to_text(entry)}: {exc}") from exc
    return edits


def apply_edits(task: Task, edits, *, sensing=None) -> list:
    """Apply learned edits to ``task`` (a copy is the caller's business); returns what applied.

    Edits naming things the task lacks (an action, a type) are skipped with a log message, so
    knowledge learned on one task can be loaded into another. With ``sensing``, a learned property
    gets the environment's current values (stored values only where the environment has none).
    """
    applied = []
    for e in edits:
        try:
            if isinstance(e, LearnedFluent):
                if task.problem.has_fluent(e.name):
                    continue
                values = {a: v for a, v in e.values.items() if all(task.problem.has_object(o) for o in a)}
                if sensing is not None:  # the world's current values beat remembered ones
                    for objs in itertools.product(*[task.objects_of(t) for t in e.param_types]):
                        v = sensing.value(e.name, objs)
                        if v is not None:
                            values[objs] = v
                    values = {a: v for a, v in values.items() if v is not False}
                task.add_fluent(e.name, list(e.param_types), numeric=e.numeric, values=values,
                                description=e.description)
                for a, k, f, v in e.effects:
                    if task.problem.has_action(a):
                        task.add_effect(a, k, f, v)
            elif isinstance(e, LearnedPrecondition):
                if e.pddl in task.precondition_texts(e.action):
                    continue
                task.add_precondition(e.action, e.pddl)
            elif isinstance(e, LearnedObject):
                if task.problem.has_object(e.name):
                    continue
                vals = {k: v for k, v in e.values.items() if task.problem.has_fluent(k[0])}
                task.add_object(e.name, e.type_name, {})
                task.set_initial_state(State(vals))
            applied.append(e)
        except Exception as exc:  # noqa: BLE001 - one bad edit must not stop the others
            log.warning("skipping learned knowledge %s: %s", e, exc)
    return applied
