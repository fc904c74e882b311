"""The navigation policy: one synchronous object that follows a walk, ``step(observation) -> directive``.

No asyncio, no I/O, no clock of its own: the robot's shell (:mod:`robot_app.nav.shell`, sensors in,
commands out) and ``eval sim``'s driver (:mod:`robot_app.sim.eval_drive`, the simulation clock) step
the same :class:`NavPolicy`, so the evaluation measures the robot's loop. Every threshold comes from
:class:`NavOptions`, which :func:`robot_app.config.nav_options` composes from the configuration.

Per step the shell asks :meth:`NavPolicy.vnm_request` which walk nodes the VNM should score (None:
the VNM does not drive now), runs the VNM on the newest camera context for them, and passes its
outputs with the fused pose and the latest fix (with their times) in an :class:`Observation`; the
:class:`Directive` says who drives (:class:`Driver`), the command, how long to hold it, and, once the
walk ends, an :class:`Outcome` with where and why.

The walk is split into stretches (:func:`robot_app.nav.walk_following.walk_stretches`): the VNM drives the
nodes whose images face the way the walk goes, GPS (LM-Nav's GPS controller: pure pursuit with the
straight-line rule) the rest, and the nodes near sharp turns when ``gps_at_turns_deg`` > 0, and the
first ``gps_first_m`` of a walk re-planned after a loss.

State table (phase: condition -> next phase; the first matching row wins; "end X": the walk ends with
outcome X and the robot stopped):

==========  ====================================================================  ======================
phase       condition                                                             next
==========  ====================================================================  ======================
any         time since the first step > ``timeout_s``                             end ``timeout``
any         command >= ``collide_min_v_mps`` and wheel speed below a quarter of   BACK_OFF
            it for ``collide_s`` (the wheels are blocked)
BACK_OFF    after reversing ``backoff_m`` at ``backoff_v_mps`` (clear of what it    end ``collided``
            hit, so that a re-planned walk can turn away)
VNM, GPS    the farthest walk node reached (and, on GPS, the distance to the       end ``stuck``
            stretch's end) not improved and the fix not ``stuck_min_m`` from where
            it last was for ``stuck_s``
START       first stretch VNM, a fresh fix more than ``gps_approach_m`` from it    end ``lost``
            and its first node more than ``start_max_distance_m`` away
START       first stretch VNM, a fresh fix more than ``gps_approach_m`` from it    APPROACH
START       no fresh fix yet, less than ``fix_wait_s`` since the first step        START (stand)
START       otherwise                                                             first stretch
APPROACH    as GPS on the straight leg fix -> first node, to ``goal_radius_m``     ALIGN
ALIGN       heading within ``align_tolerance_rad`` of the stretch's direction     VNM
ALIGN       no fresh fix, unknown heading or none within ``heading_max_age_s``,   VNM (as it stands)
            or longer than |error| / ``align_min_omega_radps`` + ``align_extra_s``
ALIGN       otherwise                                                             ALIGN (turn in place)
VNM         no camera frame within ``frame_max_age_s`` for ``camera_lost_s``       end ``camera-lost``
VNM         no frame within ``frame_max_age_s`` or no VNM output yet              VNM (stand)
VNM         the off-walk guard armed (a fresh fix once within ``max_off_walk_m``   end ``off-walk``
            of the stretch) and a fresh fix farther than that
VNM         the tracker finds no node for ``max_lost_steps`` steps                end ``lost``
VNM         the tracker reports the stretch's last node (``goal_confirm_steps``), next stretch
            or localised within ``window`` nodes of it with a fresh fix at or
            past it within ``gps_goal_check_m`` (GPS arrival)
VNM         the tracker finds no node this step                                   VNM (stand)
VNM         otherwise: the subgoal's waypoint through the PD rule                 VNM
GPS         no fresh fix for ``gps_lost_s``                                       end ``gps-lost``
GPS         no fresh fix                                                          GPS (stand)
GPS         within the stretch's radius of its end, progressed to its last nodes  next stretch
            or to its end (``goal_radius_m`` on the walk's last
            stretch, else the larger of it and ``lookahead_m``)
GPS         farther than ``gps_max_distance_m`` from the path for                 end ``lost``
            ``gps_max_lost_steps`` steps
GPS         heading unknown                                                       GPS (creep straight)
GPS         otherwise: towards the first point of the path beyond the progress    GPS
            ``lookahead_m`` from the robot, within 1.5 ``lookahead_m`` along it,
            else the farthest of those (pure pursuit; progress only forward)
next        no stretch left                                                       end ``reached``
stretch     the walk's last stretch was VNM and a fresh fix is more than           GPS (from the node
            ``gps_goal_check_m`` from its last node (not after a GPS arrival)     nearest the fix)
next        a VNM stretch after another stretch                                   ALIGN
stretch     a VNM stretch first / a GPS stretch                                   VNM / GPS
==========  ====================================================================  ======================

Frames and units: positions UTM / ENU metres, yaw counter-clockwise from east (REP-103), robot frame x
forward, y left, v m/s, omega rad/s, times seconds on the shell's clock (monotonic on the robot).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

import numpy as np

from core.control import line_follow_velocity, passed_end, polyline_distance, waypoint_to_velocity, wrap_angle
from robot_app.nav.pursuit import PathPursuit
from robot_app.nav.walk_following import WalkRules, WalkTracker, stretch_yaw, vnm_nodes, walk_stretches

__all__ = ["Driver", "Outcome", "Phase", "NavOptions", "Pose", "VnmOutput", "VnmRequest", "Observation",
           "Directive", "TraceRow", "Walk", "NavPolicy", "FAILED"]


class Driver(str, enum.Enum):
    """Who drives a step: the VNM, the GPS controller, a turn in place, backing off after a collision, or
    nobody (stand still)."""

    VNM = "vnm"
    GPS = "gps"
    TURN = "turn"
    BACK = "back"
    STOP = "stop"


class Outcome(str, enum.Enum):
    """How a walk ended (a str enum: compares equal to its value)."""

    REACHED = "reached"
    LOST = "lost"
    STUCK = "stuck"
    COLLIDED = "collided"
    OFF_WALK = "off-walk"
    TIMEOUT = "timeout"
    ABORTED = "aborted"
    GPS_LOST = "gps-lost"
    CAMERA_LOST = "camera-lost"


#: the outcomes that are failures (the route job notes them and may re-plan)
FAILED = frozenset(o for o in Outcome if o is not Outcome.REACHED)


class Phase(str, enum.Enum):
    START = "start"
    APPROACH = "approach"
    ALIGN = "align"
    VNM = "vnm"
    GPS = "gps"
    BACK_OFF = "back-off"
    DONE = "done"


@dataclass(frozen=True)
class NavOptions:
    """Every threshold of the policy (units in the names). Built by :func:`robot_app.config.nav_options`
    from ``[vnm_nav]``, ``[mission]``, ``[robot]``, ``[models]`` and ``[serial]``: no default here.

    ``rules`` are the VNM loop's (:class:`robot_app.nav.walk_following.WalkRules`); ``waypoint_index`` the
    predicted waypoint the PD rule steers to (GNM: 2 of 5), ``vnm_scale_v_mps`` the speed that scales the
    VNM's normalised waypoints to metres (GNM: metres = normalised x max_v / frame rate), the ``*_max_v_mps``
    the speed caps; the GPS controller's are LM-Nav's GPS
    ablation's (pure pursuit with :func:`core.control.line_follow_velocity`). The robot's limits the shells
    need come along: ``robot_max_v_mps`` (``[robot] max_v_mps``, the cap of a GPS-mode speed override),
    ``cmd_refresh_s`` (half ``[robot] cmd_timeout_s``: how often a held command is renewed) and
    ``wheel_radius_m``. See each key's doc in :mod:`robot_app.config`.
    """

    rules: WalkRules
    waypoint_index: int
    vnm_scale_v_mps: float
    vnm_max_v_mps: float
    gps_max_v_mps: float
    max_omega_radps: float
    gps_where_facing_away: bool
    min_vnm_nodes: int
    gps_at_turns_deg: float
    gps_goal_check_m: float
    goal_check_tail_nodes: int
    max_off_walk_m: float
    gps_approach_m: float
    start_max_distance_m: float
    stretch_ahead_m: float
    lookahead_m: float
    goal_radius_m: float
    gps_period_s: float
    gps_max_distance_m: float
    gps_max_lost_steps: int
    acquire_v_mps: float
    fix_max_age_s: float
    gps_lost_s: float
    fix_wait_s: float
    frame_max_age_s: float
    camera_lost_s: float
    align_tolerance_rad: float
    align_min_omega_radps: float
    align_gain: float
    align_extra_s: float
    heading_max_age_s: float
    stuck_s: float
    stuck_min_m: float
    collide_s: float
    collide_min_v_mps: float
    backoff_m: float
    backoff_v_mps: float
    timeout_s: float
    robot_max_v_mps: float
    cmd_refresh_s: float
    wheel_radius_m: float

    def replace(self, **changes) -> "NavOptions":
        """A copy with ``changes``; keys of :class:`WalkRules` go to ``rules``. Raises TypeError for an
        unknown key."""
        rule_keys = {f.name for f in dataclasses.fields(WalkRules)}
        rules = {k: v for k, v in changes.items() if k in rule_keys}
        rest = {k: v for k, v in changes.items() if k not in rule_keys}
        out = dataclasses.replace(self, **rest)
        return dataclasses.replace(out, rules=dataclasses.replace(out.rules, **rules)) if rules else out


@dataclass(frozen=True)
class Pose:
    """The fused pose (UTM / ENU m, yaw rad CCW from east) and the shell-clock times (s) of its last GPS fix
    and its last heading update (-inf: none)."""

    x_m: float
    y_m: float
    yaw_rad: float
    yaw_known: bool
    fix_t_s: float
    heading_t_s: float


@dataclass(frozen=True)
class VnmRequest:
    """The walk nodes [lo, hi) the VNM should score for the next step, on VNM stretch ``stretch`` (a new
    stretch: start a new context queue)."""

    lo: int
    hi: int
    stretch: int


@dataclass(frozen=True)
class VnmOutput:
    """The VNM's outputs for walk nodes [lo, hi): ``dist_steps`` (hi - lo,) predicted temporal distances in
    VNM time steps, ``waypoints_m`` (hi - lo, 2) waypoint ``waypoint_index`` of each prediction, robot
    frame metres."""

    lo: int
    hi: int
    dist_steps: np.ndarray
    waypoints_m: np.ndarray


@dataclass(frozen=True)
class Observation:
    """What the shell saw at time ``t_s``: the fused pose (None: no position yet), the time of the newest
    camera frame (None: none), the VNM's outputs for the last :meth:`NavPolicy.vnm_request` (None: not
    run) and the wheel odometry's forward speed (m/s; None: no reading)."""

    t_s: float
    pose: Pose | None = None
    frame_t_s: float | None = None
    vnm: VnmOutput | None = None
    wheel_v_mps: float | None = None


@dataclass(frozen=True)
class Directive:
    """What to do until the next step: drive (v, omega) for ``hold_s`` (0: step again at once). The walk
    index the policy is localised at, the subgoal (walk index driven towards), the VNM's best distance
    (steps; NaN off the VNM), the GPS target (m), and, when the walk has ended, ``outcome`` with
    ``to_goal_m`` (distance left to the walk's end, m) and ``why``."""

    phase: Phase
    driver: Driver
    v_mps: float
    omega_radps: float
    hold_s: float
    walk_index: int
    subgoal: int
    best_steps: float = math.nan
    target_xy: tuple | None = None
    outcome: Outcome | None = None
    to_goal_m: float = math.inf
    why: str = ""


@dataclass(frozen=True)
class TraceRow:
    """One step of a walk: time since its first step (s), who drove, walk index and subgoal, the VNM's best
    distance (steps, NaN off the VNM), the pose (m, rad; NaN unknown) and the command."""

    t_s: float
    driver: str
    walk_index: int
    subgoal: int
    best_steps: float
    x_m: float
    y_m: float
    yaw_rad: float
    v_mps: float
    omega_radps: float


@dataclass(frozen=True)
class Walk:
    """A planned walk: ``n_nodes`` nodes; ``xy_m`` (K, 2) their map positions (UTM / ENU m; None: no
    positions, the VNM drives it all without GPS checks); ``heading_rad`` (K,) their recorded headings
    (yaw CCW from east, NaN unknown; None: unknown). Raises ValueError for shapes that do not match."""

    n_nodes: int
    xy_m: np.ndarray | None = None
    heading_rad: np.ndarray | None = None

    def __post_init__(self):
        if self.n_nodes < 1:
            raise ValueError(f"Walk: at least one node expected, got {self.n_nodes}")
        if self.xy_m is not None:
            xy = np.asarray(self.xy_m, dtype=np.float64)
            if xy.shape != (self.n_nodes, 2) or not np.isfinite(xy).all():
                raise ValueError(f"Walk: xy_m must be finite ({self.n_nodes}, 2), got shape {xy.shape}")
            object.__setattr__(self, "xy_m", xy)
        if self.heading_rad is not None:
            hd = np.asarray(self.heading_rad, dtype=np.float64).reshape(-1)
            if hd.shape[0] != self.n_nodes:
                raise ValueError(f"Walk: heading_rad must have {self.n_nodes} entries, got {hd.shape[0]}")
            object.__setattr__(self, "heading_rad", hd)


@dataclass
class _GpsLeg:
    """A stretch driven by GPS: pure pursuit along its path, the walk indices lo..hi it covers, the arrival
    radius."""

    pursuit: PathPursuit
    lo: int
    hi: int
    radius_m: float
    best_goal_m: float = math.inf
    lost_steps: int = 0

    @property
    def path(self) -> np.ndarray:
        return self.pursuit.path


@dataclass
class _VnmLeg:
    lo: int
    hi: int
    tracker: WalkTracker
    final: bool
    armed: bool = False
    best_steps: float = math.inf


@dataclass
class _State:
    phase: Phase = Phase.START
    stretch: int = -1
    t0: float | None = None
    progress_t: float = 0.0
    progress_xy: tuple | None = None
    farthest: int = 0
    collide_since: float | None = None
    frame_ok_t: float = 0.0
    fix_ok_t: float = 0.0
    align_yaw: float | None = None
    align_end_t: float | None = None
    arrived_m: float | None = None
    backoff_why: str = ""
    last: Directive | None = None
    gps: _GpsLeg | None = None
    vnm: _VnmLeg | None = None


class NavPolicy:
    """Follows one walk (module docstring: the state table). ``vnm_frame_rate_hz`` and ``vnm_range_steps``
    (the top of the VNM's trained distance range) describe the VNM; None: no VNM, GPS drives the whole
    walk (which then needs positions). ``gps_first_m`` (m along the walk) gives the walk's start to GPS
    (a walk re-planned where the VNM lost the previous one).

    Raises
    ------
    ValueError
        A walk without positions and no VNM.
    """

    def __init__(self, options: NavOptions, walk: Walk, *, vnm_frame_rate_hz: float | None = None,
                 vnm_range_steps: float = math.inf, gps_first_m: float = 0.0):
        self.o, self.walk = options, walk
        self.vnm_period_s = None if vnm_frame_rate_hz is None else 1.0 / float(vnm_frame_rate_hz)
        self.vnm_range_steps = float(vnm_range_steps)
        if self.vnm_period_s is None and walk.xy_m is None:
            raise ValueError("NavPolicy: a walk driven without a VNM needs its node positions")
        self.notes: list[str] = []  # why the stretches are what they are (for the log)
        self.stretches: list[tuple[str, int, int]] = self._plan(float(gps_first_m))
        self.trace: list[TraceRow] = []
        self._s = _State()

    # -- planning ------------------------------------------------------------------------------------
    def _plan(self, gps_first_m: float) -> list[tuple[str, int, int]]:
        k, xy, o = self.walk.n_nodes, self.walk.xy_m, self.o
        if self.vnm_period_s is None:
            return [("gps", 0, k - 1)]
        whole = [("vnm", 0, k - 1)]
        if xy is None:
            return whole
        mask = np.ones(k, dtype=bool)
        try:
            if self.walk.heading_rad is not None and o.gps_where_facing_away:
                mask = vnm_nodes(xy, self.walk.heading_rad, gps_at_turns_deg=o.gps_at_turns_deg)
        except ValueError as exc:
            self.notes.append(f"{exc}; no stretch goes to GPS for facing away")
        if gps_first_m > 0:
            arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
            mask &= arc > gps_first_m
        return whole if mask.all() else walk_stretches(mask, min_vnm_nodes=o.min_vnm_nodes)

    # -- the shell's questions ------------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        return self._s.phase

    @property
    def done(self) -> bool:
        return self._s.phase is Phase.DONE

    def vnm_request(self) -> VnmRequest | None:
        """The walk nodes the VNM should score for the next :meth:`step` (None: not on a VNM stretch)."""
        s = self._s
        if s.phase is not Phase.VNM or s.vnm is None:
            return None
        lo, hi = s.vnm.tracker.window()
        return VnmRequest(s.vnm.lo + lo, s.vnm.lo + hi, s.stretch)

    # -- stepping --------------------------------------------------------------------------------------
    def step(self, obs: Observation) -> Directive:
        """One step (module docstring). After the walk has ended, the final directive again.

        Raises
        ------
        ValueError
            VNM outputs for other nodes than :meth:`vnm_request` named.
        """
        s = self._s
        if s.phase is Phase.DONE:
            return s.last
        t = float(obs.t_s)
        if s.t0 is None:
            s.t0 = s.progress_t = s.frame_ok_t = s.fix_ok_t = t
        d = self._guards(obs, t)
        if d is None:
            d = self._dispatch(obs, t)
        s.last = d
        p = obs.pose
        if d.outcome is None:
            self.trace.append(TraceRow(t - s.t0, d.driver.value, d.walk_index, d.subgoal, d.best_steps,
                                       p.x_m if p else math.nan, p.y_m if p else math.nan,
                                       p.yaw_rad if p and p.yaw_known else math.nan, d.v_mps, d.omega_radps))
        return d

    def _dispatch(self, obs: Observation, t: float) -> Directive:
        ph = self._s.phase
        if ph is Phase.START:
            return self._start(obs, t)
        if ph is Phase.ALIGN:
            return self._align(obs, t)
        if ph is Phase.BACK_OFF:
            return self._end(Outcome.COLLIDED, obs, self._s.backoff_why + f"; backed off {self.o.backoff_m:.1f} m")
        if ph is Phase.VNM:
            return self._vnm(obs, t)
        return self._gps(obs, t)  # GPS and APPROACH

    def _guards(self, obs: Observation, t: float) -> Directive | None:
        s, o = self._s, self.o
        if t - s.t0 > o.timeout_s:
            return self._end(Outcome.TIMEOUT, obs, f"longer than timeout_s = {o.timeout_s:.0f} s")
        v_cmd = s.last.v_mps if s.last is not None else 0.0
        if v_cmd >= o.collide_min_v_mps and obs.wheel_v_mps is not None and obs.wheel_v_mps < 0.25 * v_cmd:
            s.collide_since = t if s.collide_since is None else s.collide_since
            if t - s.collide_since >= o.collide_s:
                why = (f"commanded {v_cmd:.2f} m/s, the wheels turn at {obs.wheel_v_mps:.2f} m/s for "
                       f"{o.collide_s:.1f} s (blocked)")
                if not (o.backoff_m > 0 and o.backoff_v_mps > 0):
                    return self._end(Outcome.COLLIDED, obs, why)
                s.phase, s.backoff_why = Phase.BACK_OFF, why
                return self._directive(Driver.BACK, -o.backoff_v_mps, 0.0, o.backoff_m / o.backoff_v_mps,
                                       s.farthest, s.farthest, why=why)
        else:
            s.collide_since = None
        fix = self._fresh_fix(obs)
        if fix is not None:  # moving on counts as progress too (the VNM's index may jump ahead spuriously)
            if (
                s.progress_xy is None
                or math.hypot(fix[0] - s.progress_xy[0], fix[1] - s.progress_xy[1]) >= o.stuck_min_m
            ):
                s.progress_xy, s.progress_t = fix, t if s.progress_xy is not None else s.progress_t
        if s.phase in (Phase.VNM, Phase.GPS, Phase.APPROACH) and t - s.progress_t > o.stuck_s:
            return self._end(Outcome.STUCK, obs, f"no progress along the walk for stuck_s = {o.stuck_s:.0f} s")
        return None

    # -- helpers -----------------------------------------------------------------------------------------
    def _fresh_fix(self, obs: Observation) -> tuple[float, float] | None:
        p = obs.pose
        if p is None or not obs.t_s - p.fix_t_s <= self.o.fix_max_age_s or not math.isfinite(p.x_m):
            return None
        return p.x_m, p.y_m

    def _reached_index(self, index: int, t: float) -> None:
        if index > self._s.farthest:
            self._s.farthest, self._s.progress_t = index, t

    def _directive(self, driver: Driver, v: float, w: float, hold: float, index: int, sub: int, **kw) -> Directive:
        return Directive(self._s.phase, driver, float(v), float(w), float(hold), int(index), int(sub), **kw)

    def _stand(self, hold: float, why: str, *, index: int | None = None) -> Directive:
        i = self._s.farthest if index is None else index
        return self._directive(Driver.STOP, 0.0, 0.0, hold, i, i, why=why)

    def _end(self, outcome: Outcome, obs: Observation, why: str, *, index: int | None = None,
             to_goal_m: float | None = None) -> Directive:
        s = self._s
        if index is None:
            index = s.farthest
        if to_goal_m is None:
            fix = self._fresh_fix(obs)
            xy = self.walk.xy_m
            to_goal_m = (math.hypot(fix[0] - xy[-1, 0], fix[1] - xy[-1, 1]) if fix is not None and xy is not None
                         else math.inf)
        s.phase = Phase.DONE
        return Directive(Phase.DONE, Driver.STOP, 0.0, 0.0, 0.0, int(index), int(index), outcome=outcome,
                         to_goal_m=float(to_goal_m), why=why)

    # -- phases --------------------------------------------------------------------------------------------
    def _start(self, obs: Observation, t: float) -> Directive:
        s, o, xy = self._s, self.o, self.walk.xy_m
        mode, lo, hi = self.stretches[0]
        if mode != "vnm" or xy is None or not o.gps_approach_m > 0:
            return self._begin(0, obs, t, turn=False)
        fix = self._fresh_fix(obs)
        if fix is None:
            if t - s.t0 < o.fix_wait_s:
                return self._stand(0.05, "waiting for a fresh GPS fix to check the walk's start against")
            self.notes.append("no fresh GPS fix to check the walk's start against; the VNM starts as the robot stands")
            return self._begin(0, obs, t, turn=False)
        off = polyline_distance(xy[lo:hi + 1], *fix)
        if not off > o.gps_approach_m:
            return self._begin(0, obs, t, turn=False)
        to_first = math.hypot(xy[0, 0] - fix[0], xy[0, 1] - fix[1])
        if not to_first <= o.start_max_distance_m:
            return self._end(Outcome.LOST, obs, f"the walk's first node is {to_first:.1f} m from the GPS fix, more "
                                                f"than start_max_distance_m = {o.start_max_distance_m:.1f}: no GPS "
                                                "leg across unmapped ground", index=0, to_goal_m=to_first)
        self.notes.append(f"the GPS fix is {off:.1f} m from the walk's first VNM stretch (more than gps_approach_m = "
                          f"{o.gps_approach_m:.1f}): GPS drives {to_first:.1f} m to its first node")
        self.stretches.insert(0, ("gps", 0, 0))
        s.stretch = 0
        s.phase = Phase.APPROACH
        self._new_gps_leg(np.array([fix, xy[0]]), 0, 0, o.goal_radius_m, t)
        return self._gps(obs, t)

    def _begin(self, i: int, obs: Observation, t: float, *, turn: bool) -> Directive:
        """Start stretch ``i`` (``turn``: face a VNM stretch's images first)."""
        s, o, xy = self._s, self.o, self.walk.xy_m
        s.stretch, s.progress_t = i, t
        mode, lo, hi = self.stretches[i]
        final = i == len(self.stretches) - 1
        if mode == "gps":
            s.phase = Phase.GPS
            radius = o.goal_radius_m if final else max(o.goal_radius_m, o.lookahead_m)
            self._new_gps_leg(xy[lo:hi + 1], lo, hi, radius, t)
            return self._stand(0.0, f"GPS drives walk nodes {lo}-{hi}", index=lo)
        s.vnm = _VnmLeg(lo, hi, WalkTracker(hi - lo + 1, o.rules, lost_steps=self.vnm_range_steps), final)
        s.frame_ok_t = t
        yaw = stretch_yaw(xy, self.walk.heading_rad, lo, hi, ahead_m=o.stretch_ahead_m) if turn and xy is not None \
            else None
        if yaw is None:
            s.phase, s.frame_ok_t = Phase.VNM, t  # the camera-lost clock starts with the VNM
            return self._stand(0.0, f"the VNM drives walk nodes {lo}-{hi}", index=lo)
        s.phase, s.align_yaw, s.align_end_t = Phase.ALIGN, yaw, None
        return self._stand(0.0, f"turning onto the VNM stretch {lo}-{hi}", index=lo)

    def _next(self, obs: Observation, t: float) -> Directive:
        """The current stretch ended reached: the next one, the GPS goal check, or the walk's end."""
        s, o, xy = self._s, self.o, self.walk.xy_m
        mode, lo, hi = self.stretches[s.stretch]
        k = self.walk.n_nodes
        self._reached_index(hi, t)
        if s.stretch + 1 < len(self.stretches):
            return self._begin(s.stretch + 1, obs, t, turn=self.stretches[s.stretch + 1][0] == "vnm")
        fix = self._fresh_fix(obs)
        if mode == "vnm" and xy is not None and s.arrived_m is None and o.gps_goal_check_m > 0 and fix is not None \
                and k >= 2:
            off = math.hypot(xy[-1, 0] - fix[0], xy[-1, 1] - fix[1])
            if off > o.gps_goal_check_m:
                tail = np.arange(max(0, lo, k - o.goal_check_tail_nodes), k)
                j = min(int(tail[np.argmin(np.hypot(xy[tail, 0] - fix[0], xy[tail, 1] - fix[1]))]), k - 2)
                self.notes.append(
                    f"the VNM reached the goal {off:.1f} m from it by GPS; GPS drives from walk index {j}"
                )
                self.stretches.append(("gps", j, k - 1))
                return self._begin(len(self.stretches) - 1, obs, t, turn=False)
        if mode == "vnm":
            to_goal = (
                s.arrived_m
                if s.arrived_m is not None
                else (
                    s.vnm.best_steps * o.vnm_scale_v_mps * self.vnm_period_s
                    if math.isfinite(s.vnm.best_steps)
                    else math.inf
                )
            )
        else:
            to_goal = s.gps.best_goal_m if s.gps is not None else math.inf
            fix_goal = None if fix is None else math.hypot(xy[-1, 0] - fix[0], xy[-1, 1] - fix[1])
            to_goal = to_goal if fix_goal is None else fix_goal
        return self._end(Outcome.REACHED, obs, "the walk's last node", index=k - 1, to_goal_m=to_goal)

    def _align(self, obs: Observation, t: float) -> Directive:
        s, o = self._s, self.o
        p = obs.pose
        idx = self.stretches[s.stretch][1]
        live = p is not None and p.yaw_known and t - p.heading_t_s <= o.heading_max_age_s
        if self._fresh_fix(obs) is None or not live:
            s.phase, s.frame_ok_t = Phase.VNM, t  # the camera-lost clock starts with the VNM
            self.notes.append("no live heading to turn onto the next VNM stretch; it starts as the robot stands")
            return self._stand(0.0, "no live heading for the turn", index=idx)
        err = wrap_angle(s.align_yaw - p.yaw_rad)
        if s.align_end_t is None:
            s.align_end_t = t + abs(err) / o.align_min_omega_radps + o.align_extra_s
        if abs(err) <= o.align_tolerance_rad:
            s.phase, s.frame_ok_t = Phase.VNM, t  # the camera-lost clock starts with the VNM
            return self._stand(0.0, "facing the VNM stretch", index=idx)
        if t > s.align_end_t:
            s.phase, s.frame_ok_t = Phase.VNM, t  # the camera-lost clock starts with the VNM
            self.notes.append("could not turn onto the next VNM stretch in time; it starts as the robot stands")
            return self._stand(0.0, "the turn took too long", index=idx)
        w = math.copysign(min(o.max_omega_radps, max(o.align_min_omega_radps, o.align_gain * abs(err))), err)
        return self._directive(Driver.TURN, 0.0, w, o.gps_period_s, idx, idx)

    def _vnm(self, obs: Observation, t: float) -> Directive:
        s, o, xy = self._s, self.o, self.walk.xy_m
        leg = s.vnm
        period = self.vnm_period_s
        here = leg.lo + leg.tracker.index
        if obs.frame_t_s is None or t - obs.frame_t_s > o.frame_max_age_s:
            if t - s.frame_ok_t > o.camera_lost_s:
                return self._end(
                    Outcome.CAMERA_LOST, obs, f"no camera frame for camera_lost_s = {o.camera_lost_s:.0f} s", index=here
                )
            return self._stand(period, "no fresh camera frame", index=here)
        s.frame_ok_t = t
        if obs.vnm is None:
            return self._stand(period, "the VNM's context is filling", index=here)
        want = self.vnm_request()
        if (obs.vnm.lo, obs.vnm.hi) != (want.lo, want.hi):
            raise ValueError(f"NavPolicy: VNM outputs for walk nodes [{obs.vnm.lo}, {obs.vnm.hi}), the policy asked "
                             f"for [{want.lo}, {want.hi})")
        fix = self._fresh_fix(obs) if xy is not None else None
        if fix is not None and o.max_off_walk_m > 0:
            off = polyline_distance(xy[leg.lo:leg.hi + 1], *fix)
            if off <= o.max_off_walk_m:
                leg.armed = True
            elif leg.armed:
                return self._end(Outcome.OFF_WALK, obs, f"the GPS fix is {off:.1f} m from the walk (more than "
                                                        f"max_off_walk_m = {o.max_off_walk_m:.1f})", index=here)
        dec = leg.tracker.update(obs.vnm.dist_steps)
        leg.best_steps = dec.best_steps
        here = leg.lo + dec.index
        self._reached_index(here, t)
        if dec.status == "lost":
            return self._end(Outcome.LOST, obs, f"the VNM found no node for max_lost_steps = "
                                                f"{o.rules.max_lost_steps} steps", index=here)
        if dec.status == "reached":
            return self._next(obs, t)
        if fix is not None and o.gps_goal_check_m > 0 and here >= leg.hi - o.rules.window \
                and passed_end(xy[:leg.hi + 1], *fix, radius_m=o.gps_goal_check_m):
            leg.tracker.reset(leg.hi - leg.lo)
            if leg.final:
                s.arrived_m = math.hypot(fix[0] - xy[leg.hi, 0], fix[1] - xy[leg.hi, 1])
            self.notes.append(f"the GPS fix is at or past the stretch's last node, walk index {leg.hi} (VNM "
                              f"localised on walk index {here}): reached")
            return self._next(obs, t)
        if dec.status == "wait":
            return self._stand(period, "the VNM finds no node this step", index=here)
        wp = np.asarray(obs.vnm.waypoints_m, dtype=np.float64)[leg.lo + dec.subgoal - want.lo]
        v, w = waypoint_to_velocity(float(wp[0]), float(wp[1]), dt_s=period, max_v_mps=o.vnm_max_v_mps,
                                    max_omega_radps=o.max_omega_radps)
        return self._directive(Driver.VNM, v, w, period, here, leg.lo + dec.subgoal, best_steps=dec.best_steps)

    def _new_gps_leg(self, path: np.ndarray, lo: int, hi: int, radius: float, t: float) -> None:
        self._s.gps = _GpsLeg(PathPursuit(path, lookahead_m=self.o.lookahead_m), lo, hi, radius)
        self._s.fix_ok_t = t

    def _gps(self, obs: Observation, t: float) -> Directive:
        s, o = self._s, self.o
        leg = s.gps
        pp = leg.pursuit
        idx = min(leg.lo + pp.index(), leg.hi)
        fix = self._fresh_fix(obs)
        if fix is None:
            if t - s.fix_ok_t > o.gps_lost_s:
                return self._end(Outcome.GPS_LOST, obs, f"no fresh GPS fix for gps_lost_s = {o.gps_lost_s:.0f} s",
                                 index=idx)
            return self._stand(o.gps_period_s, "no fresh GPS fix", index=idx)
        s.fix_ok_t = t
        x, y = fix
        goal_d = math.hypot(leg.path[-1, 0] - x, leg.path[-1, 1] - y)
        pp.advance(x, y)
        if goal_d <= leg.radius_m and pp.near_end(leg.radius_m):
            leg.best_goal_m = goal_d
            if s.phase is Phase.APPROACH:
                return self._begin(1, obs, t, turn=True)
            return self._next(obs, t)
        if goal_d < leg.best_goal_m - 0.2:
            leg.best_goal_m, s.progress_t = goal_d, t
        leg.lost_steps = leg.lost_steps + 1 if polyline_distance(leg.path, x, y) > o.gps_max_distance_m else 0
        idx = min(leg.lo + pp.index(), leg.hi)
        self._reached_index(idx if s.phase is Phase.GPS else 0, t)
        if leg.lost_steps >= o.gps_max_lost_steps:
            return self._end(Outcome.LOST, obs, f"more than gps_max_distance_m = {o.gps_max_distance_m:.0f} m from "
                                                f"the walk for {o.gps_max_lost_steps} steps", index=idx)
        sub = min(idx + 1, leg.hi)
        p = obs.pose
        if not p.yaw_known:  # creep straight ahead until the GPS course gives the heading
            return self._directive(Driver.GPS, min(o.acquire_v_mps, o.gps_max_v_mps), 0.0, o.gps_period_s, idx, sub)
        tx, ty = pp.target(x, y)
        v, w = line_follow_velocity(x, y, p.yaw_rad, tx, ty, max_v_mps=o.gps_max_v_mps,
                                    max_omega_radps=o.max_omega_radps)
        return self._directive(Driver.GPS, v, w, o.gps_period_s, idx, sub, target_xy=(tx, ty))
