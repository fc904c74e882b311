"""Scripted exploration on a simulation clock: drive a route in a world and write a traversal log.

The simulation clock is a plain counter (no sleeping), so a drive runs as fast as the renderer allows;
:func:`record_exploration` is what the demo and the tests use to produce logs with rendered frames that
the map builder reads like a real recording. The controller is pure pursuit along the route polyline
(Coulter, "Implementation of the Pure Pursuit Path Tracking Algorithm", CMU-RI-TR-92-01, 1992:
curvature = 2 sin(alpha) / lookahead), turned into wheel speeds by the Jackal kinematics.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.tlog import TraversalLogWriter
from firmware_bridge.kinematics import twist_to_wheels
from robot_app.mapping.synthetic_logs import enu_to_latlon
from robot_app.sim.plant import GpsView, WorldPlant
from robot_app.sim.render import WorldRenderer
from robot_app.sim.world import World, load_world

__all__ = ["ExplorationReport", "record_exploration", "route_points"]

log = logging.getLogger(__name__)

PHYSICS_HZ = 50.0  # the MCU simulator's rate (firmware_bridge.sim.mcu)
GPS_HZ = 5.0
IMU_HZ = 20.0


@dataclass
class ExplorationReport:
    """What a recorded exploration did: frames written, sim time (s), distance (m), collisions, etc."""

    frames: int = 0
    gps_fixes: int = 0
    sim_time_s: float = 0.0
    distance_m: float = 0.0
    reached_end: bool = False
    collisions: list = field(default_factory=list)
    wall_s: float = 0.0
    true_xy_m: np.ndarray | None = None  # (frames, 2) true position of each frame, ENU

    @property
    def speedup(self) -> float:
        """Sim time / wall time: how much faster than real time the drive was recorded."""
        return self.sim_time_s / self.wall_s if self.wall_s > 0 else float("inf")


def route_points(world: World, route) -> np.ndarray:
    """A route as (N, 2) float64 metres ENU: a path name, a list of path names (joined) or points.

    Raises
    ------
    ValueError
        If a path name is unknown or the route has fewer than 2 distinct points.
    """
    names = [route] if isinstance(route, str) else (list(route) if route and isinstance(route[0], str) else None)
    if names is not None:
        pts = []
        for n in names:
            try:
                pts.extend(world.path(n).points)
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
    else:
        pts = [tuple(map(float, p)) for p in route]
    arr = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
    keep = np.concatenate([[True], np.linalg.norm(np.diff(arr, axis=0), axis=1) > 1e-6])
    arr = arr[keep]
    if len(arr) < 2:
        raise ValueError(f"route {route!r}: needs at least 2 distinct points")
    return arr


class _PurePursuit:
    def __init__(self, pts: np.ndarray, lookahead_m: float):
        self.pts, self.L = pts, lookahead_m
        seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
        self.s = np.concatenate([[0.0], np.cumsum(seg)])
        self.progress = 0.0

    def _point_at(self, s: float) -> np.ndarray:
        s = min(max(s, 0.0), self.s[-1])
        return np.array([np.interp(s, self.s, self.pts[:, 0]), np.interp(s, self.s, self.pts[:, 1])])

    def curvature(self, x: float, y: float, yaw: float) -> tuple[float, float]:
        """(curvature 1/m, heading error rad) towards the lookahead point."""
        # progress = arc length of the nearest route point at most one lookahead past the last progress
        # (never backwards, never across a U-turn)
        window = np.linspace(self.progress, min(self.progress + self.L, self.s[-1]), 40)
        cand = np.stack([np.interp(window, self.s, self.pts[:, 0]), np.interp(window, self.s, self.pts[:, 1])], 1)
        self.progress = float(window[np.argmin(np.hypot(cand[:, 0] - x, cand[:, 1] - y))])
        tx, ty = self._point_at(self.progress + self.L)
        alpha = math.atan2(ty - y, tx - x) - yaw
        alpha = math.atan2(math.sin(alpha), math.cos(alpha))
        return 2.0 * math.sin(alpha) / self.L, alpha

    def remaining_m(self) -> float:
        return float(self.s[-1] - self.progress)


def record_exploration(world: World | str | Path, route, out_log: str | Path, *, rate_hz: float = 4.0,
                       speed_mps: float = 1.0, seed: int = 0, width: int = 160, height: int = 120,
                       hfov_deg: float = 90.0, gps_noise_m: float = 1.0, jpeg_quality: int = 85,
                       t0_s: float = 0.0, max_time_s: float | None = None,
                       robot_radius_m: float = 0.33) -> ExplorationReport:
    """Drive ``route`` in ``world`` on the simulation clock and write a traversal log to ``out_log``.

    The robot starts at the route's first point facing the second and follows the polyline with pure
    pursuit at ``speed_mps`` (slower in sharp turns). Written: frames (rendered first-person JPEGs,
    ``width`` x ``height``) and odometry + commanded velocity at ``rate_hz``; GPS fixes at 5 Hz from
    :class:`~robot_app.sim.plant.GpsView` (quality 0 in the world's dropout zones); IMU at 20 Hz
    (body acceleration, yaw rate; REP-103); a ``collision`` event if the robot touches an obstacle,
    which ends the drive. Times ``t_s`` are sim seconds from ``t0_s``.

    Parameters
    ----------
    world : World, str or Path
        A loaded world, a shipped world's name or a world file.
    route : str, list of str, or (N, 2) array-like
        A path name of the world, several joined, or waypoints in metres ENU.
    out_log : str or Path
        Log folder (created; an existing log is continued).

    Returns
    -------
    ExplorationReport

    Raises
    ------
    ValueError
        Bad route, a route start inside an obstacle, or non-positive rates/speeds.
    robot_app.sim.world.WorldError
        If a world name/file does not load.
    """
    if rate_hz <= 0 or speed_mps <= 0 or rate_hz > PHYSICS_HZ:
        raise ValueError(f"record_exploration: rate_hz {rate_hz} must be in (0, {PHYSICS_HZ:g}] and speed_mps "
                         f"{speed_mps} > 0")
    w = world if isinstance(world, World) else load_world(world)
    pts = route_points(w, route)
    start_yaw = math.atan2(pts[1, 1] - pts[0, 1], pts[1, 0] - pts[0, 0])
    plant = WorldPlant(w, start=(pts[0, 0], pts[0, 1], start_yaw), robot_radius_m=robot_radius_m)
    gps = GpsView(plant, noise_m=gps_noise_m, seed=seed)
    pp = _PurePursuit(pts, lookahead_m=max(1.5, 1.5 * speed_mps))
    length = float(pp.s[-1])
    max_time_s = max_time_s if max_time_s is not None else 2.0 * length / speed_mps + 20.0
    rep = ExplorationReport()
    xy = []
    dt = 1.0 / PHYSICS_HZ
    every = {"frame": 1.0 / rate_hz, "gps": 1.0 / GPS_HZ, "imu": 1.0 / IMU_HZ}
    nxt = dict.fromkeys(every, 0.0)
    wall0 = time.perf_counter()
    meta = {"source": "simulated", "world": w.name, "world_file": w.source, "frame_rate_hz": rate_hz,
            "seed": seed, "anchor_latlon": list(w.anchor_latlon), "image_size": [width, height]}
    with WorldRenderer(w, width=width, height=height, hfov_deg=hfov_deg, seed=seed) as ren, \
            TraversalLogWriter(out_log, metadata=meta) as log_w:
        v_cmd = w_cmd = 0.0
        k = 0
        while True:
            t = k * dt
            st = plant.state()
            if t + 1e-9 >= nxt["frame"]:
                nxt["frame"] += every["frame"]
                log_w.add_frame(t0_s + t, ren.render_jpeg(st.x_m, st.y_m, st.yaw_rad, index=rep.frames,
                                                          quality=jpeg_quality))
                log_w.add_odom(t0_s + t, st.x_m, st.y_m, st.yaw_rad, st.v_mps, st.omega_radps)
                log_w.add_cmd(t0_s + t, v_cmd, w_cmd)
                xy.append((st.x_m, st.y_m))
                rep.frames += 1
            if t + 1e-9 >= nxt["gps"]:
                nxt["gps"] += every["gps"]
                _write_gps(log_w, w, gps, st, t0_s + t)
                rep.gps_fixes += 1
            if t + 1e-9 >= nxt["imu"]:
                nxt["imu"] += every["imu"]
                log_w.add_imu(t0_s + t, (st.accel_mps2[0], st.accel_mps2[1], 9.80665), (0.0, 0.0, st.omega_radps))
            if plant.collisions:
                c = plant.collisions[-1]
                log_w.add_event(t0_s + t, "collision", f"{c.name} ({c.category}) at ({c.x_m:.2f}, {c.y_m:.2f}) m")
                rep.collisions = list(plant.collisions)
                break
            if pp.remaining_m() < 0.3 and math.hypot(st.x_m - pts[-1, 0], st.y_m - pts[-1, 1]) < 0.6:
                rep.reached_end = True
                break
            if t >= max_time_s:
                log.warning("exploration: time limit %.0f s reached %.1f m before the route's end", max_time_s,
                            pp.remaining_m())
                break
            kappa, alpha = pp.curvature(st.x_m, st.y_m, st.yaw_rad)
            if abs(alpha) < math.pi / 2:
                v_cmd = speed_mps * max(0.2, math.cos(alpha))
                w_cmd = float(np.clip(kappa * max(v_cmd, 0.3 * speed_mps), -2.0, 2.0))
            else:  # the route turns back (or starts behind): turn in place towards it
                v_cmd, w_cmd = 0.0, 1.0 if alpha >= 0 else -1.0
            left, right = twist_to_wheels(v_cmd, w_cmd, wheel_radius_m=plant.r, wheel_separation_m=plant.ws)
            x0, y0 = st.x_m, st.y_m
            plant.step(left, right, dt)
            after = plant.state()
            rep.distance_m += math.hypot(after.x_m - x0, after.y_m - y0)
            k += 1
        rep.sim_time_s = k * dt
    rep.wall_s = time.perf_counter() - wall0
    rep.true_xy_m = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    log.info("exploration of %s: %d frames, %.1f m, %.1f s sim in %.1f s wall", w.name, rep.frames,
             rep.distance_m, rep.sim_time_s, rep.wall_s)
    return rep


def _write_gps(log_w: TraversalLogWriter, world: World, gps: GpsView, st, t_s: float) -> None:
    if world.in_gps_dropout(st.x_m, st.y_m):
        gps.error_m()  # the error process keeps running while there is no fix
        log_w.add_gps(t_s, None, None, quality=0)
        return
    g = gps.state()
    lat, lon = enu_to_latlon(np.array([[g.x_m, g.y_m]]), anchor=world.anchor_latlon)
    log_w.add_gps(t_s, float(lat[0]), float(lon[0]), quality=1, hacc_m=max(gps.noise_m, 0.5))
