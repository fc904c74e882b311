"""Rule-based landmark parser and LM-Nav's extraction-success metric (core.landmarks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.landmarks import extraction_success, lcs_length, normalize_landmark, parse_landmarks

EXTRA = Path(__file__).parent / "data" / "landmark_instructions_extra.jsonl"


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- metric ---------------------------------------------------------------------------------------

def test_normalize_drops_articles_case_and_space():
    assert normalize_landmark("  The  Red\tBarn ") == "red barn"
    assert normalize_landmark("an SUV") == "suv"
    assert normalize_landmark("another picnic table") == "another picnic table"


def test_lcs_length_reference_cases():
    assert lcs_length([], ["a"]) == 0
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4
    assert lcs_length(["x"], ["x"]) == 1


@pytest.mark.parametrize("extracted, truth, expected", [
    (["a fountain", "the bench"], ["fountain", "bench"], 1.0),
    (["bench", "fountain"], ["fountain", "bench"], 0.5),
    ([], ["fountain"], 0.0),
    (["a", "fountain", "gate", "bench"], ["fountain", "bench"], 1.0),
    (["The Fountain"], ["a fountain", "a bench", "a gate"], 1 / 3),
])
def test_extraction_success(extracted, truth, expected):
    assert extraction_success(extracted, truth) == pytest.approx(expected)


def test_extraction_success_rejects_empty_truth_and_non_strings():
    with pytest.raises(ValueError, match="empty"):
        extraction_success(["a"], [])
    with pytest.raises(TypeError, match="string"):
        extraction_success([3], ["a"])


# --- parser: the phenomena of route instructions --------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("Go past the bench and the fountain.", ["a bench", "a fountain"]),
    ("Look for a mailbox after passing the bakery.", ["a bakery", "a mailbox"]),
    ("Before the gate you will pass a shed.", ["a shed", "a gate"]),
    ("Before you reach the gate, pass a shed.", ["a shed", "a gate"]),
    ("Go to the kiosk, which comes after the fountain.", ["a fountain", "a kiosk"]),
    ("Reach the tower. On the way, pass a bench and then a well.", ["a bench", "a well", "a tower"]),
    ("The final destination is the dock; go there via the boathouse.", ["a boathouse", "a dock"]),
    ("Go to the shed. Start at the gate.", ["a gate", "a shed"]),
    ("Find a cone. Then find another cone.", ["a cone", "another cone"]),
    ("Stop at a square with a large tree.", ["a square with a large tree"]),
    ("Drive to a statue of a horse.", ["a statue of a horse"]),
    ("Take the second left, go three blocks and drive for fifty meters to the kiosk.", ["a kiosk"]),
    ("Don't take the gravel road; go to the barn.", ["a barn"]),
    ("Go to the barn instead of the silo.", ["a barn"]),
    ("Find the fountain, but first pass a bench.", ["a bench", "a fountain"]),
    ("Look for a hoop. It is past the courts.", ["courts", "a hoop"]),
    ("Go to the tree. Turn left at the tree and find a gate.", ["a tree", "a gate"]),
    ("Stop next to an SUV near the old parking meter.", ["an SUV near the old parking meter"]),
    ("Go to the far side of the bridge.", ["a bridge"]),
    ("Head to the solar panels.", ["solar panels"]),
    ("Head east on Elm Street to the library.", ["Elm Street", "a library"]),
    ("Drive past 3 houses, go 200 m and stop at Building 4.", ["3 houses", "Building 4"]),
    ("Go past a couple of benches to the third lamp post past the hotel.",
     ["benches", "a hotel", "a lamp post"]),
    ("Follow the dirt road past the silo.", ["a dirt road", "a silo"]),
    ("Stop when you get to a blue van parked beside a hedge.", ["a blue van parked beside a hedge"]),
    ("Go to the flag pole in the middle of the square.", ["a flag pole in the middle of the square"]),
    ("Turn left.", []),
    ("", []),
])
def test_parser_phenomena(text, expected):
    assert parse_landmarks(text) == expected


def test_parser_keeps_the_instructions_own_words():
    out = parse_landmarks("Go to the Old Mill by the river.")
    assert out == ["an Old Mill by the river"]


def test_parser_rejects_bad_input():
    with pytest.raises(TypeError, match="instruction must be a string"):
        parse_landmarks(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        parse_landmarks("go " * 5000)


# --- evaluation sets ------------------------------------------------------------------------------

def _mean_success(items: list[dict]) -> float:
    return sum(extraction_success(parse_landmarks(d["instruction"]), d["landmarks"])
               for d in items) / len(items)


def test_own_instruction_set_meets_target():
    items = _load(EXTRA)
    assert len(items) >= 30
    assert _mean_success(items) >= 0.95


def test_shared_development_set_meets_target(dev_data):
    items = _load(dev_data / "landmark_instructions.jsonl")
    assert _mean_success(items) >= 0.95


# --- robustness: never raises on arbitrary text ---------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_WORDS = st.sampled_from(
    "a an the another two first second of with near next to in front past after before until which it "
    "is then and but don't avoid on the way final destination start at go turn left right stop bench "
    "tree red parked by way via blocks meters . , ; ! ? '".split())


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.lists(_WORDS, max_size=40).map(" ".join)))
def test_parser_never_raises_and_returns_clean_strings(text):
    out = parse_landmarks(text)
    assert isinstance(out, list)
    for lm in out:
        assert isinstance(lm, str) and lm == lm.strip() and lm


def test_non_ascii_letters_and_shouted_words_are_kept():
    from core.landmarks import parse_landmarks

    got = parse_landmarks("Go to Café Strada, then stop at the STOP SIGN. Pass the SUV.")
    assert got == ["Café Strada", "a STOP SIGN", "an SUV"]
