"""Ground-truth node sets for ``robot-app eval sim``: which map nodes count as "at" a landmark.

A map node counts for a world building or object when the robot, at the node's TRUE pose (from the
simulation, not the noisy GPS), is

- near it: within ``object_near_m`` of an object, or ``building_near_m`` of a building's footprint; or
- looking at it: some point of it (an object's position; a building's corners, edge midpoints and
  centre) lies inside the camera's horizontal field of view, within ``object_view_m`` /
  ``building_view_m``, and no other building stands on the line of sight.

These rules play the part of LM-Nav's human labels (Shah et al., CoRL 2022, Sec. 5: a plan succeeds
when it visits each landmark, in order, at a node where the landmark is). The distances are set for
the sim camera (90 degree field of view, 160 x 120 frames, focal length 80 px): an object counts from
``object_view_per_size`` times its largest dimension (times its ``scale``; about 10 px on the frame), at least
``object_view_m`` and at most ``object_view_max_m`` (a hydrant from 15 m, a stop sign from 20 m, a
truck, trailer, tree or lamp from 30 m). Node true poses come from the exploration log's odometry, which the simulated
recorder writes from the world plant's true state (:func:`robot_app.sim.explore.record_exploration`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from robot_app.sim.world import CATALOGUE, World

__all__ = ["object_size_m", "TruthParams", "node_true_poses", "landmark_nodes", "truth_node_sets",
           "footprint_distance"]


@dataclass(frozen=True)
class TruthParams:
    """Distances (m) and field of view (degrees) of the ground-truth rules (module docstring)."""

    object_near_m: float = 7.0
    object_view_m: float = 15.0
    object_view_per_size: float = 8.0
    object_view_max_m: float = 30.0
    building_near_m: float = 10.0
    building_view_m: float = 30.0
    hfov_deg: float = 90.0
    sight_step_m: float = 1.0


def object_size_m(category: str) -> float:
    """Largest dimension (m) of a catalogue object: its height or its horizontal extent (parts' boxes,
    cylinders and spheres from :data:`robot_app.sim.world.CATALOGUE`).

    Raises
    ------
    KeyError
        For a category that is not in the catalogue.
    """
    height = horizontal = 0.0
    for part in CATALOGUE[category].parts:
        x, y, z = part.offset
        if part.shape == "box":
            sx, sy, sz = part.size
            height = max(height, z + sz / 2)
            horizontal = max(horizontal, 2 * (abs(x) + sx / 2), 2 * (abs(y) + sy / 2))
        else:
            r = part.size[0]
            h = part.size[1] if part.shape == "cylinder" else 2 * r
            height = max(height, z + h / 2)
            horizontal = max(horizontal, 2 * (math.hypot(x, y) + r))
    return float(max(height, horizontal))


def node_true_poses(node_t_s: np.ndarray, odom: dict) -> tuple[np.ndarray, np.ndarray]:
    """True (x, y) m ENU and yaw (rad) of map nodes, interpolated from a sim log's odometry at the nodes' times.

    Parameters
    ----------
    node_t_s : (N,) float64, node timestamps (the log's time base, seconds).
    odom : the log's odometry arrays ``t_s``, ``x_m``, ``y_m``, ``yaw_rad`` (:class:`core.tlog.TraversalLog`).

    Returns
    -------
    xy : (N, 2) float64 metres ENU; yaw : (N,) float64 radians CCW from east.

    Raises
    ------
    ValueError
        If the odometry is empty or a node lies outside its time span by more than 1 s.
    """
    t = np.asarray(odom["t_s"], dtype=np.float64)
    nt = np.asarray(node_t_s, dtype=np.float64)
    if t.size == 0:
        raise ValueError("the exploration log has no odometry: cannot place the map's nodes in the world")
    if nt.size and (nt.min() < t[0] - 1.0 or nt.max() > t[-1] + 1.0):
        raise ValueError(f"map node times {nt.min():.1f}-{nt.max():.1f} s lie outside the log's odometry "
                         f"{t[0]:.1f}-{t[-1]:.1f} s: the map was not built from this exploration")
    x = np.interp(nt, t, odom["x_m"])
    y = np.interp(nt, t, odom["y_m"])
    yaw = np.interp(nt, t, np.unwrap(np.asarray(odom["yaw_rad"], dtype=np.float64)))
    return np.stack([x, y], axis=1), np.arctan2(np.sin(yaw), np.cos(yaw))


def _building_points(b) -> np.ndarray:
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    hx, hy = b.size_m[0] / 2, b.size_m[1] / 2
    local = [(u, v) for u in (-hx, 0.0, hx) for v in (-hy, 0.0, hy)]
    return np.array([(b.center[0] + c * u - s * v, b.center[1] + s * u + c * v) for u, v in local])


def _inside(b, pts: np.ndarray) -> np.ndarray:
    """(...,) bool: points (..., 2) inside building ``b``'s footprint."""
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    dx, dy = pts[..., 0] - b.center[0], pts[..., 1] - b.center[1]
    u, v = c * dx + s * dy, -s * dx + c * dy
    return (np.abs(u) <= b.size_m[0] / 2) & (np.abs(v) <= b.size_m[1] / 2)


def footprint_distance(b, xy: np.ndarray) -> np.ndarray:
    """(N,) float: distance (m) from each point of ``xy`` (N, 2, world frame) to building ``b``'s footprint
    rectangle (0 inside it): what "within ``building_view_m`` of its outline" measures."""
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    dx, dy = xy[:, 0] - b.center[0], xy[:, 1] - b.center[1]
    u = np.abs(c * dx + s * dy) - b.size_m[0] / 2
    v = np.abs(-s * dx + c * dy) - b.size_m[1] / 2
    return np.hypot(np.maximum(u, 0.0), np.maximum(v, 0.0))


def _line_of_sight(world: World, xy: np.ndarray, pts: np.ndarray, *, skip: str, step_m: float) -> np.ndarray:
    """(N, P) bool: the segment from node n to point p crosses no building other than ``skip``."""
    d = np.linalg.norm(pts[None, :, :] - xy[:, None, :], axis=2)
    k = max(2, int(math.ceil(float(d.max(initial=0.0)) / step_m)) + 1)
    f = np.linspace(0.0, 1.0, k)[1:-1]  # interior samples only
    samples = xy[:, None, None, :] + (pts[None, :, None, :] - xy[:, None, None, :]) * f[None, None, :, None]
    clear = np.ones(d.shape, dtype=bool)
    for b in world.buildings:
        if b.name != skip:
            clear &= ~_inside(b, samples).any(axis=2)
    return clear


def landmark_nodes(world: World, name: str, xy: np.ndarray, yaw: np.ndarray, *,
                   params: TruthParams = TruthParams()) -> np.ndarray:
    """(N,) bool: the nodes (true poses ``xy`` (N, 2) m, ``yaw`` (N,) rad) that count as at ``name``.

    Raises
    ------
    KeyError
        If ``name`` is neither a building nor an object of the world.
    """
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    yaw = np.asarray(yaw, dtype=np.float64).ravel()
    building = next((b for b in world.buildings if b.name == name), None)
    if building is not None:
        near = footprint_distance(building, xy) <= params.building_near_m
        pts, view_m = _building_points(building), params.building_view_m
    else:
        obj = next((o for o in world.objects if o.name == name), None)
        if obj is None:
            raise KeyError(f"world {world.name!r} has no building or object {name!r}")
        pts = np.array([obj.at], dtype=np.float64)
        view_m = min(params.object_view_max_m,
                     max(params.object_view_m, params.object_view_per_size * object_size_m(obj.category) * obj.scale))
        near = np.hypot(xy[:, 0] - obj.at[0], xy[:, 1] - obj.at[1]) <= params.object_near_m
    rel = pts[None, :, :] - xy[:, None, :]
    dist = np.linalg.norm(rel, axis=2)
    bearing = np.arctan2(rel[..., 1], rel[..., 0]) - yaw[:, None]
    bearing = np.arctan2(np.sin(bearing), np.cos(bearing))
    in_view = (np.abs(bearing) <= math.radians(params.hfov_deg) / 2) & (dist <= view_m)
    if building is not None:  # the range of a building counts from its footprint, not from its points
        in_view = (np.abs(bearing) <= math.radians(params.hfov_deg) / 2) & (
            footprint_distance(building, xy)[:, None] <= view_m)
    if in_view.any():
        in_view &= _line_of_sight(world, xy, pts, skip=name, step_m=params.sight_step_m)
    return near | in_view.any(axis=1)


def truth_node_sets(world: World, targets: Sequence[Sequence[str]], xy: np.ndarray, yaw: np.ndarray, *,
                    params: TruthParams = TruthParams()) -> list[np.ndarray]:
    """For each landmark (a list of acceptable world names), the sorted (M,) int64 node indices at it."""
    out = []
    for names in targets:
        mask = np.zeros(np.asarray(xy).reshape(-1, 2).shape[0], dtype=bool)
        for n in names:
            mask |= landmark_nodes(world, n, xy, yaw, params=params)
        out.append(np.flatnonzero(mask).astype(np.int64))
    return out
