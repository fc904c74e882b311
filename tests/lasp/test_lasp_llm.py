"""The LLM diagnoser: prompts, GBNF grammars, parsing and rejection of answers, and the whole loop
on the real llama.cpp with a generated tiny GGUF (random weights: answers are grammar-valid, not
right)."""

from __future__ import annotations

import pytest

from core.lasp.benchmark import TASK_TEXT
from core.lasp.diagnosis import DiagnosisContext, Failure
from core.lasp.model import GroundAction
from core.lasp.sexpr import PddlSyntaxError
from models.lasp_llm import (
    REASONS_GBNF,
    ROLES,
    SENTENCE_GBNF,
    LlmDiagnoser,
    cause_prompt,
    check_pddl_answer,
    object_prompt,
    one_of_grammar,
    parse_property_answer,
    parse_reasons,
    pddl_grammar,
    precondition_prompt,
    property_grammar,
    property_prompt,
    translate_prompt,
)
from models.llm import validate_gbnf


@pytest.fixture
def ctx(cases):
    case = cases["3"]
    env = case.environment(0)
    task = case.robot_task()
    step = GroundAction("pick", ("robot1", "sandwich", "microwave"))
    return DiagnosisContext(task, task.initial_state(), Failure(
        step, "The agent's sensors detected excessive heat and immediately released the sandwich."),
        env, [], TASK_TEXT["heat-sandwich"])


def test_prompts_follow_the_papers_structure(ctx):
    p = cause_prompt(ctx)
    assert "(pick robot1 sandwich microwave)" in p and "excessive heat" in p
    assert "(is-empty-handed ?r - robot)" in p and "Heat the sandwich" in p and p.endswith("Reasons:\n")
    assert "?o (item, here sandwich)" in precondition_prompt(ctx, "It was too hot.")
    assert "- weight:" in property_prompt(ctx, "x", ["weight"])
    assert "weight/1" in translate_prompt(ctx, "x", {"weight": 1})
    from core.lasp.diagnosis import Candidate

    assert "glove, cup" in object_prompt(ctx, Candidate("precondition", "(a)"), ["glove", "cup"])
    assert len(ROLES) == 5


def test_grammars_are_valid_gbnf():
    for g in (REASONS_GBNF, SENTENCE_GBNF, property_grammar(["weight", "is-open"]), property_grammar([]),
              pddl_grammar({"is-open": [["c"]], "holding": [["r"], ["o"]]}, {"weight": [["o", "c"]]},
                           ["r", "o", "c"]),
              pddl_grammar({}, {"weight": [["o"]]}, ["o"]), one_of_grammar(["cup", "glove"])):
        validate_gbnf(g)
    with pytest.raises(ValueError):
        pddl_grammar({"is-open": [[]]}, {}, ["r"])
    with pytest.raises(ValueError):
        one_of_grammar([])


def test_answer_parsing_and_rejection():
    assert parse_reasons("1. It was hot.\n2. The door was shut.\n") == ["It was hot.", "The door was shut."]
    assert parse_reasons("no list") == []
    assert parse_property_answer("Yes: weight, lift-capacity", ["weight", "lift-capacity"]) == (
        True, ["weight", "lift-capacity"])
    assert parse_property_answer("No: heat-level", ["weight"]) == (False, ["heat-level"])
    with pytest.raises(ValueError):
        parse_property_answer("Yes: magic", ["weight"])          # hallucinated known property
    with pytest.raises(ValueError):
        parse_property_answer("Maybe", ["weight"])
    ar, params = {"is-open": 1, "weight": 1, "holding": 2}, ["r", "o", "c"]
    assert check_pddl_answer("(NOT (is-open ?c))", ar, params) == "(not (is-open ?c))"
    assert check_pddl_answer("(<= (weight ?o) (weight ?c))", ar, params)
    for bad in ["(is-closed ?c)", "(is-open ?x)", "(is-open fridge)", "(holding ?r)", "(is-open ?c"]:
        with pytest.raises(PddlSyntaxError):
            check_pddl_answer(bad, ar, params)


class _Scripted:
    """A stand-in LLM that answers each role from a script (for the mapping logic only)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.grammars = []

    def complete(self, prompt, *, grammar=None, **kw):
        self.grammars.append(grammar)
        return self.answers.pop(0)


def test_new_property_maps_to_the_most_similar_environment_property(ctx):
    llm = _Scripted(["1. The sandwich was too hot for the gripper.\n",
                     "the sandwich ?o must be cool enough for the hand ?r.",
                     "No: heat-level, hand-heat-limit",
                     "(<= (temperature ?o) (tolerance-temperature ?r))"])
    d = LlmDiagnoser(llm)
    (cand,) = d.diagnose(ctx)
    assert cand.pddl == "(<= (temperature ?o) (tolerance-temperature ?r))"
    assert set(cand.new_properties) == {"temperature", "tolerance-temperature"}
    assert d.llm_calls == 4 and [e["role"] for e in d.take_exchanges()] == list(ROLES[:4])
    assert "(temperature" in llm.grammars[-1]   # the translator's grammar offers the mapped names


def test_hallucinated_translation_is_rejected(ctx):
    d = LlmDiagnoser(_Scripted(["1. Hot.\n", "it must be cold.", "Yes: heated", "(is-frozen ?o)"]))
    assert d.diagnose(ctx) == []
    assert d.take_exchanges()[-1]["verdict"].startswith("rejected")


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    from models.llm import make_tiny_gguf, open_llm
    from models.llm.tiny_gguf import TinyLlamaShape

    path = make_tiny_gguf(tmp_path_factory.mktemp("lasp-llm") / "llm.gguf", seed=0,
                          shape=TinyLlamaShape(n_ctx_train=8192))
    with open_llm(path, n_ctx=8192, n_threads=1, seed=0, in_process=True) as llm:
        yield llm


@pytest.mark.llm
def test_loop_end_to_end_on_tiny_gguf(cases, tiny_llm):
    from core.lasp.loop import LoopConfig, run_lasp

    case = cases["2"]
    d = LlmDiagnoser(tiny_llm, max_tokens=48)
    res = run_lasp(case.robot_task(), case.environment(0), d, LoopConfig(max_llm_calls=30),
                   goal_text=TASK_TEXT[case.task_name])
    assert res.llm_calls >= 4 and res.llm_calls <= 30 + 4
    diag = [t for t in res.trace if t["kind"] == "diagnose"]
    assert diag and diag[0]["exchanges"][0]["role"] == "cause-analyser"
    for t in diag:
        for ex in t["exchanges"]:
            assert ex["answer"] is not None, ex
            if ex["role"] == "cause-analyser":
                assert parse_reasons(ex["answer"])          # grammar-valid numbered list
            if ex["role"] == "nl-to-pddl" and ex.get("verdict") == "accepted":
                assert ex["answer"].startswith("(")
    # whatever the weights said, nothing unknown reached the model
    robot = case.robot_task()
    for e in res.learned:
        if e.as_dict()["kind"] == "precondition":
            assert e.action in [a.name for a in robot.problem.actions]
