"""Noun-phrase level of the rule-based landmark parser: find landmark phrases in one clause.

A landmark phrase starts at a determiner ("a", "the", "another", "two", ...) or, without one, right after
a path word ("past bleachers"), runs over open-class words until a closed-class word (see
:mod:`core.landmarks.lexicon`), and takes along locating or describing attachments ("a bench near the
oak tree", "a statue of a horse", "a row of bicycles"). Phrases whose head names a direction,
distance, count or time ("the second left", "three blocks") are not landmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from core.landmarks import lexicon as lx

_STOP = (lx.PRONOUNS | lx.PREPOSITIONS | lx.CONJUNCTIONS | lx.AUXILIARIES | lx.ADVERBS
         | lx.DETERMINERS | lx.VERBS | lx.NEGATIONS)
# Directly after a determiner, verbs ("the stop sign", "the parked car"), numbers ("the two hedges") and
# sides ("the left lane", "the back of ...") may start the phrase.
_STOP_FIRST = (_STOP - lx.VERBS - lx.NUMBERS - {"left", "right", "back", "first"}) | {"that"}
_PUNCT = frozenset(".,;:!?")
_SEQUENCE_HEADS = frozenset({"stop", "destination", "goal", "point", "location", "spot", "target"})
_NOT_PLURAL_ENDINGS = ("ss", "us", "is", "ys", "as")


@dataclass(frozen=True)
class Phrase:
    """One landmark phrase found in a clause.

    Attributes
    ----------
    text : str
        The landmark in the instruction's own words, article normalised ("the fountain" -> "a fountain",
        "the bleachers" -> "bleachers").
    start, end : int
        Token span ``[start, end)`` in the clause, attachments included.
    definite : bool
        Introduced by "the"/"this"/"these"/"those" (a repeated definite phrase refers back).
    """

    text: str
    start: int
    end: int
    definite: bool


def is_open_word(low: str) -> bool:
    """True for a lower-case token that can start a bare (article-less) landmark phrase."""
    return (low not in _STOP and low not in lx.NON_LANDMARK_HEADS and low not in lx.UNIT_HEADS
            and low not in _PUNCT
            and not low.isdigit() and low not in lx.ORDINALS)


def _is_participle_before_noun(low: Sequence[str], k: int) -> bool:
    """"parked scooters", "sleeping dogs": a verb form used as an adjective before an open word."""
    return (low[k].endswith(("ed", "ing")) and k + 1 < len(low) and is_open_word(low[k + 1]))


def _is_plural(word: str) -> bool:
    w = word.lower()
    return len(w) > 3 and w.endswith("s") and not w.endswith(_NOT_PLURAL_ENDINGS)


def _indefinite(first_word: str) -> str:
    w = first_word
    # short or vowel-less capitals are read letter by letter: "an SUV", "an RV", "a UPS truck";
    # longer shouted words are words: "a STOP SIGN"
    if w.isupper() and len(w) > 1 and (len(w) <= 3 or not any(c in "AEIOU" for c in w)):
        return "an" if w[0] in "AEFHILMNORSX" else "a"
    low = w.lower()
    if low.startswith(("uni", "use", "usu", "one", "eu", "ur")):
        return "a"
    return "an" if low[0] in "aeiou" or low.startswith(("hour", "honest")) else "a"


def _body_end(low: Sequence[str], k: int) -> int:
    """End of the open-word run starting at ``k`` (first word may be a verb/number/side)."""
    n = len(low)
    first = True
    while k < n:
        w = low[k]
        if w in _PUNCT or (first and w in _STOP_FIRST) or (not first and w in _STOP):
            break
        if not first:
            nxt = low[k + 1] if k + 1 < n else ""
            if w.endswith("ly") and len(w) > 4:
                break
            if "-" not in w and (w.endswith("ed") or w.endswith("ing")) and (
                    lx.is_determiner(nxt) or (w.endswith("ed") and nxt in lx.PREPOSITIONS)):
                break  # "a car parked on the left", "the bench facing the lake"
        k += 1
        first = False
    return k


def _match_attach(low: Sequence[str], k: int) -> tuple[str, int] | None:
    for prep in lx.ATTACH_PREPS:
        if tuple(low[k:k + len(prep)]) == prep:
            return prep[-1], k + len(prep)
    return None


def _core_phrase(words: Sequence[str], low: Sequence[str], start: int, *, has_det: bool,
                 prev_word: str) -> tuple[list[str], str | None, int, bool] | None:
    """Parse determiner + ordinals + body at ``start``.

    Returns ``(body_words, determiner, end, is_landmark)`` or None when there is no body.
    """
    det = low[start] if has_det else None
    k = start + 1 if has_det else start
    skipped_ordinal = None
    while k < len(low) and low[k] in lx.ORDINALS and has_det:
        skipped_ordinal = low[k]
        k += 1
    end = _body_end(low, k)
    if end == k:
        return None
    body = list(words[k:end])
    head = low[end - 1]
    landmark = head not in lx.NON_LANDMARK_HEADS
    if head in lx.UNIT_HEADS and (lx.is_number(det) or len(body) == 1 or lx.is_number(low[end - 2])):
        landmark = False  # "three blocks", "about fifty meters", "a few steps"
    if skipped_ordinal and head in _SEQUENCE_HEADS and len(body) == 1:
        landmark = False  # "the final stop", "the next destination": the sequence, not a place
    core = [w.lower() for w in body if w.lower() not in ("left", "right")]
    if len(core) == 1 and core[0] in lx.ROUTE_NOUNS and prev_word in lx.ROUTE_CHOICE_VERBS:
        landmark = False  # "take the path between ...": choosing a way
    return body, det, end, landmark


def _render(body: Sequence[str], det: str | None) -> str:
    text = " ".join(body)
    if det is None or det in ("some",):
        return text
    if det in ("a", "an", "the", "this", "that", "these", "those"):
        return text if _is_plural(body[-1]) else f"{_indefinite(body[0])} {text}"
    return f"{det} {text}"  # another, two, several, ...


def _attachment_end(words: Sequence[str], low: Sequence[str], k: int) -> int | None:
    """End of a locating/describing attachment starting at ``k`` ("near the oak tree", "parked beside a
    hedge", "in the middle of the square"), or None when none starts there."""
    m = _match_attach(low, k)
    if m is None and low[k].endswith("ed") and k + 1 < len(low):
        m = _match_attach(low, k + 1)  # "a van parked beside a hedge"
    if m is None or m[1] >= len(low):
        return None
    prep, after = m
    if lx.is_determiner(low[after]):
        inner = _core_phrase(words, low, after, has_det=True, prev_word=prep)
    elif prep in lx.BARE_ATTACH and (is_open_word(low[after]) or _is_participle_before_noun(low, after)):
        inner = _core_phrase(words, low, after, has_det=False, prev_word=prep)
    else:
        return None
    if inner is None:
        return None
    end = inner[2]
    if not inner[3]:
        # "in the middle of the square": a partitive whose object is the landmark
        if (low[end - 1] in lx.PARTITIVE_HEADS and low[end:end + 1] == ["of"] and end + 1 < len(low)
                and lx.is_determiner(low[end + 1])):
            obj = _core_phrase(words, low, end + 1, has_det=True, prev_word="of")
            if obj is not None and obj[3]:
                return obj[2]
        return None
    return end


def parse_phrase(words: Sequence[str], low: Sequence[str], start: int, *, has_det: bool,
                 prev_word: str = "") -> tuple[Phrase | None, int]:
    """Parse one phrase at ``start``; return ``(phrase or None, index to continue scanning at)``.

    ``words``/``low`` are the clause's tokens in original and lower case. A phrase whose head is not
    a landmark returns None and the index just after its head (its attachments are scanned on their
    own); a partitive ("the far side of the bridge") returns the inner landmark.
    """
    parsed = _core_phrase(words, low, start, has_det=has_det, prev_word=prev_word)
    if parsed is None:
        return None, start + 1
    body, det, end, landmark = parsed
    if not landmark:
        if low[end - 1] in lx.PARTITIVE_HEADS and end < len(low) and low[end] == "of":
            if end + 1 < len(low) and lx.is_determiner(low[end + 1]):
                return parse_phrase(words, low, end + 1, has_det=True)
        return None, end
    if (det == "a" and len(body) == 1 and low[end - 1] in lx.QUANTITY_HEADS and low[end:end + 1] == ["of"]
            and end + 1 < len(low)):  # "a couple of benches": the benches
        inner_det = lx.is_determiner(low[end + 1])
        if inner_det or is_open_word(low[end + 1]):
            return parse_phrase(words, low, end + 1, has_det=inner_det)
    parts = [_render(body, det)]
    k = end
    while k < len(low):
        inner_end = _attachment_end(words, low, k)
        if inner_end is None:
            break
        parts.append(" ".join(words[k:inner_end]))
        k = inner_end
    definite = det in ("the", "this", "these", "those")
    return Phrase(" ".join(parts), start, k, definite), k


def find_phrases(words: Sequence[str]) -> list[Phrase]:
    """All landmark phrases of one clause, in textual order.

    Parameters
    ----------
    words : sequence of str
        The clause's tokens (words and punctuation), original case.

    Returns
    -------
    list of Phrase
    """
    low = [w.lower() for w in words]
    out: list[Phrase] = []
    i = 0
    while i < len(low):
        w = low[i]
        prev = low[i - 1] if i > 0 else ""
        if lx.is_determiner(w):
            phrase, i = parse_phrase(words, low, i, has_det=True, prev_word=prev)
        elif w in lx.BARE_TRIGGERS and i + 1 < len(low) and (
                is_open_word(low[i + 1]) or _is_participle_before_noun(low, i + 1)):
            phrase, i = parse_phrase(words, low, i + 1, has_det=False, prev_word=w)
        else:
            phrase, i = None, i + 1
        if phrase is not None:
            out.append(phrase)
    return out
