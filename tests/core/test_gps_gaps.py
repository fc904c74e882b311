"""Dead reckoning through GPS dropouts (core.gps_gaps): values against a known track, and the refusals."""

import math

import numpy as np
import pytest

from core.gps_gaps import bridge_gps_gaps


def _drive(n=400, dt=0.25, speed=1.0):
    """An L-shaped drive in UTM metres: 50 m east, then a quarter turn and north (true positions)."""
    t = np.arange(n) * dt
    s = speed * t
    xy = np.where(s[:, None] < 50.0, np.stack([s, np.zeros_like(s)], axis=1),
                  np.stack([np.full_like(s, 50.0), s - 50.0], axis=1))
    return t, xy + np.array([500_000.0, 4_000_000.0])


def _odom(t, xy, yaw_offset=math.radians(37.0), scale=1.0):
    """Odometry of the same drive in a frame rotated by ``yaw_offset`` with its own origin."""
    c, s = math.cos(-yaw_offset), math.sin(-yaw_offset)
    rel = (xy - xy[0]) @ np.array([[c, -s], [s, c]]).T * scale
    return t.copy(), rel + np.array([3.0, -7.0])


def test_a_dropout_is_filled_from_odometry_and_meets_both_fixes():
    t, truth = _drive()
    valid = np.ones(t.size, dtype=bool)
    valid[180:260] = False  # 20 s around the corner
    gps = truth.copy()
    gps[~valid] = np.nan
    ot, oxy = _odom(t, truth)
    xy, bridged, gaps = bridge_gps_gaps(t, gps, valid, ot, oxy, max_gap_s=60.0)
    assert bridged.tolist() == (~valid).tolist()
    assert np.max(np.hypot(*(xy[~valid] - truth[~valid]).T)) < 1e-6  # noise-free odometry: exact
    assert np.array_equal(xy[valid], gps[valid])
    (g,) = gaps
    assert g.bridged and (g.first, g.last) == (180, 259)
    assert g.duration_s == pytest.approx(81 * 0.25)
    assert g.driven_m == pytest.approx(20.25)
    assert g.closure_m == pytest.approx(0.0, abs=1e-6)


def test_odometry_drift_is_spread_so_the_track_closes_on_the_fix_after():
    t, truth = _drive()
    valid = np.ones(t.size, dtype=bool)
    valid[100:160] = False
    gps = truth.copy()
    gps[~valid] = np.nan
    ot, oxy = _odom(t, truth, scale=1.05)  # wheels 5 % long: 0.75 m over the 15 m gap
    xy, bridged, gaps = bridge_gps_gaps(t, gps, valid, ot, oxy, max_gap_s=60.0)
    assert gaps[0].bridged and gaps[0].closure_m == pytest.approx(0.05 * 15.25, rel=0.1)
    err = np.hypot(*(xy[bridged] - truth[bridged]).T)
    assert err.max() < 0.5  # the linear correction removes most of the drift


def test_gaps_that_cannot_be_bridged_stay_open():
    t, truth = _drive()
    ot, oxy = _odom(t, truth)
    valid = np.ones(t.size, dtype=bool)
    valid[:10] = False          # before the first fix: not bounded
    valid[100:300] = False      # 50 s: longer than max_gap_s
    gps = truth.copy()
    gps[~valid] = np.nan
    xy, bridged, gaps = bridge_gps_gaps(t, gps, valid, ot, oxy, max_gap_s=30.0)
    assert not bridged.any() and np.isnan(xy[~valid]).all()
    assert [g.reason for g in gaps] == ["not bounded by fixes", "longer than 30 s"]
    _, _, off = bridge_gps_gaps(t, gps, valid, ot, oxy, max_gap_s=0.0)
    assert not any(g.bridged for g in off)


def test_odometry_that_disagrees_with_gps_leaves_the_gap_open():
    t, truth = _drive()
    valid = np.ones(t.size, dtype=bool)
    valid[180:260] = False
    gps = truth.copy()
    gps[~valid] = np.nan
    gps[260:] += np.array([15.0, 0.0])  # the receiver jumps 15 m during the dropout
    ot, oxy = _odom(t, truth)
    xy, bridged, gaps = bridge_gps_gaps(t, gps, valid, ot, oxy, max_gap_s=60.0)
    assert not bridged.any()
    assert "disagree" in gaps[0].reason and gaps[0].closure_m > 10


def test_no_odometry_or_nan_odometry_leaves_the_gap_open():
    t, truth = _drive()
    valid = np.ones(t.size, dtype=bool)
    valid[180:200] = False
    gps = np.where(valid[:, None], truth, np.nan)
    _, bridged, gaps = bridge_gps_gaps(t, gps, valid, np.zeros(0), np.zeros((0, 2)), max_gap_s=60.0)
    assert not bridged.any() and gaps[0].reason == "no odometry over the gap"
    ot, oxy = _odom(t, truth)
    oxy[5] = np.nan
    _, bridged, _ = bridge_gps_gaps(t, gps, valid, ot, oxy, max_gap_s=60.0)
    assert not bridged.any()


def test_a_robot_standing_still_in_a_dropout_keeps_its_position():
    t = np.arange(100) * 0.25
    truth = np.tile([[400_000.0, 5_000_000.0]], (100, 1))
    valid = np.ones(100, dtype=bool)
    valid[40:60] = False
    gps = np.where(valid[:, None], truth, np.nan)
    xy, bridged, gaps = bridge_gps_gaps(t, gps, valid, t, np.zeros((100, 2)), max_gap_s=60.0)
    assert bridged[40:60].all() and np.allclose(xy, truth)


def test_bad_shapes_and_limits_are_refused():
    t = np.arange(5.0)
    with pytest.raises(ValueError, match="xy_m"):
        bridge_gps_gaps(t, np.zeros((4, 2)), np.ones(5, bool), t, np.zeros((5, 2)), max_gap_s=1.0)
    with pytest.raises(ValueError, match="odom_xy_m"):
        bridge_gps_gaps(t, np.zeros((5, 2)), np.ones(5, bool), t, np.zeros((4, 2)), max_gap_s=1.0)
    with pytest.raises(ValueError, match="max_gap_s"):
        bridge_gps_gaps(t, np.zeros((5, 2)), np.ones(5, bool), t, np.zeros((5, 2)), max_gap_s=-1.0)
