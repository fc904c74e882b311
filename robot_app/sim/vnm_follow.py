"""Follow a walk of node images with a VNM on the simulation clock (the VnmNavigator loop, stepped).

:func:`follow_walk` runs the loop of :class:`robot_app.vnm_navigator.VnmNavigator` (GNM / ViNT
deployment, DESIGN.md "VNM contract") without asyncio, serial ports or wall-clock time: at the VNM's
frame rate it renders the camera frame at the robot's true pose (:class:`WorldRenderer`), pushes it
into the context queue, scores the walk's node images within ``window`` walk indices of the last
localisation in one :meth:`VnmModel.predict` call, localises on the smallest predicted distance,
advances to the next node when that distance is below ``close_steps``, turns waypoint
``waypoint_index`` of the subgoal (metres = normalised * max_v / frame rate) into (v, omega) with
:func:`core.control.waypoint_to_velocity`, and holds that command for one period while
:class:`WorldPlant` integrates the Jackal kinematics at ``physics_hz`` and checks collisions.

:func:`route_nodes` makes a walk's node images the way a map holds them: one frame every
``spacing_m`` of a centreline drive of a route (the map builder's default node spacing is 3 m).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from core.control import waypoint_to_velocity
from firmware_bridge.kinematics import twist_to_wheels
from robot_app.sim.plant import WorldPlant
from robot_app.sim.world import World, load_world

__all__ = ["FollowResult", "follow_walk", "route_nodes"]

log = logging.getLogger(__name__)


@dataclass
class FollowResult:
    """What a simulated VNM walk did.

    Attributes
    ----------
    outcome : str
        ``reached`` (localised on the last node; see ``goal_close``), ``collision``, ``lost``
        (every distance above ``lost_steps`` for ``max_lost_steps`` steps) or ``stuck`` (timeout).
    trajectory_xy_m : (N, 2) float64
        True robot position (ENU metres) at each control step (the VNM frame rate).
    collisions : list of robot_app.sim.plant.Collision
    node_index : int
        Last localisation (walk index).
    end_error_m : float
        True distance from the final position to the last node's position (NaN without node poses).
    sim_time_s, wall_s : float
        Simulated and wall-clock duration.
    trace : list of (t_s, node_index, subgoal_index, best_dist_steps, v_mps, omega_radps)
    """

    outcome: str
    trajectory_xy_m: np.ndarray
    collisions: list
    node_index: int
    end_error_m: float
    sim_time_s: float
    wall_s: float
    trace: list = field(default_factory=list)

    @property
    def reached(self) -> bool:
        return self.outcome == "reached"

    @property
    def distance_m(self) -> float:
        """Length of the driven trajectory, m."""
        return float(np.linalg.norm(np.diff(self.trajectory_xy_m, axis=0), axis=1).sum()) if len(self.trajectory_xy_m) > 1 else 0.0


def route_nodes(world: World | str, route, *, spacing_m: float = 3.0, seed: int = 0, width: int = 160,
                height: int = 120, hfov_deg: float = 90.0, camera_height_m: float = 0.5,
                speed_mps: float = 1.0) -> tuple[list, np.ndarray]:
    """Node images along ``route``: a centreline pure-pursuit drive, one frame every ``spacing_m``.

    Parameters
    ----------
    world : World or str
    route : str, list of str, or (N, 2) array-like
        As :func:`robot_app.sim.explore.route_points` (path names or waypoints, metres ENU).

    Returns
    -------
    images : list of (height, width, 3) uint8 RGB
    poses : (K, 3) float64, x_m, y_m, yaw_rad of each node (ENU)

    Raises
    ------
    ValueError
        A bad route, or the drive collided.
    """
    from robot_app.sim.explore import route_points
    from robot_app.sim.render import WorldRenderer
    from robot_app.sim.vnm_data import RoutePlan, simulate_drive

    w = world if isinstance(world, World) else load_world(world)
    if isinstance(route, np.ndarray):  # route_points takes names or a list of points
        route = [tuple(map(float, p)) for p in route]
    pts = route_points(w, route)
    plan = RoutePlan(pts, np.zeros(len(pts)))
    with WorldRenderer(w, width=width, height=height, hfov_deg=hfov_deg, camera_height_m=camera_height_m,
                       seed=seed) as ren:
        d = simulate_drive(w, plan, ren, np.random.default_rng(seed), speed_mps=speed_mps, max_offset_m=0.0,
                           yaw_error_rad=0.0, disturb_prob=0.0, resize=False, start_wait=False)
    if d.collided:
        raise ValueError(f"route {route!r}: the centreline drive collided")
    travel = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(d.pose[:, :2], axis=0).T))])
    pick = [0]
    for k in range(1, len(travel)):
        if travel[k] - travel[pick[-1]] >= spacing_m:
            pick.append(k)
    if len(travel) - 1 != pick[-1]:
        pick.append(len(travel) - 1)
    return [d.frames[k] for k in pick], d.pose[pick].copy()


def follow_walk(world: World | str, vnm, node_images: Sequence[np.ndarray], *, start_pose: tuple | None = None,
                node_poses: np.ndarray | None = None, max_v_mps: float = 0.4, max_omega_radps: float = 4.0,
                window: int = 4, close_steps: float = 3.0, lost_steps: float | None = None, waypoint_index: int = 2,
                max_lost_steps: int = 12, timeout_s: float | None = None, physics_hz: float = 50.0, seed: int = 0,
                width: int = 160, height: int = 120, hfov_deg: float = 90.0, camera_height_m: float = 0.5,
                image_noise: float = 2.0, robot_radius_m: float = 0.33, goal_close: bool = False,
                recover_window: int = 0, goal_confirm_steps: int = 6) -> FollowResult:
    """Drive a walk given by its node images with ``vnm`` in ``world`` on the simulation clock.

    Parameters
    ----------
    world : World or str
        The world (or a shipped world's name / a world file).
    vnm : models.vnm.VnmModel
        The VNM (:func:`models.vnm.open_vnm`).
    node_images : sequence of (H, W, 3) uint8 RGB
        The walk's node images in walk order (any size; the VNM resizes them).
    start_pose : (x_m, y_m, yaw_rad), optional
        Where the robot starts; default the first node's pose (``node_poses`` is then required).
    node_poses : (K, 3) float, optional
        Node poses, only used for the default start and ``end_error_m``.
    max_v_mps, max_omega_radps : float
        Speed limits; ``max_v_mps`` also scales the waypoints to metres (GNM deployment convention;
        [models] vnm_max_v_mps, [robot] max_omega_radps defaults).
    window, close_steps, lost_steps, waypoint_index, max_lost_steps, goal_close, recover_window,
    goal_confirm_steps
        As :class:`robot_app.walk_following.WalkRules` (the loop steps its
        :class:`~robot_app.walk_following.WalkTracker`; ``lost_steps`` default: the trained range's top;
        the goal is reached when the robot localises on the last node, GNM's deployment rule, and with
        ``goal_close`` also closer than ``close_steps``).
    timeout_s : float, optional
        Simulated time limit; default 3 x (node count x 3 m) / ``max_v_mps`` + 30 s.
    physics_hz : float
        Plant integration rate.
    seed, width, height, hfov_deg, camera_height_m, image_noise
        The simulated camera ([sim] and [camera] settings).
    robot_radius_m : float
        Collision radius.

    Returns
    -------
    FollowResult

    Raises
    ------
    ValueError
        No node images, no start pose, or a start pose inside an obstacle.
    """
    from robot_app.sim.render import WorldRenderer

    w = world if isinstance(world, World) else load_world(world)
    if len(node_images) == 0:
        raise ValueError("follow_walk: no node images")
    if start_pose is None:
        if node_poses is None:
            raise ValueError("follow_walk: give start_pose or node_poses")
        start_pose = tuple(float(v) for v in node_poses[0])
    from robot_app.walk_following import WalkRules, WalkTracker

    goals = vnm.preprocess_many(list(node_images))
    n = len(node_images)
    rules = WalkRules(window=window, close_steps=close_steps, lost_steps=lost_steps, max_lost_steps=max_lost_steps,
                      goal_close=goal_close, recover_window=recover_window,
                      goal_confirm_steps=goal_confirm_steps)
    tracker = WalkTracker(n, rules, lost_steps=vnm.dist_range_steps[1])
    wi = min(waypoint_index, vnm.len_traj_pred - 1)
    period = 1.0 / vnm.frame_rate_hz
    per = max(1, int(round(physics_hz * period)))
    timeout_s = timeout_s if timeout_s is not None else 3.0 * n * 3.0 / max_v_mps + 30.0
    plant = WorldPlant(w, start=start_pose, robot_radius_m=robot_radius_m)
    ctx = vnm.new_context()
    k = 0
    outcome, xy, trace = "stuck", [], []
    wall0 = time.perf_counter()
    with WorldRenderer(w, width=width, height=height, hfov_deg=hfov_deg, camera_height_m=camera_height_m,
                       seed=seed, noise_std=image_noise) as ren:
        while k * period <= timeout_s:
            st = plant.state()
            xy.append((st.x_m, st.y_m))
            ctx.push(ren.render(st.x_m, st.y_m, st.yaw_rad, index=k))
            v = omega = 0.0
            if ctx.ready:
                lo, hi = tracker.window()
                pred = vnm.predict(ctx.stack(), goals[lo:hi])
                dec = tracker.update(pred.dist_steps)
                if dec.status in ("lost", "reached"):
                    outcome = dec.status
                    break
                if dec.status == "drive":
                    wp = pred.waypoints_m(max_v_mps=max_v_mps, frame_rate_hz=vnm.frame_rate_hz)[dec.subgoal - lo, wi]
                    v, omega = waypoint_to_velocity(float(wp[0]), float(wp[1]), dt_s=period, max_v_mps=max_v_mps,
                                                    max_omega_radps=max_omega_radps)
                    trace.append((k * period, dec.index, dec.subgoal, dec.best_steps, v, omega))
            left, right = twist_to_wheels(v, omega, wheel_radius_m=plant.r, wheel_separation_m=plant.ws)
            for _ in range(per):
                plant.step(left, right, 1.0 / physics_hz)
                if plant.collisions:
                    break
            k += 1
            if plant.collisions:
                st = plant.state()
                xy.append((st.x_m, st.y_m))
                outcome = "collision"
                break
    traj = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    end_err = float(np.hypot(*(traj[-1] - np.asarray(node_poses)[-1, :2]))) if node_poses is not None else math.nan
    res = FollowResult(outcome, traj, list(plant.collisions), tracker.index, end_err, k * period, time.perf_counter() - wall0,
                       trace)
    log.info("sim VNM walk: %s at node %d/%d after %.1f s sim (%.1f m driven, %.1f s wall)", outcome, tracker.index, n - 1,
             res.sim_time_s, res.distance_m, res.wall_s)
    return res
