"""Node images of a walk in the simulated world, as a map holds them.

The walk itself is driven by :func:`robot_app.sim.eval_drive.drive_walk` (the robot's navigation policy
on the simulation clock). :func:`route_nodes` makes a walk's node images the way a map holds them: one frame every
``spacing_m`` of a centreline drive of a route (the map builder's default node spacing is 3 m).
"""

from __future__ import annotations

import numpy as np

from robot_app.sim.explore import route_points
from robot_app.sim.render import WorldRenderer
from robot_app.sim.vnm_data import RoutePlan, simulate_drive
from robot_app.sim.world import World, load_world

__all__ = ["route_nodes"]


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
