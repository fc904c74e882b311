"""Log-likelihood scoring (LlmClient.score, models.llm.scoring) on the real llama.cpp with a tiny GGUF."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.llm  # the LLM lane (llama.cpp): pytest -m llm

from models.llm import LlmError, LlmTimeout, make_tiny_gguf, open_llm  # noqa: E402
from models.llm.scoring import MAX_CONTINUATIONS  # noqa: E402

PROMPT = "Go past the red barn, then stop at the white gate.\nOrdered landmarks:\n1."


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_gguf(tmp_path_factory.mktemp("llm-score") / "llm.gguf", seed=0)


@pytest.fixture(scope="module")
def llm(tiny_model):
    with open_llm(tiny_model, n_ctx=1024, n_threads=1, seed=0, in_process=True) as client:
        yield client


def test_scores_are_log_probabilities_and_deterministic(llm):
    conts = [" the red barn", " a white gate", " 3", " tree"]
    first = llm.score(PROMPT, conts)
    assert len(first) == 4 and all(x <= 0.0 and math.isfinite(x) for x in first)
    assert llm.last_usage["tokens"] == [len(llm_tokens(llm, PROMPT, c)) for c in conts]
    assert llm.score(PROMPT, conts) == pytest.approx(first, abs=1e-4)
    assert llm.score(PROMPT, conts[::-1]) == pytest.approx(first[::-1], abs=1e-4)   # independent


def llm_tokens(llm, prompt, cont):
    full = llm._llama.tokenize((prompt + cont).encode(), add_bos=True)
    return full[len(llm._llama.tokenize(prompt.encode(), add_bos=True)):]


def test_chain_rule(llm):
    """log P(a b | p) = log P(a | p) + log P(b | p a) when the tokens split at the same place."""
    a, b = " the red", " barn"
    assert llm_tokens(llm, PROMPT, a + b) == llm_tokens(llm, PROMPT, a) + llm_tokens(llm, PROMPT + a, b)
    (ab,) = llm.score(PROMPT, [a + b])
    (pa,) = llm.score(PROMPT, [a])
    (pb,) = llm.score(PROMPT + a, [b])
    assert ab == pytest.approx(pa + pb, abs=1e-3)


def test_the_greedy_token_scores_highest(llm):
    """The continuation greedy decoding writes is, token for token, the most probable one."""
    text = llm.complete(PROMPT, max_tokens=1, temperature=0.0, timeout_s=30)
    others = [" gate", " red", " tree", " stop", " 7"]
    scores = llm.score(PROMPT, [text] + [o for o in others if o != text])
    assert scores[0] == max(scores)


def test_scoring_leaves_completions_unchanged(llm):
    before = llm.complete(PROMPT, max_tokens=12, temperature=0.0, timeout_s=30)
    llm.score(PROMPT, [" the red barn", " a white gate and more words"])
    llm.score("Another prompt entirely.", [" x"])
    assert llm.complete(PROMPT, max_tokens=12, temperature=0.0, timeout_s=30) == before


def test_worker_scores_like_in_process(llm, tiny_model):
    conts = [" the red barn", " 2"]
    with open_llm(tiny_model, n_ctx=1024, n_threads=1, seed=0) as worker:
        assert worker.score(PROMPT, conts) == pytest.approx(llm.score(PROMPT, conts), abs=1e-3)


@pytest.mark.parametrize("prompt, conts", [
    (PROMPT, []), (PROMPT, [""]), ("", [" a"]), (PROMPT, [" a"] * (MAX_CONTINUATIONS + 1)),
    (PROMPT, [" barn" * 1200]),     # longer than the context
])
def test_bad_requests_are_llm_errors(llm, prompt, conts):
    with pytest.raises(LlmError):
        llm.score(prompt, conts)


def test_timeout(llm):
    with pytest.raises(LlmTimeout):
        llm.score(PROMPT, [" a", " b"], timeout_s=1e-6)
