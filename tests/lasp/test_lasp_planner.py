"""Planner calls: status handling (solved, unsolvable, timeout), validation, ENHSP cross-check."""

from __future__ import annotations

import shutil

import pytest

from core.lasp.model import Task
from core.lasp.planner import PlanStatus, UnknownEngine, solve, validate
from tests.lasp.conftest import SMALL_DOMAIN, SMALL_PROBLEMS, read

ENV_PROBLEMS = {"env1_serve_fruit.pddl": 2, "env1_store_fruit.pddl": 3,
                "env2_heat_sandwich.pddl": 10, "env2_heat_milk.pddl": 13}

# Counters: reaching x = 7919 and y = 104729 takes ~40,000 steps; no plan within half a second.
COUNTERS = ("""
(define (domain counter) (:requirements :numeric-fluents)
  (:functions (x) (y))
  (:action a :parameters () :precondition (and) :effect (increase (x) 2))
  (:action b :parameters () :precondition (and) :effect (increase (y) 3))
  (:action c :parameters () :precondition (and (>= (x) 1)) :effect (and (decrease (x) 1) (increase (y) 1))))""",
            """
(define (problem p) (:domain counter) (:init (= (x) 0) (= (y) 0))
  (:goal (and (= (x) 7919) (= (y) 104729))))""")
# A counter that only goes up by 1 can never reach 0.5: Kairos proves it.
ENDLESS = ("""
(define (domain up-only) (:requirements :numeric-fluents)
  (:functions (x))
  (:action up :parameters () :precondition (and) :effect (increase (x) 1)))""", """
(define (problem endless) (:domain up-only) (:init (= (x) 0)) (:goal (= (x) 0.5)))""")


@pytest.mark.parametrize("name", sorted(SMALL_PROBLEMS))
def test_small_catalogue_status(name):
    text, valid, _ = SMALL_PROBLEMS[name]
    res = solve(Task.from_pddl(SMALL_DOMAIN, text))
    if valid:
        assert res.status is PlanStatus.SOLVED and len(res.plan) == len(valid[0])
    else:
        assert res.status is PlanStatus.UNSOLVABLE and res.plan == ()


@pytest.mark.parametrize("problem,optimal", sorted(ENV_PROBLEMS.items()))
def test_kitchen_tasks_have_the_papers_plan_lengths(problem, optimal):
    task = Task.from_pddl(read("domain.pddl"), read(problem))
    res = solve(task)
    assert res.solved and len(res.plan) == optimal
    assert validate(task, res.plan) == ""


def test_time_limit_gives_timeout_not_an_exception():
    res = solve(Task.from_pddl(*COUNTERS), timeout_s=0.5)
    assert res.status is PlanStatus.TIMEOUT and res.plan == ()


def test_unreachable_numeric_goal_is_unsolvable():
    assert solve(Task.from_pddl(*ENDLESS), timeout_s=5).status is PlanStatus.UNSOLVABLE


def test_unknown_engine_is_misuse():
    with pytest.raises(UnknownEngine):
        solve(Task.from_pddl(SMALL_DOMAIN, SMALL_PROBLEMS["broken"][0]), engine="magic")


@pytest.mark.skipif(shutil.which("java") is None, reason="ENHSP needs Java")
@pytest.mark.parametrize("problem", ["env1_serve_fruit.pddl", "env2_heat_milk.pddl"])
def test_enhsp_cross_check(problem):
    """ENHSP finds plans of the same length, and each plan is valid in the other's eyes."""
    task = Task.from_pddl(read("domain.pddl"), read(problem))
    k, e = solve(task, engine="kairos"), solve(task, engine="enhsp", timeout_s=60)
    assert k.solved and e.solved
    assert len(k.plan) == len(e.plan) == ENV_PROBLEMS[problem]
    assert validate(task, e.plan) == "" and validate(task, k.plan) == ""


@pytest.mark.skipif(shutil.which("java") is None, reason="ENHSP needs Java")
def test_enhsp_agrees_on_unsolvable():
    res = solve(Task.from_pddl(SMALL_DOMAIN, SMALL_PROBLEMS["limit"][0]), engine="enhsp", timeout_s=60)
    assert res.status is PlanStatus.UNSOLVABLE
