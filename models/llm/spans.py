"""Landmark extraction by span choice: the LLM picks and orders phrases of the instruction itself.

LM-Nav (Shah et al., CoRL 2022, Sec. 4.1 and App. A) extracts landmarks with a few-shot prompt and a
free-text answer. A small model answering in free text copies the prompt's examples and invents
phrases; here its answer is constrained by a GBNF grammar built from the instruction's own word
n-grams (contiguous words within one clause, 1..``max_words`` long), so every landmark it writes is a
phrase the operator typed, and the list has an explicit end (a blank line) so the model can stop.

Spans are cut at clause punctuation (``, ; : . ! ?``) and, by default, never start with a
preposition, conjunction, pronoun, auxiliary, adverb or route verb, nor end with one of those or an
article (word lists of :mod:`core.landmarks.lexicon`): "past the bench" is not offered, "the bench" is.
"""

from __future__ import annotations

import logging
import re

from core.landmarks.lexicon import (
    ADVERBS,
    ARTICLES,
    AUXILIARIES,
    CONJUNCTIONS,
    DETERMINERS,
    PREPOSITIONS,
    PRONOUNS,
    VERBS,
)
from core.landmarks.metrics import normalize_landmark
from models.llm.client import LlmClient
from models.llm.errors import LlmError
from models.llm.grammar import MAX_LIST_ITEMS, numbered_list_rule
from models.llm.prompts import landmark_prompt, parse_numbered_list

log = logging.getLogger(__name__)

MAX_SPAN_WORDS = 8
MAX_SPANS = 600
_WORD = re.compile(r"[A-Za-z0-9]+(?:['-][A-Za-z0-9]+)*|[,;:.!?]")
_NO_START = (PREPOSITIONS | CONJUNCTIONS | PRONOUNS | AUXILIARIES | ADVERBS | VERBS) - ARTICLES
_NO_END = _NO_START | DETERMINERS


def instruction_spans(instruction: str, *, max_words: int = MAX_SPAN_WORDS, filtered: bool = True) -> list[str]:
    """The phrases the span grammar offers, in order of first appearance (no duplicates).

    Parameters
    ----------
    instruction : str
        The route instruction.
    max_words : int
        Longest span in words (>= 1).
    filtered : bool
        Drop spans that start or end with a closed-class word (module doc); False keeps every n-gram.

    Returns
    -------
    list of str
        At most :data:`MAX_SPANS` spans, words joined by one space, as written (case kept).

    Raises
    ------
    ValueError
        If ``max_words`` < 1.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words}")
    clauses, cur = [], []
    for tok in _WORD.findall(instruction or ""):
        if tok in ",;:.!?":
            if cur:
                clauses.append(cur)
            cur = []
        else:
            cur.append(tok)
    if cur:
        clauses.append(cur)
    out: dict[str, None] = {}
    for words in clauses:
        for i in range(len(words)):
            for n in range(1, max_words + 1):
                if i + n > len(words):
                    break
                span = words[i:i + n]
                if filtered and (span[0].lower() in _NO_START or span[-1].lower() in _NO_END):
                    continue
                out.setdefault(" ".join(span), None)
                if len(out) >= MAX_SPANS:
                    return list(out)
    return list(out)


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def span_list_grammar(spans: list[str], *, max_items: int = MAX_LIST_ITEMS) -> str:
    """GBNF: ``1. SPAN\\n2. SPAN\\n...`` (1..``max_items`` items, each one of ``spans``), then a blank line.

    Raises
    ------
    ValueError
        If ``spans`` is empty or ``max_items`` is outside 1..99.
    """
    if not spans:
        raise ValueError("the instruction has no phrase to choose from")
    return (f'root ::= {numbered_list_rule("span", max_items)} "\\n"\n'
            f"span ::= {' | '.join(_literal(s) for s in spans)}\n")


def extract_landmarks_spans(client: LlmClient, instruction: str, *, max_words: int = MAX_SPAN_WORDS,
                            max_tokens: int = 96, timeout_s: float = 20.0) -> list[str]:
    """Ordered landmarks of ``instruction``, each a phrase of the instruction chosen by the LLM.

    The prompt is LM-Nav's few-shot prompt (:func:`models.llm.prompts.landmark_prompt`; its examples'
    answers are phrases of their own instructions); the answer is constrained by
    :func:`span_list_grammar` over :func:`instruction_spans`, at temperature 0.

    Parameters
    ----------
    client : LlmClient
        An open model (:func:`models.llm.open_llm`).
    instruction : str
        The route instruction.
    max_words : int
        Longest phrase offered, in words.
    max_tokens, timeout_s
        Limits of the request (tokens; seconds).

    Returns
    -------
    list of str
        1..10 phrases of the instruction in visiting order, none repeating another (case and articles
        ignored, :func:`core.landmarks.metrics.normalize_landmark`).

    Raises
    ------
    ValueError
        If ``instruction`` is empty or has no phrase to offer.
    LlmTimeout
        If the model did not answer in time.
    LlmError
        If the model failed or its answer (cut by ``max_tokens``) held no landmark.
    """
    if not instruction or not instruction.strip():
        raise ValueError("instruction is empty")
    spans = instruction_spans(instruction, max_words=max_words)
    grammar = span_list_grammar(spans)
    text = client.complete(landmark_prompt(instruction), grammar=grammar, max_tokens=max_tokens,
                           temperature=0.0, timeout_s=timeout_s, stop=["\n\n"])
    allowed, seen, landmarks = set(spans), set(), []
    for x in parse_numbered_list(text):
        key = normalize_landmark(x)  # "the bench" repeats "bench"
        if x in allowed and key not in seen:
            seen.add(key)
            landmarks.append(x)
    if not landmarks:
        raise LlmError(f"the LLM answer held no landmark phrase: {text[:200]!r}")
    log.debug("LLM span landmarks for %r: %s", instruction, landmarks)
    return landmarks
