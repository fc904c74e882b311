"""The simulated environment: execution against the oracle, worded observations, sensing."""

from __future__ import annotations

import json

from core.lasp.environment import SimulatedEnvironment
from core.lasp.model import GroundAction
from core.lasp.similarity import lexical_similarity, stem
from tests.lasp.conftest import KITCHEN


def _env(task, seed=0):
    return SimulatedEnvironment(task, templates=json.loads((KITCHEN / "observations.json").read_text()),
                                seed=seed)


def test_failure_observation_is_words_not_pddl(oracle_milk):
    env = _env(oracle_milk)
    out = env.execute(GroundAction("pour", ("robot1", "milk", "bottle", "plate", "table")))
    assert not out.ok and "(" not in out.observation and "?" not in out.observation
    # the precondition that failed first is "holding the bottle"; the oracle names it for the logs
    assert out.failed_condition == "(holding ?r ?from)"
    assert env.state == oracle_milk.initial_state()  # a failed action changes nothing


def test_wording_varies_with_the_seed_only(oracle_milk):
    step = GroundAction("place-in", ("robot1", "cup", "microwave"))
    prefix = [GroundAction("pick", ("robot1", "cup", "table"))]
    texts = set()
    for seed in range(8):
        env = _env(oracle_milk, seed)
        for s in prefix:
            assert env.execute(s).ok
        out = env.execute(step)
        assert out.failed_condition == "(is-open ?c)" and "cup" in out.observation
        texts.add(out.observation)
        env2 = _env(oracle_milk, seed)
        for s in prefix:
            env2.execute(s)
        assert env2.execute(step).observation == out.observation
    assert len(texts) >= 3


def test_unknown_action_fails_cleanly(oracle_milk):
    out = _env(oracle_milk).execute(GroundAction("fly", ("robot1",)))
    assert not out.ok and "fly" in out.observation


def test_sensing(oracle_milk):
    env = _env(oracle_milk)
    assert env.value("temperature", ("cup",)) == 20.0
    assert env.value("temperature", ("robot1",)) is None      # wrong type
    assert env.value("nonsense", ("cup",)) is None
    assert env.value("can-contain-liquid", ("plate",)) is False
    assert env.objects()["glove"] == "item"
    assert "heat" in env.describe_object("glove")
    effects = {(e.action, e.kind) for e in env.property_effects("temperature")}
    assert effects == {("heat", "increase"), ("heat-liquid", "increase")}
    names = {p.name for p in env.properties()}
    assert {"weight", "lift-capacity", "is-open"} <= names


def test_goal_reached_after_the_oracle_plan(oracle_milk):
    from core.lasp.planner import solve

    env = _env(oracle_milk)
    for step in solve(oracle_milk).plan:
        assert env.execute(step).ok
    assert env.goal_reached()


def test_lexical_similarity_shape_and_synonyms():
    sim = lexical_similarity(["the pot is too hot to hold"],
                             ["its temperature in degrees", "its weight in kilograms", ""])
    assert sim.shape == (1, 3) and sim.dtype.kind == "f"
    assert sim[0, 0] > sim[0, 1] and sim[0, 2] == 0.0
    assert abs(lexical_similarity(["open door"], ["open door"])[0, 0] - 1.0) < 1e-9
    assert stem("heated") == stem("heat") and stem("lifting") == stem("lift")
