"""LLM text side without a model: GBNF validation, the LM-Nav prompt, list parsing (models.llm)."""

from __future__ import annotations

import pytest

from models.llm.errors import GrammarError
from models.llm.grammar import LANDMARK_LIST_GBNF, landmark_list_grammar, validate_gbnf
from models.llm.prompts import HEADER, landmark_messages, landmark_prompt, parse_numbered_list


@pytest.mark.parametrize("text", [
    LANDMARK_LIST_GBNF,
    landmark_list_grammar(1),
    'root ::= ("a" | "b"\n    | c)+ # comment\nc ::= [^x\\]] .? "\\x41\\u00e9\\n"',
    'root ::= item{2,} item{3} item{0,4}\nitem ::= [a-z]',
])
def test_valid_grammars_pass(text):
    validate_gbnf(text)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ('rot ::= "a"', "no 'root'"),
    ("root ::= item", "not defined"),
    ('root ::= "a', "unterminated string"),
    ("root ::= [a-", "unterminated character class"),
    ("root ::= []", "empty character class"),
    ('root ::= ("a"', "missing"),
    ('root ::= "a"{3,1}', "max below min"),
    ('root ::= "a"{x}', "repetition"),
    ('root ::= "\\q"', "escape"),
    ('root ::= "\\x4"', "hex"),
    ('root ::= "a"\nroot ::= "b"', "defined twice"),
    ('root "a"', "::="),
    ('root ::= "a" )', "unexpected"),
])
def test_malformed_grammars_are_rejected_with_the_reason(text, message):
    with pytest.raises(GrammarError, match=message):
        validate_gbnf(text)


def test_landmark_grammar_bounds():
    with pytest.raises(ValueError):
        landmark_list_grammar(0)
    assert '"10. "' in landmark_list_grammar(10) and '"3. "' not in landmark_list_grammar(2)


def test_prompt_has_three_examples_then_the_instruction():
    prompt = landmark_prompt("  Go to the gate.  ")
    assert prompt.count(HEADER) == 4
    assert prompt.endswith(f"Go to the gate.\n{HEADER}\n")
    with pytest.raises(ValueError):
        landmark_prompt("   ")


def test_chat_messages():
    msgs = landmark_messages("Go to the gate.")
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert msgs[-1]["content"] == "Go to the gate."


@pytest.mark.parametrize("text, expected", [
    ("1. a stop sign\n2. a white car\n", ["a stop sign", "a white car"]),
    ("\n 1) a barn.\n2.a gate\n\nThat's all.\n3. ignored", ["a barn", "a gate"]),
    ("no list here", []),
    ("1. \n2. a tree", ["a tree"]),
])
def test_parse_numbered_list(text, expected):
    assert parse_numbered_list(text) == expected
