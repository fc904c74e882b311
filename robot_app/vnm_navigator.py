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

Stretches walked against the direction they were recorded in: a VNM drives towards goal images taken
ahead of it, so where the walk's node images face away from the way the walk goes
(:func:`core.control.faces_travel` on the map's node positions and headings) the navigator drives that
stretch with the GPS navigator (LM-Nav's GPS controller) and hands back to the VNM on the first node of
the next stretch that faces the travel (:func:`walk_stretches`; ``[vnm_nav] gps_where_facing_away``),
where the robot first turns in place to the stretch's direction; with ``[vnm_nav] gps_at_turns_deg`` set,
the walk around its sharp turns goes to the GPS navigator too (:func:`vnm_nodes`). When the VNM reports
the goal but the GPS fix is more than ``[vnm_nav] gps_goal_check_m`` from the last node, the GPS
navigator drives the rest; when the VNM localises near the end of a VNM stretch but has not reported
it, a GPS fix at or past the stretch's last node within that distance ends the stretch reached, and the
walk on the last stretch (a VNM that does not recognise the last node drove on past it).
A VNM stretch also ends ``lost`` when a fresh GPS fix is more than ``[vnm_nav] max_off_walk_m`` from its
nodes after one has been within that distance (the arg-min always names a node, so a robot that lost the
walk visually would otherwise drive on). The route job then re-plans from the map node nearest the fix,
and the new walk's first ``[vnm_nav] gps_after_lost_m`` go to the GPS navigator (the VNM failed there).
A walk whose first stretch is the VNM's and lies more than ``[vnm_nav] gps_approach_m`` from the fix (a
route started off the recorded path) begins with a straight GPS leg to its first node, at most
``[mission] start_max_distance_m`` long, and a turn onto the walk.

The localisation and subgoal rules and the split into stretches live in :mod:`robot_app.walk_following`
(pure numpy, no I/O; re-exported here), which the simulated drivers (:mod:`robot_app.sim.vnm_follow`,
:mod:`robot_app.sim.eval_drive`) use too, so the evaluation measures exactly this loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import math
import time

import numpy as np

from core.control import passed_end, polyline_distance, waypoint_to_velocity, wrap_angle
from robot_app.commands import Source
from robot_app.navigator import RunReport
from robot_app.walk_following import (  # noqa: F401 - re-exported: the navigator's rules
    StepDecision, WalkRules, WalkTracker, stretch_yaw, vnm_nodes, walk_stretches)

log = logging.getLogger(__name__)


def _rgb(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as im:
        return np.asarray(im.convert("RGB"))


class VnmNavigator:
    """Drives the app's autonomy command slot along a walk whose node images come from the map.

    The rules (:class:`WalkRules`) come from ``app.config.vnm_nav`` when the config has that section,
    else the GNM defaults; keyword arguments given here override single rules. ``waypoint_index`` and
    ``max_v_mps`` (default ``[models] vnm_max_v_mps``, capped by ``[robot] max_v_mps``) scale and pick
    the waypoint; ``timeout_s`` ends a run as ``stuck`` (per VNM stretch). ``gps_navigator`` (a
    :class:`robot_app.navigator.GpsNavigator` on the same app) drives the stretches whose node images face
    away from the walk when ``[vnm_nav] gps_where_facing_away`` is on and :meth:`follow` gets the walk's
    positions and headings; without it the whole walk goes to the VNM.
    """

    def __init__(self, app, vnm, *, window: int | None = None, close_steps: float | None = None,
                 lost_steps: float | None = None, waypoint_index: int | None = None, max_v_mps: float | None = None,
                 max_lost_steps: int | None = None, timeout_s: float = 600.0, goal_close: bool | None = None,
                 recover_window: int | None = None, goal_confirm_steps: int | None = None, gps_navigator=None):
        self.app = app
        self.vnm = vnm
        self.gps_navigator = gps_navigator
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
        self.gps_where_facing_away = bool(getattr(nav, "gps_where_facing_away", True))
        self.min_vnm_nodes = int(getattr(nav, "min_vnm_nodes", 3))
        self.gps_at_turns_deg = float(getattr(nav, "gps_at_turns_deg", 0.0))
        self.gps_goal_check_m = float(getattr(nav, "gps_goal_check_m", 3.0))
        self.max_off_walk_m = float(getattr(nav, "max_off_walk_m", 10.0))
        self.gps_approach_m = float(getattr(nav, "gps_approach_m", 5.0))
        self.stretches: list[tuple[str, int, int]] = []
        self._walk_xy = None
        self._trace: list = []
        self._gps_live = None  # (lo, hi, began_s) while a GPS stretch runs
        self._arrived_m = None  # GPS distance (m) to the last node when the last stretch ended by GPS arrival

    @property
    def trace(self) -> list:
        """Rows (t_s, walk index, subgoal index, best VNM distance in steps (-1 on GPS stretches), v,
        omega, driver: 0 VNM / 1 GPS) so far, the running GPS stretch's included."""
        if self._gps_live is None or self.gps_navigator is None:
            return self._trace
        lo, hi, began = self._gps_live
        return self._trace + [self._gps_row(r, lo, hi, began) for r in getattr(self.gps_navigator, "trace", [])]

    @staticmethod
    def _gps_row(row, lo: int, hi: int, began: float) -> tuple:
        # GpsNavigator rows are (t_s from its own start, x_m, y_m, yaw_rad, index, v, omega)
        return began + row[0], min(lo + int(row[4]), hi), min(lo + int(row[4]) + 1, hi), -1.0, row[5], row[6], 1.0

    def _command(self, v: float, omega: float) -> None:
        self.app.commands.submit(Source.AUTONOMY, v, omega, sender="vnm-navigator")

    async def _drive_for(self, v: float, omega: float, duration_s: float) -> None:
        """Hold ``(v, omega)`` for ``duration_s`` (one VNM frame period), renewing the autonomy slot every
        half ``[robot] cmd_timeout_s``: the VNM runs at its frame rate (GNM: 4 Hz, 0.25 s, as long as the
        timeout), the command multiplexer cuts a command older than the timeout. Renewal happens only in
        this task, so a navigator that hangs (a VNM call that never returns) still stops the robot."""
        refresh_s = self.app.config.robot.cmd_timeout_s / 2.0
        end = time.monotonic() + duration_s
        while True:
            self._command(v, omega)
            left = end - time.monotonic()
            if left <= 0.0:
                return
            await asyncio.sleep(min(refresh_s, left))

    def plan_stretches(self, n_nodes: int, walk_latlon=None, node_heading_rad=None, *,
                       gps_first_m: float = 0.0) -> list[tuple[str, int, int]]:
        """The walk's VNM and GPS stretches (:func:`walk_stretches`). The nodes whose images face away
        (with headings that match the walk and ``gps_where_facing_away``) and, with ``gps_first_m`` > 0,
        those within that many metres along the walk from its start go to GPS; one VNM stretch when there
        is no GPS navigator or the positions are missing or do not match the walk. Keeps the walk's
        positions (UTM m) for the turns between stretches, the approach leg and the GPS checks."""
        whole = [("vnm", 0, n_nodes - 1)]
        self._walk_xy = None
        if self.gps_navigator is None or walk_latlon is None:
            return whole
        lat, lon = (np.asarray(a, dtype=np.float64).reshape(-1) for a in walk_latlon)
        if not lat.shape[0] == lon.shape[0] == n_nodes:
            log.warning("VNM walk: %d node images but %d positions; the whole walk goes to the VNM, no GPS checks",
                        n_nodes, lat.shape[0])
            return whole
        try:
            self._walk_xy = xy = self.gps_navigator.estimator.to_xy(lat, lon)
            mask = np.ones(n_nodes, dtype=bool)
            heading = None if node_heading_rad is None else np.asarray(node_heading_rad, dtype=np.float64).reshape(-1)
            if heading is not None and heading.shape[0] != n_nodes:
                log.warning("VNM walk: %d node images but %d headings; no stretch goes to GPS for facing away",
                            n_nodes, heading.shape[0])
            elif heading is not None and self.gps_where_facing_away:
                mask = vnm_nodes(xy, heading, gps_at_turns_deg=self.gps_at_turns_deg)
            if gps_first_m > 0:
                arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
                mask &= arc > gps_first_m
            return whole if mask.all() else walk_stretches(mask, min_vnm_nodes=self.min_vnm_nodes)
        except ValueError as exc:  # a position utm cannot convert: drive it all with the VNM, say why
            log.warning("VNM walk: %s; the whole walk goes to the VNM, no GPS checks", exc)
            self._walk_xy = None
            return whole

    async def follow(self, node_jpegs: list[bytes], walk_latlon=None, node_heading_rad=None, *,
                     gps_first_m: float = 0.0) -> RunReport:
        """Follow the walk given by its node images (walk order). Never raises for field conditions.

        ``walk_latlon`` ((K,) lat, (K,) lon degrees) and ``node_heading_rad`` ((K,) the map's node headings,
        yaw CCW from east, NaN unknown) let the stretches that face away go to the GPS navigator.
        ``gps_first_m`` (m along the walk) gives its start to the GPS navigator too: a route job re-planned
        after the VNM lost the walk starts where the VNM failed (``[vnm_nav] gps_after_lost_m``). A walk
        whose first stretch is the VNM's and lies more than ``[vnm_nav] gps_approach_m`` from the GPS fix
        starts with a GPS leg to its first node (:meth:`_approach`; :attr:`stretches` then begins with
        ``("gps", 0, 0)``); with positions, the walk waits up to 2 s for a fresh fix to judge that. The
        report's ``final_index`` is a walk index and ``distance_to_goal_m`` the last stretch's (on a VNM
        stretch the best predicted distance in steps x ``max_v_mps`` / frame rate); ``trace`` rows are
        (t_s, walk index, subgoal index, best VNM distance in steps (-1 on GPS stretches), v, omega,
        driver: 0 VNM / 1 GPS).
        """
        vnm = self.vnm
        self._trace, self._gps_live, self._arrived_m = [], None, None  # kept so a cancelled run still has it
        self.stretches = stretches = self.plan_stretches(len(node_jpegs), walk_latlon, node_heading_rad,
                                                         gps_first_m=gps_first_m)
        heading = None if node_heading_rad is None else np.asarray(node_heading_rad, dtype=np.float64).reshape(-1)
        goals = await asyncio.to_thread(lambda: vnm.preprocess_many([_rgb(j) for j in node_jpegs]))
        if len(stretches) > 1 or stretches[0][0] != "vnm":
            log.info("VNM walk: stretches %s (gps where the node images face away, near sharp turns or at "
                     "the start of a walk re-planned after a loss)", stretches)
        t0 = time.monotonic()
        report = RunReport("cancelled", 0, float("inf"), 0.0, self._trace)
        # the GPS navigator's pose estimate (gyro integration above all) stays current through VNM stretches
        sensing = asyncio.ensure_future(self._sense_loop()) if self._walk_xy is not None else None
        try:
            approach = await self._approach(walk_latlon, t0)
            if approach is not None and not approach.reached:
                report = approach
            else:
                report = await self._follow_stretches(goals, walk_latlon, heading, t0, after_gps=approach is not None)
        finally:
            if sensing is not None:
                sensing.cancel()
                await asyncio.gather(sensing, return_exceptions=True)
        return RunReport(report.outcome, report.final_index, report.distance_to_goal_m, time.monotonic() - t0,
                         self._trace)

    async def _follow_stretches(self, goals, walk_latlon, heading, t0: float, *, after_gps: bool) -> RunReport:
        """Drive :attr:`stretches` in order (the approach leg, when there was one, done already:
        ``after_gps``), then the GPS goal check after a last VNM stretch."""
        stretches = self.stretches[1:] if after_gps else self.stretches
        report = RunReport("cancelled", 0, float("inf"), 0.0, self._trace)
        for i, (mode, lo, hi) in enumerate(stretches):
            if mode == "vnm":
                if i > 0 or after_gps:  # after GPS: face the stretch's images first (the walk may turn here)
                    yaw = stretch_yaw(self._walk_xy, heading, lo, hi)
                    if yaw is not None:
                        await self._align(yaw)
                report = await self._follow_vnm(goals[lo:hi + 1], lo, t0, final=i == len(stretches) - 1)
            else:
                report = await self._follow_gps(walk_latlon, lo, hi, final=i == len(stretches) - 1, t0=t0)
            if report.outcome != "reached":
                return report
        if stretches[-1][0] == "vnm" and self._walk_xy is not None and self._arrived_m is None:
            report = await self._goal_check(walk_latlon, report, t0, first=stretches[-1][1])  # arrival: checked
        return report

    async def _sense_loop(self) -> None:
        gps = self.gps_navigator
        while True:
            gps.sense()
            await asyncio.sleep(gps.period_s)

    async def _approach(self, walk_latlon, t0: float) -> RunReport | None:
        """A walk whose first stretch is the VNM's, with a fresh GPS fix more than ``gps_approach_m`` from
        that stretch's polyline (a route may start up to ``[mission] start_max_distance_m`` from its walk;
        a re-plan starts at the map node nearest the fix): the GPS navigator drives a straight leg from
        the fix to the walk's first node, to its own goal radius (prepended to :attr:`stretches` as
        ``("gps", 0, 0)``), and :meth:`follow` then turns the robot onto the stretch before the VNM takes
        over. The VNM only recognises the walk from about where its images were taken, and the GPS
        off-walk guard arms only once the robot is near it. The leg crosses ground no drive recorded, so
        a fix farther than ``[mission] start_max_distance_m`` from the walk's first node gets no leg: the
        walk ends ``lost`` at once, the robot standing. Returns the leg's report (walk index 0, the
        distance to the walk's first node), or None when no leg is needed (or it cannot be judged: no
        positions, no GPS navigator, no fresh fix within 2 s)."""
        gps = self.gps_navigator
        mode, lo, hi = self.stretches[0]
        if mode != "vnm" or self._walk_xy is None or not self.gps_approach_m > 0:
            return None
        t_end = time.monotonic() + 2.0  # a walk may start just as the app connects: wait for a fix
        while not gps.sense():
            if time.monotonic() > t_end:
                log.warning("VNM walk: no fresh GPS fix to check the walk's start against; the VNM starts as "
                            "the robot stands")
                return None
            await asyncio.sleep(gps.period_s)
        est = gps.estimator
        off = polyline_distance(self._walk_xy[lo:hi + 1], est.x_m, est.y_m)
        if not off > self.gps_approach_m:  # NaN (no position yet) included
            return None
        to_first = float(math.hypot(self._walk_xy[0, 0] - est.x_m, self._walk_xy[0, 1] - est.y_m))
        cap = float(self.app.config.mission.start_max_distance_m)
        if not to_first <= cap:
            log.warning("VNM walk: the walk's first node is %.1f m from the GPS fix, more than [mission] "
                        "start_max_distance_m = %.1f: no GPS leg across unmapped ground; lost", to_first, cap)
            return RunReport("lost", 0, to_first, 0.0, [])
        import utm

        lat0, lon0 = utm.to_latlon(est.x_m, est.y_m, est.zone[0], est.zone[1], strict=False)
        lat, lon = (np.asarray(a, dtype=np.float64).reshape(-1) for a in walk_latlon)
        log.info("VNM walk: the GPS fix is %.1f m from the walk's first VNM stretch (more than [vnm_nav] "
                 "gps_approach_m = %.1f): GPS drives %.1f m to its first node", off, self.gps_approach_m, to_first)
        self.stretches = [("gps", 0, 0)] + self.stretches
        # to the navigator's own goal radius (final=True), not the hand-over radius of a GPS stretch
        return await self._follow_gps((np.array([lat0, lat[0]]), np.array([lon0, lon[0]])), 0, 0, final=True,
                                      t0=t0, leg=True)

    async def _goal_check(self, walk_latlon, report: RunReport, t0: float, *, first: int = 0) -> RunReport:
        """The VNM reported the goal: with the GPS fix more than ``gps_goal_check_m`` from the last node,
        the GPS navigator drives from the walk node nearest the fix (among the last 10, and within the
        last stretch, which starts at walk index ``first``: a walk that folds back over itself has earlier
        nodes at the same places, from which the GPS navigator would drive the fold again) to the end
        (the sim VNM, for one, localises on the last node several metres early)."""
        gps = self.gps_navigator
        if not self.gps_goal_check_m > 0 or not gps.sense():
            return report
        xy, est = self._walk_xy, gps.estimator
        off = float(np.hypot(xy[-1, 0] - est.x_m, xy[-1, 1] - est.y_m))
        if not off > self.gps_goal_check_m:
            return report
        k = xy.shape[0]
        if k < 2:  # a walk of one node: nothing to drive along
            return report
        tail = np.arange(max(0, first, k - 10), k)
        j = min(int(tail[np.argmin(np.hypot(xy[tail, 0] - est.x_m, xy[tail, 1] - est.y_m))]), k - 2)
        log.info("VNM walk: the VNM reached the goal %.1f m from it by GPS; GPS drives from walk index %d", off, j)
        self.stretches = self.stretches + [("gps", j, k - 1)]
        return await self._follow_gps(walk_latlon, j, k - 1, final=True, t0=t0)

    def _fresh_fix_xy(self) -> tuple[float, float] | None:
        """The GPS pose estimate's position (UTM m) when the walk has positions and the fix is fresh."""
        gps = self.gps_navigator
        if self._walk_xy is None or gps is None:
            return None
        est = gps.estimator
        if time.monotonic() - est.fix_t_mono_s > self.app.config.serial.gps_max_age_s:
            return None
        return est.x_m, est.y_m

    def _arrived_by_gps(self, index: int, last: int | None = None) -> float | None:
        """With the VNM localised at walk index ``index``, within ``window`` nodes of the walk index
        ``last`` (a stretch's end; default the walk's), and a fresh GPS fix at or past that node within
        ``gps_goal_check_m`` (0: never): the fix's distance (m) to that node; else None."""
        xy = self._walk_xy
        if xy is None or not self.gps_goal_check_m > 0:
            return None
        last = xy.shape[0] - 1 if last is None else last
        if index < last - self.rules.window:
            return None
        fix = self._fresh_fix_xy()
        # the walk up to the stretch's end: passed_end takes its last leg from the nodes before, which a
        # stretch of one or two close nodes would not have
        if fix is None or not passed_end(xy[:last + 1], *fix, radius_m=self.gps_goal_check_m):
            return None
        return float(math.hypot(fix[0] - xy[last, 0], fix[1] - xy[last, 1]))

    def _walk_distance_m(self, first: int, n: int) -> float | None:
        """The distance (m) of a fresh GPS fix from the VNM stretch's nodes (walk indices first ..
        first + n - 1); None without positions, a GPS navigator, a fresh fix or a finite distance."""
        fix = self._fresh_fix_xy()
        if fix is None:
            return None
        off = polyline_distance(self._walk_xy[first:first + n], *fix)
        return off if math.isfinite(off) else None

    async def _align(self, yaw_rad: float, *, tolerance_rad: float = math.radians(20.0)) -> None:
        """Turn in place until the pose estimate's heading is within ``tolerance_rad`` of ``yaw_rad`` (CCW
        from east), with the GPS navigator's pose while it follows the turn (the fused estimate, or a gyro
        reading integrated within the last 0.3 s: the GPS course says nothing while turning on the spot);
        gives up without such a heading, or after |error| / 0.4 rad/s + 3 s (the VNM stretch then starts
        as the robot stands)."""
        gps = self.gps_navigator
        max_omega = self.app.config.robot.max_omega_radps
        t_end = None
        try:
            while True:
                fresh = gps.sense()
                now = time.monotonic()
                live = gps.pose_source == "estimator" or now - gps.estimator.gyro_t_mono_s <= 0.3
                if not fresh or not gps.estimator.yaw_known or not live:
                    log.info("VNM walk: no live heading to turn onto the next VNM stretch; it starts as the robot "
                             "stands")
                    return
                if t_end is None:
                    t_end = now + abs(wrap_angle(yaw_rad - gps.estimator.yaw_rad)) / 0.4 + 3.0
                if now > t_end:
                    break
                err = wrap_angle(yaw_rad - gps.estimator.yaw_rad)
                if abs(err) <= tolerance_rad:
                    return
                self._command(0.0, math.copysign(min(max_omega, max(0.4, 1.5 * abs(err))), err))
                await asyncio.sleep(gps.period_s)
            log.warning("VNM walk: could not turn onto the next VNM stretch in time; it starts as the robot stands")
        finally:
            self._command(0.0, 0.0)

    async def _follow_gps(self, walk_latlon, lo: int, hi: int, *, final: bool, t0: float,
                          leg: bool = False) -> RunReport:
        """One stretch with the GPS navigator; it ends within max(``goal_radius_m``, ``lookahead_m``) of the
        stretch's last node when the VNM takes over there (the walk's own goal radius on the last stretch).
        ``leg=True``: ``walk_latlon`` is the path to drive itself (the approach leg), not the walk."""
        gps = self.gps_navigator
        lat, lon = (np.asarray(a, dtype=np.float64).reshape(-1)[slice(None) if leg else slice(lo, hi + 1)]
                    for a in walk_latlon)
        radius = None if final else max(gps.goal_radius_m, gps.lookahead_m)
        self._gps_live = (lo, hi, time.monotonic() - t0)
        try:
            rep = await gps.follow(lat, lon, goal_radius_m=radius)
        finally:
            began = self._gps_live[2]
            self._gps_live = None
            self._trace.extend(self._gps_row(r, lo, hi, began) for r in getattr(gps, "trace", []))
        log.info("GPS stretch %d-%d %s after %.1f s", lo, hi, rep.outcome, rep.duration_s)
        return RunReport(rep.outcome, min(lo + rep.final_index, hi), rep.distance_to_goal_m, rep.duration_s, [])

    async def _follow_vnm(self, goals: np.ndarray, first: int, t0: float, *, final: bool = False) -> RunReport:
        """One stretch with the VNM (the GNM deployment loop) over the node images ``goals`` (walk
        indices from ``first``). Its end also counts as reached when the VNM localises within ``window``
        nodes of it and a fresh GPS fix is at or past the stretch's last node within ``gps_goal_check_m``
        of it (:func:`core.control.passed_end`): a VNM that does not recognise the last node's image would
        drive on past it (on the ``final`` stretch, the report then gives the fix's distance)."""
        vnm, cam = self.vnm, self.app.camera
        ctx = vnm.new_context()
        period = 1.0 / vnm.frame_rate_hz
        tracker = WalkTracker(goals.shape[0], self.rules, lost_steps=vnm.dist_range_steps[1])
        last_frame = None
        t_start = time.monotonic()
        trace = self._trace
        outcome, best_d = "cancelled", float("inf")
        # the GPS off-walk guard arms once a fix is within max_off_walk_m of the stretch: a route job may
        # start up to [mission] start_max_distance_m from the walk, and a re-plan starts at the map node
        # nearest the fix, which may be farther than that; the VNM's arg-min always names some node, so a
        # robot that has lost the walk visually would otherwise drive on
        guard = self.max_off_walk_m > 0 and self._walk_xy is not None
        armed = False
        last = first + goals.shape[0] - 1
        try:
            while True:
                now = time.monotonic()
                if now - t_start > self.timeout_s:
                    outcome = "stuck"
                    break
                frame = cam.latest if cam is not None else None
                if frame is None or now - frame.t_mono_s > 1.0:
                    self._command(0.0, 0.0)
                    if now - t_start > 5.0:
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
                off = self._walk_distance_m(first, goals.shape[0]) if guard else None
                if off is not None and off <= self.max_off_walk_m:
                    armed = True
                elif off is not None and armed:
                    log.warning("VNM stretch: the GPS fix is %.1f m from the walk (more than [vnm_nav] "
                                "max_off_walk_m = %.1f): lost", off, self.max_off_walk_m)
                    outcome = "lost"
                    break
                lo, hi = tracker.window()
                pred = await asyncio.to_thread(vnm.predict, ctx.stack(), goals[lo:hi])
                dec = tracker.update(pred.dist_steps)
                best_d = dec.best_steps
                if dec.status in ("lost", "reached"):
                    outcome = dec.status
                    break
                arrived_m = self._arrived_by_gps(first + tracker.index, last)  # "drive" or "wait"
                if arrived_m is not None:
                    log.info("VNM walk: the GPS fix is at or past the stretch's last node, walk index %d (VNM "
                             "localised on walk index %d): reached", last, first + tracker.index)
                    tracker.reset(goals.shape[0] - 1)
                    if final:
                        self._arrived_m = arrived_m
                    outcome = "reached"
                    break
                if dec.status == "wait":
                    self._command(0.0, 0.0)
                    await asyncio.sleep(period)
                    continue
                wp = pred.waypoints_m(max_v_mps=self.max_v_mps, frame_rate_hz=vnm.frame_rate_hz)[dec.subgoal - lo,
                                                                                                  self.waypoint_index]
                v, omega = waypoint_to_velocity(float(wp[0]), float(wp[1]), dt_s=period, max_v_mps=self.max_v_mps,
                                                max_omega_radps=self.app.config.robot.max_omega_radps)
                trace.append((now - t0, first + dec.index, first + dec.subgoal, best_d, v, omega, 0.0))
                await self._drive_for(v, omega, period)
        finally:
            self._command(0.0, 0.0)
        log.info("VNM stretch %s after %.1f s at walk index %d", outcome, time.monotonic() - t_start,
                 first + tracker.index)
        # the best predicted distance in steps, as metres at the speed the waypoints are scaled with
        to_goal_m = best_d * self.max_v_mps / vnm.frame_rate_hz if np.isfinite(best_d) else float("inf")
        if final and self._arrived_m is not None:  # ended by GPS arrival: the fix's distance to the last node
            to_goal_m = self._arrived_m
        return RunReport(outcome, first + tracker.index, to_goal_m, time.monotonic() - t_start, [])
