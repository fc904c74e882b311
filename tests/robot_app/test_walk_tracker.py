"""WalkTracker: the GNM deployment loop's localisation and subgoal rules, on given distances (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_app.vnm_navigator import WalkRules, WalkTracker


def _step(tr: WalkTracker, dist_of):
    lo, hi = tr.window()
    return tr.update(np.array([dist_of(i) for i in range(lo, hi)], dtype=np.float32))


def test_gnm_defaults_localise_on_the_smallest_distance_and_aim_at_the_next_node_when_close():
    tr = WalkTracker(10, lost_steps=20.0)
    assert tr.window() == (0, 5)  # GNM radius 4 around the start
    dec = tr.update(np.array([9.0, 6.0, 2.0, 8.0, 12.0]))
    assert (dec.status, dec.index, dec.subgoal) == ("drive", 2, 3)  # close (< 3): the next node
    dec = _step(tr, lambda i: abs(i - 4) * 4.0 + 5.0)  # node 4 closest but not close: aim at it
    assert (dec.status, dec.index, dec.subgoal) == ("drive", 4, 4)
    assert tr.window() == (0, 9)


def test_goal_reached_when_localised_on_the_last_node_unless_goal_close():
    far = lambda i: 30.0 - 3.0 * i  # noqa: E731 - the last node is the closest, 3 steps away
    tr = WalkTracker(5, lost_steps=40.0)
    assert _step(tr, far).status == "reached"
    tr = WalkTracker(5, WalkRules(goal_close=True), lost_steps=40.0)
    dec = _step(tr, far)
    assert (dec.status, dec.index, dec.subgoal) == ("drive", 4, 4)
    assert _step(tr, lambda i: 1.0 if i == 4 else 10.0).status == "reached"


def test_lost_after_max_lost_steps_without_a_node_and_the_localisation_kept():
    tr = WalkTracker(10, WalkRules(max_lost_steps=3), lost_steps=20.0)
    _step(tr, lambda i: abs(i - 3) + 5.0)
    assert tr.index == 3
    statuses = [_step(tr, lambda i: 25.0).status for _ in range(3)]
    assert statuses == ["wait", "wait", "lost"] and tr.index == 3
    tr.reset(6)
    assert tr.index == 6 and tr.lost == 0


def test_back_window_limits_how_far_the_localisation_slides_back():
    sym = WalkTracker(20, lost_steps=20.0)
    sym.reset(10)
    fwd = WalkTracker(20, WalkRules(back_window=1), lost_steps=20.0)
    fwd.reset(10)
    for _ in range(3):
        for tr in (sym, fwd):  # every node behind the start looks closest, the first the most
            _step(tr, lambda i: 1.0 + 0.01 * i if i < 10 else 15.0)
    assert sym.index == 0 and fwd.index == 7  # 4 nodes back per step against 1
    assert fwd.window() == (6, 12)


def test_recover_window_widens_the_search_after_a_step_without_a_node():
    tr = WalkTracker(30, WalkRules(recover_window=10), lost_steps=20.0)
    tr.reset(10)
    assert tr.window() == (6, 15)
    assert tr.update(np.full(9, 25.0)).status == "wait"
    assert tr.window() == (0, 21)  # widened while lost
    dec = _step(tr, lambda i: 2.0 if i == 18 else 25.0)
    assert (dec.status, dec.index) == ("drive", 18) and tr.window() == (14, 23)


@pytest.mark.parametrize("kwargs, match", [({"window": -1}, "must be >= 0"), ({"back_window": -2}, "must be >= 0")])
def test_bad_rules_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WalkTracker(5, WalkRules(**kwargs), lost_steps=20.0)
    with pytest.raises(ValueError, match="at least one node"):
        WalkTracker(0, lost_steps=20.0)


def test_distances_must_match_the_window():
    tr = WalkTracker(10, lost_steps=20.0)
    tr.window()
    with pytest.raises(ValueError, match=r"expected 5 distances \(walk slice \[0, 5\)\), got 3"):
        tr.update(np.zeros(3))
