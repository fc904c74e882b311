"""Is a landmark in the map at all? The presence score of a grounded landmark and its calibrated threshold.

LM-Nav's grounding (:mod:`core.grounding`) is a softmax over the map's nodes: it always places a
landmark somewhere, also one the map never saw ("the purple elephant"). The walk search cannot tell;
the operator has to be told. One raw cosine is a poor judge: how high a phrase scores against images it
does not show depends on the phrase and on the model (a text embedding near the image embeddings'
mean scores every node high), so an absolute cut that suits one phrase flags or misses another.

The presence score compares the best node with the map's typical node *for the same landmark*::

    c[v, k]   cosine of node v (max over its images) with landmark k   ((N, K), core.grounding.node_similarity)
    best_k    = max over the nodes with an image of c[v, k]
    median_k  = median over the nodes with an image of c[v, k]         (the map's typical score for k)
    score_k   = best_k - w * median_k                                   (w = median_weight, in [0, 1])

and the landmark counts as found when ``score_k >= threshold``. ``w = 0`` is the raw best cosine (the
uncalibrated ``[models] landmark_min_cosine`` rule); ``w = 1`` the pure margin of the best node over the
median; in between (default :data:`DEFAULT_MEDIAN_WEIGHT` = 0.5) removes half of the phrase's offset.
The pure margin fails for a landmark seen from most of a small map (its median is high too); half of it
kept the raw cosine's robustness there (measured on the shipped sim worlds, docs/models.md).

``threshold`` and ``median_weight`` are per model pair: ``robot-app models calibrate-grounding`` picks the
threshold on maps with known present and absent landmarks (:func:`choose_threshold`, the balanced
accuracy) and records both next to the model files. This module is numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_MEDIAN_WEIGHT", "PresenceRule", "presence_scores", "confusion", "choose_threshold",
           "threshold_for_absent_rate"]

#: Default weight ``w`` of the map's median cosine in the presence score (module docstring).
DEFAULT_MEDIAN_WEIGHT = 0.5


def _check_weight(median_weight) -> float:
    try:
        w = float(median_weight)
    except (TypeError, ValueError):
        raise ValueError(f"median_weight: expected a number in [0, 1], got {median_weight!r}") from None
    if not (math.isfinite(w) and 0.0 <= w <= 1.0):
        raise ValueError(f"median_weight: expected a number in [0, 1], got {median_weight!r}")
    return w


def presence_scores(similarity, *, median_weight: float = DEFAULT_MEDIAN_WEIGHT
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Presence score of each landmark in a map (module docstring: ``best - w * median`` over the nodes).

    Parameters
    ----------
    similarity : (N, K) float array
        Cosine similarity of each node with each landmark, ``-inf`` for a node without an image, as
        :func:`core.grounding.node_similarity` returns it. N >= 1.
    median_weight : float in [0, 1]
        ``w``; 0 gives the raw best cosine.

    Returns
    -------
    score, best, median : (K,) float64 each
        ``best - w * median``, the best node's cosine and the median cosine over the nodes with an image;
        all three ``-inf`` for a landmark that no node has an image for (it is never found).

    Raises
    ------
    ValueError
        Not 2-D, no node, NaN or ``+inf`` in ``similarity``, or ``median_weight`` outside [0, 1].
    """
    w = _check_weight(median_weight)
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] < 1:
        raise ValueError(f"similarity: expected shape (N, K) with N >= 1, got {sim.shape}")
    if np.isnan(sim).any() or np.isposinf(sim).any():
        raise ValueError("similarity: contains NaN or +inf (cosines are finite, -inf where a node has no image)")
    k = sim.shape[1]
    best = np.full(k, -np.inf)
    median = np.full(k, -np.inf)
    for i in range(k):
        col = sim[:, i]
        col = col[np.isfinite(col)]
        if col.size:
            best[i], median[i] = col.max(), np.median(col)
    score = np.where(np.isfinite(best), best - w * np.where(np.isfinite(median), median, 0.0), -np.inf)
    return score, best, median


@dataclass(frozen=True)
class PresenceRule:
    """When a grounded landmark counts as found in the map: ``score >= threshold`` with the score of
    :func:`presence_scores` at ``median_weight``.

    Attributes
    ----------
    threshold : float, on the presence score (cosine units).
    median_weight : float in [0, 1], ``w`` of the score; 0 = the raw best cosine.
    source : str, where the rule came from, for the operator and the logs (a calibration file, or the
        uncalibrated config key).
    calibrated : bool, whether ``threshold`` was measured for this model (False: a config default).
    """

    threshold: float
    median_weight: float = 0.0
    source: str = ""
    calibrated: bool = False

    def __post_init__(self):
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not math.isfinite(self.threshold):
            raise ValueError(f"threshold: expected a finite number, got {self.threshold!r}")
        _check_weight(self.median_weight)

    def judge(self, similarity) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(found, score, best, median)`` for an (N, K) similarity: (K,) bool and three (K,) float64
        (:func:`presence_scores`; raises its ValueError)."""
        score, best, median = presence_scores(similarity, median_weight=self.median_weight)
        return score >= self.threshold, score, best, median


def _scores(name: str, values) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError(f"{name}: needs at least one score")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: scores must be finite (a landmark matched no node image)")
    return a


def confusion(present, absent, threshold: float) -> dict:
    """How a threshold sorts landmarks known to be in the map (``present``) and known not to be (``absent``).

    Parameters
    ----------
    present, absent : (P,) and (A,) float arrays of presence scores; P, A >= 1.
    threshold : float, a landmark with ``score < threshold`` is flagged "not in the map".

    Returns
    -------
    dict
        ``threshold``; ``present`` (P), ``present_flagged`` (wrongly flagged), ``absent`` (A),
        ``absent_flagged`` (rightly flagged), the rates ``present_flagged_rate`` and
        ``absent_flagged_rate``, and ``balanced_accuracy`` = mean of the share of present ones kept and
        the share of absent ones flagged.

    Raises
    ------
    ValueError
        An empty list or a non-finite score.
    """
    p, a = _scores("present", present), _scores("absent", absent)
    pf, af = int((p < threshold).sum()), int((a < threshold).sum())
    return {"threshold": float(threshold), "present": int(p.size), "present_flagged": pf,
            "present_flagged_rate": round(pf / p.size, 4), "absent": int(a.size), "absent_flagged": af,
            "absent_flagged_rate": round(af / a.size, 4),
            "balanced_accuracy": round(((p.size - pf) / p.size + af / a.size) / 2, 4)}


def _candidates(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Thresholds between consecutive distinct scores, and one below and above them all."""
    v = np.unique(np.concatenate([p, a]))
    return np.concatenate([[v[0] - 1e-3], (v[:-1] + v[1:]) / 2, [v[-1] + 1e-3]])


def choose_threshold(present, absent) -> dict:
    """The threshold on presence scores with the best balanced accuracy, and its :func:`confusion`.

    Candidates lie midway between consecutive distinct scores; of several with the same best balanced
    accuracy, the middle one is taken (the middle of the plateau). Rounded to 4 decimals.

    Parameters
    ----------
    present, absent : (P,) and (A,) float arrays of presence scores (P, A >= 1).

    Returns
    -------
    dict
        :func:`confusion` at the chosen threshold.

    Raises
    ------
    ValueError
        An empty list or a non-finite score.
    """
    p, a = _scores("present", present), _scores("absent", absent)
    cands = _candidates(p, a)
    ba = ((p[None, :] >= cands[:, None]).mean(axis=1) + (a[None, :] < cands[:, None]).mean(axis=1)) / 2
    best = np.flatnonzero(ba == ba.max())
    return confusion(p, a, round(float(cands[best[len(best) // 2]]), 4))


def threshold_for_absent_rate(present, absent, *, target: float = 0.95) -> dict:
    """The threshold that flags at least ``target`` of the absent landmarks with the fewest present ones
    flagged (the lowest such threshold), and its :func:`confusion`.

    Parameters
    ----------
    present, absent : (P,) and (A,) float arrays of presence scores (P, A >= 1).
    target : float in (0, 1], share of absent landmarks to flag.

    Raises
    ------
    ValueError
        An empty list, a non-finite score, or ``target`` outside (0, 1].
    """
    if not (isinstance(target, (int, float)) and 0.0 < target <= 1.0):
        raise ValueError(f"target: expected a share in (0, 1], got {target!r}")
    p, a = _scores("present", present), _scores("absent", absent)
    cands = _candidates(p, a)
    ok = cands[(a[None, :] < cands[:, None]).mean(axis=1) >= target - 1e-12]
    return confusion(p, a, math.ceil(float(ok.min()) * 1e4) / 1e4)  # rounded up: still flags the target
