"""``robot-app imu calibrate-mag``: hard/soft-iron magnetometer calibration from a rotation in place.

The robot turns in place at ``--omega-radps`` for ``--duration`` seconds (or, with ``--no-drive``, the
operator turns it, e.g. with the gamepad) while the magnetometer samples are collected from the IMU
configured in ``[serial] imu_source``; :func:`robot_app.sensing.state_estimation.fit_planar_mag_calibration`
fits the correction, written to ``--output`` (default ``[estimation] mag_calibration_file``), which the
state estimator loads when the app starts. The robot's serial ports must be free: stop
``robot-app.service`` first.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time

log = logging.getLogger(__name__)


def register(sub, groups) -> None:
    p = groups["imu"].add_parser(
        "calibrate-mag", help="magnetometer hard/soft-iron calibration (the robot turns in place)",
        description="Turn the robot in place and fit the magnetometer's hard- and soft-iron correction "
                    "(horizontal plane). Needs free space around the robot, level ground, and no large iron "
                    "nearby. Stop robot-app.service first (it holds the serial ports).")
    p.add_argument("--duration", type=float, default=30.0, help="seconds to turn and sample (default 30)")
    p.add_argument("--omega-radps", type=float, default=0.5,
                   help="turn rate, rad/s CCW (default 0.5: one turn in 12.6 s)")
    p.add_argument("--no-drive", action="store_true", help="do not command the base: turn the robot yourself")
    p.add_argument("--output", default=None, help="calibration file (default: [estimation] mag_calibration_file)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to wait for the devices")
    p.set_defaults(func=_calibrate)
    register_bench(groups)


async def collect_mag_samples(config, *, duration_s: float, omega_radps: float, drive: bool = True,
                              connect_timeout_s: float = 10.0, progress=None):
    """Turn in place (``drive``) and collect magnetometer readings.

    Returns
    -------
    numpy.ndarray, shape (N, 3), float64
        Field in tesla, sensor frame.

    Raises
    ------
    firmware_bridge.errors.BridgeTimeout
        If the base (or the IMU) does not connect within ``connect_timeout_s``.
    ValueError
        If ``[serial] imu_source`` is ``none``.
    """
    import numpy as np

    from firmware_bridge.factory import drivers_from_config
    from firmware_bridge.readings import ImuReading

    if config.serial.imu_source == "none":
        raise ValueError("[serial] imu_source is 'none': there is no magnetometer to calibrate")
    drivers = drivers_from_config(config.serial, config.robot, config.ros2)
    base, imu = drivers["base"], drivers.get("imu", drivers["base"])
    used = {id(d): d for d in (base, imu)}.values()
    samples: list = []
    for d in used:
        await d.start()
    try:
        for d in used:
            await d.wait_connected(connect_timeout_s)
        q = imu.subscribe(kinds=(ImuReading,), maxsize=4096)
        t0 = time.monotonic()
        next_report = t0
        try:
            while (now := time.monotonic()) - t0 < duration_s:
                if drive:
                    base.set_velocity(0.0, omega_radps)
                while not q.empty():
                    r = q.get_nowait()
                    if r.magnetic_field_t is not None:
                        samples.append(r.magnetic_field_t)
                if progress is not None and now >= next_report:
                    progress(now - t0, len(samples))
                    next_report += 1.0
                await asyncio.sleep(0.05)
        finally:
            imu.unsubscribe(q)
            if drive and base.connected and not base.estop_latched:
                base.set_velocity(0.0, 0.0)
                await asyncio.sleep(0.2)  # let the zero command reach the MCU before closing
    finally:
        for d in used:
            await d.close()
    return np.asarray(samples, dtype=np.float64).reshape(-1, 3)


def _calibrate(args, config) -> int:
    from firmware_bridge.errors import BridgeError
    from robot_app.errors import UsageError
    from robot_app.sensing.state_estimation import MagCalibrationError, fit_planar_mag_calibration

    if not 1.0 <= args.duration <= 600.0:
        raise UsageError(f"--duration must be 1..600 s, got {args.duration}")
    limit = config.robot.max_omega_radps
    if not 0.05 <= abs(args.omega_radps) <= min(limit, 3.0):
        raise UsageError(f"--omega-radps must be 0.05..{min(limit, 3.0)} rad/s in magnitude, got {args.omega_radps}")
    if config.serial.imu_source == "none":
        raise UsageError("[serial] imu_source is 'none': there is no magnetometer to calibrate")
    out = args.output or config.estimation.mag_calibration_file
    if not out:
        raise UsageError("no output file: give --output or set [estimation] mag_calibration_file")
    if not args.no_drive:
        print(f"turning in place at {args.omega_radps} rad/s for {args.duration:.0f} s: keep clear of the robot",
              file=sys.stderr)

    def progress(t_s: float, n: int) -> None:
        print(f"\r{t_s:5.1f}/{args.duration:.0f} s, {n} samples", end="", file=sys.stderr, flush=True)

    try:
        samples = asyncio.run(collect_mag_samples(config, duration_s=args.duration, omega_radps=args.omega_radps,
                                                  drive=not args.no_drive, connect_timeout_s=args.connect_timeout,
                                                  progress=progress))
    except BridgeError as exc:
        print(f"\nrobot-app: cannot reach the robot: {exc} (is robot-app.service still running?)", file=sys.stderr)
        return 1
    print(file=sys.stderr)
    try:
        cal = fit_planar_mag_calibration(samples)
    except MagCalibrationError as exc:
        print(f"robot-app: calibration failed: {exc}", file=sys.stderr)
        return 1
    try:
        cal.save(out)
    except OSError as exc:
        print(f"robot-app: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    (ox, oy, _), m = cal.offset, cal.matrix
    print(f"wrote {out}: {cal.samples} samples over {cal.coverage_deg:.0f} deg; hard iron ({ox * 1e6:.2f}, "
          f"{oy * 1e6:.2f}) uT; soft iron [[{m[0][0]:.3f}, {m[0][1]:.3f}], [{m[1][0]:.3f}, {m[1][1]:.3f}]]")
    print("restart robot-app.service to use it")
    return 0


# -- bench estimation ------------------------------------------------------------------------------------
def register_bench(groups) -> None:
    b = groups["bench"].add_parser(
        "estimation", help="state estimator: cost per reading and accuracy on a noisy synthetic drive",
        description="Replay a synthetic drive (differential-drive plant, IMU 50 Hz, wheels 50 Hz, GPS 5 Hz "
                    "with noise) through the estimator; report the CPU time per reading and the position / "
                    "heading errors against the truth, next to raw GPS.")
    b.add_argument("--duration", type=float, default=120.0, help="simulated seconds (default 120)")
    b.add_argument("--gps-sigma-m", type=float, default=1.0, help="GPS noise per axis, m (default 1.0)")
    b.add_argument("--mag", action="store_true", help="with a calibrated magnetometer (default: without)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    b.set_defaults(func=_bench)


def synthetic_drive(*, duration_s: float, gps_sigma_m: float, seed: int = 0, origin=(52.5148, 13.4643)):
    """Readings (time-ordered list) and the true poses (t, x, y, yaw) of a weaving drive at ~1 m/s.

    Noise: gyro 0.01 rad/s white + 0.005 rad/s bias, accelerometer 0.05 m/s^2, magnetometer 0.3 uT,
    wheel speed 2 %, GPS ``gps_sigma_m`` per axis (reported as its variance), GPS course 5 deg.
    """
    import numpy as np

    from firmware_bridge.readings import GpsFix, ImuReading, WheelFeedback, WheelState
    from firmware_bridge.sim.mcu import EARTH_FIELD_ENU_T, GRAVITY_MPS2
    from firmware_bridge.sim.plant import KinematicPlant, twist_to_wheels
    from robot_app.mapping.synthetic_logs import enu_to_latlon

    rng = np.random.default_rng(seed)
    plant = KinematicPlant()
    dt, out, truth = 0.02, [], []
    fixes_xy = []
    for k in range(int(duration_s / dt)):
        t = k * dt
        v = 1.0 if t > 1.0 else 0.0
        w = 0.5 * math.sin(2 * math.pi * t / 20.0) if t > 1.0 else 0.0
        plant.step(*twist_to_wheels(v, w, wheel_radius_m=plant.r, wheel_separation_m=plant.ws), dt)
        st = plant.state()
        c, s = math.cos(st.yaw_rad), math.sin(st.yaw_rad)
        e, n, u = EARTH_FIELD_ENU_T
        mag = (c * e + s * n + rng.normal(0, 3e-7), -s * e + c * n + rng.normal(0, 3e-7), u)
        out.append(ImuReading(t, "imu_link", (0.0, 0.0, st.omega_radps + 0.005 + rng.normal(0, 0.01)),
                              (st.accel_mps2[0] + rng.normal(0, 0.05), st.accel_mps2[1] + rng.normal(0, 0.05),
                               GRAVITY_MPS2), None, mag))
        ws = [WheelState(wr * (1 + rng.normal(0, 0.02)), tr, 0.0, 0.0, 30.0, 30.0, False)
              for wr, tr in zip(st.wheel_radps, st.wheel_travel_rad)]
        out.append(WheelFeedback(t, ws[0], ws[1], 35.0, 40.0, 1, 1))
        truth.append((t, st.x_m, st.y_m, st.yaw_rad))
        if k % 10 == 0:
            fixes_xy.append((t, st.x_m + rng.normal(0, gps_sigma_m), st.y_m + rng.normal(0, gps_sigma_m),
                             abs(st.v_mps), (90.0 - math.degrees(st.yaw_rad) + rng.normal(0, 5.0)) % 360.0))
    xy = np.array([(f[1], f[2]) for f in fixes_xy])
    lat, lon = enu_to_latlon(xy, anchor=origin)
    var = gps_sigma_m ** 2
    for (t, _, _, speed, course), la, lo in zip(fixes_xy, lat, lon):
        out.append(GpsFix(t + 1e-4, float(la), float(lo), 40.0, 1, 10, 1.0, (var, var, 4 * var), 2, None, None,
                          speed_mps=speed, course_deg=course, source="RMC"))
    out.sort(key=lambda r: r.t_mono_s)
    return out, np.array(truth), np.array([(f[0], f[1], f[2]) for f in fixes_xy])


def _bench(args, config) -> int:
    import json

    import numpy as np
    import utm

    from firmware_bridge.readings import GpsFix
    from robot_app.errors import UsageError
    from robot_app.sensing.state_estimation import MagCalibration, StateEstimator, wrap_angle

    if not 5.0 <= args.duration <= 3600.0:
        raise UsageError(f"--duration must be 5..3600 s, got {args.duration}")
    if not 0.0 <= args.gps_sigma_m <= 20.0:
        raise UsageError(f"--gps-sigma-m must be 0..20 m, got {args.gps_sigma_m}")
    origin = (52.5148, 13.4643)
    readings, truth, gps = synthetic_drive(duration_s=args.duration, gps_sigma_m=args.gps_sigma_m, seed=args.seed,
                                           origin=origin)
    ident = MagCalibration((0.0, 0.0, 0.0), ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))
    est = StateEstimator(config.estimation, config.robot, mag_calibration=ident if args.mag else None)
    e0, n0 = utm.from_latlon(*origin)[:2]  # the synthetic drive's ENU origin in UTM
    poses, ti = [], 0
    t_cpu = time.process_time()
    for r in readings:
        est.on_reading(r)
        if isinstance(r, GpsFix):
            p = est.pose()
            if p is not None:
                poses.append((r.t_mono_s, p.x_m - e0, p.y_m - n0, p.yaw_rad, p.yaw_known))
    cpu_s = time.process_time() - t_cpu
    t_true = truth[:, 0]
    pos_err, yaw_err, gps_err = [], [], []
    for (t, x, y, yaw, known), (tg, gx, gy) in zip(poses, gps[-len(poses):]):
        if t < 10.0:  # skip the start (heading acquisition)
            continue
        ti = min(int(np.searchsorted(t_true, t)), len(t_true) - 1)
        _, tx, ty, tyaw = truth[ti]
        pos_err.append(math.hypot(x - tx, y - ty))
        gps_err.append(math.hypot(gx - tx, gy - ty))
        if known:
            yaw_err.append(abs(wrap_angle(yaw - tyaw)))
    res = {"readings": len(readings), "simulated_s": args.duration, "cpu_s": round(cpu_s, 3),
           "us_per_reading": round(1e6 * cpu_s / len(readings), 1),
           "cpu_fraction_of_real_time": round(cpu_s / args.duration, 4),
           "position_rms_m": round(float(np.sqrt(np.mean(np.square(pos_err)))), 3),
           "raw_gps_rms_m": round(float(np.sqrt(np.mean(np.square(gps_err)))), 3),
           "yaw_rms_deg": round(float(np.degrees(np.sqrt(np.mean(np.square(yaw_err))))), 2),
           "magnetometer": bool(args.mag), "gps_sigma_m": args.gps_sigma_m}
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:36s} {v}")
    return 0
