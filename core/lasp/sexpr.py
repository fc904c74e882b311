"""PDDL s-expressions: read a literal or comparison as text, turn it into a unified-planning
expression of a given problem, and write expressions back as PDDL text.

The diagnosers, the learned-knowledge file and the CLI exchange knowledge as PDDL fragments such as
``(<= (temperature ?o) (tolerance-temperature ?r))``; this module is the one place that converts
between that text and the planning model (PDDL 2.1 syntax, Fox & Long 2003, Sec. 4).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Mapping, Union

SExpr = Union[str, list]

_TOKEN = re.compile(r"\(|\)|[^\s()]+")

_COMPARISONS = {"<=": "LE", "<": "LT", ">=": "GE", ">": "GT", "=": "Equals"}
_ARITH = {"+": "Plus", "-": "Minus", "*": "Times", "/": "Div"}


class PddlSyntaxError(ValueError):
    """A PDDL fragment is not a well-formed s-expression, or names something the model lacks."""


def parse_sexpr(text: str) -> SExpr:
    """Parse one s-expression (``;`` comments allowed); atoms are lower-cased strings.

    Raises
    ------
    PddlSyntaxError
        On unbalanced parentheses, an empty text or trailing tokens.
    """
    text = re.sub(r";[^\n]*", " ", text).lower()
    tokens = _TOKEN.findall(text)
    if not tokens:
        raise PddlSyntaxError("empty PDDL fragment")
    pos = 0

    def read() -> SExpr:
        nonlocal pos
        if pos >= len(tokens):
            raise PddlSyntaxError(f"unbalanced parentheses in {text.strip()!r}")
        tok = tokens[pos]
        pos += 1
        if tok == ")":
            raise PddlSyntaxError(f"unexpected ')' in {text.strip()!r}")
        if tok != "(":
            return tok
        out = []
        while True:
            if pos >= len(tokens):
                raise PddlSyntaxError(f"unbalanced parentheses in {text.strip()!r}")
            if tokens[pos] == ")":
                pos += 1
                return out
            out.append(read())

    expr = read()
    if pos != len(tokens):
        raise PddlSyntaxError(f"trailing text after the expression in {text.strip()!r}")
    return expr


def parse_many(text: str) -> list:
    """Parse a text holding several top-level s-expressions (e.g. a learned-knowledge file)."""
    text = re.sub(r";[^\n]*", " ", text)
    depth, start, out = 0, None, []
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise PddlSyntaxError("unexpected ')' in PDDL text")
            if depth == 0:
                out.append(parse_sexpr(text[start:i + 1]))
    if depth != 0:
        raise PddlSyntaxError("unbalanced parentheses in PDDL text")
    return out


def to_text(expr: SExpr) -> str:
    """Write an s-expression (nested lists of strings) as PDDL text."""
    if isinstance(expr, str):
        return expr
    return "(" + " ".join(to_text(e) for e in expr) + ")"


def _number(tok: str) -> Fraction | None:
    try:
        return Fraction(tok)
    except (ValueError, ZeroDivisionError):
        return None


def fnode_to_sexpr(node) -> SExpr:
    """A unified-planning expression as an s-expression (parameters as ``?name``).

    Raises
    ------
    PddlSyntaxError
        For an operator this module does not write (timing, object fluents...).
    """
    if node.is_fluent_exp():
        return [node.fluent().name] + [fnode_to_sexpr(a) for a in node.args]
    if node.is_parameter_exp():
        return "?" + node.parameter().name
    if node.is_variable_exp():
        return "?" + node.variable().name
    if node.is_object_exp():
        return node.object().name
    if node.is_bool_constant():
        return "(and)" if node.bool_constant_value() else "(or)"
    if node.is_int_constant() or node.is_real_constant():
        v = Fraction(node.constant_value())
        return str(v.numerator) if v.denominator == 1 else repr(float(v))
    simple = {"is_and": "and", "is_or": "or", "is_not": "not", "is_implies": "imply",
              "is_le": "<=", "is_lt": "<", "is_equals": "=", "is_plus": "+", "is_minus": "-",
              "is_times": "*", "is_div": "/"}
    for test, op in simple.items():
        if getattr(node, test)():
            return [op] + [fnode_to_sexpr(a) for a in node.args]
    if node.is_exists() or node.is_forall():
        head = "exists" if node.is_exists() else "forall"
        params = []
        for v in node.variables():
            params += ["?" + v.name, "-", v.type.name]
        return [head, params, fnode_to_sexpr(node.arg(0))]
    raise PddlSyntaxError(f"cannot write {node} as PDDL")


def fnode_text(node) -> str:
    """A unified-planning expression as PDDL text."""
    return to_text(fnode_to_sexpr(node))


def build_fnode(expr: SExpr, problem, params: Mapping[str, object], *, where: str = "") -> object:
    """Build a unified-planning expression of ``problem`` from an s-expression.

    Parameters
    ----------
    expr : s-expression (see :func:`parse_sexpr`)
    problem : unified_planning.model.Problem
        Gives the fluents and objects that names refer to.
    params : mapping
        ``?name`` (without the ``?``) -> a UP ``Parameter`` of the action the expression belongs to.
    where : str
        Names the place (action, file) for error messages.

    Raises
    ------
    PddlSyntaxError
        When the expression names an unknown predicate, function, parameter or object, or a fluent
        gets the wrong number of arguments; nothing is added to the problem in that case.
    """
    em = problem.environment.expression_manager
    ctx = f" in {where}" if where else ""

    def term(e: SExpr):
        if isinstance(e, str):
            if e.startswith("?"):
                if e[1:] not in params:
                    raise PddlSyntaxError(f"unknown parameter {e}{ctx} (known: "
                                          f"{', '.join('?' + p for p in params) or 'none'})")
                return em.ParameterExp(params[e[1:]])
            num = _number(e)
            if num is not None:
                return em.Real(num) if num.denominator != 1 else em.Int(int(num))
            if not problem.has_object(e):
                raise PddlSyntaxError(f"unknown object {e!r}{ctx}")
            return em.ObjectExp(problem.object(e))
        return build(e)

    def build(e: SExpr):
        if isinstance(e, str) or not e:
            return term(e) if isinstance(e, str) else em.TRUE()
        head, rest = e[0], e[1:]
        if not isinstance(head, str):
            raise PddlSyntaxError(f"expected an operator or a name at the head of {to_text(e)}{ctx}")
        if head == "and":
            return em.And(*[build(a) for a in rest]) if rest else em.TRUE()
        if head == "or":
            return em.Or(*[build(a) for a in rest])
        if head == "not":
            if len(rest) != 1:
                raise PddlSyntaxError(f"'not' takes one argument: {to_text(e)}{ctx}")
            return em.Not(build(rest[0]))
        if head in _COMPARISONS and len(rest) == 2:
            return getattr(em, _COMPARISONS[head])(term(rest[0]), term(rest[1]))
        if head in _ARITH and len(rest) >= 1:
            args = [term(a) for a in rest]
            if head == "-" and len(args) == 1:
                return em.Minus(em.Int(0), args[0])
            return getattr(em, _ARITH[head])(*args)
        if not problem.has_fluent(head):
            raise PddlSyntaxError(f"unknown predicate or function {head!r}{ctx}")
        fluent = problem.fluent(head)
        if len(rest) != fluent.arity:
            raise PddlSyntaxError(f"{head} takes {fluent.arity} argument(s), got {len(rest)}: "
                                  f"{to_text(e)}{ctx}")
        return em.FluentExp(fluent, [term(a) for a in rest])

    try:
        node = build(expr)
        node.type  # noqa: B018 - UP checks argument types lazily; make it check here
        return node
    except PddlSyntaxError:
        raise
    except Exception as exc:  # UP's type checker: e.g. an argument of the wrong type
        raise PddlSyntaxError(f"ill-typed expression {to_text(expr)}{ctx}: {exc}") from exc


def fluent_names(expr: SExpr) -> set:
    """Names in head position of an s-expression that are not PDDL operators (its predicates and
    functions)."""
    if isinstance(expr, str) or not expr:
        return set()
    head = expr[0]
    out = set()
    ops = {"and", "or", "not", "imply", "exists", "forall"} | set(_COMPARISONS) | set(_ARITH)
    if isinstance(head, str) and head not in ops:
        out.add(head)
    for sub in expr[1:]:
        out |= fluent_names(sub)
    return out
