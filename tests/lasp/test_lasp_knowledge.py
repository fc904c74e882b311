"""The learned-knowledge PDDL diff: parsing, errors, applying to another task."""

from __future__ import annotations

import pytest

from core.lasp.knowledge import (
    LearnedFluent,
    LearnedObject,
    LearnedPrecondition,
    apply_edits,
    parse_pddl_diff,
    to_pddl_diff,
)
from core.lasp.sexpr import PddlSyntaxError

TEXT = """; robot-app LASP learned knowledge, format 1
(:function (temperature ?a0 - item))
(:effect heat increase (temperature ?o) 60)
(:init (= (temperature cup) 99) (= (temperature ghost) 5))
(:precondition pick (<= (temperature ?o) (tolerance-temperature ?r)))
(:object glove item)
(:init (is-heat-insulation glove) (on glove table))
"""


def test_parse_and_write_round_trip():
    edits = parse_pddl_diff(TEXT)
    assert [type(e) for e in edits] == [LearnedFluent, LearnedPrecondition, LearnedObject]
    assert edits[0].numeric and edits[0].param_types == ("item",)
    assert edits[0].effects == [("heat", "increase", "(temperature ?o)", "60")]
    assert edits[2].values[("on", ("glove", "table"))] is True
    assert parse_pddl_diff(to_pddl_diff(edits))[0].values == edits[0].values


@pytest.mark.parametrize("bad", ["(:bogus x)", "(:precondition pick)", "(:effect heat increase (t ?o) 1)",
                                 "(:init (a b))", "(:function (x ?a0 - item)"])
def test_malformed_entries_are_errors(bad):
    with pytest.raises(PddlSyntaxError):
        parse_pddl_diff(bad)


def test_apply_to_another_task_with_the_worlds_current_values(cases):
    case = cases["9"]
    env = case.environment(0)
    task = case.robot_task()
    applied = apply_edits(task, parse_pddl_diff(TEXT), sensing=env)
    # tolerance-temperature is unknown to this robot: the precondition is skipped, the rest applies
    assert [type(e) for e in applied] == [LearnedFluent, LearnedObject]
    state = task.initial_state()
    assert state[("temperature", ("plate",))] == 20.0          # the world's value
    assert state.holds(("on", ("glove", "table")))
    assert any(e.is_increase() and e.fluent.fluent().name == "temperature"
               for e in task.action("heat").effects)
