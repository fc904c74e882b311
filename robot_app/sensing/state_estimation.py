"""Planar state estimation: orientation from the IMU (AHRS), fused with wheel odometry and GPS in an EKF.

Pipeline (one reading at a time, in arrival order, host monotonic time):

- IMU (:class:`~firmware_bridge.readings.ImuReading`, 50-100 Hz): a Madgwick AHRS filter
  (``ahrs.filters.Madgwick``; Madgwick 2010, "An efficient orientation filter for inertial and
  inertial/magnetic sensor arrays") tracks the 3-D orientation from gyro + accelerometer, plus the
  magnetometer once :class:`MagCalibration` is loaded. The change of its yaw between samples (tilt
  compensated) drives the EKF prediction; with a calibrated magnetometer its absolute yaw is also a
  heading measurement. Madgwick's earth frame has x towards magnetic north and z up (NWU), so
  ``yaw_enu = yaw_nwu + pi/2 + declination`` (checked against the simulator's field).
- Wheel odometry (:class:`~firmware_bridge.readings.WheelFeedback`, 50 Hz): measured wheel speeds ->
  body (v, omega) by :func:`firmware_bridge.kinematics.wheels_to_twist`; v is a measurement, omega
  drives the prediction only when no IMU sample arrived within :data:`IMU_TIMEOUT_S`.
- GPS (:class:`~firmware_bridge.readings.GpsFix`): UTM position (zone of the first fix) with the
  receiver's east/north variances (floored), and the course over ground as a heading measurement
  above ``course_min_speed_mps`` (RMC course is clockwise from north: ``yaw = pi/2 - course``).

The EKF (``filterpy.kalman.ExtendedKalmanFilter``) state is ``(x_m, y_m, yaw_rad, v_mps)``: UTM
easting/northing, yaw counter-clockwise from east (REP-103), forward speed. Motion model: unicycle
with the midpoint heading; process noise from ``[estimation] accel_sigma_mps2`` and
``yaw_rate_sigma_radps``. The yaw is unknown (``yaw_known`` False) until the first magnetometer or
GPS course measurement, which sets it directly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firmware_bridge.kinematics import wheels_to_twist
from firmware_bridge.readings import GpsFix, ImuReading, WheelFeedback

log = logging.getLogger(__name__)

IMU_TIMEOUT_S = 0.2   # no IMU sample for this long: the wheel odometry's omega drives the prediction
MAG_UPDATE_PERIOD_S = 0.1  # absolute magnetometer heading used at most at 10 Hz (correlated noise)
# The AHRS starts at the identity: a high gain for the first samples lets it converge from any heading
# (Madgwick, beta 1.0: within ~2 deg after 100 samples from 115 deg off, measured on the simulator's field)
# before its heading is used.
AHRS_WARMUP_SAMPLES = 150
AHRS_WARMUP_GAIN = 1.0

__all__ = ["Pose", "MagCalibration", "MagCalibrationError", "fit_planar_mag_calibration", "StateEstimator",
           "EstimatorComponent", "wrap_angle"]


def wrap_angle(a: float) -> float:
    """Angle in radians wrapped to [-pi, pi)."""
    return (a + math.pi) % (2.0 * math.pi) - math.pi


@dataclass(frozen=True)
class Pose:
    """Planar state estimate in UTM.

    ``x_m``/``y_m``: easting/northing in zone ``utm_zone`` (number, letter); ``yaw_rad``: CCW from east;
    ``v_mps``: forward speed; ``covariance``: 4x4 row-major tuple over (x, y, yaw, v) in SI units squared;
    ``t_mono_s``: time of the newest reading folded in; ``gps_t_mono_s``: of the last GPS fix used;
    ``yaw_known``: False until a magnetometer or GPS-course heading was seen.
    """

    t_mono_s: float
    x_m: float
    y_m: float
    yaw_rad: float
    v_mps: float
    covariance: tuple
    utm_zone: tuple
    gps_t_mono_s: float
    yaw_known: bool


class MagCalibrationError(ValueError):
    """Magnetometer samples unusable for a calibration, or a calibration file that cannot be read."""


@dataclass(frozen=True)
class MagCalibration:
    """Hard- and soft-iron correction: ``corrected = matrix @ (raw - offset)`` (tesla, sensor frame).

    ``offset``: 3 floats (hard iron); ``matrix``: 3x3 nested tuples (soft iron). From a rotation in place
    only the horizontal (x, y) part is observable; z passes through unchanged (offset 0, scale 1).
    """

    offset: tuple
    matrix: tuple
    samples: int = 0
    coverage_deg: float = 0.0

    def apply(self, mag) -> np.ndarray:
        """Corrected field, shape (3,) float64 (same unit as ``mag``)."""
        return np.asarray(self.matrix, float) @ (np.asarray(mag, float) - np.asarray(self.offset, float))

    def save(self, path: str | Path) -> None:
        """Write as JSON (atomically: a temporary file renamed over ``path``)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps({"format": "robot-app mag calibration 1", "offset_t": list(self.offset),
                                   "matrix": [list(r) for r in self.matrix], "samples": self.samples,
                                   "coverage_deg": self.coverage_deg}, indent=2))
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> "MagCalibration":
        """Read a file written by :meth:`save`.

        Raises
        ------
        FileNotFoundError
            If ``path`` does not exist.
        MagCalibrationError
            If it is not a valid calibration file (the message names the file).
        """
        text = Path(path).read_text()
        try:
            d = json.loads(text)
            off = tuple(float(v) for v in d["offset_t"])
            mat = tuple(tuple(float(v) for v in row) for row in d["matrix"])
            if len(off) != 3 or len(mat) != 3 or any(len(r) != 3 for r in mat):
                raise ValueError("offset must have 3 values and matrix 3x3")
            if not (np.all(np.isfinite(off)) and np.all(np.isfinite(mat))):
                raise ValueError("non-finite values")
        except (ValueError, KeyError, TypeError) as exc:
            raise MagCalibrationError(f"{path}: not a magnetometer calibration: {exc}") from exc
        return cls(off, mat, int(d.get("samples", 0)), float(d.get("coverage_deg", 0.0)))


def fit_planar_mag_calibration(mag_t, *, min_coverage_deg: float = 300.0) -> MagCalibration:
    """Hard/soft iron from magnetometer samples taken while the robot turns in place on level ground.

    The horizontal samples lie on an ellipse ``A x^2 + B xy + C y^2 + D x + E y = 1`` (linear least squares,
    e.g. Vasconcelos et al. 2011, "Geometric approach to strapdown magnetometer calibration", planar case).
    Its centre is the hard-iron offset; the soft-iron matrix ``W = sqrt(M)`` (M the ellipse's quadratic
    form) maps it to a circle, scaled to keep the mean horizontal field strength.

    Parameters
    ----------
    mag_t : array_like, shape (N, 3)
        Raw readings (tesla, sensor frame, z up), N >= 20.
    min_coverage_deg : float
        Smallest heading range the samples must span around the fitted centre.

    Raises
    ------
    MagCalibrationError
        Too few or non-finite samples, a degenerate fit (not an ellipse), or too little rotation.
    """
    m = np.asarray(mag_t, dtype=np.float64)
    if m.ndim != 2 or m.shape[1] != 3 or m.shape[0] < 20:
        raise MagCalibrationError(f"need at least 20 samples of shape (N, 3), got {m.shape}")
    if not np.all(np.isfinite(m)):
        raise MagCalibrationError("magnetometer samples contain NaN or infinity")
    scale = float(np.median(np.linalg.norm(m[:, :2], axis=1))) or 1.0
    x, y = m[:, 0] / scale, m[:, 1] / scale  # unit-free for a well-conditioned fit
    a = np.column_stack([x * x, x * y, y * y, x, y])
    coef, *_ = np.linalg.lstsq(a, np.ones_like(x), rcond=None)
    qa, qb, qc, qd, qe = coef
    q = np.array([[qa, qb / 2.0], [qb / 2.0, qc]])
    if np.linalg.det(q) <= 0 or qa <= 0:
        raise MagCalibrationError("samples do not lie on an ellipse: turn the robot in place, away from iron")
    centre = -0.5 * np.linalg.solve(q, np.array([qd, qe]))
    w_eig, v_eig = np.linalg.eigh(q)
    w2 = v_eig @ np.diag(np.sqrt(w_eig)) @ v_eig.T
    corrected = (w2 @ (np.column_stack([x, y]) - centre).T).T
    r = np.linalg.norm(corrected, axis=1)
    raw_r = np.linalg.norm(np.column_stack([x, y]) - centre, axis=1)
    w2 = w2 * (raw_r.mean() / r.mean())
    ang = np.sort(np.degrees(np.arctan2(corrected[:, 1], corrected[:, 0])))
    gaps = np.diff(np.concatenate([ang, [ang[0] + 360.0]]))
    coverage = float(360.0 - gaps.max())
    if coverage < min_coverage_deg:
        raise MagCalibrationError(f"the samples span {coverage:.0f} deg of heading, need {min_coverage_deg:.0f}: "
                                  "turn longer or faster")
    matrix = ((float(w2[0, 0]), float(w2[0, 1]), 0.0), (float(w2[1, 0]), float(w2[1, 1]), 0.0), (0.0, 0.0, 1.0))
    return MagCalibration((float(centre[0] * scale), float(centre[1] * scale), 0.0), matrix, int(m.shape[0]),
                          coverage)


class StateEstimator:
    """AHRS + EKF over the readings of the drivers (see the module docstring). Synchronous, no I/O.

    Parameters
    ----------
    estimation : EstimationConfig
        ``[estimation]`` section.
    robot : RobotConfig
        ``[robot]`` section (wheel radius and separation for the odometry).
    mag_calibration : MagCalibration, optional
        Without it the magnetometer is ignored and the heading comes from the GPS course.
    """

    def __init__(self, estimation, robot, *, mag_calibration: MagCalibration | None = None):
        from ahrs.filters import Madgwick
        from filterpy.kalman import ExtendedKalmanFilter

        self.cfg, self.robot = estimation, robot
        self.mag_cal = mag_calibration
        self._ahrs = Madgwick(frequency=100.0, gain=AHRS_WARMUP_GAIN)
        self._imu_samples = 0
        self._q = np.array([1.0, 0.0, 0.0, 0.0])
        self._ahrs_yaw: float | None = None
        self._imu_t: float | None = None
        self._mag_t = -math.inf
        self.ekf = ExtendedKalmanFilter(dim_x=4, dim_z=2)
        self.ekf.predict_x = self._motion  # nonlinear motion: the new state is computed in _predict
        self.ekf.x = np.zeros((4, 1))
        self.ekf.P = np.diag([1e6, 1e6, math.pi ** 2, 1.0])
        self._t: float | None = None
        self.zone: tuple | None = None
        self.gps_t_mono_s = -math.inf
        self.position_known = False
        self.yaw_known = False
        self._last_v_odom = 0.0

    # -- model -----------------------------------------------------------------------------------
    def _motion(self, x_new) -> None:
        self.ekf.x = x_new

    def _predict(self, t_mono_s: float, dyaw_rad: float) -> None:
        if self._t is None:
            self._t = t_mono_s
            return
        dt = t_mono_s - self._t
        if dt <= 0.0:
            return
        self._t = t_mono_s
        ekf = self.ekf
        yaw, v = float(ekf.x[2, 0]), float(ekf.x[3, 0])
        mid = yaw + dyaw_rad / 2.0
        c, s = math.cos(mid), math.sin(mid)
        ekf.F = np.array([[1.0, 0.0, -v * s * dt, c * dt], [0.0, 1.0, v * c * dt, s * dt],
                          [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
        qv = (self.cfg.accel_sigma_mps2 * dt) ** 2
        g = np.array([[c * dt / 2.0], [s * dt / 2.0], [0.0], [1.0]])  # acceleration noise enters v and position
        ekf.Q = g @ g.T * qv + np.diag([1e-6, 1e-6, (self.cfg.yaw_rate_sigma_radps * dt) ** 2, 0.0])
        ekf.predict(u=np.array([[ekf.x[0, 0] + v * c * dt], [ekf.x[1, 0] + v * s * dt],
                                [wrap_angle(yaw + dyaw_rad)], [v]]))

    def _update(self, z: list, rows: list, var: list, *, angle_row: int | None = None) -> None:
        h = np.zeros((len(rows), 4))
        for i, r in enumerate(rows):
            h[i, r] = 1.0

        def residual(a, b):
            d = a - b
            if angle_row is not None:
                d[angle_row, 0] = wrap_angle(float(d[angle_row, 0]))
            return d

        self.ekf.update(np.array(z, float).reshape(-1, 1), lambda x: h, lambda x: h @ x, R=np.diag(var),
                        residual=residual)
        self.ekf.x[2, 0] = wrap_angle(float(self.ekf.x[2, 0]))

    def _set_yaw(self, yaw_rad: float, var: float) -> None:
        self.ekf.x[2, 0] = wrap_angle(yaw_rad)
        self.ekf.P[2, :] = 0.0
        self.ekf.P[:, 2] = 0.0
        self.ekf.P[2, 2] = var
        self.yaw_known = True

    def _heading(self, yaw_rad: float, sigma_deg: float) -> None:
        var = math.radians(sigma_deg) ** 2
        if not self.yaw_known:
            self._set_yaw(yaw_rad, var)
        else:
            self._update([yaw_rad], [2], [var], angle_row=0)

    # -- readings --------------------------------------------------------------------------------
    def on_reading(self, reading) -> None:
        """Fold in one ImuReading, WheelFeedback or GpsFix (anything else is ignored)."""
        if isinstance(reading, ImuReading):
            self.on_imu(reading)
        elif isinstance(reading, WheelFeedback):
            self.on_wheels(reading)
        elif isinstance(reading, GpsFix):
            self.on_fix(reading)

    def on_imu(self, r) -> None:
        """AHRS step, then EKF prediction by its yaw change (and a magnetometer heading when calibrated)."""
        if r.angular_velocity_radps is None or r.linear_acceleration_mps2 is None:
            return
        gyr = np.asarray(r.angular_velocity_radps, float)
        acc = np.asarray(r.linear_acceleration_mps2, float)
        if not (np.all(np.isfinite(gyr)) and np.all(np.isfinite(acc))) or not np.any(acc):
            return
        dt = 0.01 if self._imu_t is None else min(max(r.t_mono_s - self._imu_t, 1e-4), 0.5)
        self._imu_t = r.t_mono_s
        self._imu_samples += 1
        if self._imu_samples == AHRS_WARMUP_SAMPLES:
            self._ahrs.gain = self.cfg.ahrs_gain
        gyr = gyr + np.array([1e-12, 0.0, 0.0])  # ahrs skips samples whose gyro norm is exactly zero
        use_mag = self.mag_cal is not None and r.magnetic_field_t is not None
        if use_mag:
            mag = self.mag_cal.apply(r.magnetic_field_t) * 1e9  # nT, the unit ahrs documents
            self._q = self._ahrs.updateMARG(self._q, gyr=gyr, acc=acc, mag=mag, dt=dt)
        else:
            self._q = self._ahrs.updateIMU(self._q, gyr=gyr, acc=acc, dt=dt)
        w, x, y, z = self._q
        yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        dyaw = 0.0 if self._ahrs_yaw is None else wrap_angle(yaw - self._ahrs_yaw)
        self._ahrs_yaw = yaw
        self._predict(r.t_mono_s, dyaw)
        if use_mag and self._imu_samples >= AHRS_WARMUP_SAMPLES and r.t_mono_s - self._mag_t >= MAG_UPDATE_PERIOD_S:
            self._mag_t = r.t_mono_s
            self._heading(yaw + math.pi / 2.0 + math.radians(self.cfg.declination_deg), self.cfg.mag_yaw_sigma_deg)

    def on_wheels(self, r) -> None:
        """Wheel speeds -> (v, omega): v is measured; omega predicts only when the IMU is silent."""
        v, omega = wheels_to_twist(r.left.velocity_radps, r.right.velocity_radps,
                                   wheel_radius_m=self.robot.wheel_radius_m,
                                   wheel_separation_m=self.robot.wheel_separation_m)
        if not (math.isfinite(v) and math.isfinite(omega)):
            return
        if self._imu_t is None or r.t_mono_s - self._imu_t > IMU_TIMEOUT_S:
            dt = 0.0 if self._t is None else max(0.0, r.t_mono_s - self._t)
            self._predict(r.t_mono_s, omega * dt)
        self._last_v_odom = v
        self._update([v], [3], [self.cfg.odom_sigma_mps ** 2])

    def on_fix(self, fix) -> None:
        """GPS position (and course over ground when moving) in the estimator's UTM zone."""
        import utm

        if not (math.isfinite(fix.latitude_deg) and math.isfinite(fix.longitude_deg)
                and -80.0 <= fix.latitude_deg <= 84.0):  # UTM's latitude range
            return
        if self.zone is None:
            _, _, zn, letter = utm.from_latlon(fix.latitude_deg, fix.longitude_deg)
            self.zone = (int(zn), str(letter))
        e, n, _, _ = utm.from_latlon(fix.latitude_deg, fix.longitude_deg, force_zone_number=self.zone[0],
                                     force_zone_letter=self.zone[1])
        cov = fix.covariance_enu_m2 if fix.covariance_enu_m2 else (25.0, 25.0, 100.0)
        floor = self.cfg.gps_sigma_floor_m ** 2
        var = [max(float(c), floor) if math.isfinite(float(c)) else 25.0 for c in cov[:2]]
        self._predict(fix.t_mono_s, 0.0)
        if not self.position_known:
            self.ekf.x[0, 0], self.ekf.x[1, 0] = e, n
            self.ekf.P[0, 0], self.ekf.P[1, 1] = var
            self.position_known = True
        else:
            self._update([e, n], [0, 1], var)
        self.gps_t_mono_s = fix.t_mono_s
        if fix.course_deg is not None and fix.speed_mps is not None and fix.speed_mps >= self.cfg.course_min_speed_mps:
            yaw = math.radians(90.0 - fix.course_deg)
            if self._last_v_odom < 0.0:  # reversing: the course is opposite to the heading
                yaw += math.pi
            self._heading(wrap_angle(yaw), self.cfg.course_sigma_deg)

    def pose(self) -> Pose | None:
        """The current estimate, or None before the first GPS fix."""
        if not self.position_known or self._t is None:
            return None
        x = self.ekf.x[:, 0]
        return Pose(self._t, float(x[0]), float(x[1]), wrap_angle(float(x[2])), float(x[3]),
                    tuple(float(v) for v in self.ekf.P.ravel()), self.zone, self.gps_t_mono_s, self.yaw_known)


def load_mag_calibration(path: str) -> MagCalibration | None:
    """The calibration at ``path``, or None (logged) when it is missing or unreadable."""
    if not path:
        return None
    try:
        cal = MagCalibration.load(path)
    except FileNotFoundError:
        log.info("no magnetometer calibration at %s: heading from GPS course and gyro", path)
        return None
    except (OSError, MagCalibrationError) as exc:
        log.warning("magnetometer calibration ignored: %s", exc)
        return None
    log.info("magnetometer calibration loaded from %s", path)
    return cal


class EstimatorComponent:
    """Supervised component: readings of every driver -> :class:`StateEstimator` -> ``sensors.pose``.

    ``config`` gives ``[estimation]``, ``[robot]`` and ``[serial]`` (which driver the IMU and GPS come from);
    ``drivers`` maps "base" / "gps" / "imu" to the running drivers; ``sensors``
    (:class:`robot_app.interfaces.Sensors`) gets the pose, None while no GPS fix arrived for
    ``[estimation] max_gps_age_s``.
    """

    name = "estimation"

    def __init__(self, config, drivers, sensors):
        self.config, self.drivers, self.sensors = config, drivers, sensors
        self.estimator: StateEstimator | None = None

    async def run(self) -> None:
        cfg = self.config
        def build() -> StateEstimator:  # in a worker thread: importing filterpy (scipy) takes seconds on a Jetson
            return StateEstimator(cfg.estimation, cfg.robot,
                                  mag_calibration=load_mag_calibration(cfg.estimation.mag_calibration_file))

        self.estimator = est = await asyncio.to_thread(build)
        merged: asyncio.Queue = asyncio.Queue(maxsize=1024)
        subs = [(drv, drv.subscribe(kinds=kinds)) for drv, kinds in self._sources(ImuReading, WheelFeedback, GpsFix)]
        pumps = [asyncio.ensure_future(self._pump(q, merged)) for _, q in subs]
        failures = 0
        try:
            while True:
                reading = await merged.get()
                try:
                    est.on_reading(reading)
                except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
                    # one bad reading must not take the estimator down (the robot would stop with it)
                    failures += 1
                    if failures in (1, 10, 100) or failures % 1000 == 0:
                        log.warning("estimation: %s ignored (%s; %d so far)", type(reading).__name__, exc, failures)
                    continue
                pose = est.pose()
                if pose is not None and time.monotonic() - pose.gps_t_mono_s > cfg.estimation.max_gps_age_s:
                    pose = None
                self.sensors.pose = pose
        finally:
            self.sensors.pose = None
            for p in pumps:
                p.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for drv, q in subs:
                drv.unsubscribe(q)

    def _sources(self, imu_kind, wheel_kind, gps_kind) -> list:
        """(driver, reading kinds) to subscribe: the IMU and GPS only from the configured source (with a
        Microstrain on its own port the MCU's own IMU stream must not reach the same AHRS)."""
        serial, drivers = self.config.serial, self.drivers
        out = []
        base = drivers.get("base")
        if base is not None:
            kinds = (wheel_kind,) + ((imu_kind,) if serial.imu_source == "mcu" else ()) \
                + ((gps_kind,) if serial.gps_source == "mcu" else ())
            out.append((base, kinds))
        if "imu" in drivers:
            out.append((drivers["imu"], (imu_kind,)))
        if "gps" in drivers:
            out.append((drivers["gps"], (gps_kind,)))
        return out

    @staticmethod
    async def _pump(src: asyncio.Queue, dst: asyncio.Queue) -> None:
        while True:
            item = await src.get()
            if dst.full():
                dst.get_nowait()
            dst.put_nowait(item)
