"""PathPursuit (robot_app.nav.pursuit): progress only forward, folds driven to their tip, the target."""

from __future__ import annotations

import numpy as np
import pytest

from robot_app.nav.pursuit import FOLD_REACHED_M, PathPursuit


def test_progress_and_target_on_a_straight_path():
    pp = PathPursuit(np.stack([np.arange(11.0), np.zeros(11)], axis=1), lookahead_m=2.0)  # a node a metre
    assert pp.length_m == 10.0 and pp.index() == 0
    pp.advance(3.0, 0.4)
    p0 = pp.progress_m
    assert 2.3 < p0 <= 3.0  # the earliest point within 0.3 m of the nearest: a little behind, never ahead
    tx, ty = pp.target(3.0, 0.4)
    assert 4.5 < tx < 5.5 and ty == 0.0  # 2 m from the robot, on the path
    pp.advance(1.0, 0.0)  # the robot behind its progress: the progress does not move back
    assert pp.progress_m == p0
    assert not pp.near_end(1.0)
    assert pp.index() == 2
    pp.advance(8.5, 0.0)
    assert pp.near_end(1.0) and pp.index() == 8  # on the last three nodes


def test_a_fold_is_driven_to_its_tip_before_the_leg_back():
    out_and_back = np.array([(float(i), 0.0) for i in range(7)] + [(float(i), 0.0) for i in range(5, 1, -1)])
    pp = PathPursuit(out_and_back, lookahead_m=2.0)
    assert pp.folds_m.tolist() == [6.0]
    pp.advance(4.0, 0.0)
    assert pp.progress_m < 6.0 and pp.target(4.0, 0.0)[0] > 4.0  # still out towards the tip
    pp.advance(6.0 - 0.5 * FOLD_REACHED_M, 0.0)
    assert pp.progress_m >= 6.0  # at the tip: on along the leg back
    assert pp.target(5.5, 0.0)[0] < 5.5  # now the target lies back


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="finite"):
        PathPursuit(np.array([[0.0, np.nan]]), lookahead_m=2.0)
    with pytest.raises(ValueError, match="lookahead"):
        PathPursuit(np.zeros((2, 2)), lookahead_m=0.0)
