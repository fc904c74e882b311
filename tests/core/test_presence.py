"""core.presence: the presence score of a grounded landmark and the choice of its threshold (values)."""

from __future__ import annotations

import numpy as np
import pytest

from core.presence import PresenceRule, choose_threshold, confusion, presence_scores, threshold_for_absent_rate


def test_presence_score_is_best_minus_weighted_median_over_nodes_with_an_image():
    sim = np.array([[0.5, 0.2, -np.inf],
                    [0.1, 0.3, -np.inf],
                    [0.2, 0.1, -np.inf],
                    [-np.inf, 0.9, -np.inf]])  # node 3 has no image for landmark 0 (and none at all for 2)
    score, best, median = presence_scores(sim, median_weight=0.5)
    assert best.tolist() == [0.5, 0.9, -np.inf]
    assert median[0] == pytest.approx(0.2) and median[1] == pytest.approx(0.25) and median[2] == -np.inf
    assert score[0] == pytest.approx(0.5 - 0.1) and score[1] == pytest.approx(0.9 - 0.125) and score[2] == -np.inf
    assert score.dtype == np.float64 and score.shape == (3,)
    raw, _, _ = presence_scores(sim, median_weight=0.0)  # w = 0: the raw best cosine
    assert raw[:2].tolist() == [0.5, 0.9]
    margin, _, _ = presence_scores(sim, median_weight=1.0)  # w = 1: the margin over the median
    assert margin[0] == pytest.approx(0.3) and margin[1] == pytest.approx(0.65)


def test_a_high_scoring_phrase_that_peaks_nowhere_scores_below_one_that_peaks():
    """The raw cosine ranks them the wrong way round; the score removes the phrase's offset."""
    flat = np.full(100, 0.40)
    flat[7] = 0.42  # high everywhere, nowhere in particular
    peak = np.full(100, 0.05)
    peak[50:55] = 0.38  # low in general, clearly higher at a few nodes
    score, best, _ = presence_scores(np.stack([flat, peak], axis=1), median_weight=0.5)
    assert best[0] > best[1] and score[0] < score[1]
    assert score.tolist() == pytest.approx([0.42 - 0.2, 0.38 - 0.025])


def test_presence_rule_judges_found_at_the_threshold():
    rule = PresenceRule(threshold=0.3, median_weight=0.5)
    found, score, best, median = rule.judge(np.array([[0.5, 0.2], [0.1, 0.3], [0.2, 0.1]]))
    assert found.tolist() == [True, False] and found.dtype == bool
    assert score.tolist() == pytest.approx([0.4, 0.2])
    # one landmark, two nodes: 0.3 - 0.5 x median 0.25 = 0.175
    assert PresenceRule(threshold=0.17, median_weight=0.5).judge([[0.3], [0.2]])[0].tolist() == [True]
    assert PresenceRule(threshold=0.18, median_weight=0.5).judge([[0.3], [0.2]])[0].tolist() == [False]


@pytest.mark.parametrize("bad, match", [(np.zeros(3), "shape"), (np.zeros((0, 2)), "shape"),
                                        (np.array([[np.nan]]), "NaN"), (np.array([[np.inf]]), "NaN")])
def test_presence_scores_reject_bad_similarities(bad, match):
    with pytest.raises(ValueError, match=match):
        presence_scores(bad)


@pytest.mark.parametrize("w", [-0.1, 1.5, float("nan"), "half"])
def test_the_median_weight_must_lie_in_0_1(w):
    with pytest.raises(ValueError, match="median_weight"):
        presence_scores(np.zeros((2, 1)), median_weight=w)
    with pytest.raises(ValueError, match="median_weight"):
        PresenceRule(threshold=0.2, median_weight=w)


@pytest.mark.parametrize("t", [float("nan"), float("inf"), None, True, "0.2"])
def test_a_rule_needs_a_finite_threshold(t):
    with pytest.raises(ValueError, match="threshold"):
        PresenceRule(threshold=t)


def test_confusion_counts_flags_on_both_sides():
    c = confusion([0.31, 0.28, 0.35, 0.19], [0.12, 0.2, 0.3], 0.25)
    assert c == {"threshold": 0.25, "present": 4, "present_flagged": 1, "present_flagged_rate": 0.25, "absent": 3,
                 "absent_flagged": 2, "absent_flagged_rate": 0.6667, "balanced_accuracy": 0.7083}


def test_choose_threshold_takes_the_middle_of_the_best_gap():
    c = choose_threshold([0.31, 0.28, 0.35], [0.12, 0.2, 0.18])
    assert c["threshold"] == 0.24 and c["balanced_accuracy"] == 1.0  # midway 0.2 .. 0.28
    c = choose_threshold([0.3, 0.15], [0.2, 0.1])  # overlapping
    assert c["balanced_accuracy"] == 0.75
    with pytest.raises(ValueError, match="at least one"):
        choose_threshold([], [0.1])
    with pytest.raises(ValueError, match="finite"):
        choose_threshold([-np.inf], [0.1])


def test_threshold_for_absent_rate_flags_the_target_share_with_the_fewest_present_flagged():
    present = [0.2, 0.3, 0.4, 0.5]
    absent = [0.1, 0.15, 0.25, 0.35]
    c = threshold_for_absent_rate(present, absent, target=0.75)
    assert c["threshold"] == 0.275 and c["absent_flagged"] == 3 and c["present_flagged"] == 1
    c = threshold_for_absent_rate(present, absent, target=1.0)
    assert c["absent_flagged"] == 4 and c["present_flagged"] == 2 and c["threshold"] == 0.375
    with pytest.raises(ValueError, match="target"):
        threshold_for_absent_rate(present, absent, target=0.0)
