"""Following a planned walk with the visual navigation model (GNM / ViNT deployment loop; docs/design.md,
"VNM contract").

:class:`VnmNavigator` is the robot's shell around the navigation policy (:mod:`robot_app.nav.policy`,
whose module docstring has the state table): it turns the walk's node images, map positions and
headings into a :class:`robot_app.nav.policy.Walk`, preprocesses the node images once, and steps the
policy with :class:`robot_app.nav.shell.WalkShell` (camera frames into the VNM's context queue, the VNM
on the nodes the policy names, the pose from the GPS navigator, the command into the autonomy slot).

At the VNM's frame rate (4 Hz for GNM) the VNM scores the walk's node images within ``window`` walk
indices of the last localisation in one call; the node with the smallest predicted temporal distance
is the localisation; below ``close_steps`` the next node becomes the subgoal; the subgoal's waypoint
``waypoint_index`` (GNM deploys waypoint 2 of 5), scaled to metres by ``[models] vnm_max_v_mps`` / frame
rate, goes through the PD rule (:func:`core.control.waypoint_to_velocity`). Stretches walked against
the direction they were recorded in, and the walk around sharp turns when ``[vnm_nav]
gps_at_turns_deg`` is set, go to the GPS controller; the GPS goal check, the GPS arrival at a
stretch's end, the off-walk guard and the approach leg are the policy's rows.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from robot_app.mapping.map_build import decode_jpeg
from robot_app.nav.gps import PoseEstimator, RunReport
from robot_app.nav.policy import NavPolicy, Outcome, Walk
from robot_app.nav.shell import WalkShell

log = logging.getLogger(__name__)


class NoPose:
    """A pose source that never has a fix (a VNM walk without a GPS navigator: no GPS checks)."""

    period_s = 0.1
    pose_source = "none"

    def __init__(self):
        self.estimator = PoseEstimator()

    def sense(self) -> bool:
        return False


class VnmNavigator:
    """Drives the app's autonomy command slot along a walk whose node images come from the map.

    ``sensors`` (:class:`robot_app.interfaces.Sensors`) gives the camera frames, ``commands`` is the command
    multiplexer, ``options`` the policy's :class:`robot_app.nav.policy.NavOptions`
    (:func:`robot_app.config.nav_options`); ``changes`` override single ones (:meth:`NavOptions.replace`: the keys of
    :class:`robot_app.nav.walk_following.WalkRules` and of NavOptions). ``gps_navigator`` (a
    :class:`robot_app.nav.gps.GpsNavigator` on the same sensors) is the pose source: with it and the walk's
    positions the GPS stretches, the GPS checks and the approach leg happen; without it the VNM drives
    the whole walk.
    """

    def __init__(self, sensors, commands, vnm, options, *, gps_navigator=None, **changes):
        self.sensors, self.commands, self.vnm, self.gps_navigator = sensors, commands, vnm, gps_navigator
        self.options = options.replace(**changes) if changes else options
        self.policy: NavPolicy | None = None
        self.shell: WalkShell | None = None

    @property
    def stretches(self) -> list:
        """The running (or last) walk's stretches: (mode "vnm"/"gps", first, last walk index)."""
        return [] if self.policy is None else self.policy.stretches

    @property
    def trace(self) -> list:
        """The running (or last) walk's :class:`robot_app.nav.policy.TraceRow` rows."""
        return [] if self.policy is None else self.policy.trace

    def walk(self, n_nodes: int, walk_latlon=None, node_heading_rad=None) -> Walk:
        """The policy's walk: positions (UTM m, in the GPS navigator's zone) and headings when they are there
        and match the node images; otherwise without (a warning says why)."""
        if self.gps_navigator is None or walk_latlon is None:
            return Walk(n_nodes)
        lat, lon = (np.asarray(a, dtype=np.float64).reshape(-1) for a in walk_latlon)
        if not lat.shape[0] == lon.shape[0] == n_nodes:
            log.warning("VNM walk: %d node images but %d positions; the whole walk goes to the VNM, no GPS checks",
                        n_nodes, lat.shape[0])
            return Walk(n_nodes)
        try:
            xy = self.gps_navigator.estimator.to_xy(lat, lon)
            if not np.isfinite(xy).all():
                raise ValueError("a node position is not finite")
        except ValueError as exc:  # a position utm cannot convert: drive it all with the VNM, say why
            log.warning("VNM walk: %s; the whole walk goes to the VNM, no GPS checks", exc)
            return Walk(n_nodes)
        heading = None if node_heading_rad is None else np.asarray(node_heading_rad, dtype=np.float64).reshape(-1)
        if heading is not None and heading.shape[0] != n_nodes:
            log.warning("VNM walk: %d node images but %d headings; no stretch goes to GPS for facing away",
                        n_nodes, heading.shape[0])
            heading = None
        return Walk(n_nodes, xy, heading)

    def plan_stretches(self, n_nodes: int, walk_latlon=None, node_heading_rad=None, *,
                       gps_first_m: float = 0.0) -> list[tuple[str, int, int]]:
        """The stretches :meth:`follow` would drive this walk in (before an approach leg or a GPS goal
        check adds one): (mode "vnm"/"gps", first, last walk index)."""
        walk = self.walk(n_nodes, walk_latlon, node_heading_rad)
        return NavPolicy(self.options, walk, vnm_frame_rate_hz=self.vnm.frame_rate_hz,
                         vnm_range_steps=self.vnm.dist_range_steps[1], gps_first_m=gps_first_m).stretches

    async def follow(self, node_jpegs: list[bytes], walk_latlon=None, node_heading_rad=None, *,
                     gps_first_m: float = 0.0, observe=None) -> RunReport:
        """Follow the walk given by its node images (walk order). Never raises for field conditions.

        ``walk_latlon`` ((K,) lat, (K,) lon degrees) and ``node_heading_rad`` ((K,) the map's node headings,
        yaw CCW from east, NaN unknown) give the policy the walk's positions and headings; ``gps_first_m``
        (m along the walk) gives its start to GPS (a route re-planned after the VNM lost the walk starts
        where the VNM failed, ``[vnm_nav] gps_after_lost_m``). ``observe`` replaces the sensors
        (:class:`robot_app.nav.shell.WalkShell`). The report's ``final_index`` is a walk index,
        ``distance_to_goal_m`` the distance left (m) and ``trace`` the policy's rows.
        """
        vnm = self.vnm
        walk = self.walk(len(node_jpegs), walk_latlon, node_heading_rad)
        self.policy = policy = NavPolicy(self.options, walk, vnm_frame_rate_hz=vnm.frame_rate_hz,
                                         vnm_range_steps=vnm.dist_range_steps[1], gps_first_m=gps_first_m)
        if len(policy.stretches) > 1 or policy.stretches[0][0] != "vnm":
            log.info("VNM walk: stretches %s (GPS where the node images face away, near sharp turns or at the "
                     "start of a walk re-planned after a loss)", policy.stretches)
        goals = None
        if observe is None:
            goals = await asyncio.to_thread(lambda: vnm.preprocess_many([decode_jpeg(j) for j in node_jpegs]))
        pose = self.gps_navigator if self.gps_navigator is not None else NoPose()
        self.shell = WalkShell(
            self.sensors, self.commands, pose, vnm=vnm, goals=goals, sender="vnm-navigator", observe=observe
        )
        t0 = time.monotonic()
        try:
            d = await self.shell.run(policy)
        finally:
            for note in policy.notes:
                log.info("VNM walk: %s", note)
        (log.info if d.outcome is Outcome.REACHED else log.warning)(
            "VNM walk %s at walk index %d after %.1f s: %s", d.outcome.value, d.walk_index, time.monotonic() - t0,
            d.why)
        return RunReport(d.outcome.value, d.walk_index, d.to_goal_m, time.monotonic() - t0, policy.trace, d.why)
