"""``robot-app imu calibrate-mag``: hard/soft-iron magnetometer calibration from a rotation in place.

The robot turns in place at ``--omega-radps`` for ``--duration`` seconds (or, with ``--no-drive``, the
operator turns it, e.g. with the gamepad) while the magnetometer samples are collected from the IMU
configured in ``[serial] imu_source``; :func:`robot_app.state_estimation.fit_planar_mag_calibration`
fits the correction, written to ``--output`` (default ``[estimation] mag_calibration_file``), which the
state estimator loads when the app starts. The robot's serial ports must be free: stop
``robot-app.service`` first.
"""

from __future__ import annotations

import asyncio
import logging
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
    drivers = drivers_from_config(config.serial, config.robot)
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
    from robot_app.cli import UsageError
    from robot_app.state_estimation import MagCalibrationError, fit_planar_mag_calibration

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
