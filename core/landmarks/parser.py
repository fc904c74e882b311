"""Rule-based landmark parser: route instruction -> ordered landmark list, no model needed.

The offline counterpart of LM-Nav's LLM landmark extraction (LM-Nav, Shah et al., CoRL 2022, Sec. 4.1
and App. A): the robot's default when no ``llm.gguf`` is installed. Labelling conventions (those of
``tests/data/landmark_instructions.jsonl``, see ``tests/data/README.md``): landmarks in the order the robot
reaches them, locating/describing modifiers kept attached, directions/turns/distances/counts dropped, things
to avoid excluded.

How it works: the text is split into sentences and clauses (at punctuation and at clause words such as
"then", "after", "before", "until", "which"); :mod:`core.landmarks.phrases` finds the landmark phrases
of each clause; each clause then places its landmarks in the visiting order:

- default: after everything so far;
- "X after Y" / "X, which comes after Y" / "It is past Y" / "but first Y" / "before that, Y":
  Y just before the landmark referred to;
- "Before Y, X" (sentence-initial) and "On the way to Y, X": Y after the rest of the sentence;
- "on the way" / "along the way" / "by way of" / "via": before the destination named last;
- "the final destination/stop is X": X last; "start at X": X first;
- "don't take X" / "avoid X" / "without X" / "not X": X dropped;
- a repeated "the X" refers back to the earlier X (no new landmark); "another X" is a new one.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from core.landmarks import lexicon as lx
from core.landmarks.metrics import normalize_landmark
from core.landmarks.phrases import find_phrases, is_open_word

log = logging.getLogger(__name__)

# letters and digits of any script ("Café", "naïve"), with inner apostrophes and hyphens
_TOKEN = re.compile(r"[^\W_]+(?:['\-][^\W_]+)*|[.,;:!?]")
_SENTENCE_END = frozenset(".!?")
_CLAUSE_PUNCT = frozenset(",;:")
_CLAUSE_WORDS = frozenset({
    "then", "but", "until", "till", "when", "whenever", "once", "after", "before", "while", "where",
    "which", "so", "because", "if", "unless", "and", "or", "as", "afterwards",
})
_SUBORDINATORS = frozenset({"before", "after", "once", "when", "whenever", "until", "till", "while", "as"})
_NEW_SUBJECTS = frozenset({"you", "we", "i"})
_CONTINUE_LEADS = frozenset({"and", "or", "then", ",", ";"})
_FINAL_WORDS = frozenset({"destination", "goal"})
_FINAL_PAIRS = frozenset({("final", "stop"), ("last", "stop"), ("final", "point"), ("end", "point"),
                          ("final", "location"), ("final", "target")})
_GOAL_WORDS = frozenset({"to", "toward", "towards", "at", "for", "find", "reach", "see", "by", "near"})
_START_WORDS = frozenset({"start", "begin", "starting", "beginning", "starts", "begins"})
MAX_INSTRUCTION_CHARS = 10_000


@dataclass
class _Clause:
    lead: list[str]
    words: list[str] = field(default_factory=list)

    @property
    def low(self) -> list[str]:
        return [w.lower() for w in self.words]


@dataclass
class _Landmark:
    text: str
    key: str
    pin: int = 0  # -1 first, +1 last


@dataclass
class _Statement:
    """A clause with its continuations ("..., and the bleachers")."""

    op: str  # "append", "before", "after", "pending"
    ref: _Landmark | None
    pin: int = 0
    negated: bool = False
    pronoun_subject: bool = False
    landmarks: list[_Landmark] = field(default_factory=list)
    cursor: _Landmark | None = None  # last one inserted by an "after" op


def tokenize(text: str) -> list[list[str]]:
    """Split an instruction into sentences of word/punctuation tokens (curly quotes normalised)."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\n", " . ")
    sentences: list[list[str]] = [[]]
    for tok in _TOKEN.findall(text):
        if tok in _SENTENCE_END:
            if sentences[-1]:
                sentences.append([])
        else:
            sentences[-1].append(tok)
    return [s for s in sentences if s]


def split_clauses(sentence: list[str]) -> list[_Clause]:
    """Split one sentence at clause punctuation and clause words; "is past Y" opens an "after" clause."""
    clauses = [_Clause(lead=[])]
    for i, tok in enumerate(sentence):
        low = tok.lower()
        prev = sentence[i - 1].lower() if i else ""
        cur = clauses[-1]
        if tok in _CLAUSE_PUNCT:
            clauses.append(_Clause(lead=[tok]))
        elif low in _NEW_SUBJECTS and cur.words and set(cur.lead) & _SUBORDINATORS:
            clauses.append(_Clause(lead=[","], words=[tok]))  # "Before the bridge you will ..."
        elif low in _CLAUSE_WORDS or (low in ("past", "beyond") and (
                prev in lx.BE_VERBS or (is_open_word(prev) and _after_goal_phrase(cur.words)))):
            # "past"/"beyond" after "is" or after a goal ("go to the lamp post past the hotel") orders
            # like "after"; after a verb ("drive past") or a followed way ("follow the road past the
            # silo") it is a path preposition.
            # "is past Y" orders like "after"; "the lamp post past Y" refers to the phrase just before
            word = ("after" if prev in lx.BE_VERBS else "past") if low in ("past", "beyond") else low
            if cur.words:
                clauses.append(_Clause(lead=[word]))
            else:
                cur.lead.append(word)
        else:
            cur.words.append(tok)
    return [c for c in clauses if c.words or c.lead]


def _after_goal_phrase(words: list[str]) -> bool:
    """True when the clause so far ends in a phrase introduced by a goal word ("to the lamp post")."""
    low = [w.lower() for w in words]
    for j in range(len(low) - 1, -1, -1):
        if lx.is_determiner(low[j]):
            return j > 0 and low[j - 1] in _GOAL_WORDS
    return False


def _has_way_marker(low: list[str]) -> str | None:
    """"to" for "on the way to Y", "way" for the other en-route markers, else None."""
    for i, w in enumerate(low):
        if w == "via" or (w == "en" and low[i + 1:i + 2] == ["route"]):
            return "way"
        if w == "way" and i >= 2 and low[i - 1] in ("the", "your", "our") and low[i - 2] in ("on", "along"):
            return "to" if low[i + 1:i + 2] == ["to"] else "way"
        if w == "way" and i >= 1 and low[i - 1] == "by" and low[i + 1:i + 2] == ["of"]:
            return "way"
    return None


def _has_first_marker(clause: _Clause) -> bool:
    low = clause.low
    if "before" in clause.lead and low[:1] and low[0] in ("that", "this", "it", "then", "so"):
        return True
    for i, w in enumerate(low):
        if w == "first" and (i == 0 or not lx.is_determiner(low[i - 1])):
            return True
    return False


def _pin_of(low: list[str]) -> int:
    if any(w in _FINAL_WORDS for w in low) or any(p in _FINAL_PAIRS for p in zip(low, low[1:])):
        return 1
    if low[:1] and low[0] in _START_WORDS:
        return -1
    return 0


def _negation_index(low: list[str]) -> int | None:
    for i, w in enumerate(low):
        if w in lx.NEGATIONS or (w == "rather" and low[i + 1:i + 2] == ["than"]):
            return i
    return None


class _Ordering:
    """The visiting order being built, with the referent bookkeeping of the rules above."""

    def __init__(self) -> None:
        self.order: list[_Landmark] = []
        self.pending: list[_Landmark] = []
        self.last: _Landmark | None = None

    def find(self, key: str) -> _Landmark | None:
        for lm in self.order + self.pending:
            if lm.key == key:
                return lm
        return None

    def place(self, lm: _Landmark, stmt: _Statement) -> None:
        if stmt.op == "pending":
            self.pending.append(lm)
        elif stmt.op == "before" and stmt.ref in self.order:
            self.order.insert(self.order.index(stmt.ref), lm)
        elif stmt.op == "after" and stmt.ref in self.order:
            anchor = stmt.cursor if stmt.cursor in self.order else stmt.ref
            self.order.insert(self.order.index(anchor) + 1, lm)
            stmt.cursor = lm
        else:
            self.order.append(lm)

    def flush_pending(self) -> None:
        self.order.extend(self.pending)
        self.pending.clear()


def _new_statement(clause: _Clause, index: int, prev: _Statement | None, sentence_lms: list[_Landmark],
                   state: _Ordering, carry: dict) -> _Statement:
    low, lead = clause.low, clause.lead
    pronoun = "which" in lead or (low[:1] != [] and low[0] in lx.SUBJECT_PRONOUNS)
    way = _has_way_marker(low)
    phrases_here = bool(find_phrases(clause.words))
    op, ref = "append", None
    if way == "to" or ("before" in lead and index == 0 and not _has_first_marker(clause)):
        op = "pending"
    elif way == "way":
        if phrases_here and sentence_lms:
            op, ref = "before", sentence_lms[-1]
        elif phrases_here and "there" in low:
            op, ref = "before", state.last
        elif not phrases_here:
            carry["way"] = state.last
    elif _has_first_marker(clause) and index > 0 or ("before" in lead and _has_first_marker(clause)):
        if phrases_here:
            op, ref = "before", state.last
        else:
            carry["first"] = state.last
    elif ("after" in lead or "past" in lead) and index > 0 and prev is not None:
        if prev.landmarks:
            op, ref = "before", prev.landmarks[-1 if "past" in lead else 0]
        elif prev.pronoun_subject:
            op, ref = "before", state.last
    elif "before" in lead and prev is not None and prev.pronoun_subject:
        op, ref = "after", state.last
    elif carry.get("first") is not None:
        op, ref = "before", carry.pop("first")
    elif carry.get("way") is not None:
        op, ref = "before", carry["way"]
    return _Statement(op=op, ref=ref, pin=_pin_of(low), pronoun_subject=pronoun)


def _is_continuation(clause: _Clause) -> bool:
    low = clause.low
    return bool(low) and all(w in _CONTINUE_LEADS for w in clause.lead) and lx.is_determiner(low[0])


def _emit(clause: _Clause, stmt: _Statement, state: _Ordering, sentence_lms: list[_Landmark]) -> None:
    low = clause.low
    neg = _negation_index(low)
    if neg is not None and neg == 0:
        stmt.negated = True
    for ph in find_phrases(clause.words):
        if stmt.negated or (neg is not None and ph.start > neg):
            log.debug("landmark %r excluded: negated", ph.text)
            continue
        key = normalize_landmark(ph.text)
        earlier = state.find(key) if ph.definite else None
        if earlier is not None:  # "the X" again: the same landmark
            state.last = earlier
            continue
        lm = _Landmark(ph.text, key, stmt.pin)
        state.place(lm, stmt)
        stmt.landmarks.append(lm)
        sentence_lms.append(lm)
        state.last = lm


def parse_landmarks(instruction: str) -> list[str]:
    """Extract the ordered landmark list of a route instruction with hand-written rules.

    Parameters
    ----------
    instruction : str
        Free-form English route instruction, e.g. ``"Find the fountain, but first pass by a wooden
        bench near the oak tree."``.

    Returns
    -------
    list of str
        Landmarks in visiting order, in the instruction's own words with articles normalised, e.g.
        ``["a wooden bench near the oak tree", "a fountain"]``. Empty if none was found.

    Raises
    ------
    TypeError
        If ``instruction`` is not a string.
    ValueError
        If it is longer than ``MAX_INSTRUCTION_CHARS`` characters.
    """
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a string, got {type(instruction).__name__}")
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        raise ValueError(f"instruction is {len(instruction)} characters long; the limit is "
                         f"{MAX_INSTRUCTION_CHARS}")
    state = _Ordering()
    for sentence in tokenize(instruction):
        sentence_lms: list[_Landmark] = []
        carry: dict = {}
        stmt: _Statement | None = None
        index = 0
        for clause in split_clauses(sentence):
            if stmt is None or not _is_continuation(clause):
                if stmt is not None and stmt.op != "pending" and stmt.landmarks and state.pending:
                    state.flush_pending()
                if not clause.words:
                    continue
                stmt = _new_statement(clause, index, stmt, sentence_lms, state, carry)
                index += 1
            _emit(clause, stmt, state, sentence_lms)
        state.flush_pending()
    first = [lm for lm in state.order if lm.pin < 0]
    last = [lm for lm in state.order if lm.pin > 0]
    middle = [lm for lm in state.order if lm.pin == 0]
    return [lm.text for lm in first + middle + last]
