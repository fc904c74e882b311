"""Following a planned walk with the visual navigation model (GNM / ViNT deployment loop, DESIGN.md).

At the VNM's frame rate (4 Hz for GNM): the newest camera frame goes into the context queue; the VNM
scores the walk's node images within ``window`` walk indices of the last localisation (GNM's radius,
4) in one call (the observation branch once, one goal-branch pass per node); the node with the
smallest predicted temporal distance is the localisation; when that distance is below
``close_steps`` the next node becomes the subgoal. The subgoal's waypoint ``waypoint_index`` (GNM
deploys waypoint 2 of 5), scaled to metres by ``max_v / frame_rate``, goes through the PD rule
(:func:`core.control.waypoint_to_velocity`) to (v, omega) within the limits, which the control loop
forwards at 50 Hz. ONNX inference runs in a worker thread, so the event loop never waits for it.
The goal is reached when the localisation is the walk's last node (GNM deployment: closest node ==
goal node; ``goal_close=True`` also asks for a distance below ``close_steps``).
Lost (every distance above ``lost_steps`` for ``max_lost_steps`` steps), a missing camera frame, or
the goal reached end the run; the robot is always stopped when :meth:`VnmNavigator.follow` returns.

The localisation and subgoal rules live in :class:`WalkTracker` (pure numpy, no I/O), which the
simulated drivers (:mod:`robot_app.sim.vnm_follow`, :mod:`robot_app.sim.eval_drive`) step too, so the
evaluation measures exactly this loop. Its options (:class:`WalkRules`, ``[vnm_nav]`` in the config)
default to GNM's deployment values; the extra rules are off by default and documented there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import time
from dataclasses import dataclass

import numpy as np

from core.control import waypoint_to_velocity
from robot_app.navigator import RunReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WalkRules:
    """Options of the walk-following loop (:class:`WalkTracker`); units in the names, distances in VNM time steps.

    The first five are GNM's deployment parameters (visualnav-transformer ``navigate.py``: ``radius`` 4,
    ``close_threshold`` 3, waypoint 2); the defaults reproduce that loop.

    Attributes
    ----------
    window : int
        Walk indices scored on each side of the last localisation (GNM ``radius``).
    close_steps : float
        Below this predicted distance to the localised node, the next node is the subgoal (GNM
        ``close_threshold``).
    lost_steps : float or None
        A step whose best distance is above this finds no node; None: the top of the VNM's trained range
        (its distances mean nothing beyond it).
    max_lost_steps : int
        Consecutive steps without a node before the run ends ``lost``.
    goal_close : bool
        Reached also needs a distance below ``close_steps`` to the last node (GNM only asks that the
        localisation be the last node).
    goal_confirm_steps : int
        Consecutive steps localised on the last node, driving on towards it meanwhile, before the goal
        counts as reached (a step localised elsewhere starts the count again; a step without a node
        does not count); 1: at once (GNM). The arg-min moves to a node before the robot is at it (about
        half way from the node before, further with nodes a few metres apart), so stopping at once
        leaves the robot short of the goal; a few more steps drive it the rest of the way, and a single
        spurious jump to the last node does not end the walk.
    recover_window : int
        After a step that found no node, score this many indices on each side instead of ``window``
        (re-localise over a wider stretch of the walk before declaring it lost, as a human operator
        would look around); 0 or anything <= ``window``: never widen (GNM).
    """

    window: int = 4
    close_steps: float = 3.0
    lost_steps: float | None = None
    max_lost_steps: int = 12
    goal_close: bool = False
    goal_confirm_steps: int = 1
    recover_window: int = 0


@dataclass(frozen=True)
class StepDecision:
    """What :meth:`WalkTracker.update` decided for one step.

    ``status``: ``drive`` (follow waypoint of walk index ``subgoal``), ``wait`` (no node found this step:
    stop), ``lost`` (no node for ``max_lost_steps`` steps: end the run) or ``reached`` (end the run).
    ``index`` is the localisation (walk index), ``best_steps`` the smallest predicted distance this step.
    """

    status: str
    index: int
    subgoal: int
    best_steps: float


class WalkTracker:
    """Localisation and subgoal choice along a walk of ``n_nodes`` node images (no I/O, no model).

    Per step: :meth:`window` gives the walk slice ``[lo, hi)`` to score; the caller runs the VNM on
    those node images and passes the predicted distances (hi - lo,) to :meth:`update`, then drives
    towards the waypoint of the returned subgoal (index ``subgoal - lo`` in that prediction).

    Raises
    ------
    ValueError
        ``n_nodes < 1`` or a negative window.
    """

    def __init__(self, n_nodes: int, rules: WalkRules = WalkRules(), *, lost_steps: float):
        if n_nodes < 1:
            raise ValueError(f"WalkTracker: the walk needs at least one node, got {n_nodes}")
        if rules.goal_confirm_steps < 1:
            raise ValueError(f"WalkTracker: goal_confirm_steps must be >= 1, got {rules.goal_confirm_steps}")
        if rules.window < 0 or rules.recover_window < 0:
            raise ValueError(f"WalkTracker: window and recover_window must be >= 0, got {rules}")
        self.n, self.rules = int(n_nodes), rules
        self.lost_steps = float(rules.lost_steps if rules.lost_steps is not None else lost_steps)
        self.index, self.lost, self.at_goal = 0, 0, 0
        self._lo, self._hi = 0, min(self.n, rules.window + 1)

    def reset(self, index: int = 0) -> None:
        """Start again localised at walk ``index`` (after an intervention)."""
        self.index, self.lost, self.at_goal = int(min(max(index, 0), self.n - 1)), 0, 0

    def window(self) -> tuple[int, int]:
        """The walk slice [lo, hi) to score this step."""
        r = self.rules.window
        if self.lost > 0 and self.rules.recover_window > r:
            r = self.rules.recover_window
        self._lo, self._hi = max(0, self.index - r), min(self.n, self.index + r + 1)
        return self._lo, self._hi

    def update(self, dist_steps: np.ndarray) -> StepDecision:
        """Decide from the distances (hi - lo,) float to the nodes of the last :meth:`window`.

        Raises
        ------
        ValueError
            ``dist_steps`` does not match the window's length.
        """
        d = np.asarray(dist_steps, dtype=np.float64).reshape(-1)
        lo, hi = self._lo, self._hi
        if d.shape[0] != hi - lo:
            raise ValueError(f"dist_steps: expected {hi - lo} distances (walk slice [{lo}, {hi})), got {d.shape[0]}")
        j = int(np.argmin(d))
        best = float(d[j])
        rules = self.rules
        if not best <= self.lost_steps:
            self.lost += 1
            status = "lost" if self.lost >= rules.max_lost_steps else "wait"
            return StepDecision(status, self.index, self.index, best)
        self.lost = 0
        self.index = lo + j
        close = best < rules.close_steps
        if self.index == self.n - 1 and (close or not rules.goal_close):
            self.at_goal += 1  # consecutive steps on the last node (see goal_confirm_steps)
            if self.at_goal >= rules.goal_confirm_steps:
                return StepDecision("reached", self.index, self.index, best)
            return StepDecision("drive", self.index, self.index, best)
        self.at_goal = 0
        sub = min(self.index + 1, hi - 1) if close else self.index  # a node this step scored
        return StepDecision("drive", self.index, sub, best)


def walk_stretches(facing, *, min_vnm_nodes: int = 3) -> list[tuple[str, int, int]]:
    """Split a walk into stretches driven with the VNM and stretches driven by GPS.

    A VNM follows goal images taken ahead of it on a drive; where a walk runs against the direction a
    stretch was recorded in, its node images face away (:func:`core.control.faces_travel`) and the
    robot drives that stretch with the GPS navigator (LM-Nav's GPS controller) instead. Runs of facing
    nodes shorter than ``min_vnm_nodes`` go to GPS too. Consecutive stretches share their boundary
    node: a GPS stretch ends on the first node of the next VNM stretch.

    Parameters
    ----------
    facing : (K,) bool, per walk node: its image faces the way the walk goes (K >= 1).
    min_vnm_nodes : int >= 1

    Returns
    -------
    list of (mode, lo, hi): mode ``"vnm"`` or ``"gps"``, walk indices lo..hi inclusive, in walk order,
    covering 0..K-1. A walk of one node is one VNM stretch (0, 0) when that node faces the travel.

    Raises
    ------
    ValueError
        An empty mask or ``min_vnm_nodes < 1``.
    """
    f = np.asarray(facing, dtype=bool).reshape(-1)
    k = f.shape[0]
    if k == 0 or min_vnm_nodes < 1:
        raise ValueError(f"walk_stretches: a non-empty mask and min_vnm_nodes >= 1 expected, got {k} nodes, "
                         f"min_vnm_nodes={min_vnm_nodes}")
    runs, i = [], 0
    while i < k:
        j = i
        while j + 1 < k and f[j + 1] == f[i]:
            j += 1
        if f[i] and j - i + 1 >= min(min_vnm_nodes, k):
            runs.append((i, j))
        i = j + 1
    out, pos = [], 0
    for a, b in runs:
        if a > pos:
            out.append(("gps", pos, a))
        out.append(("vnm", a, b))
        pos = b
    if not runs:
        return [("gps", 0, k - 1)]
    if pos < k - 1:
        out.append(("gps", pos, k - 1))
    return out


def _rgb(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as im:
        return np.asarray(im.convert("RGB"))


class VnmNavigator:
    """Drives ``app.command`` along a walk whose node images come from the map.

    The rules (:class:`WalkRules`) come from ``app.config.vnm_nav`` when the config has that section,
    else the GNM defaults; keyword arguments given here override single rules. ``waypoint_index`` and
    ``max_v_mps`` (default ``[models] vnm_max_v_mps``, capped by ``[robot] max_v_mps``) scale and pick
    the waypoint; ``timeout_s`` ends a run as ``stuck``.
    """

    def __init__(self, app, vnm, *, window: int | None = None, close_steps: float | None = None,
                 lost_steps: float | None = None, waypoint_index: int | None = None, max_v_mps: float | None = None,
                 max_lost_steps: int | None = None, timeout_s: float = 600.0, goal_close: bool | None = None,
                 recover_window: int | None = None, goal_confirm_steps: int | None = None):
        self.app = app
        self.vnm = vnm
        nav = getattr(app.config, "vnm_nav", None)
        base = WalkRules(**{f: getattr(nav, f) for f in WalkRules.__dataclass_fields__ if hasattr(nav, f)})
        if not base.lost_steps:  # [vnm_nav] lost_steps = 0: the model's trained range
            base = dataclasses.replace(base, lost_steps=None)
        given = {"window": window, "close_steps": close_steps, "lost_steps": lost_steps,
                 "max_lost_steps": max_lost_steps, "goal_close": goal_close, "recover_window": recover_window,
                 "goal_confirm_steps": goal_confirm_steps}
        self.rules = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
        if waypoint_index is None:
            waypoint_index = int(getattr(nav, "waypoint_index", 2))
        self.waypoint_index = min(waypoint_index, vnm.len_traj_pred - 1)
        self.max_v_mps = min(max_v_mps or app.config.models.vnm_max_v_mps, app.config.robot.max_v_mps)
        self.timeout_s = timeout_s

    def _command(self, v: float, omega: float) -> None:
        from robot_app.service.app import Command

        self.app.command = Command(v, omega, time.monotonic(), "vnm-navigator")

    async def follow(self, node_jpegs: list[bytes]) -> RunReport:
        """Follow the walk given by its node images (walk order). Never raises for field conditions."""
        vnm, cam = self.vnm, self.app.camera
        goals = await asyncio.to_thread(lambda: vnm.preprocess_many([_rgb(j) for j in node_jpegs]))
        ctx = vnm.new_context()
        period = 1.0 / vnm.frame_rate_hz
        tracker = WalkTracker(len(node_jpegs), self.rules, lost_steps=vnm.dist_range_steps[1])
        last_frame = None
        t0 = time.monotonic()
        self.trace = trace = []  # kept on the navigator so a cancelled run still has it
        outcome, best_d = "cancelled", float("inf")
        try:
            while True:
                now = time.monotonic()
                if now - t0 > self.timeout_s:
                    outcome = "stuck"
                    break
                frame = cam.latest if cam is not None else None
                if frame is None or now - frame.t_mono_s > 1.0:
                    self._command(0.0, 0.0)
                    if now - t0 > 5.0:
                        outcome = "camera-lost"
                        break
                    await asyncio.sleep(period)
                    continue
                if frame is not last_frame:
                    ctx.push(await asyncio.to_thread(_rgb, frame.jpeg))
                    last_frame = frame
                if not ctx.ready:
                    await asyncio.sleep(period)
                    continue
                lo, hi = tracker.window()
                pred = await asyncio.to_thread(vnm.predict, ctx.stack(), goals[lo:hi])
                dec = tracker.update(pred.dist_steps)
                best_d = dec.best_steps
                if dec.status in ("lost", "reached"):
                    outcome = dec.status
                    break
                if dec.status == "wait":
                    self._command(0.0, 0.0)
                    await asyncio.sleep(period)
                    continue
                wp = pred.waypoints_m(max_v_mps=self.max_v_mps, frame_rate_hz=vnm.frame_rate_hz)[dec.subgoal - lo,
                                                                                                  self.waypoint_index]
                v, omega = waypoint_to_velocity(float(wp[0]), float(wp[1]), dt_s=period, max_v_mps=self.max_v_mps,
                                                max_omega_radps=self.app.config.robot.max_omega_radps)
                self._command(v, omega)
                trace.append((now - t0, dec.index, dec.subgoal, best_d, v, omega))
                await asyncio.sleep(period)
        finally:
            self._command(0.0, 0.0)
        log.info("VNM walk %s after %.1f s at walk index %d", outcome, time.monotonic() - t0, tracker.index)
        return RunReport(outcome, tracker.index, best_d, time.monotonic() - t0, trace)
