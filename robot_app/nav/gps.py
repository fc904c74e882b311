"""Following a planned walk in GPS mode (LM-Nav's GPS ablation; the fallback when no VNM is installed),
and the pose the navigation policy drives with.

The pose comes from the drivers' latest readings: position from the GPS fix (UTM, one zone per run),
heading from the gyro (integrated yaw rate) corrected towards the GPS course over ground whenever the
robot moves faster than ``course_min_speed_mps`` (RMC course is clockwise from north; yaw is CCW from
east, REP-103). When the app's state estimator publishes a pose (``Sensors.pose``: AHRS + wheel odometry +
GPS EKF, :mod:`robot_app.sensing.state_estimation`) with a known heading in the walk's UTM zone, that pose is
used instead; the simple estimate keeps running as the fallback.

:meth:`GpsNavigator.follow` steps the navigation policy (:mod:`robot_app.nav.policy`) without a VNM: GPS
drives the whole walk (pure pursuit with the straight-line rule; the policy's state table says when
the walk ends). The robot is always stopped when it returns.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from core.control import wrap_angle
from firmware_bridge.readings import GpsFix, ImuReading
from robot_app.nav.policy import NavPolicy, Outcome, Walk
from robot_app.nav.shell import WalkShell

log = logging.getLogger(__name__)


class PoseEstimator:
    """Planar pose (UTM x, y m; yaw rad CCW from east) from GPS fixes, GPS course and the gyro."""

    def __init__(self, *, zone: tuple[int, str] | None = None, course_gain: float = 0.3,
                 course_min_speed_mps: float = 0.3):
        self.zone = zone
        self.course_gain = course_gain
        self.course_min_speed_mps = course_min_speed_mps
        self.x_m = self.y_m = math.nan
        self.yaw_rad = 0.0
        self.yaw_known = False
        self.fix_t_mono_s = -math.inf
        self._last_fix_id = None
        self._gyro_t = None

    def to_xy(self, lat_deg, lon_deg) -> np.ndarray:
        """WGS-84 -> UTM metres in this estimator's zone (set by the first call)."""
        import utm

        lat = np.atleast_1d(np.asarray(lat_deg, dtype=np.float64))
        lon = np.atleast_1d(np.asarray(lon_deg, dtype=np.float64))
        if self.zone is None:
            _, _, z, letter = utm.from_latlon(float(lat[0]), float(lon[0]))
            self.zone = (z, letter)
        e, n, _, _ = utm.from_latlon(lat, lon, force_zone_number=self.zone[0], force_zone_letter=self.zone[1])
        return np.stack([np.asarray(e, float), np.asarray(n, float)], axis=1)

    def on_fix(self, fix) -> None:
        if fix is None or id(fix) == self._last_fix_id:
            return
        self._last_fix_id = id(fix)
        self.x_m, self.y_m = self.to_xy(fix.latitude_deg, fix.longitude_deg)[0]
        self.fix_t_mono_s = fix.t_mono_s
        if fix.course_deg is not None and (fix.speed_mps or 0.0) >= self.course_min_speed_mps:
            course_yaw = wrap_angle(math.radians(90.0 - fix.course_deg))
            if not self.yaw_known:
                self.yaw_rad, self.yaw_known = course_yaw, True
            else:
                self.yaw_rad = wrap_angle(self.yaw_rad + self.course_gain * wrap_angle(course_yaw - self.yaw_rad))

    def on_gyro(self, yaw_rate_radps: float | None, t_mono_s: float, *, max_gap_s: float = 1.0) -> None:
        """Integrate the yaw rate since the last call. After a gap longer than ``max_gap_s`` (nobody
        sensed, or no IMU reading) one rate sample says nothing about the turn in between: the heading
        becomes unknown until the GPS course gives it again."""
        if yaw_rate_radps is not None and self._gyro_t is not None:
            dt = max(0.0, t_mono_s - self._gyro_t)
            if dt > max_gap_s:
                self.yaw_known = False
            else:
                self.yaw_rad = wrap_angle(self.yaw_rad + yaw_rate_radps * dt)
        if yaw_rate_radps is not None:
            self._gyro_t = t_mono_s

    @property
    def gyro_t_mono_s(self) -> float:
        """Monotonic time of the last integrated gyro reading (-inf: none yet)."""
        return -math.inf if self._gyro_t is None else self._gyro_t


@dataclass
class RunReport:
    """Outcome of one walk: ``outcome`` a :class:`robot_app.nav.policy.Outcome` value (or "cancelled"),
    the walk index reached, the distance left to the walk's end (m), the duration (s), the policy's
    trace (:class:`robot_app.nav.policy.TraceRow` per step) and why the walk ended."""

    outcome: str
    final_index: int
    distance_to_goal_m: float
    duration_s: float
    trace: list = field(default_factory=list)
    why: str = ""  # the policy's reason for the end (robot_app.nav.policy.Directive.why)

    @property
    def reached(self) -> bool:
        return self.outcome == "reached"


class GpsNavigator:
    """The pose source of the navigation policy (:meth:`sense`, :attr:`estimator`) and GPS mode's driver
    (:meth:`follow`).

    ``sensors`` (:class:`robot_app.interfaces.Sensors`) gives the fixes (``gps``, else ``base``), the gyro
    (``imu``, else ``base``) and the fused ``pose``; ``commands`` is the command multiplexer; ``options``
    the policy's :class:`robot_app.nav.policy.NavOptions` (:func:`robot_app.config.nav_options`). The
    keywords override single options for GPS mode (``max_v_mps`` the GPS speed cap, at most
    ``options.robot_max_v_mps``; ``max_lost_steps`` the GPS localiser's).
    """

    def __init__(self, sensors, commands, options, *, max_v_mps: float | None = None,
                 lookahead_m: float | None = None, goal_radius_m: float | None = None,
                 max_lost_steps: int | None = None, stuck_s: float | None = None,
                 acquire_v_mps: float | None = None, timeout_s: float | None = None):
        self.sensors, self.commands = sensors, commands
        given = {"gps_max_v_mps": None if max_v_mps is None else min(max_v_mps, options.robot_max_v_mps),
                 "lookahead_m": lookahead_m, "goal_radius_m": goal_radius_m, "gps_max_lost_steps": max_lost_steps,
                 "stuck_s": stuck_s, "acquire_v_mps": acquire_v_mps, "timeout_s": timeout_s}
        self.options = options.replace(**{k: v for k, v in given.items() if v is not None})
        self.estimator = PoseEstimator()
        self.pose_source = "gps+gyro"  # or "estimator" while sensors.pose (state estimation) is usable
        self.policy = None

    @property
    def period_s(self) -> float:
        return self.options.gps_period_s

    @property
    def lookahead_m(self) -> float:
        return self.options.lookahead_m

    @property
    def goal_radius_m(self) -> float:
        return self.options.goal_radius_m

    @property
    def trace(self) -> list:
        """The running (or last) walk's :class:`robot_app.nav.policy.TraceRow` rows."""
        return [] if self.policy is None else self.policy.trace

    def sense(self) -> bool:
        """Update :attr:`estimator` from the latest readings; False when the GPS fix is stale."""
        sensors = self.sensors
        gps = sensors.gps or sensors.base
        imu_src = sensors.imu or sensors.base
        max_age = self.options.fix_max_age_s
        self.estimator.on_fix(gps.latest(GpsFix, max_age_s=max_age) if gps is not None else None)
        imu = imu_src.latest(ImuReading, max_age_s=0.2) if imu_src is not None else None
        if imu is not None and imu.angular_velocity_radps is not None:
            self.estimator.on_gyro(imu.angular_velocity_radps[2], time.monotonic())
        pose = sensors.pose  # robot_app.sensing.state_estimation: AHRS + wheel odometry + GPS EKF
        use = (pose is not None and pose.yaw_known and self.estimator.zone is not None
               and tuple(pose.utm_zone) == tuple(self.estimator.zone))
        if use:  # the fused estimate replaces this simple one; the simple one keeps running as the fallback
            est = self.estimator
            est.x_m, est.y_m, est.yaw_rad, est.yaw_known = pose.x_m, pose.y_m, pose.yaw_rad, True
            est.fix_t_mono_s = max(est.fix_t_mono_s, pose.gps_t_mono_s)
        if use != (self.pose_source == "estimator"):
            self.pose_source = "estimator" if use else "gps+gyro"
            log.info("navigator: pose from %s", self.pose_source)
        return time.monotonic() - self.estimator.fix_t_mono_s <= max_age

    async def follow(self, walk_lat_deg, walk_lon_deg, *, goal_radius_m: float | None = None,
                     observe=None) -> RunReport:
        """Follow the walk to its last node with GPS alone. Never raises for field conditions: the outcome
        says. ``goal_radius_m`` overrides the goal radius for this walk; ``observe`` replaces the sensors
        (:class:`robot_app.nav.shell.WalkShell`)."""
        walk = self.estimator.to_xy(walk_lat_deg, walk_lon_deg)
        opts = self.options if goal_radius_m is None else self.options.replace(goal_radius_m=float(goal_radius_m))
        self.policy = policy = NavPolicy(opts, Walk(walk.shape[0], walk))
        t0 = time.monotonic()
        d = await WalkShell(self.sensors, self.commands, self, sender="navigator", observe=observe).run(policy)
        for note in policy.notes:
            log.info("GPS walk: %s", note)
        (log.info if d.outcome is Outcome.REACHED else log.warning)(
            "GPS walk %s after %.1f s, %.1f m from the goal: %s", d.outcome.value, time.monotonic() - t0,
            d.to_goal_m, d.why)
        return RunReport(d.outcome.value, d.walk_index, d.to_goal_m, time.monotonic() - t0, policy.trace, d.why)
