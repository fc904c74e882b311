"""Landmark extraction by span choice (models.llm.spans): the grammar offers only the instruction's own
phrases; on the real llama.cpp with a tiny random GGUF every landmark is one of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.landmarks.metrics import normalize_landmark
from models.llm import validate_gbnf
from models.llm.spans import MAX_SPAN_WORDS, extract_landmarks_spans, instruction_spans, span_list_grammar

INSTRUCTION = "Find the fountain, but first pass by a wooden bench near the oak tree."
DEV = Path(__file__).resolve().parents[1] / "data" / "landmark_instructions.jsonl"


def test_spans_are_phrases_of_the_instruction():
    spans = instruction_spans(INSTRUCTION)
    assert "the fountain" in spans and "a wooden bench near the oak tree" in spans and "oak tree" in spans
    for bad in ("Find the fountain", "pass by a wooden bench", "fountain but", "the", "fountain first"):
        assert bad not in spans          # closed-class words at an edge, or across the comma
    assert "fountain but first" not in instruction_spans(INSTRUCTION, filtered=False)  # the comma cuts
    assert "Find the fountain" in instruction_spans(INSTRUCTION, filtered=False)
    assert all(len(s.split()) <= 3 for s in instruction_spans(INSTRUCTION, max_words=3))
    assert instruction_spans("Go left, then go back.") == [] and instruction_spans("") == []
    with pytest.raises(ValueError):
        instruction_spans(INSTRUCTION, max_words=0)


def test_grammar_is_valid_for_every_development_instruction():
    for line in DEV.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        spans = instruction_spans(item["instruction"])
        assert spans and all(len(s.split()) <= MAX_SPAN_WORDS for s in spans)
        validate_gbnf(span_list_grammar(spans))
    with pytest.raises(ValueError):
        span_list_grammar([])
    with pytest.raises(ValueError):
        span_list_grammar(["a"], max_items=0)


def test_quotes_and_backslashes_are_escaped():
    validate_gbnf(span_list_grammar(['the "big" gate', "a back\\slash"]))


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    from models.llm import make_tiny_gguf, open_llm

    path = make_tiny_gguf(tmp_path_factory.mktemp("llm-spans") / "llm.gguf", seed=0)
    with open_llm(path, n_ctx=2048, n_threads=1, seed=0, in_process=True) as llm:
        yield llm


@pytest.mark.llm
def test_a_random_model_can_only_answer_with_the_instructions_phrases(tiny_llm):
    from models.llm.prompts import landmark_prompt, parse_numbered_list

    for line in DEV.read_text(encoding="utf-8").splitlines()[:8]:
        text = json.loads(line)["instruction"]
        spans = instruction_spans(text)
        raw = tiny_llm.complete(landmark_prompt(text), grammar=span_list_grammar(spans), max_tokens=200,
                                temperature=0.0, timeout_s=30, stop=["\n\n"])
        items = parse_numbered_list(raw)
        assert items and all(x in spans for x in items), raw
        got = extract_landmarks_spans(tiny_llm, text, max_tokens=200)
        assert got == [x for i, x in enumerate(items)
                       if normalize_landmark(x) not in {normalize_landmark(y) for y in items[:i]}]
        assert 1 <= len(got) <= 10


@pytest.mark.llm
def test_errors(tiny_llm):
    from models.llm import LlmError, LlmTimeout

    with pytest.raises(ValueError):
        extract_landmarks_spans(tiny_llm, "  ")
    with pytest.raises(ValueError):
        extract_landmarks_spans(tiny_llm, "Go left, then go back.")          # nothing to choose from
    with pytest.raises(LlmTimeout):
        extract_landmarks_spans(tiny_llm, INSTRUCTION, timeout_s=1e-6)
    with pytest.raises(LlmError):
        extract_landmarks_spans(tiny_llm, INSTRUCTION, max_tokens=1)  # cut before any whole phrase


@pytest.mark.llm
def test_parse_instruction_llm_spans_mode(tmp_path):
    from models.llm import make_tiny_gguf
    from robot_app.config import config_from_mapping
    from robot_app.route.landmark_parsing import parse_instruction

    config = config_from_mapping({"paths": {"models_dir": str(tmp_path)},
                                  "llm": {"worker": False, "landmark_parser": "llm-spans"}})
    assert parse_instruction(INSTRUCTION, config=config)[1] == "rules"     # no model: the rules
    make_tiny_gguf(tmp_path / "llm.gguf", sidecar=True)
    landmarks, used = parse_instruction(INSTRUCTION, config=config)
    assert used == "llm-spans" and set(landmarks) <= set(instruction_spans(INSTRUCTION))
    assert parse_instruction("Go left, then go back.", config=config) == ([], "rules")  # no phrase: the rules
