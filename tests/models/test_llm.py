"""LLM runtime on the real llama.cpp with a generated tiny GGUF (models.llm)."""

from __future__ import annotations

import hashlib
import re

import pytest

pytestmark = pytest.mark.llm  # the LLM lane (llama.cpp): pytest -m llm

from models.llm import (  # noqa: E402
    LANDMARK_LIST_GBNF,
    GrammarError,
    LlmError,
    LlmTimeout,
    extract_landmarks_llm,
    make_tiny_gguf,
    open_llm,
)
from models.llm.grammar import MAX_LIST_ITEMS, MAX_PHRASE_WORDS  # noqa: E402
from models.llm.tiny_gguf import TinyLlamaShape  # noqa: E402

INSTRUCTION = "Go past the red barn, then stop at the white gate."
_ITEM_LINE = re.compile(r"^(\d+)\. [A-Za-z0-9][A-Za-z0-9'-]*(,? [A-Za-z0-9][A-Za-z0-9'-]*)*$")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_gguf(tmp_path_factory.mktemp("llm") / "llm.gguf", seed=0)


@pytest.fixture(scope="module")
def llm(tiny_model):
    with open_llm(tiny_model, n_ctx=1024, n_threads=1, n_gpu_layers=0, seed=0, in_process=True) as client:
        yield client


# --- tiny model generator -------------------------------------------------------------------------

def test_tiny_gguf_is_seeded(tmp_path):
    a = make_tiny_gguf(tmp_path / "a.gguf", seed=3)
    b = make_tiny_gguf(tmp_path / "b.gguf", seed=3)
    c = make_tiny_gguf(tmp_path / "c.gguf", seed=4)
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]


@pytest.mark.parametrize("shape", [TinyLlamaShape(n_embd=60, n_head=8), TinyLlamaShape(n_embd=48, n_head=16),
                                   TinyLlamaShape(n_head=4, n_head_kv=3)])
def test_tiny_gguf_rejects_shapes_llama_cpp_aborts_on(tmp_path, shape):
    with pytest.raises(ValueError, match="n_head"):
        make_tiny_gguf(tmp_path / "bad.gguf", shape=shape)


# --- in-process: loading, prompting, grammar, determinism, limits ---------------------------------

def test_grammar_constrained_output_is_a_numbered_list(llm):
    text = llm.complete("1.", grammar=LANDMARK_LIST_GBNF, max_tokens=400, temperature=0.0, timeout_s=30)
    lines = text.rstrip("\n").split("\n")
    assert 1 <= len(lines) <= MAX_LIST_ITEMS
    for k, line in enumerate(lines, 1):
        if k == len(lines) and not text.endswith("\n"):
            break  # cut by max_tokens mid-item
        assert _ITEM_LINE.match(line), line
        assert line.startswith(f"{k}. ")
        assert len(line.split(" ", 1)[1].split()) <= MAX_PHRASE_WORDS


def test_landmark_extraction_parses_and_is_deterministic(llm, tiny_model):
    first = extract_landmarks_llm(llm, INSTRUCTION)
    assert 1 <= len(first) <= MAX_LIST_ITEMS and all(isinstance(x, str) and x for x in first)
    assert extract_landmarks_llm(llm, INSTRUCTION) == first
    with open_llm(tiny_model, n_ctx=1024, n_threads=1, seed=7, in_process=True) as other:
        assert extract_landmarks_llm(other, INSTRUCTION) == first  # temperature 0 is greedy


def test_chat_template_variant(llm):
    landmarks = extract_landmarks_llm(llm, INSTRUCTION, chat=True)
    assert 1 <= len(landmarks) <= MAX_LIST_ITEMS


def test_usage_is_reported(llm):
    llm.complete("the red barn", max_tokens=5)
    assert llm.last_usage["prompt_tokens"] > 0
    assert 1 <= llm.last_usage["completion_tokens"] <= 5
    assert llm.last_usage["seconds"] >= 0


def test_timeout_raises_llm_timeout(llm):
    with pytest.raises(LlmTimeout) as info:
        llm.complete("the red barn " * 50, max_tokens=200, timeout_s=1e-4)
    assert isinstance(info.value, TimeoutError)


def test_malformed_grammar_is_rejected_before_llama_cpp(llm):
    with pytest.raises(GrammarError, match="not defined"):
        llm.complete("x", grammar='root ::= item\nitm ::= "a"')


def test_prompt_longer_than_context_is_an_llm_error(llm):
    with pytest.raises(LlmError, match="context"):
        llm.complete("barn " * 3000, max_tokens=4)


@pytest.mark.parametrize("kwargs", [dict(max_tokens=0), dict(temperature=-1.0), dict(timeout_s=0.0)])
def test_bad_request_arguments(llm, kwargs):
    with pytest.raises(LlmError):
        llm.complete("x", **kwargs)


def test_open_llm_errors(tmp_path, tiny_model):
    with pytest.raises(LlmError, match="not found"):
        open_llm(tmp_path / "missing.gguf", in_process=True)
    with pytest.raises(LlmError, match="n_threads"):
        open_llm(tiny_model, n_threads=0, in_process=True)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(LlmError):
        open_llm(junk, in_process=True)


def test_closed_client_refuses(tiny_model):
    client = open_llm(tiny_model, n_ctx=256, in_process=True)
    client.close()
    client.close()
    with pytest.raises(LlmError, match="closed"):
        client.complete("x")


# --- worker process: same answers, crash and hang recovery ----------------------------------------

def test_worker_matches_in_process_and_restarts_after_crash(llm, tiny_model):
    expected = extract_landmarks_llm(llm, INSTRUCTION)
    with open_llm(tiny_model, n_ctx=1024, n_threads=1, in_process=False) as worker:
        assert worker.load_s > 0
        assert extract_landmarks_llm(worker, INSTRUCTION) == expected
        pid = worker.pid
        with pytest.raises(LlmError, match="died"):
            worker._request({"kind": "crash", "timeout_s": 10.0})  # llama.cpp-style abort()
        assert worker.pid is None
        assert extract_landmarks_llm(worker, INSTRUCTION) == expected  # restarted on demand
        assert worker.pid not in (None, pid) and worker.restarts == 1


def test_worker_hard_deadline_kills_a_hung_worker(tiny_model):
    with open_llm(tiny_model, n_ctx=256, in_process=False) as worker:
        worker.hard_grace_s = 0.2
        with pytest.raises(LlmTimeout):
            worker._request({"kind": "sleep", "seconds": 30.0, "timeout_s": 0.3})
        assert worker.pid is None
        assert isinstance(worker.complete("barn", max_tokens=3), str)


def test_worker_gives_up_after_repeated_failures(tiny_model):
    with open_llm(tiny_model, n_ctx=256, in_process=False) as worker:
        for _ in range(3):
            with pytest.raises(LlmError, match="died"):
                worker._request({"kind": "crash", "timeout_s": 10.0})
        with pytest.raises(LlmError, match="not restarting"):
            worker.complete("barn", max_tokens=3)


def test_worker_reports_load_failure(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but not really")
    with pytest.raises(LlmError):
        open_llm(junk, in_process=False, load_timeout_s=60)


def test_dropped_worker_client_does_not_leave_its_process(tiny_model):
    import gc

    worker = open_llm(tiny_model, n_ctx=256, in_process=False)
    proc = worker._proc
    del worker
    gc.collect()
    assert proc.poll() is not None
