"""NavPolicy (robot_app.nav.policy): the state table, row group by row group, on a point robot and a
scripted VNM (no model, no I/O, no asyncio)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from core.control import polyline_distance, wrap_angle
from robot_app.config import Config, nav_options
from robot_app.nav.policy import (
    FAILED,
    Directive,
    Driver,
    NavPolicy,
    Observation,
    Outcome,
    Phase,
    Pose,
    TraceRow,
    VnmOutput,
    VnmRequest,
    Walk,
)

OPTS = nav_options(Config())
RATE_HZ = 4.0  # VNM frame rate: a VNM step every 0.25 s
RANGE_STEPS = 20.0  # the top of the VNM's trained range (the tracker's lost_steps when the rules leave it None)
STEP_M = 0.25  # the fake VNM's metres per temporal step


# -- helpers -----------------------------------------------------------------------------------------------
def straight_xy(n: int = 11, spacing: float = 1.0) -> np.ndarray:
    """n nodes due east from the origin."""
    return np.stack([np.arange(n) * spacing, np.zeros(n)], axis=1)


def straight_walk(n: int = 11, *, headings: bool = True) -> Walk:
    return Walk(n, straight_xy(n), np.zeros(n) if headings else None)


def l_walk_xy() -> np.ndarray:
    """East 0..5 m, then north 1..5 m: 11 nodes with a right-angle turn at (5, 0)."""
    east = [(float(i), 0.0) for i in range(6)]
    north = [(5.0, float(j)) for j in range(1, 6)]
    return np.array(east + north)


def policy(walk: Walk, opts=OPTS, *, vnm: bool = True, gps_first_m: float = 0.0) -> NavPolicy:
    return NavPolicy(opts, walk, vnm_frame_rate_hz=RATE_HZ if vnm else None, vnm_range_steps=RANGE_STEPS,
                     gps_first_m=gps_first_m)


def pose(x: float, y: float, yaw: float = 0.0, *, t: float, yaw_known: bool = True, fix_age: float = 0.0,
         heading_age: float = 0.0) -> Pose:
    return Pose(float(x), float(y), float(yaw), yaw_known, t - fix_age, t - heading_age)


def scripted(req: VnmRequest, best: int, *, best_steps: float = 1.0, waypoint=(0.2, 0.0)) -> VnmOutput:
    """VNM outputs for ``req`` that localise on walk index ``best`` (``best_steps`` away; the others 4
    steps more per index), every waypoint ``waypoint``."""
    idx = np.arange(req.lo, req.hi)
    dist = best_steps + 4.0 * np.abs(idx - best)
    wps = np.tile(np.asarray(waypoint, dtype=np.float64), (idx.size, 1))
    return VnmOutput(req.lo, req.hi, dist, wps)


def flat(req: VnmRequest, steps: float) -> VnmOutput:
    """VNM outputs for ``req`` with every node ``steps`` away."""
    n = req.hi - req.lo
    return VnmOutput(req.lo, req.hi, np.full(n, float(steps)), np.zeros((n, 2)))


@dataclass
class Robot:
    """A point robot (unicycle): pose (x, y, yaw) ENU m / rad."""

    x: float
    y: float
    yaw: float = 0.0

    def drive(self, v: float, w: float, dt: float) -> None:
        if dt <= 0:
            return
        if abs(w) < 1e-9:
            self.x += v * math.cos(self.yaw) * dt
            self.y += v * math.sin(self.yaw) * dt
        else:
            y2 = self.yaw + w * dt
            self.x += v / w * (math.sin(y2) - math.sin(self.yaw))
            self.y -= v / w * (math.cos(y2) - math.cos(self.yaw))
            self.yaw = y2
        self.yaw = wrap_angle(self.yaw)


def geometric_vnm(req: VnmRequest, robot: Robot, node_xy: np.ndarray, *, reach_m: float = 0.25) -> VnmOutput:
    """A fake VNM from the geometry: distance = |robot - node| / STEP_M steps; each node's waypoint points
    at the node in the robot frame, at most ``reach_m`` away."""
    nodes = node_xy[req.lo:req.hi]
    dx, dy = nodes[:, 0] - robot.x, nodes[:, 1] - robot.y
    d = np.hypot(dx, dy)
    c, s = math.cos(robot.yaw), math.sin(robot.yaw)
    fx, fy = c * dx + s * dy, -s * dx + c * dy
    scale = np.where(d > reach_m, reach_m / np.maximum(d, 1e-12), 1.0)
    return VnmOutput(req.lo, req.hi, d / STEP_M, np.stack([fx * scale, fy * scale], axis=1))


@dataclass
class Run:
    directives: list
    observations: list
    t: float


def drive(pol: NavPolicy, robot: Robot, node_xy: np.ndarray | None = None, *, t: float = 0.0,
          max_steps: int = 3000, gps: bool = True, camera: bool = True, yaw_known: bool = True,
          until=None) -> Run:
    """Step ``pol`` with the robot's pose (a fresh fix and heading each step unless ``gps`` is off), a fresh
    camera frame and the geometric VNM on ``node_xy`` when it asks; the robot holds each directive for its
    ``hold_s`` and the wheels follow the command. Stops at the walk's end, when ``until(directive)`` holds,
    or after ``max_steps``."""
    ds, obs_l = [], []
    wheel = None
    for _ in range(max_steps):
        req = pol.vnm_request()
        out = geometric_vnm(req, robot, node_xy) if req is not None and camera and node_xy is not None else None
        p = Pose(robot.x, robot.y, robot.yaw, yaw_known, t if gps else -math.inf, t if yaw_known else -math.inf)
        obs = Observation(t, pose=p, frame_t_s=t if camera else None, vnm=out, wheel_v_mps=wheel)
        d = pol.step(obs)
        ds.append(d)
        obs_l.append(obs)
        if d.outcome is not None or (until is not None and until(d)):
            break
        robot.drive(d.v_mps, d.omega_radps, d.hold_s)
        wheel = d.v_mps
        t += d.hold_s
    return Run(ds, obs_l, t)


def vnm_step(pol: NavPolicy, t: float, best: int, *, xy=None, **kw) -> Directive:
    """One VNM step localised on ``best`` (a fresh frame; a fresh fix at ``xy`` if given)."""
    req = pol.vnm_request()
    assert req is not None
    p = None if xy is None else pose(*xy, t=t)
    return pol.step(Observation(t, pose=p, frame_t_s=t, vnm=scripted(req, best, **kw)))


def start_vnm(pol: NavPolicy, t: float = 0.0, xy=(0.0, 0.0)) -> Directive:
    """The first step of a walk whose first stretch is VNM, the robot on its start: the VNM drives."""
    d = pol.step(Observation(t, pose=None if xy is None else pose(*xy, t=t), frame_t_s=t))
    assert (d.phase, d.driver, d.hold_s) == (Phase.VNM, Driver.STOP, 0.0)
    return d


# -- stretches -------------------------------------------------------------------------------------------
def test_walk_without_positions_is_one_vnm_stretch():
    assert policy(Walk(5)).stretches == [("vnm", 0, 4)]
    assert policy(straight_walk(6)).stretches == [("vnm", 0, 5)]  # all facing the travel


def test_no_vnm_is_one_gps_stretch():
    assert policy(straight_walk(7), vnm=False).stretches == [("gps", 0, 6)]


def test_walk_without_positions_and_no_vnm_raises():
    with pytest.raises(ValueError, match="positions"):
        policy(Walk(5), vnm=False)


def test_heading_facing_away_in_the_middle_gives_vnm_gps_vnm():
    heading = np.zeros(15)
    heading[5:10] = math.pi  # recorded the other way round
    walk = Walk(15, straight_xy(15), heading)
    assert policy(walk).stretches == [("vnm", 0, 4), ("gps", 4, 10), ("vnm", 10, 14)]
    assert policy(walk, OPTS.replace(gps_where_facing_away=False)).stretches == [("vnm", 0, 14)]


def test_gps_first_m_gives_the_walks_start_to_gps():
    pol = policy(straight_walk(10), gps_first_m=3.5)
    assert pol.stretches == [("gps", 0, 4), ("vnm", 4, 9)]
    assert policy(straight_walk(10), gps_first_m=20.0).stretches == [("gps", 0, 9)]  # the whole walk


# -- START -----------------------------------------------------------------------------------------------
def test_start_far_from_the_first_vnm_stretch_approaches_by_gps():
    pol = policy(straight_walk(11))
    d = pol.step(Observation(0.0, pose=pose(0.0, 8.0, -math.pi / 2, t=0.0), frame_t_s=0.0))
    assert pol.phase is Phase.APPROACH
    assert pol.stretches == [("gps", 0, 0), ("vnm", 0, 10)]
    assert (d.phase, d.driver, d.walk_index) == (Phase.APPROACH, Driver.GPS, 0)
    assert d.target_xy == pytest.approx((0.0, 8.0 - OPTS.lookahead_m))  # pure pursuit: 2 m on along the leg
    assert d.v_mps == pytest.approx(OPTS.gps_max_v_mps)  # facing the first node, far from it
    assert d.omega_radps == pytest.approx(0.0, abs=1e-9)
    assert d.hold_s == pytest.approx(OPTS.gps_period_s)
    assert pol.vnm_request() is None


def test_start_beyond_start_max_distance_ends_lost_at_once():
    pol = policy(straight_walk(11))
    d = pol.step(Observation(0.0, pose=pose(-12.0, 16.0, t=0.0), frame_t_s=0.0))  # 20 m from node 0
    assert pol.done and d.outcome is Outcome.LOST and d.outcome in FAILED
    assert (d.phase, d.driver, d.v_mps, d.walk_index) == (Phase.DONE, Driver.STOP, 0.0, 0)
    assert d.to_goal_m == pytest.approx(20.0)  # to the walk's first node
    assert pol.stretches == [("vnm", 0, 10)]


def test_start_near_the_walk_starts_the_vnm_at_once():
    pol = policy(straight_walk(11))
    start_vnm(pol, xy=(1.0, 3.0))  # 3 m off: below gps_approach_m
    assert pol.stretches == [("vnm", 0, 10)]
    assert pol.vnm_request() == VnmRequest(0, OPTS.rules.window + 1, 0)


def test_start_without_a_fresh_fix_stands_until_fix_wait_s_then_the_vnm_starts():
    pol = policy(straight_walk(11))
    stale = lambda t: pose(20.0, 20.0, t=t, fix_age=OPTS.fix_max_age_s + 1.0)  # noqa: E731 - would be LOST if fresh
    for t in (0.0, 0.5, 1.0, 1.5, 1.95):
        d = pol.step(Observation(t, pose=stale(t) if t else None, frame_t_s=t))
        assert (d.phase, d.driver, d.v_mps, d.omega_radps) == (Phase.START, Driver.STOP, 0.0, 0.0)
        assert d.hold_s > 0 and d.outcome is None
        assert pol.vnm_request() is None
    d = pol.step(Observation(OPTS.fix_wait_s, pose=stale(OPTS.fix_wait_s), frame_t_s=OPTS.fix_wait_s))
    assert (d.phase, d.driver, d.outcome) == (Phase.VNM, Driver.STOP, None)
    assert pol.vnm_request() == VnmRequest(0, 5, 0)
    assert any("no fresh GPS fix" in n for n in pol.notes)


# -- APPROACH / ALIGN ------------------------------------------------------------------------------------
def _approach_to_align(y0: float, yaw0: float):
    pol = policy(straight_walk(11))
    robot = Robot(0.0, y0, yaw0)
    run = drive(pol, robot, until=lambda d: d.phase is not Phase.APPROACH)
    assert run.directives[0].phase is Phase.APPROACH
    assert all(d.driver is Driver.GPS for d in run.directives[:-1])
    last = run.directives[-1]
    assert (last.phase, last.driver, last.outcome) == (Phase.ALIGN, Driver.STOP, None)
    assert math.hypot(robot.x, robot.y) <= OPTS.goal_radius_m  # the leg's end: the walk's first node
    return pol, robot, run.t


@pytest.mark.parametrize("y0, yaw0, sign", [(8.0, -math.pi / 2, +1.0), (-8.0, math.pi / 2, -1.0)])
def test_approach_reaches_the_first_node_then_align_turns_in_place_onto_the_stretch(y0, yaw0, sign):
    pol, robot, t = _approach_to_align(y0, yaw0)
    x, y = robot.x, robot.y
    run = drive(pol, robot, t=t, until=lambda d: d.phase is not Phase.ALIGN)
    turns, last = run.directives[:-1], run.directives[-1]
    assert len(turns) >= 2
    for d in turns:
        assert (d.phase, d.driver, d.v_mps) == (Phase.ALIGN, Driver.TURN, 0.0)
        assert math.copysign(1.0, d.omega_radps) == sign  # towards yaw 0 (the stretch runs east)
        assert OPTS.align_min_omega_radps <= abs(d.omega_radps) <= OPTS.max_omega_radps
    assert (last.phase, last.driver, last.walk_index) == (Phase.VNM, Driver.STOP, 0)
    assert abs(wrap_angle(robot.yaw - 0.0)) <= OPTS.align_tolerance_rad
    assert (robot.x, robot.y) == pytest.approx((x, y))  # turned in place
    assert pol.vnm_request() == VnmRequest(0, 5, 1)  # stretch 1: the VNM stretch behind the GPS leg


@pytest.mark.parametrize("case", ["old heading", "unknown heading", "no fresh fix"])
def test_align_without_a_live_heading_goes_to_vnm_at_once(case):
    pol, robot, t = _approach_to_align(8.0, -math.pi / 2)
    t += 0.1
    p = {"old heading": pose(robot.x, robot.y, robot.yaw, t=t, heading_age=OPTS.heading_max_age_s + 0.5),
         "unknown heading": pose(robot.x, robot.y, robot.yaw, t=t, yaw_known=False),
         "no fresh fix": pose(robot.x, robot.y, robot.yaw, t=t, fix_age=OPTS.fix_max_age_s + 0.5)}[case]
    d = pol.step(Observation(t, pose=p, frame_t_s=t))
    assert (d.phase, d.driver, d.v_mps, d.omega_radps, d.outcome) == (Phase.VNM, Driver.STOP, 0.0, 0.0, None)
    assert pol.phase is Phase.VNM and pol.vnm_request() is not None
    assert any("no live heading" in n for n in pol.notes)


def test_camera_lost_after_a_long_align_counts_from_the_frames_seen_while_turning():
    pol, robot, t = _approach_to_align(8.0, -math.pi / 2)
    d = None
    while pol.phase is Phase.ALIGN:  # the turn is blocked: the yaw stays, frames keep coming
        t += 0.1
        d = pol.step(Observation(t, pose=pose(robot.x, robot.y, robot.yaw, t=t), frame_t_s=t))
        assert t < 20.0
    assert (d.phase, d.driver) == (Phase.VNM, Driver.STOP) and "took too long" in d.why
    assert t > OPTS.camera_lost_s  # the turn lasted longer than camera_lost_s, with a fresh frame each step
    t += 0.25
    d = pol.step(Observation(t, pose=pose(robot.x, robot.y, robot.yaw, t=t), frame_t_s=t - OPTS.frame_max_age_s - 0.2))
    # one late frame, 1.45 s after a fresh one: stand and wait for the next (camera_lost_s is 5 s)
    assert (d.outcome, d.driver) == (None, Driver.STOP)


# -- VNM -------------------------------------------------------------------------------------------------
def test_vnm_without_a_fresh_frame_stands_then_ends_camera_lost():
    pol = policy(Walk(11))
    start_vnm(pol, xy=None)
    t = 0.0
    while t < OPTS.camera_lost_s:
        t += 0.25
        old = t - OPTS.frame_max_age_s - 0.5 if t > 2.0 else None  # no frame, then only stale ones
        d = pol.step(Observation(t, frame_t_s=old))
        if t <= OPTS.camera_lost_s:
            assert (d.phase, d.driver, d.v_mps, d.outcome) == (Phase.VNM, Driver.STOP, 0.0, None)
            assert d.hold_s == pytest.approx(1.0 / RATE_HZ) and d.why == "no fresh camera frame"
    d = pol.step(Observation(t + 0.25, frame_t_s=None))
    assert d.outcome is Outcome.CAMERA_LOST and d.phase is Phase.DONE
    assert math.isinf(d.to_goal_m)  # no positions


def test_vnm_camera_lost_counts_from_the_last_fresh_frame():
    pol = policy(Walk(11))
    start_vnm(pol, xy=None)
    assert pol.step(Observation(3.0, frame_t_s=3.0)).outcome is None  # a frame: the clock restarts
    assert pol.step(Observation(8.0, frame_t_s=None)).outcome is None  # 5 s since: not more
    assert pol.step(Observation(8.25, frame_t_s=None)).outcome is Outcome.CAMERA_LOST


def test_vnm_without_output_stands():
    pol = policy(Walk(11))
    start_vnm(pol, xy=None)
    for t in (0.25, 0.5, 0.75):
        d = pol.step(Observation(t, frame_t_s=t, vnm=None))
        assert (d.phase, d.driver, d.v_mps, d.omega_radps, d.outcome) == (Phase.VNM, Driver.STOP, 0.0, 0.0, None)
        assert d.hold_s == pytest.approx(0.25)
    assert pol.vnm_request() == VnmRequest(0, 5, 0)


def test_vnm_outputs_for_the_wrong_window_raise():
    pol = policy(Walk(11))
    start_vnm(pol, xy=None)
    with pytest.raises(ValueError, match=r"\[1, 6\).*\[0, 5\)"):
        pol.step(Observation(0.25, frame_t_s=0.25, vnm=flat(VnmRequest(1, 6, 0), 2.0)))


def test_vnm_drives_the_subgoals_waypoint_through_the_pd_rule():
    pol = policy(Walk(11))
    start_vnm(pol, xy=None)
    req = pol.vnm_request()
    dist = np.array([6.0, 1.0, 5.0, 9.0, 13.0])  # localised on 1, close: subgoal 2
    wps = np.zeros((5, 2))
    wps[:, 1] = -1.0
    wps[2] = (0.2, 0.05)
    d = pol.step(Observation(0.25, frame_t_s=0.25, vnm=VnmOutput(req.lo, req.hi, dist, wps)))
    assert (d.phase, d.driver, d.walk_index, d.subgoal) == (Phase.VNM, Driver.VNM, 1, 2)
    assert d.best_steps == pytest.approx(1.0)
    assert d.v_mps == pytest.approx(0.2 * RATE_HZ)
    assert d.omega_radps == pytest.approx(math.atan(0.25) * RATE_HZ)
    assert d.hold_s == pytest.approx(0.25)
    assert pol.vnm_request() == VnmRequest(0, 6, 0)  # the window follows the localisation


def test_vnm_off_walk_guard_ends_off_walk_once_armed():
    pol = policy(straight_walk(11))
    start_vnm(pol, xy=(0.0, 0.0))
    assert vnm_step(pol, 0.25, 0, xy=(0.0, 0.0)).driver is Driver.VNM  # within max_off_walk_m: armed
    d = vnm_step(pol, 0.5, 0, xy=(3.0, 11.0))
    assert (d.outcome, d.phase, d.walk_index) == (Outcome.OFF_WALK, Phase.DONE, 0)
    assert d.to_goal_m == pytest.approx(math.hypot(7.0, 11.0))


def test_vnm_off_walk_guard_is_not_armed_before_a_fix_near_the_walk():
    pol = policy(straight_walk(11))
    for t in (0.0, 1.0):
        assert pol.step(Observation(t, frame_t_s=t)).phase is Phase.START  # no fix: stand
    start_vnm(pol, t=OPTS.fix_wait_s, xy=None)
    t = OPTS.fix_wait_s
    d = vnm_step(pol, t + 0.25, 0, xy=(3.0, 11.0))  # 11 m off, not armed yet
    assert (d.outcome, d.driver) == (None, Driver.VNM)
    assert vnm_step(pol, t + 0.5, 0, xy=(3.0, 9.0)).outcome is None  # 9 m: arms it
    assert vnm_step(pol, t + 0.75, 0, xy=(3.0, 11.0)).outcome is Outcome.OFF_WALK


def test_vnm_lost_after_max_lost_steps_without_a_node():
    opts = OPTS.replace(max_lost_steps=3, lost_steps=10.0)
    assert opts.rules.max_lost_steps == 3 and opts.rules.lost_steps == 10.0
    pol = policy(Walk(11), opts)
    start_vnm(pol, xy=None)
    seq = [15.0, 15.0, 9.0, 15.0, 15.0]  # above lost_steps (below the VNM's range); one found resets
    t = 0.0
    for steps in seq:
        t += 0.25
        d = pol.step(Observation(t, frame_t_s=t, vnm=flat(pol.vnm_request(), steps)))
        assert d.outcome is None
        if steps > 10.0:
            assert (d.driver, d.v_mps, d.why) == (Driver.STOP, 0.0, "the VNM finds no node this step")
        else:
            assert d.driver is Driver.VNM
    d = pol.step(Observation(t + 0.25, frame_t_s=t + 0.25, vnm=flat(pol.vnm_request(), 15.0)))
    assert (d.outcome, d.phase, d.driver) == (Outcome.LOST, Phase.DONE, Driver.STOP)


def test_vnm_lost_uses_the_vnm_range_when_the_rules_leave_lost_steps_unset():
    pol = policy(Walk(11), OPTS.replace(max_lost_steps=2))
    start_vnm(pol, xy=None)
    assert pol.step(Observation(0.25, frame_t_s=0.25, vnm=flat(pol.vnm_request(), 19.0))).driver is Driver.VNM
    assert pol.step(Observation(0.5, frame_t_s=0.5, vnm=flat(pol.vnm_request(), 21.0))).outcome is None
    assert pol.step(Observation(0.75, frame_t_s=0.75, vnm=flat(pol.vnm_request(), 21.0))).outcome is Outcome.LOST


def test_vnm_reached_after_goal_confirm_steps_on_the_last_node():
    pol = policy(Walk(5), OPTS.replace(goal_confirm_steps=3))
    start_vnm(pol, xy=None)
    assert vnm_step(pol, 0.25, 4, best_steps=1.5).driver is Driver.VNM
    assert vnm_step(pol, 0.5, 3, best_steps=1.5).driver is Driver.VNM  # elsewhere: the count starts again
    for t in (0.75, 1.0):
        d = vnm_step(pol, t, 4, best_steps=1.5)
        assert (d.driver, d.walk_index, d.subgoal, d.outcome) == (Driver.VNM, 4, 4, None)
        assert d.v_mps == pytest.approx(0.8)  # driving on towards the last node meanwhile
    d = vnm_step(pol, 1.25, 4, best_steps=1.5)
    assert (d.outcome, d.phase, d.walk_index) == (Outcome.REACHED, Phase.DONE, 4)
    assert d.outcome not in FAILED
    # no positions: the distance left is the VNM's, steps x scale x period
    assert d.to_goal_m == pytest.approx(1.5 * OPTS.vnm_scale_v_mps / RATE_HZ)


def test_vnm_gps_arrival_on_the_last_stretch_reaches_with_the_fixs_distance():
    pol = policy(straight_walk(11))
    start_vnm(pol, xy=(0.0, 0.0))
    assert vnm_step(pol, 0.25, 4, xy=(4.0, 0.0)).outcome is None
    # localised more than window nodes before the end: a fix past it is no arrival
    assert vnm_step(pol, 0.5, 4, xy=(10.5, 0.3)).driver is Driver.VNM
    assert vnm_step(pol, 0.75, 8, xy=(8.0, 0.0)).outcome is None  # 2 m short of the end: not past it
    d = vnm_step(pol, 1.0, 8, xy=(10.5, 0.3))  # within window of the end, the fix past it
    assert (d.outcome, d.walk_index) == (Outcome.REACHED, 10)
    assert d.to_goal_m == pytest.approx(math.hypot(0.5, 0.3))
    assert any("at or past the stretch's last node" in n for n in pol.notes)
    assert pol.stretches == [("vnm", 0, 10)]  # no GPS goal check after a GPS arrival


def test_vnm_gps_arrival_on_a_stretch_before_another_hands_over_to_it():
    heading = np.zeros(15)
    heading[5:10] = math.pi
    pol = policy(Walk(15, straight_xy(15), heading))
    start_vnm(pol, xy=(0.0, 0.0))
    assert vnm_step(pol, 0.25, 2, xy=(2.0, 0.0)).driver is Driver.VNM
    d = vnm_step(pol, 0.5, 3, xy=(4.5, 0.0))
    assert (d.outcome, d.phase, d.driver, d.walk_index) == (None, Phase.GPS, Driver.STOP, 4)
    assert pol.phase is Phase.GPS and pol.vnm_request() is None
    d = pol.step(Observation(0.6, pose=pose(4.5, 0.0, t=0.6)))
    assert (d.phase, d.driver) == (Phase.GPS, Driver.GPS)


@pytest.mark.parametrize("fix, j", [
    ((5.0, 0.0), 5),   # from the tail node nearest the fix
    ((10.0, 4.0), 9),  # nearest the last node: from the one before it (a leg, not a point)
])
def test_vnm_reached_far_from_the_end_by_gps_hands_the_rest_to_gps(fix, j):
    pol = policy(straight_walk(11), OPTS.replace(goal_confirm_steps=1))
    start_vnm(pol, xy=fix)
    assert vnm_step(pol, 0.25, 4, xy=fix).driver is Driver.VNM
    assert vnm_step(pol, 0.5, 8, xy=fix).driver is Driver.VNM
    d = vnm_step(pol, 0.75, 10, xy=fix)  # the VNM says reached, the fix is more than gps_goal_check_m away
    assert d.outcome is None and (d.phase, d.driver, d.walk_index) == (Phase.GPS, Driver.STOP, j)
    assert pol.stretches == [("vnm", 0, 10), ("gps", j, 10)]
    assert any(f"GPS drives from walk index {j}" in n for n in pol.notes)
    robot = Robot(*fix, 0.0)
    run = drive(pol, robot, t=0.75)
    end = run.directives[-1]
    assert all(d.driver is Driver.GPS for d in run.directives[:-1])
    assert (end.outcome, end.walk_index) == (Outcome.REACHED, 10)
    assert end.to_goal_m <= OPTS.goal_radius_m
    assert end.to_goal_m == pytest.approx(math.hypot(robot.x - 10.0, robot.y))


def test_vnm_reached_near_the_end_by_gps_ends_reached():
    pol = policy(straight_walk(11), OPTS.replace(goal_confirm_steps=1))
    start_vnm(pol, xy=(5.0, 0.0))
    vnm_step(pol, 0.25, 4, xy=(6.0, 0.0))
    vnm_step(pol, 0.5, 8, xy=(8.0, 0.0))
    d = vnm_step(pol, 0.75, 10, xy=(9.0, 0.0), best_steps=2.0)  # 1 m short: within gps_goal_check_m
    assert (d.outcome, d.walk_index) == (Outcome.REACHED, 10)
    assert d.to_goal_m == pytest.approx(2.0 * OPTS.vnm_scale_v_mps / RATE_HZ)
    assert pol.stretches == [("vnm", 0, 10)]


def test_vnm_point_robot_follows_a_walk_to_reached():
    xy = straight_xy(11)
    pol = policy(Walk(11))  # no positions: the tracker alone decides
    robot = Robot(0.0, 0.0, 0.0)
    run = drive(pol, robot, xy)
    end = run.directives[-1]
    assert (end.outcome, end.walk_index) == (Outcome.REACHED, 10)
    assert robot.x == pytest.approx(10.0, abs=0.3) and robot.y == pytest.approx(0.0, abs=1e-9)
    assert sum(d.driver is Driver.VNM for d in run.directives) >= 40  # 10 m at 1 m/s in 0.25 s steps
    subgoals = [d.subgoal for d in run.directives if d.driver is Driver.VNM]
    assert subgoals == sorted(subgoals)  # never back


# -- GPS -------------------------------------------------------------------------------------------------
def test_gps_without_a_fresh_fix_stands_then_ends_gps_lost():
    pol = policy(straight_walk(11), vnm=False)
    d = pol.step(Observation(0.0, pose=pose(0.0, 0.0, t=0.0)))
    assert (d.phase, d.driver, d.hold_s) == (Phase.GPS, Driver.STOP, 0.0)
    stale = lambda t: pose(0.0, 0.0, t=t, fix_age=OPTS.fix_max_age_s + 0.1)  # noqa: E731
    for t in (0.5, 1.0, 2.5, 4.0, OPTS.gps_lost_s):
        d = pol.step(Observation(t, pose=stale(t) if t != 1.0 else None))
        assert (d.phase, d.driver, d.v_mps, d.outcome) == (Phase.GPS, Driver.STOP, 0.0, None)
        assert d.hold_s == pytest.approx(OPTS.gps_period_s) and d.why == "no fresh GPS fix"
    d = pol.step(Observation(OPTS.gps_lost_s + 0.5, pose=stale(OPTS.gps_lost_s + 0.5)))
    assert (d.outcome, d.phase) == (Outcome.GPS_LOST, Phase.DONE)
    assert math.isinf(d.to_goal_m)  # no fresh fix to measure it with


@pytest.mark.parametrize("lookahead_m, goal_radius_m, handed_over", [
    (2.0, 1.0, True),   # radius max(1, 2) = 2 m: 1.5 m from the end hands over
    (1.0, 1.0, False),  # radius 1 m: GPS drives on
    (1.0, 2.0, True),   # radius max(2, 1) = 2 m
])
def test_gps_arrival_at_a_stretch_end_hands_over_to_the_next(lookahead_m, goal_radius_m, handed_over):
    opts = OPTS.replace(lookahead_m=lookahead_m, goal_radius_m=goal_radius_m)
    pol = policy(straight_walk(10), opts, gps_first_m=3.5)
    assert pol.stretches == [("gps", 0, 4), ("vnm", 4, 9)]
    assert pol.step(Observation(0.0, pose=pose(0.0, 0.0, t=0.0))).phase is Phase.GPS
    d = pol.step(Observation(0.1, pose=pose(1.5, 0.0, t=0.1)))  # 2.5 m from node 4
    assert (d.phase, d.driver, d.walk_index) == (Phase.GPS, Driver.GPS, 1)
    d = pol.step(Observation(0.2, pose=pose(2.5, 0.0, t=0.2)))  # 1.5 m from node 4
    if handed_over:
        assert (d.phase, d.driver, d.walk_index, d.outcome) == (Phase.ALIGN, Driver.STOP, 4, None)
        d = pol.step(Observation(0.2, pose=pose(2.5, 0.0, t=0.2)))  # facing the stretch already
        assert (d.phase, d.driver) == (Phase.VNM, Driver.STOP)
        assert pol.vnm_request() == VnmRequest(4, 9, 1)
    else:
        assert (d.phase, d.driver, d.outcome) == (Phase.GPS, Driver.GPS, None)


def test_gps_point_robot_reaches_the_end_of_an_l_shaped_walk():
    xy = l_walk_xy()
    pol = policy(Walk(11, xy), vnm=False)
    robot = Robot(0.0, 0.0, 0.0)
    run = drive(pol, robot)
    end = run.directives[-1]
    assert (end.outcome, end.walk_index, end.why) == (Outcome.REACHED, 10, "the walk's last node")
    assert end.to_goal_m <= OPTS.goal_radius_m
    assert end.to_goal_m == pytest.approx(math.hypot(robot.x - 5.0, robot.y - 5.0))
    gps = [d for d in run.directives if d.driver is Driver.GPS]
    assert len(gps) >= 50 and all(0.0 <= d.v_mps <= OPTS.gps_max_v_mps for d in gps)
    assert max(d.walk_index for d in gps) >= 8
    off = max(polyline_distance(xy, o.pose.x_m, o.pose.y_m) for o in run.observations)
    assert off < 1.0  # the corner cut stays close to the walk
    assert run.t < 30.0


def test_gps_unknown_heading_creeps_straight():
    pol = policy(straight_walk(11), vnm=False)
    pol.step(Observation(0.0, pose=pose(0.0, 0.5, t=0.0, yaw_known=False)))
    d = pol.step(Observation(0.1, pose=pose(0.0, 0.5, t=0.1, yaw_known=False)))
    assert (d.phase, d.driver) == (Phase.GPS, Driver.GPS)
    assert d.v_mps == pytest.approx(min(OPTS.acquire_v_mps, OPTS.gps_max_v_mps))
    assert d.omega_radps == 0.0 and d.target_xy is None
    d = pol.step(Observation(0.2, pose=pose(0.0, 0.5, math.pi / 2, t=0.2)))  # heading known again: pursuit
    assert d.target_xy is not None and d.omega_radps < 0.0  # turning right, towards the walk ahead


def test_gps_far_from_the_walk_ends_lost_after_gps_max_lost_steps():
    pol = policy(straight_walk(11), OPTS.replace(gps_max_lost_steps=5), vnm=False)
    far = (0.0, OPTS.gps_max_distance_m + 5.0)
    ds = [pol.step(Observation(0.1 * i, pose=pose(*far, t=0.1 * i))) for i in range(6)]
    assert ds[0].driver is Driver.STOP  # the stretch begins
    assert all(d.outcome is None and d.driver is Driver.GPS for d in ds[1:5])
    assert (ds[5].outcome, ds[5].phase) == (Outcome.LOST, Phase.DONE)
    assert ds[5].to_goal_m == pytest.approx(math.hypot(10.0, far[1]))


# -- guards ----------------------------------------------------------------------------------------------
def test_timeout_after_timeout_s():
    pol = policy(Walk(5), OPTS.replace(timeout_s=10.0))
    start_vnm(pol, xy=None)
    t = 0.0
    while t < 10.0:
        t += 0.25
        assert pol.step(Observation(t, frame_t_s=t)).outcome is None  # the VNM's context is filling
    d = pol.step(Observation(10.25, frame_t_s=10.25))
    assert (d.outcome, d.phase, d.driver) == (Outcome.TIMEOUT, Phase.DONE, Driver.STOP)


def _blocked_run(wheel):
    """A GPS walk, the robot standing at its start; ``wheel(v_cmd)`` the wheel reading. Returns the
    (t, directive) pairs until the end or 3 s."""
    pol = policy(straight_walk(11), vnm=False)
    out, last_v = [], 0.0
    for i in range(13):
        t = 0.25 * i
        d = pol.step(Observation(t, pose=pose(0.0, 0.0, t=t), wheel_v_mps=wheel(last_v)))
        out.append((t, d))
        last_v = d.v_mps
        if d.outcome is not None:
            break
    return out


def test_collided_when_the_wheels_stay_below_a_quarter_of_the_command():
    run = _blocked_run(lambda v: 0.2 * v)
    assert run[1][1].v_mps >= OPTS.collide_min_v_mps  # t = 0.25: GPS drives
    t_end, d = run[-1]
    assert d.outcome is Outcome.COLLIDED and d.phase is Phase.DONE and "backed off" in d.why
    # blocked since the step after the first command: back off, then the walk ends
    t_back, back = run[-2]
    assert t_back == pytest.approx(0.5 + OPTS.collide_s) and back.phase is Phase.BACK_OFF
    assert back.driver is Driver.BACK and back.v_mps == -OPTS.backoff_v_mps and back.omega_radps == 0.0
    assert back.hold_s == pytest.approx(OPTS.backoff_m / OPTS.backoff_v_mps)
    assert all(d.outcome is None for _, d in run[:-1])
    # without the back-off the walk ends at once
    pol = policy(straight_walk(11), OPTS.replace(backoff_m=0.0), vnm=False)
    last_v = 0.0
    for i in range(13):
        d = pol.step(Observation(0.25 * i, pose=pose(0.0, 0.0, t=0.25 * i), wheel_v_mps=0.2 * last_v))
        last_v = d.v_mps
        if d.outcome is not None:
            break
    assert d.outcome is Outcome.COLLIDED and 0.25 * i == pytest.approx(0.5 + OPTS.collide_s)


@pytest.mark.parametrize("wheel", [lambda v: None, lambda v: v, lambda v: 0.3 * v], ids=["no reading", "follows",
                                                                                          "above a quarter"])
def test_not_collided_without_a_reading_or_with_the_wheels_turning(wheel):
    run = _blocked_run(wheel)
    assert len(run) == 13 and all(d.outcome is None for _, d in run)


def test_not_collided_below_collide_min_v_mps():
    pol = policy(straight_walk(11), OPTS.replace(gps_max_v_mps=0.15), vnm=False)
    last_v = 0.0
    for i in range(13):
        t = 0.25 * i
        d = pol.step(Observation(t, pose=pose(0.0, 0.0, t=t), wheel_v_mps=0.0 if last_v else None))
        assert d.outcome is None
        last_v = d.v_mps
    assert 0.0 < last_v < OPTS.collide_min_v_mps


def test_stuck_on_gps_without_progress_for_stuck_s():
    pol = policy(straight_walk(11), OPTS.replace(stuck_s=3.0), vnm=False)
    t, d = 0.0, None
    while d is None or d.outcome is None:
        d = pol.step(Observation(t, pose=pose(0.0, 0.0, t=t)))
        t += 0.25
        assert t < 10.0
    assert d.outcome is Outcome.STUCK and d.phase is Phase.DONE
    assert t - 0.25 == pytest.approx(3.5)  # the first GPS step (t = 0.25) set the best distance to the end


def test_stuck_on_vnm_without_progress_for_stuck_s():
    pol = policy(Walk(5), OPTS.replace(stuck_s=3.0))
    start_vnm(pol, xy=None)
    ends = {}
    for i in range(1, 40):
        t = 0.25 * i
        d = vnm_step(pol, t, 1 if t >= 2.0 else 0)  # node 1 reached at t = 2 s: progress
        if d.outcome is not None:
            ends[d.outcome] = t
            break
    assert ends == {Outcome.STUCK: 5.25}


# -- after the end, the trace ----------------------------------------------------------------------------
def test_after_the_end_step_returns_the_final_directive_and_the_trace_stops():
    pol = policy(straight_walk(11))
    d = pol.step(Observation(0.0, pose=pose(-12.0, 16.0, t=0.0)))
    assert d.outcome is Outcome.LOST and pol.trace == []  # the final step is not traced
    again = pol.step(Observation(5.0, pose=pose(0.0, 0.0, t=5.0), frame_t_s=5.0))
    assert again is d and pol.vnm_request() is None and pol.trace == []


def test_trace_rows_for_each_non_final_step():
    xy = straight_xy(11)
    pol = policy(Walk(11))
    t0 = 7.0
    robot = Robot(0.0, 0.0, 0.0)
    run = drive(pol, robot, xy, t=t0)
    assert run.directives[-1].outcome is Outcome.REACHED
    assert len(pol.trace) == len(run.directives) - 1
    for row, d, o in zip(pol.trace, run.directives, run.observations):
        assert isinstance(row, TraceRow)
        assert row.driver == d.driver.value and isinstance(row.driver, str) and not isinstance(row.driver, Driver)
        assert (row.walk_index, row.subgoal, row.v_mps, row.omega_radps) == (d.walk_index, d.subgoal, d.v_mps,
                                                                             d.omega_radps)
        assert row.t_s == pytest.approx(o.t_s - t0)
        assert (row.x_m, row.y_m, row.yaw_rad) == (o.pose.x_m, o.pose.y_m, o.pose.yaw_rad)
        assert row.best_steps == d.best_steps or (math.isnan(row.best_steps) and math.isnan(d.best_steps))
    assert pol.trace[0].driver == "stop" and {r.driver for r in pol.trace[1:]} == {"vnm"}
    assert pol.trace[0].t_s == 0.0


def test_trace_rows_without_a_pose_or_heading_hold_nan():
    pol = policy(Walk(5))
    pol.step(Observation(0.0))
    pol.step(Observation(0.25, pose=pose(1.0, 2.0, 0.5, t=0.25, yaw_known=False), frame_t_s=0.25))
    r0, r1 = pol.trace
    assert math.isnan(r0.x_m) and math.isnan(r0.y_m) and math.isnan(r0.yaw_rad)
    assert (r1.x_m, r1.y_m) == (1.0, 2.0) and math.isnan(r1.yaw_rad)
    assert (r0.driver, r1.driver) == ("stop", "stop") and r1.t_s == 0.25


def test_gps_follows_a_walk_that_folds_back_over_itself_in_order():
    """Out 6 m east and back 4 m west along the same line: pure pursuit on the progress (only forward)
    drives the fold in order and ends at the walk's end, never aiming at the other leg's nodes."""
    xy = np.array([(float(i), 0.0) for i in range(7)] + [(float(i), 0.0) for i in range(5, 1, -1)])
    pol = policy(Walk(len(xy), xy), vnm=False)
    run = drive(pol, Robot(0.0, 0.0, 0.0), max_steps=2000)
    d = run.directives[-1]
    assert d.outcome is Outcome.REACHED and d.walk_index == len(xy) - 1
    subgoals = [x.subgoal for x in run.directives if x.outcome is None]
    assert subgoals == sorted(subgoals)  # the walk index only moves forward
    assert max(r.x_m for r in pol.trace) > 5.0  # it drove out to the fold first


def test_moving_on_counts_as_progress_after_a_spurious_jump_of_the_vnm():
    """The VNM localises on node 4 once (a spurious jump to its window's end), then on node 2 behind it: the
    farthest index does not grow, but the fix moving on along the walk keeps the walk from ending stuck;
    standing, it ends stuck after stuck_s."""
    def run(speed):
        pol = policy(straight_walk(40))
        t, x = 0.0, 0.0
        start_vnm(pol, t)
        vnm_step(pol, 0.25, 4, xy=(0.0, 0.0))
        for k in range(2, 200):
            t = 0.25 * k
            x += speed * 0.25
            d = vnm_step(pol, t, 2, xy=(x, 0.0))
            if d.outcome is not None:
                return d, t
        return d, t

    d, _t = run(0.5)
    assert d.outcome is None
    d, t = run(0.0)
    assert d.outcome is Outcome.STUCK and t == pytest.approx(OPTS.stuck_s + 0.5, abs=0.3)
