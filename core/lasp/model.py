"""The planning-task model: a PDDL domain and problem parsed once with unified-planning, edited in
memory as knowledge is learned, and evaluated in Python on immutable states.

A :class:`State` maps ground atoms ``(fluent name, (object, ...))`` to ``bool`` (predicates) or
``float`` (numeric fluents). Expressions are evaluated directly on the UP expression trees (rather
than through UP's simulator) so that a failed precondition can be pinned down even when it is
static: a simulator may have pruned such an action during grounding, whereas the LASP diagnosis
(Chen et al., RSS 2024, Sec. IV-B) needs to know which condition did not hold.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Iterator, Mapping

from core.lasp.sexpr import PddlSyntaxError, build_fnode, fnode_text, parse_sexpr

log = logging.getLogger(__name__)

GroundAtom = tuple  # (fluent name: str, args: tuple[str, ...])


class PddlError(ValueError):
    """A PDDL domain or problem could not be parsed or is not supported by the LASP layer."""


class State(Mapping):
    """An immutable assignment of ground atoms to values; missing predicates are false.

    Successors are new states (:meth:`updated`); states are hashable.
    """

    __slots__ = ("_d", "_h")

    def __init__(self, values: Mapping[GroundAtom, object] | Iterable = ()):
        self._d = dict(values)
        self._h = None

    def __getitem__(self, key: GroundAtom):
        return self._d[key]

    def __iter__(self) -> Iterator[GroundAtom]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(frozenset((k, v) for k, v in self._d.items() if v is not False))
        return self._h

    def __eq__(self, other) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        strip = lambda d: {k: v for k, v in d.items() if v is not False}  # noqa: E731
        return strip(self._d) == strip(other._d)

    def updated(self, changes: Mapping[GroundAtom, object]) -> "State":
        """A new state with ``changes`` applied."""
        d = dict(self._d)
        d.update(changes)
        return State(d)

    def holds(self, atom: GroundAtom) -> bool:
        return bool(self._d.get(atom, False))


def _value(v):
    """A UP constant as a Python bool or float."""
    if v.is_bool_constant():
        return v.bool_constant_value()
    return float(Fraction(v.constant_value()))


def pddl_descriptions(domain_text: str) -> dict:
    """Descriptions of predicates and functions taken from ``;`` comments in the domain text.

    A comment on the same line as a declaration ``(name ?x - t ...)`` inside ``(:predicates`` or
    ``(:functions`` describes ``name``. Names without a comment are described by their own words
    (see :func:`describe_name`). A comment on an ``(:action name`` line is the action's sentence, its
    parameters as ``?x`` (``; load ?x onto ?r at ?p``), stored under ``"action:name"`` (see
    :meth:`Task.action_sentence`).

    Returns
    -------
    dict
        lower-case name (or ``"action:"`` + name) -> description text.
    """
    out = {}
    section = None
    for line in domain_text.splitlines():
        low = line.lower()
        if "(:predicates" in low:
            section = "p"
        elif "(:functions" in low:
            section = "f"
        elif "(:action" in low or "(:types" in low or "(:constants" in low:
            section = None
            m = re.search(r"\(:action\s+([A-Za-z][\w-]*)", line, re.I)
            if m and ";" in line:
                out["action:" + m.group(1).lower()] = line.split(";", 1)[1].strip()
        if section is None or ";" not in line:
            continue
        code, comment = line.split(";", 1)
        m = re.search(r"\(\s*([A-Za-z][\w-]*)\s*(\?|\))", code.replace("(:predicates", "").replace(
            "(:functions", ""))
        if m:
            out[m.group(1).lower()] = comment.strip()
    return out


def describe_name(name: str) -> str:
    """Words of a PDDL name: ``is-empty-handed`` -> ``is empty handed``."""
    return " ".join(w for w in re.split(r"[-_\s]+", name) if w)


_SECTION_ORDER = (":requirements", ":types", ":constants", ":predicates", ":functions")


def canonical_domain_order(domain_text: str) -> str:
    """``domain_text`` with its declaration sections in the order unified-planning's reader expects
    (``:requirements :types :constants :predicates :functions``, then the actions as they were): PDDL
    itself does not fix that order, and a domain declaring ``:functions`` before ``:predicates`` is valid.
    Text it cannot split into balanced top-level sections is returned unchanged (the reader then says
    what is wrong)."""
    spans, depth, start, i, n = [], 0, None, 0, len(domain_text)
    define_open = None
    while i < n:
        c = domain_text[i]
        if c == ";":  # a comment to the end of the line
            j = domain_text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "(":
            depth += 1
            if depth == 1:
                define_open = i
            elif depth == 2:
                start = i
        elif c == ")":
            if depth == 2 and start is not None:
                spans.append((start, i + 1))
                start = None
            depth -= 1
            if depth < 0:
                return domain_text
        i += 1
    if depth != 0 or define_open is None or not spans:
        return domain_text

    def key(k_span):
        k, (a, b) = k_span
        head = domain_text[a + 1:b].split(None, 1)[0].lower() if domain_text[a + 1:b].split() else ""
        return (_SECTION_ORDER.index(head), k) if head in _SECTION_ORDER else (len(_SECTION_ORDER) if head != "domain"
                                                                               else -1, k)

    ordered = [span for _k, span in sorted(enumerate(spans), key=key)]
    if ordered == spans:
        return domain_text
    body = "\n  ".join(domain_text[a:b] for a, b in ordered)
    return domain_text[:spans[0][0]] + body + domain_text[spans[-1][1]:]


class Task:
    """A PDDL planning task (domain + problem) held as a unified-planning ``Problem``.

    Parameters
    ----------
    problem : unified_planning.model.Problem
    descriptions : dict
        Predicate/function name -> natural-language description (from domain comments).
    """

    def __init__(self, problem, descriptions: Mapping[str, str] | None = None):
        self.problem = problem
        self.descriptions = dict(descriptions or {})
        self._objects_by_type: dict = {}

    # ----------------------------------------------------------------------- construction
    @classmethod
    def from_pddl(cls, domain_text: str, problem_text: str, *, where: str = "") -> "Task":
        """Parse PDDL 2.1 text (typing, negative preconditions, numeric fluents).

        Raises
        ------
        PddlError
            When unified-planning cannot read the text; the message names ``where``.
        """
        from unified_planning.io import PDDLReader

        try:
            problem = PDDLReader().parse_problem_string(canonical_domain_order(domain_text), problem_text)
        except Exception as exc:  # pyparsing / UP raise many kinds
            raise PddlError(f"{where or 'PDDL'}: cannot parse: {exc}") from exc
        return cls(problem, pddl_descriptions(domain_text))

    def copy(self) -> "Task":
        """An independent copy (edits to it leave this task unchanged)."""
        return Task(self.problem.clone(), self.descriptions)

    # ----------------------------------------------------------------------- lookups
    def objects_of(self, type_name: str) -> list:
        """Names of the objects of a type, subtypes included."""
        if type_name not in self._objects_by_type:
            tp = self.problem.user_type(type_name)
            self._objects_by_type[type_name] = [o.name for o in self.problem.objects(tp)]
        return self._objects_by_type[type_name]

    def object_type(self, name: str) -> str:
        return self.problem.object(name).type.name

    def is_subtype(self, sub: str, sup: str) -> bool:
        """Whether type ``sub`` is ``sup`` or below it."""
        t = self.problem.user_type(sub)
        while t is not None:
            if t.name == sup:
                return True
            t = t.father
        return False

    def fluent_names(self) -> list:
        return [f.name for f in self.problem.fluents]

    def describe(self, name: str) -> str:
        """The description of a predicate or function (its comment, else its words)."""
        return self.descriptions.get(name) or describe_name(name)

    def action(self, name: str):
        try:
            return self.problem.action(name)
        except Exception as exc:
            raise PddlError(f"unknown action {name!r} (known: "
                            f"{', '.join(a.name for a in self.problem.actions)})") from exc

    # ----------------------------------------------------------------------- states
    def initial_state(self) -> State:
        """The problem's initial state (explicit values and defaults).

        Built from the explicit values plus the defaults of numeric fluents (predicates missing
        from a :class:`State` are false); UP's ``initial_values`` grounds every fluent and costs
        several times more.
        """
        import itertools

        out = {}
        defaults = self.problem.fluents_defaults
        for f in self.problem.fluents:
            if f.type.is_bool_type() or f not in defaults:
                continue
            value = _value(defaults[f])
            domains = [self.objects_of(p.type.name) for p in f.signature]
            for args in itertools.product(*domains):
                out[(f.name, tuple(args))] = value
        for k, v in self.problem.explicit_initial_values.items():
            out[(k.fluent().name, tuple(a.object().name for a in k.args))] = _value(v)
        return State(out)

    def set_initial_state(self, state: State) -> None:
        """Make ``state`` the problem's initial state (for replanning from where the robot is)."""
        em = self.problem.environment.expression_manager
        for (name, args), value in state.items():
            if not self.problem.has_fluent(name) or not all(self.problem.has_object(a) for a in args):
                continue
            fluent = self.problem.fluent(name)
            objs = [self.problem.object(a) for a in args]
            val = em.Bool(bool(value)) if fluent.type.is_bool_type() else em.Real(
                Fraction(value).limit_denominator(10**6))
            self.problem.set_initial_value(em.FluentExp(fluent, objs), val)

    # ----------------------------------------------------------------------- evaluation
    def evaluate(self, node, state: State, binding: Mapping[str, str]):
        """Value of a UP expression in ``state`` with parameters bound to object names.

        Raises
        ------
        PddlError
            For an operator outside PDDL 2.1 numeric/ADL conditions, or an undefined numeric fluent.
        """
        ev = self.evaluate
        if node.is_fluent_exp():
            atom = (node.fluent().name, tuple(self._arg(a, binding) for a in node.args))
            if node.fluent().type.is_bool_type():
                return state.holds(atom)
            if atom not in state:
                raise PddlError(f"numeric fluent ({atom[0]} {' '.join(atom[1])}) has no value")
            return state[atom]
        if node.is_and():
            return all(ev(a, state, binding) for a in node.args)
        if node.is_or():
            return any(ev(a, state, binding) for a in node.args)
        if node.is_not():
            return not ev(node.arg(0), state, binding)
        if node.is_implies():
            return (not ev(node.arg(0), state, binding)) or ev(node.arg(1), state, binding)
        if node.is_bool_constant() or node.is_int_constant() or node.is_real_constant():
            return _value(node)
        if node.is_le():
            return ev(node.arg(0), state, binding) <= ev(node.arg(1), state, binding) + 1e-9
        if node.is_lt():
            return ev(node.arg(0), state, binding) < ev(node.arg(1), state, binding) - 1e-9
        if node.is_equals():
            a, b = node.arg(0), node.arg(1)
            if a.type.is_user_type():
                return self._arg(a, binding) == self._arg(b, binding)
            return abs(ev(a, state, binding) - ev(b, state, binding)) <= 1e-9
        if node.is_plus():
            return sum(ev(a, state, binding) for a in node.args)
        if node.is_minus():
            return ev(node.arg(0), state, binding) - ev(node.arg(1), state, binding)
        if node.is_times():
            out = 1.0
            for a in node.args:
                out *= ev(a, state, binding)
            return out
        if node.is_div():
            return ev(node.arg(0), state, binding) / ev(node.arg(1), state, binding)
        if node.is_exists() or node.is_forall():
            return self._quantified(node, state, binding)
        raise PddlError(f"unsupported expression {node}")

    def _quantified(self, node, state, binding) -> bool:
        names = [v.name for v in node.variables()]
        domains = [self.objects_of(v.type.name) for v in node.variables()]
        want_any = node.is_exists()

        def rec(i, b):
            if i == len(names):
                return bool(self.evaluate(node.arg(0), state, b))
            for obj in domains[i]:
                r = rec(i + 1, {**b, names[i]: obj})
                if r == want_any:
                    return want_any
            return not want_any
        return rec(0, dict(binding))

    @staticmethod
    def _arg(a, binding) -> str:
        if a.is_parameter_exp():
            return binding[a.parameter().name]
        if a.is_variable_exp():
            return binding[a.variable().name]
        if a.is_object_exp():
            return a.object().name
        raise PddlError(f"unsupported argument {a}")

    def binding(self, action_name: str, args) -> dict:
        """Map an action's parameter names to ``args``.

        Raises
        ------
        PddlError
            On an unknown action or object, a wrong number of arguments or a wrongly typed one.
        """
        action = self.action(action_name)
        if len(args) != len(action.parameters):
            raise PddlError(f"{action_name} takes {len(action.parameters)} argument(s), got {len(args)}")
        out = {}
        for p, a in zip(action.parameters, args):
            if not self.problem.has_object(a):
                raise PddlError(f"unknown object {a!r} in ({action_name} {' '.join(args)})")
            if not self.is_subtype(self.object_type(a), p.type.name):
                raise PddlError(f"{a} is a {self.object_type(a)}, not a {p.type.name}, in "
                                f"({action_name} {' '.join(args)})")
            out[p.name] = a
        return out

    def action_sentence(self, action_name: str, args) -> str:
        """The ground action in words, for the operator: the domain's sentence for the action with each
        ``?param`` replaced by its object's words (``load parcel 1 onto jackal at depot``), else the
        action's words and its objects'.

        Raises
        ------
        PddlError
            On an unknown action, object or a wrong number of arguments (:meth:`binding`).
        """
        binding = self.binding(action_name, args)
        template = self.descriptions.get("action:" + action_name.lower())
        if not template:
            return f"{describe_name(action_name)} ({', '.join(describe_name(a) for a in args)})"
        return re.sub(r"\?([A-Za-z][\w-]*)",
                      lambda m: describe_name(binding.get(m.group(1), m.group(0))), template)

    def conjuncts(self, action_name: str) -> list:
        """The action's precondition as a flat list of conjuncts (UP expressions)."""
        out = []
        stack = list(self.action(action_name).preconditions)[::-1]
        while stack:
            c = stack.pop()
            if c.is_and():
                stack.extend(list(c.args)[::-1])
            else:
                out.append(c)
        return out

    def failed_conjunct(self, action_name: str, args, state: State):
        """The first precondition conjunct that is false in ``state`` (None if applicable)."""
        b = self.binding(action_name, args)
        for c in self.conjuncts(action_name):
            if not self.evaluate(c, state, b):
                return c
        return None

    def apply(self, action_name: str, args, state: State) -> State:
        """The successor state (effects evaluated in ``state``, PDDL's simultaneous semantics;
        deletes before adds)."""
        b = self.binding(action_name, args)
        deletes, adds = {}, {}
        for e in self.action(action_name).effects:
            if e.is_conditional() and not self.evaluate(e.condition, state, b):
                continue
            atom = (e.fluent.fluent().name, tuple(self._arg(a, b) for a in e.fluent.args))
            value = self.evaluate(e.value, state, b)
            if e.is_increase():
                value = state.get(atom, 0.0) + value
            elif e.is_decrease():
                value = state.get(atom, 0.0) - value
            (deletes if value is False else adds)[atom] = value
        deletes.update(adds)
        return state.updated(deletes)

    def goal_holds(self, state: State) -> bool:
        return all(self.evaluate(g, state, {}) for g in self.problem.goals)

    # ----------------------------------------------------------------------- editing
    def add_precondition(self, action_name: str, pddl: str) -> None:
        """Add a precondition given as PDDL text over the action's parameters.

        Raises
        ------
        PddlSyntaxError
            If the text is malformed or names an unknown predicate, function, parameter or object.
        """
        action = self.action(action_name)
        params = {p.name: p for p in action.parameters}
        node = build_fnode(parse_sexpr(pddl), self.problem, params, where=f"action {action_name}")
        if not node.type.is_bool_type():
            raise PddlSyntaxError(f"precondition {pddl} of {action_name} is not a condition")
        action.add_precondition(node)

    def add_effect(self, action_name: str, kind: str, fluent_pddl: str, value_pddl: str) -> None:
        """Add an effect ``kind`` in {"assign", "increase", "decrease"} to an action.

        Raises
        ------
        PddlSyntaxError
            If the fluent or value names something unknown.
        """
        action = self.action(action_name)
        params = {p.name: p for p in action.parameters}
        where = f"effect of {action_name}"
        fl = build_fnode(parse_sexpr(fluent_pddl), self.problem, params, where=where)
        val = build_fnode(parse_sexpr(value_pddl), self.problem, params, where=where)
        {"assign": action.add_effect, "increase": action.add_increase_effect,
         "decrease": action.add_decrease_effect}[kind](fl, val)

    def add_fluent(self, name: str, param_types: list, *, numeric: bool,
                   values: Mapping[tuple, object] | None = None, description: str = "") -> None:
        """Declare a new predicate or numeric function and give its initial values.

        Parameters
        ----------
        param_types : list of str
            Type names of the arguments (types of this task).
        values : mapping
            ``(object, ...)`` -> bool or float. Predicates default to false, functions to 0.
        """
        from collections import OrderedDict

        from unified_planning.model import Fluent

        if self.problem.has_fluent(name):
            raise PddlSyntaxError(f"{name} is already declared")
        env = self.problem.environment
        sig = OrderedDict((f"a{i}", self.problem.user_type(t)) for i, t in enumerate(param_types))
        fluent = Fluent(name, env.type_manager.RealType() if numeric else env.type_manager.BoolType(),
                        sig, environment=env)
        em = self.problem.environment.expression_manager
        self.problem.add_fluent(fluent, default_initial_value=em.Real(Fraction(0)) if numeric
                                else em.FALSE())
        for args, v in (values or {}).items():
            objs = [self.problem.object(a) for a in args]
            val = em.Real(Fraction(v).limit_denominator(10**6)) if numeric else em.Bool(bool(v))
            self.problem.set_initial_value(em.FluentExp(fluent, objs), val)
        if description:
            self.descriptions[name] = description

    def add_object(self, name: str, type_name: str, values: Mapping[GroundAtom, object]) -> None:
        """Add an object of a known type with the initial values of atoms that mention it."""
        from unified_planning.model import Object

        if self.problem.has_object(name):
            raise PddlSyntaxError(f"object {name} is already known")
        self.problem.add_object(Object(name, self.problem.user_type(type_name),
                                       self.problem.environment))
        self._objects_by_type.clear()
        self.set_initial_state(State(values))

    def precondition_texts(self, action_name: str) -> list:
        return [fnode_text(c) for c in self.conjuncts(action_name)]


@dataclass(frozen=True)
class GroundAction:
    """One step of a plan: action name and object names."""

    name: str
    args: tuple

    def __str__(self) -> str:
        return "(" + " ".join((self.name,) + tuple(self.args)) + ")"

    @classmethod
    def parse(cls, text: str) -> "GroundAction":
        """Read ``(name arg ...)`` or ``name(arg, ...)``.

        Raises
        ------
        PddlSyntaxError
            If the text is neither form.
        """
        t = text.strip().lower()
        m = re.fullmatch(r"([\w-]+)\s*\(([^()]*)\)", t)
        if m:
            return cls(m.group(1), tuple(a.strip() for a in m.group(2).split(",") if a.strip()))
        e = parse_sexpr(t)
        if isinstance(e, str) or not e or not all(isinstance(x, str) for x in e):
            raise PddlSyntaxError(f"expected an action like (pick robot1 apple table), got {text!r}")
        return cls(e[0], tuple(e[1:]))
