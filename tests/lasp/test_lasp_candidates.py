"""The offline diagnoser's candidate space: nothing the failed action's own definition contradicts."""

from __future__ import annotations

from core.lasp.benchmark import load_cases
from core.lasp.diagnosis import (
    BeliefSensing,
    DiagnosisContext,
    Failure,
    enumerate_preconditions,
    ruled_out_by_definition,
)
from core.lasp.model import GroundAction
from tests.lasp.conftest import KITCHEN


def test_candidates_that_contradict_the_actions_definition_are_never_offered():
    task = load_cases(KITCHEN)["3"].robot_task()
    ruled = ruled_out_by_definition(task, "pick")
    # the negation of a precondition conjunct, what pick achieves, the negation of what it removes
    assert {"(not (is-empty-handed ?r))", "(holding ?r ?o)", "(not (on ?o ?l))", "(not (in ?o ?l))"} <= ruled
    assert ruled_out_by_definition(task, "open") == {"(is-open ?c)"}  # needs it closed, makes it open
    state = task.initial_state()
    step = next(_pick_steps(task, state), None)
    assert step is not None
    ctx = DiagnosisContext(task, state, Failure(step, "it slipped out of the gripper"), BeliefSensing(task, state))
    got = {c.pddl for c in enumerate_preconditions(ctx)}
    assert got and not (got & ruled), sorted(got & ruled)

def _pick_steps(task, state):
    """Ground pick actions that are applicable in ``state`` (the failure of one is what is diagnosed)."""
    import itertools

    action = task.action("pick")
    pools = [task.objects_of(p.type.name) for p in action.parameters]
    for combo in itertools.product(*pools):
        if task.failed_conjunct("pick", combo, state) is None:
            yield GroundAction("pick", tuple(combo))


def test_every_candidate_type_checks_over_the_actions_declared_parameters():
    """``place ?o ?l - thing`` bound to an item: ``(holding ?r ?l)`` fits this binding (the object is an
    item) but not the action (``?l`` is any thing), so it is no precondition; it once crashed the history
    check of a later diagnosis."""
    import itertools

    from core.lasp.sexpr import build_fnode, parse_sexpr

    for cid in ("3", "4", "9"):
        task = load_cases(KITCHEN)[cid].robot_task()
        state = task.initial_state()
        for action in task.problem.actions:
            pools = [task.objects_of(p.type.name) for p in action.parameters]
            params = {p.name: p for p in action.parameters}
            for combo in itertools.islice(itertools.product(*pools), 40):
                ctx = DiagnosisContext(task, state, Failure(GroundAction(action.name, tuple(combo)), "it failed"),
                                       BeliefSensing(task, state))
                for c in enumerate_preconditions(ctx):
                    if not c.new_properties:
                        build_fnode(parse_sexpr(c.pddl), task.problem, params)  # raises if ill-typed
