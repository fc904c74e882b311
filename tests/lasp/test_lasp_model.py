"""The planning-task model: PDDL text <-> unified-planning, evaluation, edits, plan validation."""

from __future__ import annotations

import pytest

from core.lasp.model import GroundAction, PddlError, State, Task, pddl_descriptions
from core.lasp.planner import validate
from core.lasp.sexpr import PddlSyntaxError, fluent_names, fnode_text, parse_many, parse_sexpr, to_text
from tests.lasp.conftest import SMALL_DOMAIN, SMALL_PROBLEMS, read


def _steps(texts):
    return [GroundAction.parse(t) for t in texts]


def test_sexpr_parse_and_write():
    e = parse_sexpr("(<= (Temperature ?o) (tolerance-temperature ?r)) ; comment")
    assert e == ["<=", ["temperature", "?o"], ["tolerance-temperature", "?r"]]
    assert to_text(e) == "(<= (temperature ?o) (tolerance-temperature ?r))"
    assert fluent_names(e) == {"temperature", "tolerance-temperature"}
    assert len(parse_many("(a b) ; x\n(c (d))")) == 2


@pytest.mark.parametrize("bad", ["", "(a", "a)", "(a))", "(a) (b)"])
def test_sexpr_rejects_malformed(bad):
    with pytest.raises(PddlSyntaxError):
        parse_sexpr(bad)


def test_ground_action_both_syntaxes():
    assert GroundAction.parse("(pick robot1 apple table)") == GroundAction("pick", ("robot1", "apple", "table"))
    assert GroundAction.parse("pick(robot1, apple, table)") == GroundAction("pick", ("robot1", "apple", "table"))
    with pytest.raises(PddlSyntaxError):
        GroundAction.parse("((pick))")


def test_descriptions_come_from_comments():
    d = pddl_descriptions(read("domain.pddl"))
    assert "hot" in d["temperature"] and "heavy" in d["weight"]
    assert "empty" in d["is-empty-handed"]


def test_state_is_immutable_and_hashable():
    s = State({("on", ("a", "b")): True})
    s2 = s.updated({("on", ("a", "b")): False})
    assert s.holds(("on", ("a", "b"))) and not s2.holds(("on", ("a", "b")))
    assert State({}) == s2 and hash(State({})) == hash(s2)


def test_failed_static_precondition_is_found(oracle_milk):
    """is-microwave-safe is static: a grounding simulator prunes the action; we still name it."""
    state = oracle_milk.initial_state().updated({("in", ("knife", "microwave")): True})
    failed = oracle_milk.failed_conjunct("heat", ("robot1", "knife", "microwave"), state)
    assert fnode_text(failed) == "(is-microwave-safe ?o)"


def test_apply_numeric_and_boolean_effects(oracle_milk):
    s = oracle_milk.initial_state()
    s = oracle_milk.apply("wear", ("robot1", "glove", "table"), s)
    assert s[("tolerance-temperature", ("robot1",))] == 145.0
    assert s.holds(("wearing", ("robot1", "glove"))) and not s.holds(("on", ("glove", "table")))


def test_binding_rejects_bad_actions(oracle_milk):
    with pytest.raises(PddlError, match="unknown action"):
        oracle_milk.binding("fly", ("robot1",))
    with pytest.raises(PddlError, match="takes 3"):
        oracle_milk.binding("pick", ("robot1", "cup"))
    with pytest.raises(PddlError, match="not a item"):
        oracle_milk.binding("pick", ("robot1", "table", "table"))


def test_add_precondition_and_reject_unknown_names():
    t = Task.from_pddl(read("case2_domain.pddl"), read("case2_problem.pddl"))
    t.add_precondition("place-in", "(is-open ?c)")
    assert "(is-open ?c)" in t.precondition_texts("place-in")
    for bad, msg in [("(is-closed ?c)", "unknown predicate"), ("(is-open ?x)", "unknown parameter"),
                     ("(is-open banana)", "unknown object"), ("(is-open ?c ?o)", "takes 1"),
                     ("(weight ?o)", "not a condition")]:
        with pytest.raises(PddlSyntaxError, match=msg):
            t.add_precondition("place-in", bad)
    assert t.precondition_texts("place-in").count("(is-open ?c)") == 1


def test_copy_is_independent():
    t = Task.from_pddl(read("case2_domain.pddl"), read("case2_problem.pddl"))
    c = t.copy()
    c.add_precondition("place-in", "(is-open ?c)")
    assert "(is-open ?c)" not in t.precondition_texts("place-in")


def test_parse_error_names_the_place():
    with pytest.raises(PddlError, match="mine.pddl"):
        Task.from_pddl("(define (domain x) (:action", "", where="mine.pddl")


@pytest.mark.parametrize("name", sorted(SMALL_PROBLEMS))
def test_catalogue_valid_and_invalid_plans(name):
    text, valid, invalid = SMALL_PROBLEMS[name]
    t = Task.from_pddl(SMALL_DOMAIN, text)
    for plan in valid:
        assert validate(t, _steps(plan)) == ""
    for plan in invalid:
        assert validate(t, _steps(plan)) != ""


def test_a_domain_declaring_functions_before_predicates_parses():
    """PDDL does not fix the order of the declaration sections; the reader gets them in its own order and
    the comments that describe each name stay with it."""
    from core.lasp.model import Task, canonical_domain_order

    domain = """(define (domain tiny)
  (:requirements :strips :typing :numeric-fluents)
  (:types thing)
  (:functions (weight ?t - thing)) ; how heavy it is, kg
  (:predicates (held ?t - thing)  ; the robot holds it
  )
  (:action pick :parameters (?t - thing) :precondition (not (held ?t)) :effect (held ?t)))"""
    problem = "(define (problem p) (:domain tiny) (:objects box - thing) (:init (= (weight box) 1)) (:goal (held box)))"
    task = Task.from_pddl(domain, problem)
    assert sorted(task.fluent_names()) == ["held", "weight"]
    reordered = canonical_domain_order(domain)
    assert reordered.index("(:predicates") < reordered.index("(:functions") < reordered.index("(:action")
    assert canonical_domain_order("(define (domain x) (:predicates (p)) (:functions (f)))").count("(") == 6
    assert canonical_domain_order("(define (domain x) (:predicates") == "(define (domain x) (:predicates"


def test_action_sentences_come_from_the_domains_comments():
    """The operator reads ground actions in words: the ``(:action`` line's comment with its parameters filled
    in; an action without one falls back to its own words."""
    from robot_app.jobs.task_jobs import JACKAL_DIR

    task = Task.from_pddl((JACKAL_DIR / "robot_domain.pddl").read_text(),
                          (JACKAL_DIR / "robot_patrol.pddl").read_text())
    assert task.action_sentence("load", ["jackal", "parcel-1", "depot"]) == "load parcel 1 onto jackal at depot"
    assert task.action_sentence("open-gate", ["jackal", "yard-gate", "yard", "site-b"]) == \
        "open yard gate between yard and site b"
    del task.descriptions["action:charge"]
    assert task.action_sentence("charge", ["jackal", "depot"]) == "charge (jackal, depot)"
    with pytest.raises(PddlError):
        task.action_sentence("load", ["jackal"])
