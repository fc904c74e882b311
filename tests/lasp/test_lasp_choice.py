"""The constrained LLM diagnoser (models.lasp_choice): the grammar lets only candidate numbers out, the
model's picks reorder the offline candidates, failures and timeouts keep the offline order; on the real
llama.cpp with a generated tiny GGUF (random weights: its choices are arbitrary, never invalid)."""

from __future__ import annotations

import pytest

from core.lasp.benchmark import TASK_TEXT
from core.lasp.diagnosis import Candidate, DiagnosisContext, Failure, OfflineDiagnoser
from core.lasp.model import GroundAction
from models.lasp_choice import (
    MAX_TOP_K,
    ChoiceLlmDiagnoser,
    choice_grammar,
    choice_prompt,
    object_choice_prompt,
    parse_choice,
    pmi_prompts,
)
from models.llm import validate_gbnf

OBS = "The agent's sensors detected excessive heat and immediately released the sandwich."


@pytest.fixture
def ctx(cases):
    case = cases["3"]
    task = case.robot_task()
    step = GroundAction("pick", ("robot1", "sandwich", "microwave"))
    return DiagnosisContext(task, task.initial_state(), Failure(step, OBS), case.environment(0), [],
                            TASK_TEXT["heat-sandwich"])


# --- grammar, parsing, prompts (no model) ---------------------------------------------------------

@pytest.mark.parametrize("n, picks", [(1, 1), (2, 3), (8, 3), (8, 1), (MAX_TOP_K, 5)])
def test_choice_grammar_is_valid_gbnf(n, picks):
    g = choice_grammar(n, picks)
    validate_gbnf(g)
    assert f'"{n}"' in g and f'"{n + 1}"' not in g


@pytest.mark.parametrize("n, picks", [(0, 3), (MAX_TOP_K + 1, 3), (5, 0)])
def test_choice_grammar_rejects_bad_sizes(n, picks):
    with pytest.raises(ValueError):
        choice_grammar(n, picks)


def test_parse_choice():
    assert parse_choice(" 3, 1", 8) == [2, 0]
    assert parse_choice(" 2, 2, 5", 8) == [1, 4]      # a repeated id counts once
    for bad in ("", " 9", " 0", "three", " 1, x"):
        with pytest.raises(ValueError):
            parse_choice(bad, 8)


def test_pmi_prompts_differ_only_by_the_observation(ctx):
    with_obs, without = pmi_prompts(ctx)
    assert OBS in with_obs and OBS not in without
    assert with_obs.replace(" " + OBS, "") == without and with_obs.endswith("not true that")


def test_prompts_number_the_descriptions(ctx):
    cands = OfflineDiagnoser().diagnose(ctx)[:4]
    p = choice_prompt(ctx, cands)
    assert OBS in p and "(pick robot1 sandwich microwave)" in p and "Heat the sandwich" in p
    for i, c in enumerate(cands, 1):
        assert f"\n{i}. {c.description}\n" in p
    assert p.endswith("Answer:")
    objs = [Candidate("object", "glove", "pick", 0.5, (), "a heat-insulating glove")]
    assert "1. glove: a heat-insulating glove" in object_choice_prompt(ctx, cands[0], objs)
    with pytest.raises(ValueError):
        choice_prompt(ctx, [])
    with pytest.raises(ValueError):
        object_choice_prompt(ctx, cands[0], [])


@pytest.mark.parametrize("kwargs", [{"mode": "free"}, {"top_k": 1}, {"top_k": MAX_TOP_K + 1}, {"max_picks": 0},
                                    {"pmi_weight": -1.0}])
def test_constructor_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        ChoiceLlmDiagnoser(None, **kwargs)


# --- the real llama.cpp on a tiny random model -----------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    from models.llm import make_tiny_gguf, open_llm
    from models.llm.tiny_gguf import TinyLlamaShape

    path = make_tiny_gguf(tmp_path_factory.mktemp("lasp-choice") / "llm.gguf", seed=0,
                          shape=TinyLlamaShape(n_ctx_train=4096))
    with open_llm(path, n_ctx=4096, n_threads=1, seed=0, in_process=True) as llm:
        yield llm


@pytest.mark.llm
@pytest.mark.parametrize("n", [2, 5, 8, 12])
def test_grammar_lets_only_candidate_numbers_out_of_a_random_model(tiny_llm, n):
    for prompt in ("Answer:", "Candidates:\n1. a\n2. b\nAnswer:", "the red barn tower gate 7 9 11 Answer:"):
        text = tiny_llm.complete(prompt, grammar=choice_grammar(n, 3), max_tokens=16, temperature=0.0,
                                 timeout_s=30, stop=["\n"])
        picks = parse_choice(text, n)        # raises on anything but ids in 1..n
        assert 1 <= len(picks) <= 3 and all(0 <= i < n for i in picks)


def _check_reordering(out, offline, exchanges, role):
    assert sorted(c.pddl for c in out) == sorted(c.pddl for c in offline)  # nothing added or lost
    (ex,) = [e for e in exchanges if e["role"] == role]
    assert ex["verdict"].startswith("accepted: ")
    order = [int(x) - 1 for x in ex["verdict"].split(": ", 1)[1].split(", ")]
    picked = [offline[i].pddl for i in order]
    assert [c.pddl for c in out[:len(order)]] == picked                     # the model's choice first
    assert [c.pddl for c in out[len(order):]] == [c.pddl for c in offline if c.pddl not in picked]
    assert all("the LLM's choice" in c.reasons[-1] for c in out[:len(order)])


@pytest.mark.llm
@pytest.mark.parametrize("mode", ["choice", "score", "pmi"])
def test_choice_reorders_the_offline_candidates(ctx, tiny_llm, mode):
    offline = OfflineDiagnoser().diagnose(ctx)
    assert len(offline) >= 8
    d = ChoiceLlmDiagnoser(tiny_llm, mode=mode, top_k=8)
    out = d.diagnose(ctx)
    assert d.llm_calls == (2 if mode == "pmi" else 1) and d.name == f"llm-{mode}"
    ex = d.take_exchanges()
    _check_reordering(out, offline, ex, "precondition-choice")
    assert ex[0]["prompt"] == (pmi_prompts(ctx)[0] if mode == "pmi" else choice_prompt(ctx, offline[:8]))
    if mode != "choice":
        assert len(ex[0]["answer"].split(", ")) == 8           # one score per shown candidate
        assert len(ex[0]["verdict"].split(", ")) == 8          # all eight ranked
    assert d.take_exchanges() == []
    assert d.diagnose(ctx) == out                              # temperature 0: deterministic
    assert d.llm_calls == (3 if mode == "pmi" else 2)          # pmi: the prior is cached


@pytest.mark.llm
@pytest.mark.parametrize("mode", ["choice", "score", "pmi"])
def test_timeout_keeps_the_offline_order(ctx, tiny_llm, mode):
    offline = OfflineDiagnoser().diagnose(ctx)
    d = ChoiceLlmDiagnoser(tiny_llm, mode=mode, timeout_s=1e-6)   # any real request takes longer
    assert [c.pddl for c in d.diagnose(ctx)] == [c.pddl for c in offline]
    (ex,) = d.take_exchanges()
    assert ex["answer"] is None and "longer than" in ex["error"] and ex["verdict"].startswith("failed")
    assert d.llm_calls == 1
    assert tiny_llm.complete("1.", max_tokens=2, timeout_s=30) is not None   # the model still answers


@pytest.mark.llm
def test_a_closed_model_keeps_the_offline_order(ctx, tmp_path):
    from models.llm import make_tiny_gguf, open_llm

    llm = open_llm(make_tiny_gguf(tmp_path / "llm.gguf"), n_ctx=4096, in_process=True)
    llm.close()
    d = ChoiceLlmDiagnoser(llm)
    assert [c.pddl for c in d.diagnose(ctx)] == [c.pddl for c in OfflineDiagnoser().diagnose(ctx)]
    assert "closed" in d.take_exchanges()[0]["error"]


@pytest.mark.llm
def test_objects_are_chosen_among_the_unknown_ones(cases, tiny_llm):
    case = cases["9"]   # heat milk without the glove and the cup: two objects the robot does not know
    task = case.robot_task()
    step = GroundAction("pour", ("robot1", "milk", "bottle", "plate", "table"))
    ctx = DiagnosisContext(task, task.initial_state(), Failure(step, "The milk ran off the plate."),
                           case.environment(0), [], TASK_TEXT["heat-milk"])
    cause = Candidate("precondition", "(can-contain-liquid ?to)", "pour", description="the plate holds liquid")
    offline = OfflineDiagnoser().rank_objects(ctx, cause)
    assert sorted(o.pddl for o in offline) == ["cup", "glove"]
    d = ChoiceLlmDiagnoser(tiny_llm)
    out = d.rank_objects(ctx, cause)
    _check_reordering(out, offline, d.take_exchanges(), "object-choice")
    assert d.llm_calls == 1
    pmi = ChoiceLlmDiagnoser(tiny_llm, mode="pmi")     # pmi keeps the offline object order
    assert [o.pddl for o in pmi.rank_objects(ctx, cause)] == [o.pddl for o in offline] and pmi.llm_calls == 0


@pytest.mark.llm
def test_nothing_to_choose_costs_no_model_call(cases, tiny_llm):
    case = cases["5"]   # only the cup is unknown
    task = case.robot_task()
    step = GroundAction("pour", ("robot1", "milk", "bottle", "plate", "table"))
    ctx = DiagnosisContext(task, task.initial_state(), Failure(step, "The milk ran off the plate."),
                           case.environment(0), [], TASK_TEXT["heat-milk"])
    cause = Candidate("precondition", "(can-contain-liquid ?to)", "pour")
    d = ChoiceLlmDiagnoser(tiny_llm)
    assert [o.pddl for o in d.rank_objects(ctx, cause)] == ["cup"]
    assert d.llm_calls == 0 and d.take_exchanges() == []


@pytest.mark.llm
def test_loop_end_to_end_with_the_choice_diagnoser(cases, tiny_llm):
    from core.lasp.loop import LoopConfig, run_lasp

    case = cases["2"]
    d = ChoiceLlmDiagnoser(tiny_llm)
    res = run_lasp(case.robot_task(), case.environment(0), d, LoopConfig(max_llm_calls=10),
                   goal_text=TASK_TEXT[case.task_name])
    diag = [t for t in res.trace if t["kind"] == "diagnose"]
    assert diag and res.llm_calls == d.llm_calls >= 1
    for t in diag:
        for ex in t["exchanges"]:
            assert ex["role"] in ("precondition-choice", "object-choice")
            assert ex["verdict"].startswith("accepted")   # a grammar-valid answer every time
