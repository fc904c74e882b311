"""Text similarity for the offline diagnoser.

The diagnosers take any callable ``similarity(queries, candidates) -> (Q, C) float array`` in
[0, 1] (higher = closer in meaning). On the robot the application passes one built on the MiniLM
text-embedding model (cosine of L2-normalised embeddings); :func:`lexical_similarity` here is the
fallback when that model file is absent. It is LEXICAL, not semantic: TF-IDF weighted cosine over
crudely stemmed words, where each word also counts (at half weight) for the group of near-synonyms
it belongs to in a small hand-written table (:data:`RELATED_WORDS`, everyday English about
household objects, robots and outdoor driving). Words outside that table only match themselves.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable, Sequence

import numpy as np

Similarity = Callable[[Sequence[str], Sequence[str]], np.ndarray]

STOPWORDS = frozenset("""
a an the and or of to in on at by for with from into onto is are was were be been being it its
this that these those as so but if then than there their they them he she his her we our you your
i me my not no nor do does did done has have had can could will would should shall may might must
still also just very far what which who whom when where while because about over off up out
some something anything any all each every other others another one ones way again already same
robot robots agent
""".split())

# Groups of near-synonyms (one group per line). A word may appear in several groups.
RELATED_WORDS = [
    "hot heat heated warm temperature burn burning scorch scald thermal overheat degree celsius cold cool",
    "heavy weight weigh lift hoist raise load mass kilogram strain strong light",
    "tolerate tolerance withstand stand endure bear limit exceed excessive beyond too max maximum highest heaviest "
    "capacity",
    "open opened close closed shut door ajar interlock",
    "hand gripper grip grasp hold holding carry carrying occupied free empty fingers",
    "liquid spill spilled overflow soak leak drip puddle splash contain container vessel hold pour drink mess wet",
    "wear glove mitt insulation insulate protect protection",
    "support top topple balance stack",
    "microwave oven spark sparks metal safe",
    "fruit apple watermelon banana orange",
    "battery charge charged energy power low drained dock charger",
    "gate barrier blocked block closed path way road route passage obstacle",
    "payload cargo load capacity heavy weight overloaded",
    "inspect inspection camera look photo",
    "deliver delivery drop package parcel",
]

_SUFFIXES = ("ations", "ation", "ingly", "ness", "ings", "ing", "edly", "ied", "ies", "ed", "ly",
             "es", "s", "er", "est")


def stem(word: str) -> str:
    """A crude suffix-stripping stem (good enough to tie ``heated``/``heat``, ``lifting``/``lift``)."""
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    if len(word) > 3 and word[-1] == word[-2]:
        word = word[:-1]
    return word


def _build_groups() -> dict:
    groups: dict = {}
    for gi, line in enumerate(RELATED_WORDS):
        for w in line.split():
            groups.setdefault(stem(w), set()).add(f"#g{gi}")
    return groups


_GROUPS = _build_groups()


def tokens(text: str) -> Counter:
    """Weighted bag of stems and synonym groups for one text."""
    bag: Counter = Counter()
    for w in re.findall(r"[a-z]+", text.lower()):
        if w in STOPWORDS or len(w) < 2:
            continue
        s = stem(w)
        bag[s] += 1.0
        for g in _GROUPS.get(s, ()):
            bag[g] += 0.5
    return bag


def lexical_similarity(queries: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
    """TF-IDF cosine similarity of word stems and synonym groups (lexical, see module doc).

    Parameters
    ----------
    queries, candidates : sequences of str

    Returns
    -------
    numpy.ndarray
        (len(queries), len(candidates)) float64 in [0, 1]. IDF is computed over ``candidates``
        (plus one smoothing document), so words every candidate shares weigh little.
    """
    qb = [tokens(q) for q in queries]
    cb = [tokens(c) for c in candidates]
    n = len(cb) + 1
    df: Counter = Counter()
    for b in cb:
        df.update(b.keys())
    idf = lambda t: math.log((n + 1) / (df.get(t, 0) + 1)) + 1.0  # noqa: E731

    def vec(b: Counter) -> dict:
        v = {t: c * idf(t) for t, c in b.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {t: x / norm for t, x in v.items()}

    qv, cv = [vec(b) for b in qb], [vec(b) for b in cb]
    out = np.zeros((len(qv), len(cv)), dtype=np.float64)
    for i, a in enumerate(qv):
        for j, b in enumerate(cv):
            small, big = (a, b) if len(a) < len(b) else (b, a)
            out[i, j] = sum(x * big.get(t, 0.0) for t, x in small.items())
    return np.clip(out, 0.0, 1.0)


def check_similarity_output(sim: np.ndarray, q: int, c: int) -> np.ndarray:
    """Validate a similarity callable's answer: shape (q, c), finite.

    Raises
    ------
    ValueError
        On a wrong shape or non-finite values.
    """
    sim = np.asarray(sim, dtype=np.float64)
    if sim.shape != (q, c):
        raise ValueError(f"similarity returned shape {sim.shape}, expected ({q}, {c})")
    if not np.all(np.isfinite(sim)):
        raise ValueError("similarity returned non-finite values")
    return sim
