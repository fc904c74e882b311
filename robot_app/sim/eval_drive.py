"""Executing a planned walk in the simulated world, on the simulation clock, for ``robot-app eval sim``.

The robot's navigation policy (:class:`robot_app.nav.policy.NavPolicy`, the same object
:class:`~robot_app.nav.vnm.VnmNavigator` and :class:`~robot_app.nav.gps.GpsNavigator` step on the
robot) is stepped here on the simulation clock: at each step the shell renders the camera frame at the
robot's true pose when the policy asks for the VNM, runs the VNM on the nodes it names, gives it the
noisy GPS fix (:class:`~robot_app.sim.plant.GpsView`) with the true heading and the wheel speed, and
holds its command for the directive's ``hold_s`` while :class:`~robot_app.sim.plant.WorldPlant`
integrates the Jackal kinematics at 50 Hz with collisions. Two modes, as in LM-Nav's experiments (Shah
et al., CoRL 2022, Sec. 5 and its GPS ablation): ``vnm`` (the policy with the VNM and the walk's node
images, map positions and headings: GPS stretches, GPS checks, approach leg and off-walk guard as on the
robot) and ``gps`` (the policy without a VNM).

A walk the policy ends short of its goal is handled as the route job does (:mod:`robot_app.jobs.mission`):
``lost`` / ``off-walk`` / ``stuck`` / ``collided`` are re-planned from the map node nearest the fix (the
``replan`` callback; at most ``max_replans`` times per walk; after a loss the new walk's first
``gps_after_lost_m`` go to GPS); ``stuck``, ``collided`` and ``timeout`` are a disengagement each, a loss the
re-plans do not recover is one. Besides, the judge watches the TRUE state: a collision with an obstacle
or more than ``off_path_m`` from the walk's true polyline is an operator intervention at once. After each
disengagement the "operator" puts the robot back on the walk at the node after the one it had reached,
facing the walk, and the policy starts again on the rest of the walk; after ``max_disengagements`` the
run is abandoned.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from core.control import polyline_distance
from firmware_bridge.kinematics import twist_to_wheels
from robot_app.nav.policy import Directive, Driver, NavOptions, NavPolicy, Observation, Outcome, Pose, VnmOutput, Walk
from robot_app.sim.plant import GpsView, WorldPlant
from robot_app.sim.render import WorldRenderer
from robot_app.sim.world import World

__all__ = ["DriveParams", "DriveResult", "SimWalk", "drive_walk", "polyline_distance", "PolicyRunner"]

log = logging.getLogger(__name__)

PHYSICS_HZ = 50.0
DISENGAGEMENT_KINDS = ("collision", "off_path", "lost", "stuck")
#: seconds after ``collide_s`` from a contact with an obstacle before the judge steps in (the robot's own
#: collision rule, wheels blocked for ``collide_s``, ends the walk collided and re-plans first)
CONTACT_GRACE_S = 1.0
_KIND = {Outcome.COLLIDED: "collision", Outcome.STUCK: "stuck", Outcome.TIMEOUT: "stuck"}
_REPLANNED = (Outcome.LOST, Outcome.OFF_WALK, Outcome.STUCK, Outcome.COLLIDED)


@dataclass(frozen=True)
class DriveParams:
    """The judge's and the operator's settings of :func:`drive_walk` (units in the names); the robot's own
    are the :class:`~robot_app.nav.policy.NavOptions`."""

    off_path_m: float = 6.0
    goal_radius_m: float = 3.0
    max_disengagements: int = 10
    gps_noise_m: float = 1.0
    time_limit_s: float | None = None  # None: 2 x the walk's length at the GPS speed cap + 60 s


@dataclass(frozen=True)
class SimWalk:
    """A walk to drive: ``truth`` (K, 2) true node positions (m ENU; the judge's), ``gps`` (K, 2) their map
    positions (the policy's; None: none), ``heading`` (K,) the map's node headings (None: unknown),
    ``images`` K node images (H, W, 3) uint8 RGB for the VNM (None in GPS mode), ``nodes`` (K,) map node ids
    and ``landmarks`` the walk indices of its landmarks (for re-plans; None without a map)."""

    truth: np.ndarray
    gps: np.ndarray | None = None
    heading: np.ndarray | None = None
    images: list | None = None
    nodes: np.ndarray | None = None
    landmarks: tuple = ()

    def suffix(self, i: int) -> "SimWalk":
        """The walk from index ``i`` on."""
        cut = (lambda a: None if a is None else a[i:])
        return SimWalk(self.truth[i:], cut(self.gps), cut(self.heading), cut(self.images), cut(self.nodes),
                       tuple(p - i for p in self.landmarks if p >= i))


@dataclass
class DriveResult:
    """One execution: ``reached`` the walk's end (true position within the goal radius), the
    disengagements by kind, metres driven (true) and of those by GPS, simulated seconds, the true track
    (T, 2) m ENU, ``events`` (each disengagement as (kind, walk index reached)), the re-plans, the
    policy's outcomes in order and the contacts with obstacles (each one the robot's collision rule or the
    judge turned into a disengagement, or a graze it drove clear of)."""

    mode: str
    reached: bool = False
    disengagements: dict = field(default_factory=lambda: dict.fromkeys(DISENGAGEMENT_KINDS, 0))
    driven_m: float = 0.0
    sim_time_s: float = 0.0
    final_error_m: float = float("nan")
    abandoned: bool = False
    track_xy_m: np.ndarray | None = None
    events: list = field(default_factory=list)
    gps_m: float = 0.0
    replans: int = 0
    outcomes: list = field(default_factory=list)
    contacts: int = 0

    @property
    def total_disengagements(self) -> int:
        return int(sum(self.disengagements.values()))

    def as_dict(self) -> dict:
        return {"mode": self.mode, "reached": self.reached, "disengagements": dict(self.disengagements),
                "disengagements_total": self.total_disengagements, "driven_m": round(self.driven_m, 2),
                "sim_time_s": round(self.sim_time_s, 2),
                "final_error_m": None if not math.isfinite(self.final_error_m) else round(self.final_error_m, 2),
                "abandoned": self.abandoned, "gps_m": round(self.gps_m, 2),
                "gps_share": round(self.gps_m / self.driven_m, 3) if self.driven_m > 0 else None,
                "replans": self.replans, "outcomes": list(self.outcomes), "contacts": self.contacts}


def _heading_at(xy: np.ndarray, i: int) -> float:
    j = min(i + 1, xy.shape[0] - 1)
    k = i if j != i else max(i - 1, 0)
    d = xy[j] - xy[k] if j != k else np.array([1.0, 0.0])
    return math.atan2(d[1], d[0])


class PolicyRunner:
    """Steps one :class:`NavPolicy` on the simulation clock (module docstring). ``observe(policy, t)`` gives
    the observation (default: :meth:`sense`), ``apply(directive)`` holds the command (default:
    :meth:`hold`, which returns whether the judge intervened). The same-directives test replaces both."""

    def __init__(self, plant: WorldPlant, gps: GpsView, *, vnm=None, goals=None, renderer=None, options: NavOptions):
        self.plant, self.gps, self.vnm, self.goals, self.ren, self.o = plant, gps, vnm, goals, renderer, options
        self._ctx, self._ctx_stretch, self.frame_no = None, None, 0
        self.directives: list[Directive] = []

    def sense(self, policy: NavPolicy, t: float) -> Observation:
        st = self.plant.state()
        g = self.gps.state()
        pose = Pose(g.x_m, g.y_m, st.yaw_rad, True, t, t)  # the sim steers with the true heading
        req = policy.vnm_request()
        out = None
        if req is not None and self.vnm is not None:
            if req.stretch != self._ctx_stretch:
                self._ctx, self._ctx_stretch = self.vnm.new_context(), req.stretch
            frame = self.ren.render(st.x_m, st.y_m, st.yaw_rad, index=self.frame_no)
            self.frame_no += 1
            self._ctx.push(frame)
            while not self._ctx.ready:  # a new context: the robot stood here while it filled
                self._ctx.push(frame)
            pred = self.vnm.predict(self._ctx.stack(), self.goals[req.lo:req.hi])
            wps = pred.waypoints_m(max_v_mps=self.o.vnm_scale_v_mps, frame_rate_hz=self.vnm.frame_rate_hz)
            out = VnmOutput(req.lo, req.hi, pred.dist_steps, wps[:, min(self.o.waypoint_index,
                                                                       self.vnm.len_traj_pred - 1)])
        return Observation(t, pose, t, out, st.v_mps)

    def run(self, policy: NavPolicy, t: float, step_hold) -> tuple[Directive | None, float]:
        """Step until the walk ends or ``step_hold(directive) -> (dt_s, stop)`` says stop (the judge, the
        time limit). Returns (final directive or None when stopped, the time)."""
        zero = 0
        while True:
            d = policy.step(self.sense(policy, t))
            self.directives.append(d)
            if d.outcome is not None:
                return d, t
            if d.hold_s <= 0.0:
                zero += 1
                if zero > 100:
                    raise RuntimeError("navigation policy: 100 steps in a row without holding a command")
                continue
            zero = 0
            dt, stop = step_hold(d)
            t += dt
            if stop:
                return None, t


def drive_walk(world: World, walk: SimWalk, *, mode: str, options: NavOptions, vnm=None, camera: dict | None = None,
               params: DriveParams = DriveParams(), seed: int = 0, replan=None, max_replans: int = 0,
               gps_after_lost_m: float = 0.0) -> DriveResult:
    """Drive ``walk`` in ``world`` on the simulation clock with the robot's policy and judge it from the
    true state (module docstring).

    Parameters
    ----------
    world : World
    walk : SimWalk, the robot starts at its first node facing the second.
    mode : ``"vnm"`` (needs ``vnm`` and the walk's images) or ``"gps"`` (needs the walk's map positions).
    options : the policy's options (:func:`robot_app.config.nav_options`).
    vnm : :class:`models.vnm.VnmModel`; camera : the sim camera as the map saw it (``width``, ``height``,
        ``hfov_deg``).
    params : DriveParams, the judge's and the operator's.
    seed : the GPS noise's and the renderer's.
    replan : ``(walk, reached_index, fix_xy) -> SimWalk | None``, a new walk from the map node nearest the
        fix through the landmarks not yet reached (None: cannot); without it failures go to the operator.
    max_replans, gps_after_lost_m : as ``[mission] max_replans`` and ``[vnm_nav] gps_after_lost_m``.

    Raises
    ------
    ValueError
        Unknown mode, an empty walk, or a mode's inputs missing.
    """
    truth = np.asarray(walk.truth, dtype=np.float64).reshape(-1, 2)
    if truth.shape[0] == 0:
        raise ValueError("drive_walk: the walk is empty")
    if mode == "gps":
        if walk.gps is None:
            raise ValueError("drive_walk: mode 'gps' needs the walk's map positions")
    elif mode == "vnm":
        if vnm is None or walk.images is None:
            raise ValueError("drive_walk: mode 'vnm' needs vnm and the walk's node images")
    else:
        raise ValueError(f"drive_walk: mode must be 'vnm' or 'gps', got {mode!r}")
    res = DriveResult(mode)
    if truth.shape[0] == 1:
        res.reached, res.final_error_m, res.track_xy_m = True, 0.0, truth.copy()
        return res
    plant = WorldPlant(world, start=(truth[0, 0], truth[0, 1], _heading_at(truth, 0)))
    renderer = None
    if mode == "vnm":
        renderer = WorldRenderer(world, seed=seed, **(camera or {}))
    try:
        _Drive(res, world, plant, walk, mode, options, vnm, renderer, params, seed, replan, max_replans,
               gps_after_lost_m).run()
    finally:
        if renderer is not None:
            renderer.close()
    return res


class _Drive:
    """One :func:`drive_walk`: the policy runs, the judge, the operator and the re-plans."""

    def __init__(self, res, world, plant, walk, mode, options, vnm, renderer, params, seed, replan, max_replans,
                 gps_after_lost_m):
        self.res, self.plant, self.walk, self.mode, self.o = res, plant, walk, mode, options
        self.vnm, self.ren, self.p, self.replan = vnm, renderer, params, replan
        self.max_replans, self.gps_after_lost_m = max_replans, gps_after_lost_m
        self.gps = GpsView(plant, noise_m=params.gps_noise_m, seed=seed + 7919)
        self.substeps_dt = 1.0 / PHYSICS_HZ
        seg = np.linalg.norm(np.diff(walk.truth, axis=0), axis=1)
        self.limit_s = params.time_limit_s or 2.0 * float(seg.sum()) / options.gps_max_v_mps + 60.0
        self.track = [tuple(walk.truth[0])]
        self.n_coll = 0
        self.t = 0.0
        self.goal = walk.truth[-1]  # the walk's end; re-plans keep it (they end at its last landmark)

    def _policy(self, walk: SimWalk, gps_first_m: float) -> tuple[NavPolicy, PolicyRunner]:
        xy = walk.gps if walk.gps is not None else None
        goals = None
        if self.mode == "vnm":
            goals = self.vnm.preprocess_many(list(walk.images))
            policy = NavPolicy(self.o, Walk(len(walk.truth), xy, walk.heading if xy is not None else None),
                               vnm_frame_rate_hz=self.vnm.frame_rate_hz, vnm_range_steps=self.vnm.dist_range_steps[1],
                               gps_first_m=gps_first_m)
        else:
            policy = NavPolicy(self.o, Walk(len(walk.truth), xy))
        return policy, PolicyRunner(self.plant, self.gps, vnm=self.vnm if self.mode == "vnm" else None, goals=goals,
                                    renderer=self.ren, options=self.o)

    def _hold(self, d: Directive, state: dict) -> tuple[float, bool]:
        """Hold the directive's command while the plant steps; the judge looks after it. Returns (dt, stop:
        the judge intervened or the time limit passed)."""
        n = max(1, int(round(d.hold_s * PHYSICS_HZ)))
        res, plant, truth = self.res, self.plant, state["walk"].truth
        for _ in range(n):
            left, right = twist_to_wheels(d.v_mps, d.omega_radps, wheel_radius_m=plant.r, wheel_separation_m=plant.ws)
            before = plant.state()
            plant.step(left, right, self.substeps_dt)
            after = plant.state()
            step_m = math.hypot(after.x_m - before.x_m, after.y_m - before.y_m)
            res.driven_m += step_m
            res.gps_m += step_m if d.driver is Driver.GPS else 0.0
        dt = n * self.substeps_dt
        self.t += dt
        st = plant.state()
        self.track.append((st.x_m, st.y_m))
        lo, hi = max(0, state["progress"] - 2), min(truth.shape[0], state["progress"] + 5)
        state["progress"] = lo + int(np.argmin(np.hypot(truth[lo:hi, 0] - st.x_m, truth[lo:hi, 1] - st.y_m)))
        if len(plant.collisions) > self.n_coll:  # a new contact (plant: one record per contact)
            self.n_coll = len(plant.collisions)
            res.contacts += 1
            state["contact_t"] = self.t  # the robot's own collision rule gets its time first
        last = plant.last_collision
        if state["contact_t"] is not None and last is not None and last.t_s < plant.state().t_s - 0.2:
            state["contact_t"] = None  # clear of it again (backed off, or a graze)
        if state["contact_t"] is not None and self.t - state["contact_t"] >= self.o.collide_s + CONTACT_GRACE_S:
            state["judged"] = "collision"
        elif polyline_distance(truth, st.x_m, st.y_m) > self.p.off_path_m:
            state["judged"] = "off_path"
        return dt, state["judged"] is not None or self.t >= self.limit_s

    def run(self) -> None:
        res, p = self.res, self.p
        walk, replans, gps_first = self.walk, 0, 0.0
        while walk is not None:
            state = {"walk": walk, "progress": 0, "judged": None, "contact_t": None}
            policy, runner = self._policy(walk, gps_first)
            gps_first = 0.0
            d, _t = runner.run(policy, self.t, lambda dd, state=state: self._hold(dd, state))
            if d is None and state["judged"] is None:  # the time limit
                log.debug("%s drive: time limit %.0f s reached", res.mode, self.limit_s)
                break
            if d is not None:
                res.outcomes.append(d.outcome.value)
                if d.outcome is Outcome.REACHED:
                    break
            index = state["progress"] if d is None else max(state["progress"], d.walk_index)
            if d is None:  # the judge: a collision or off the path, the operator steps in
                if self._disengage(state["judged"], index):
                    break
                walk = self._operator(walk, index)
                continue
            kind = _KIND.get(d.outcome)  # stuck, collided, timeout: a disengagement each
            if kind is not None and self._disengage(kind, index):
                break
            if d.outcome in _REPLANNED and self.replan is not None and replans < self.max_replans:
                replans += 1
                res.replans += 1
                g = self.gps.state()
                new = self.replan(walk, index, (g.x_m, g.y_m))
                if new is not None and len(new.truth) >= 2:
                    lost = d.outcome in (Outcome.LOST, Outcome.OFF_WALK)
                    walk, gps_first = new, (self.gps_after_lost_m if lost else 0.0)
                    self.n_coll = len(self.plant.collisions)
                    continue
            if kind is None and self._disengage("lost", index):  # a loss the re-plans did not recover
                break
            walk = self._operator(walk, index)
        st = self.plant.state()
        goal = self.goal
        res.final_error_m = float(math.hypot(st.x_m - goal[0], st.y_m - goal[1]))
        res.reached = res.final_error_m <= p.goal_radius_m
        res.sim_time_s = self.t
        res.track_xy_m = np.asarray(self.track, dtype=np.float64)

    def _disengage(self, kind: str, index: int) -> bool:
        """Count a disengagement; True when the run is abandoned (``max_disengagements``)."""
        self.res.disengagements[kind] += 1
        self.res.events.append((kind, int(index)))
        st = self.plant.state()
        log.debug("%s drive: %s disengagement at (%.1f, %.1f) m, walk index %d", self.res.mode, kind, st.x_m, st.y_m,
                  index)
        if self.res.total_disengagements >= self.p.max_disengagements:
            self.res.abandoned = True
        return self.res.abandoned

    def _operator(self, walk: SimWalk, index: int) -> SimWalk | None:
        """Put the robot on the walk at the node after ``index``, facing the walk; the rest of the walk (None:
        the robot is at its end already)."""
        k = min(index + 1, len(walk.truth) - 1)
        while True:  # the first node on from there that is clear of obstacles
            x, y = walk.truth[k]
            try:
                self.plant.teleport(x, y, _heading_at(walk.truth, k))
                break
            except ValueError:
                if k >= len(walk.truth) - 1:
                    return None
                k += 1
        self.n_coll = len(self.plant.collisions)
        self.track.append((x, y))
        if k >= len(walk.truth) - 1:
            return None
        return walk.suffix(k)
