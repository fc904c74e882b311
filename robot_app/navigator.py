"""Following a planned walk in GPS mode (LM-Nav's GPS ablation; the fallback when no VNM is installed).

The pose comes from the drivers' latest readings: position from the GPS fix (UTM, one zone per run),
heading from the gyro (integrated yaw rate) corrected towards the GPS course over ground whenever the
robot moves faster than ``course_min_speed_mps`` (RMC course is clockwise from north; yaw is CCW from
east, REP-103). When the app's state estimator publishes ``app.pose`` (AHRS + wheel odometry + GPS
EKF, :mod:`robot_app.state_estimation`) with a known heading in the walk's UTM zone, that pose is used
instead; the simple estimate keeps running as the fallback. Until the heading is known the robot creeps straight ahead to acquire it. Each step
localises on the walk (:class:`core.control.WindowLocaliser`), aims at the first walk node at least
``lookahead_m`` ahead and turns the straight-line controller's (v, omega) into the app's command,
which the control loop forwards at 50 Hz. Stale GPS (older than ``gps_max_age_s``) stops the robot;
being lost for ``max_lost_steps`` steps or making no progress for ``stuck_s`` ends the run with that
outcome. The robot is always stopped when :meth:`GpsNavigator.follow` returns.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from core.control import WindowLocaliser, advance_along, line_follow_velocity, wrap_angle
from robot_app.commands import Source

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
    """Outcome of one walk: ``outcome`` in reached / lost / stuck / gps-lost / cancelled."""

    outcome: str
    final_index: int
    distance_to_goal_m: float
    duration_s: float
    trace: list = field(default_factory=list)   # (t_s, x_m, y_m, yaw_rad, index, v, omega)

    @property
    def reached(self) -> bool:
        return self.outcome == "reached"


class GpsNavigator:
    """Drives the app's command along a walk given as node lat/lon (degrees).

    ``app`` needs ``base`` (a ``firmware_bridge`` JackalBase or anything with ``latest(kind, max_age_s)``),
    ``command`` (set here) and ``config`` (``[robot]`` limits, ``[serial] gps_max_age_s``).
    """

    def __init__(self, app, *, rate_hz: float = 10.0, max_v_mps: float = 1.0, lookahead_m: float = 2.0,
                 goal_radius_m: float = 1.0, max_lost_steps: int = 30, stuck_s: float = 20.0,
                 acquire_v_mps: float = 0.4, timeout_s: float = 600.0):
        self.app = app
        self.period_s = 1.0 / rate_hz
        self.max_v_mps = min(max_v_mps, app.config.robot.max_v_mps)
        self.lookahead_m = lookahead_m
        self.goal_radius_m = goal_radius_m
        self.max_lost_steps = max_lost_steps
        self.stuck_s = stuck_s
        self.acquire_v_mps = acquire_v_mps
        self.timeout_s = timeout_s
        self.estimator = PoseEstimator()
        self.pose_source = "gps+gyro"  # or "estimator" while app.pose (state estimation) is usable

    def _command(self, v: float, omega: float) -> None:
        self.app.commands.submit(Source.AUTONOMY, v, omega, sender="navigator")

    def sense(self) -> bool:
        """Update :attr:`estimator` from the latest readings; False when the GPS fix is stale."""
        from firmware_bridge.readings import GpsFix, ImuReading

        gps = getattr(self.app, "gps", None) or self.app.base
        imu_src = getattr(self.app, "imu", None) or self.app.base
        max_age = self.app.config.serial.gps_max_age_s
        self.estimator.on_fix(gps.latest(GpsFix, max_age_s=max_age))
        imu = imu_src.latest(ImuReading, max_age_s=0.2)
        if imu is not None and imu.angular_velocity_radps is not None:
            self.estimator.on_gyro(imu.angular_velocity_radps[2], time.monotonic())
        pose = getattr(self.app, "pose", None)  # robot_app.state_estimation: AHRS + wheel odometry + GPS EKF
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

    async def follow(self, walk_lat_deg, walk_lon_deg, *, goal_radius_m: float | None = None) -> RunReport:
        """Follow the walk to its last node. Never raises for field conditions: the outcome says.

        ``goal_radius_m`` overrides the navigator's goal radius for this walk (the VNM navigator hands a
        stretch back to the VNM from a few metres before its last node).
        """
        goal_radius = self.goal_radius_m if goal_radius_m is None else float(goal_radius_m)
        walk = self.estimator.to_xy(walk_lat_deg, walk_lon_deg)
        loc = WindowLocaliser(walk, window=4, hysteresis_m=0.3, max_distance_m=15.0)
        arc = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(walk, axis=0).T))]) if walk.shape[0] > 1 \
            else np.zeros(1)
        progress = 0.0  # metres along the walk, only forward (a walk may fold back over itself)
        t0 = time.monotonic()
        last_fix_ok = t0
        best_goal_d, best_t = math.inf, t0
        self.trace = trace = []  # kept on the navigator so a cancelled run still has it
        outcome = "cancelled"
        try:
            while True:
                now = time.monotonic()
                if not self.sense():
                    self._command(0.0, 0.0)
                    if now - last_fix_ok > 5.0:  # 5 s without a fresh fix
                        outcome = "gps-lost"
                        break
                    await asyncio.sleep(self.period_s)
                    continue
                last_fix_ok = now
                est = self.estimator
                goal_d = float(np.hypot(*(walk[-1] - (est.x_m, est.y_m))))
                progress = advance_along(walk, arc, progress, est.x_m, est.y_m, span_m=2.0 * self.lookahead_m + 2.0)
                # within the radius of the last node, and localised on the walk's last nodes or progressed to
                # its end: a walk that comes back near its start is not over before it is driven
                if goal_d <= goal_radius and (loc.index >= walk.shape[0] - 3 or arc[-1] - progress <= goal_radius + 1.0):
                    outcome = "reached"
                    break
                if goal_d < best_goal_d - 0.2:
                    best_goal_d, best_t = goal_d, now
                if now - best_t > self.stuck_s or now - t0 > self.timeout_s:
                    outcome = "stuck"
                    break
                r = loc.update(est.x_m, est.y_m)
                if loc.lost_steps >= self.max_lost_steps:
                    outcome = "lost"
                    break
                if not est.yaw_known:  # creep straight ahead until the GPS course gives the heading
                    v, omega = self.acquire_v_mps, 0.0
                else:
                    target = self._target(walk, r.index, est)
                    v, omega = line_follow_velocity(est.x_m, est.y_m, est.yaw_rad, *target,
                                                    max_v_mps=self.max_v_mps,
                                                    max_omega_radps=self.app.config.robot.max_omega_radps)
                self._command(v, omega)
                trace.append((now - t0, est.x_m, est.y_m, est.yaw_rad, r.index, v, omega))
                await asyncio.sleep(self.period_s)
        finally:
            self._command(0.0, 0.0)
        est = self.estimator
        d = float(np.hypot(*(walk[-1] - (est.x_m, est.y_m)))) if np.isfinite(est.x_m) else math.inf
        log.info("walk %s after %.1f s, %.1f m from the goal", outcome, time.monotonic() - t0, d)
        return RunReport(outcome, loc.index, d, time.monotonic() - t0, trace)

    def _target(self, walk: np.ndarray, index: int, est: PoseEstimator) -> tuple[float, float]:
        pos = np.array([est.x_m, est.y_m])
        # from the node after the localised one: the localised node may lie behind the robot (hysteresis),
        # and aiming back at it turns the robot around
        for j in range(min(index + 1, walk.shape[0] - 1), walk.shape[0]):
            if np.hypot(*(walk[j] - pos)) >= self.lookahead_m:
                return float(walk[j, 0]), float(walk[j, 1])
        return float(walk[-1, 0]), float(walk[-1, 1])

