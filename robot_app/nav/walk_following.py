"""The VNM's walk-following rules: pure numpy, no I/O (GNM / ViNT deployment loop; docs/design.md, "VNM contract").

:class:`WalkTracker` holds the localisation and subgoal rules of the GNM deployment loop with the options
of :class:`WalkRules` (``[vnm_nav]`` in the config; :data:`GNM_RULES` are GNM's deployment values, the extra rules
documented there). :func:`vnm_nodes` and :func:`walk_stretches` split a walk into the stretches the VNM
drives and those GPS drives; :func:`stretch_yaw` is the heading to face before a VNM stretch. The
navigation policy (:mod:`robot_app.nav.policy`), which the robot and ``eval sim`` both step, uses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.control import faces_travel, near_sharp_turns


@dataclass(frozen=True)
class WalkRules:
    """Options of the walk-following loop (:class:`WalkTracker`); units in the names, distances in VNM time steps.

    No defaults: the robot's come from ``[vnm_nav]`` (:func:`robot_app.config.nav_options`); :data:`GNM_RULES`
    are GNM's deployment loop's (visualnav-transformer ``navigate.py``: ``radius`` 4, ``close_threshold`` 3).

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

    window: int
    close_steps: float
    lost_steps: float | None
    max_lost_steps: int
    goal_close: bool
    goal_confirm_steps: int
    recover_window: int


#: GNM's deployment loop (visualnav-transformer ``navigate.py``: radius 4, close_threshold 3; localised on the
#: last node is the goal; no distance threshold, here the VNM's trained range; 12 steps without a node)
GNM_RULES = WalkRules(window=4, close_steps=3.0, lost_steps=None, max_lost_steps=12, goal_close=False,
                      goal_confirm_steps=1, recover_window=0)


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

    def __init__(self, n_nodes: int, rules: WalkRules, *, lost_steps: float):
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


def vnm_nodes(walk_xy_m, heading_rad, *, gps_at_turns_deg: float = 0.0) -> np.ndarray:
    """(K,) bool: the walk nodes the VNM should drive, the rest go to GPS (:func:`walk_stretches`).

    Those whose image faces the way the walk goes there (:func:`core.control.faces_travel`), less, when
    ``gps_at_turns_deg`` > 0, those near a turn sharper than that (:func:`core.control.near_sharp_turns`:
    from 6 m before to 3 m after it; at a junction the node after the turn shows a view the robot cannot
    see before it has turned). ``walk_xy_m`` (K, 2) UTM / ENU metres, ``heading_rad`` (K,) the map's node
    headings (NaN unknown).

    Raises
    ------
    ValueError
        From :func:`core.control.faces_travel` / :func:`core.control.near_sharp_turns`.
    """
    mask = faces_travel(walk_xy_m, heading_rad)
    if gps_at_turns_deg > 0:
        mask &= ~near_sharp_turns(walk_xy_m, min_turn_rad=math.radians(gps_at_turns_deg))
    return mask


def walk_stretches(facing, *, min_vnm_nodes: int = 3) -> list[tuple[str, int, int]]:
    """Split a walk into stretches driven with the VNM and stretches driven by GPS.

    A VNM follows goal images taken ahead of it on a drive; where a walk runs against the direction a
    stretch was recorded in, its node images face away (:func:`core.control.faces_travel`) and the
    robot drives that stretch with the GPS navigator (LM-Nav's GPS controller) instead. Runs of facing
    nodes shorter than ``min_vnm_nodes`` go to GPS too. Consecutive stretches share their boundary
    node: a GPS stretch ends on the first node of the next VNM stretch (where the drivers turn the robot
    in place to the stretch's direction before the VNM takes over: a walk that turns back onto a
    recorded stretch leaves it facing away from the stretch's first images).

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


def stretch_yaw(walk_xy: np.ndarray, heading, lo: int, hi: int, *, ahead_m: float = 2.0) -> float | None:
    """The yaw (rad, CCW from east) to face before driving the stretch lo..hi of a walk with the VNM:
    towards the first node of the stretch at least ``ahead_m`` from its first node (the way the stretch
    goes, also where its first node is a corner, whose smoothed heading lies between the two legs), else
    the first node's recorded heading (``heading`` (K,) or None; NaN unknown), else None (no turn).

    ``walk_xy`` : (K, 2) float, the walk's node positions, UTM / ENU metres.
    """
    for j in range(lo + 1, hi + 1):
        d = walk_xy[j] - walk_xy[lo]
        if math.hypot(d[0], d[1]) >= ahead_m:
            return math.atan2(d[1], d[0])
    if heading is not None and len(heading) > lo and np.isfinite(heading[lo]):
        return float(heading[lo])
    return None
