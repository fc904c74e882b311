"""LM-Nav's landmark extraction success and the landmark text normalisation it compares with.

Source: LM-Nav (Shah et al., CoRL 2022), App. C: "extraction success" of one instruction is the length
of the longest common subsequence (LCS) of the extracted and the true landmark lists divided by the
number of true landmarks; landmarks are compared after dropping articles.
"""

from __future__ import annotations

import re
from typing import Sequence

_ARTICLES = frozenset({"a", "an", "the"})
_SPACE = re.compile(r"\s+")


def normalize_landmark(text: str) -> str:
    """Comparison key of one landmark phrase: lower case, articles removed, white space collapsed.

    Parameters
    ----------
    text : str
        A landmark phrase such as ``"The  Red Barn"``.

    Returns
    -------
    str
        ``"red barn"`` for the example; leading/trailing punctuation is stripped as well.

    Raises
    ------
    TypeError
        If ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"landmark must be a string, got {type(text).__name__}")
    words = [w.strip(".,;:!?\"'()") for w in _SPACE.split(text.lower())]
    return " ".join(w for w in words if w and w not in _ARTICLES)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two sequences (classic O(len(a) len(b)) DP)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def extraction_success(extracted: Sequence[str], truth: Sequence[str]) -> float:
    """LM-Nav App. C extraction success: ``LCS(extracted, truth) / len(truth)``, in [0, 1].

    Landmarks are compared with :func:`normalize_landmark` (case-insensitive, articles ignored).

    Parameters
    ----------
    extracted : sequence of str
        Landmarks a parser produced, in visiting order.
    truth : sequence of str
        The true landmarks in visiting order; must not be empty.

    Returns
    -------
    float
        1.0 when the truth is a subsequence of ``extracted``.

    Raises
    ------
    ValueError
        If ``truth`` is empty (the ratio is undefined).
    TypeError
        If an item is not a string.
    """
    if len(truth) == 0:
        raise ValueError("extraction success is undefined for an empty true landmark list")
    ext = [normalize_landmark(x) for x in extracted]
    tru = [normalize_landmark(x) for x in truth]
    return lcs_length(ext, tru) / len(tru)
