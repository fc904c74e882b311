"""State estimation: magnetometer calibration fit, and the AHRS + EKF estimate against the simulated plant."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time

import numpy as np
import pytest
import utm

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.commands import Source
from robot_app.config import Config, ConfigError, config_from_mapping, nav_options
from robot_app.mapping.synthetic_logs import enu_to_latlon
from robot_app.sensing.state_estimation import (
    MagCalibration,
    MagCalibrationError,
    fit_planar_mag_calibration,
    wrap_angle,
)
from robot_app.service.app import App

ORIGIN = (52.5148, 13.4643)


def _ring(n=200, *, offset=(3e-6, -5e-6), soft=((1.3, 0.2), (0.2, 0.8)), span_deg=360.0, seed=0):
    rng = np.random.default_rng(seed)
    ang = np.radians(np.linspace(0.0, span_deg, n, endpoint=False))
    true = np.column_stack([2e-5 * np.cos(ang), 2e-5 * np.sin(ang)])
    raw = true @ np.asarray(soft).T + np.asarray(offset)
    raw += rng.normal(0.0, 5e-8, raw.shape)
    return np.column_stack([raw, np.full(n, -4.4e-5)]), true


def test_planar_fit_recovers_hard_and_soft_iron():
    raw, true = _ring()
    cal = fit_planar_mag_calibration(raw)
    assert np.allclose(cal.offset[:2], (3e-6, -5e-6), atol=2e-7)
    corrected = np.array([cal.apply(m) for m in raw])
    r = np.hypot(corrected[:, 0], corrected[:, 1])
    assert r.std() / r.mean() < 0.01  # a circle after correction
    # headings are preserved up to one common rotation (soft iron symmetric: none at all)
    d = np.array([wrap_angle(a - b) for a, b in zip(np.arctan2(corrected[:, 1], corrected[:, 0]),
                                                     np.arctan2(true[:, 1], true[:, 0]))])
    assert np.abs(d - d.mean()).max() < math.radians(1.0)
    assert cal.coverage_deg > 350 and np.allclose(corrected[:, 2], -4.4e-5)


def test_planar_fit_refuses_bad_samples():
    raw, _ = _ring(span_deg=120.0)
    with pytest.raises(MagCalibrationError, match="span"):
        fit_planar_mag_calibration(raw)
    with pytest.raises(MagCalibrationError, match="at least 20"):
        fit_planar_mag_calibration(np.zeros((5, 3)))
    bad = _ring()[0]
    bad[3, 1] = np.nan
    with pytest.raises(MagCalibrationError, match="NaN"):
        fit_planar_mag_calibration(bad)


def test_calibration_file_round_trip_and_bad_file(tmp_path):
    cal = fit_planar_mag_calibration(_ring()[0])
    p = tmp_path / "sub" / "mag.json"
    cal.save(p)
    back = MagCalibration.load(p)
    assert np.allclose(back.offset, cal.offset) and np.allclose(back.matrix, cal.matrix)
    (tmp_path / "bad.json").write_text('{"offset_t": [1, 2], "matrix": []}')
    with pytest.raises(MagCalibrationError, match="bad.json"):
        MagCalibration.load(tmp_path / "bad.json")


@pytest.mark.parametrize("table, key", [({"ahrs_gain": -1.0}, "ahrs_gain"),
                                        ({"gps_sigma_floor_m": 0.0}, "gps_sigma_floor_m"),
                                        ({"declination_deg": "east"}, "declination_deg"),
                                        ({"enabled": 1}, "enabled"), ({"kalman": 1}, "kalman")])
def test_bad_estimation_config_is_refused(table, key):
    with pytest.raises(ConfigError, match=rf"\[estimation\] {key}"):
        config_from_mapping({"estimation": table}, origin="cfg.toml")


def _truth_utm(st, zone):
    lat, lon = enu_to_latlon(np.array([(st.x_m, st.y_m)]), anchor=ORIGIN)
    e, n, _, _ = utm.from_latlon(lat[0], lon[0], force_zone_number=zone[0], force_zone_letter=zone[1])
    return float(e), float(n)


async def _with_app(tmp_path, body, *, mag_file="", enabled=True):
    async with SimulatedDevices(tmp_path, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
        base = Config()
        cfg = dataclasses.replace(
            base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
            paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "none")),
            ui=dataclasses.replace(base.ui, enabled=False),
            estimation=dataclasses.replace(base.estimation, mag_calibration_file=mag_file, enabled=enabled))
        app = App(cfg)
        task = asyncio.ensure_future(app.run())
        try:
            await app.base.wait_connected(10.0)
            return await body(app, sim)
        finally:
            app.request_stop()
            await asyncio.wait_for(task, 10.0)


async def _drive(app, v, omega, seconds):
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        app.commands.submit(Source.AUTONOMY, v, omega, sender="test")
        await asyncio.sleep(0.05)


def _errors(app, sim):
    pose, st = app.pose, sim.plant.state()
    e, n = _truth_utm(st, pose.utm_zone)
    return math.hypot(pose.x_m - e, pose.y_m - n), abs(wrap_angle(pose.yaw_rad - st.yaw_rad)), pose, st


def test_estimate_tracks_the_simulated_robot_over_a_short_drive(tmp_path):
    """GPS course + gyro + wheel odometry (no magnetometer calibration): within 0.5 m and 5 deg."""
    async def body(app, sim):
        assert app.supervisor.states["estimation"].state == "running"  # the app runs the estimator itself
        for _ in range(50):
            if getattr(app, "pose", None) is not None:
                break
            await asyncio.sleep(0.1)
        assert app.pose is not None and not app.pose.yaw_known  # position from GPS, heading unknown
        samples = []
        for v, w, s in ((1.0, 0.0, 2.0), (0.8, 0.6, 2.5), (1.0, -0.4, 2.0)):
            await _drive(app, v, w, s)
            samples.append(_errors(app, sim))
        await _drive(app, 0.0, 0.0, 0.5)
        samples.append(_errors(app, sim))
        return samples, json.loads(json.dumps(app.status_dict()))

    samples, status = asyncio.run(_with_app(tmp_path, body))
    for pos_err, yaw_err, pose, st in samples:
        assert pose.yaw_known
        assert pos_err < 0.5, (pos_err, pose, st)
        assert yaw_err < math.radians(5.0), (math.degrees(yaw_err), pose, st)
    assert abs(samples[-1][2].v_mps) < 0.05  # standing still at the end
    assert status["pose"]["yaw_known"] and status["components"]["estimation"] == "running"
    cov = np.array(samples[-1][2].covariance).reshape(4, 4)
    assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_calibrated_magnetometer_gives_the_heading_at_rest(tmp_path):
    """With a calibration file the heading is known before the robot moves, and follows a turn in place."""
    ident = MagCalibration((0.0, 0.0, 0.0), ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)))
    ident.save(tmp_path / "mag.json")

    async def body(app, sim):
        for _ in range(50):
            if getattr(app, "pose", None) is not None and app.pose.yaw_known:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # let the AHRS settle on the magnetometer
        at_rest = _errors(app, sim)
        await _drive(app, 0.0, 0.8, 2.0)
        await _drive(app, 0.0, 0.0, 0.5)
        return at_rest, _errors(app, sim)

    at_rest, turned = asyncio.run(_with_app(tmp_path, body, mag_file=str(tmp_path / "mag.json")))
    assert at_rest[2].yaw_known and at_rest[1] < math.radians(5.0), math.degrees(at_rest[1])
    assert abs(turned[3].yaw_rad) > 1.0  # the plant really turned
    assert turned[1] < math.radians(5.0), math.degrees(turned[1])
    assert turned[0] < 0.5


def test_gps_navigator_drives_on_the_fused_pose(tmp_path):
    """The navigator switches to app.pose once its heading is known and reaches the end of the walk."""
    from robot_app.nav.gps import GpsNavigator

    walk = np.array([(0.0, 0.0), (3.0, 0.0), (6.0, 0.0), (8.0, 2.0), (8.0, 5.0)])
    lat, lon = enu_to_latlon(walk, anchor=ORIGIN)

    async def body(app, sim):
        nav = GpsNavigator(app.sensors, app.commands, nav_options(app.config), max_v_mps=1.5, lookahead_m=1.5,
                           goal_radius_m=0.6, timeout_s=40.0)
        report = await nav.follow(lat, lon)
        return report, nav.pose_source, sim.plant.state()

    report, source, st = asyncio.run(_with_app(tmp_path, body))
    assert report.outcome == "reached" and source == "estimator"
    assert math.hypot(st.x_m - 8.0, st.y_m - 5.0) < 1.0


def test_without_the_estimator_the_navigator_uses_its_own_pose(tmp_path):
    from robot_app.nav.gps import GpsNavigator

    lat, lon = enu_to_latlon(np.array([(0.0, 0.0), (3.0, 0.0), (5.0, 0.0)]), anchor=ORIGIN)

    async def body(app, sim):
        assert "estimation" not in app.supervisor.states and app.pose is None
        nav = GpsNavigator(app.sensors, app.commands, nav_options(app.config), max_v_mps=1.5, lookahead_m=1.5,
                           goal_radius_m=0.6, timeout_s=30.0)
        return await nav.follow(lat, lon), nav.pose_source

    report, source = asyncio.run(_with_app(tmp_path, body, enabled=False))
    assert report.outcome == "reached" and source == "gps+gyro"


def test_bench_estimation_beats_raw_gps(capsys):
    """The bench's figures are computed and the fusion is closer to the truth than the raw GPS fixes."""
    import json

    from robot_app.cli import main

    assert main(["bench", "estimation", "--duration", "30", "--gps-sigma-m", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["readings"] > 3000 and res["us_per_reading"] > 0
    assert res["position_rms_m"] < 0.7 * res["raw_gps_rms_m"]
    assert res["yaw_rms_deg"] < 15.0


def test_estimator_ignores_broken_readings_and_keeps_tracking():
    """NaN gyro/accelerometer/wheel values and NaN or polar GPS fixes are skipped, not folded in."""
    from firmware_bridge.readings import GpsFix, ImuReading, WheelFeedback, WheelState
    from robot_app.cli.imu_cmd import synthetic_drive
    from robot_app.sensing.state_estimation import StateEstimator

    readings, truth, _ = synthetic_drive(duration_s=30.0, gps_sigma_m=1.0, seed=3, origin=ORIGIN)
    nan = float("nan")
    bad_wheel = WheelState(nan, 0.0, 0.0, 0.0, 30.0, 30.0, False)
    broken = [ImuReading(0.0, "imu_link", (nan, 0.0, 0.0), (0.0, 0.0, 9.8)), ImuReading(0.0, "imu_link"),
              WheelFeedback(0.0, bad_wheel, bad_wheel, 35.0, 40.0, 1, 1),
              GpsFix(0.0, nan, 13.0, None, 1, 5, 1.0, (1.0, 1.0, 4.0), 1, None, None),
              GpsFix(0.0, 89.0, 13.0, None, 1, 5, 1.0, (nan, 1.0, 4.0), 1, None, None)]
    cfg = Config()
    est = StateEstimator(cfg.estimation, cfg.robot)
    for i, r in enumerate(readings):
        if i % 500 == 250:
            for b in broken:
                est.on_reading(dataclasses.replace(b, t_mono_s=r.t_mono_s))
        est.on_reading(r)
    pose = est.pose()
    e0, n0 = utm.from_latlon(*ORIGIN)[:2]
    _, tx, ty, tyaw = truth[-1]
    assert pose.yaw_known and np.all(np.isfinite(pose.covariance))
    assert math.hypot(pose.x_m - e0 - tx, pose.y_m - n0 - ty) < 1.5
    assert abs(wrap_angle(pose.yaw_rad - tyaw)) < math.radians(10.0)


def test_estimator_reads_the_imu_and_gps_only_from_the_configured_sources():
    from firmware_bridge.factory import drivers_from_config
    from firmware_bridge.readings import GpsFix, ImuReading, WheelFeedback
    from robot_app.sensing.state_estimation import EstimatorComponent

    base = Config()
    for imu_src, gps_src in (("mcu", "mcu"), ("mip", "serial"), ("none", "none")):
        cfg = dataclasses.replace(base, serial=dataclasses.replace(base.serial, imu_source=imu_src,
                                                                   gps_source=gps_src))
        drivers = drivers_from_config(cfg.serial, cfg.robot)
        got = {name: kinds for (drv, kinds) in EstimatorComponent(cfg, drivers, None)._sources(
               ImuReading, WheelFeedback, GpsFix) for name, d in drivers.items() if d is drv}
        imu_from = [n for n, k in got.items() if ImuReading in k]
        gps_from = [n for n, k in got.items() if GpsFix in k]
        assert WheelFeedback in got["base"]
        assert imu_from == ({"mcu": ["base"], "mip": ["imu"], "none": []}[imu_src])
        assert gps_from == ({"mcu": ["base"], "serial": ["gps"], "none": []}[gps_src])
