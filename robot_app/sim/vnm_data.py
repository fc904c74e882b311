"""Simulated drives for the sim VNM: routes over a world's paths, drives with recoveries, labelled pairs.

:func:`path_network` and :func:`random_route` make routes over the world's path network (junctions
joined, no U-turns); :func:`simulate_drive` drives one on the simulation clock by pure pursuit
(:mod:`robot_app.sim.explore`) through :class:`WorldPlant` and renders a frame at the VNM rate (4 Hz);
:class:`DriveFrames` concatenates drives and labels (observation, goal) pairs with temporal distances
and future waypoints, as :mod:`robot_app.sim.train_vnm` (which describes the labels) trains on them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from firmware_bridge.kinematics import twist_to_wheels
from models.export.vnm_export import IMAGENET_MEAN, IMAGENET_STD
from robot_app.sim.explore import _PurePursuit
from robot_app.sim.plant import WorldPlant
from robot_app.sim.world import World

__all__ = ["Drive", "DriveFrames", "RoutePlan", "path_network", "random_route", "simulate_drive",
           "FRAME_RATE_HZ", "DIST_MAX_STEPS", "NEGATIVE_FACTOR", "NOMINAL_SPEED_MPS", "CONTEXT_SIZE", "wrap_rad",
           "LEN_TRAJ_PRED"]

log = logging.getLogger(__name__)

FRAME_RATE_HZ = 4.0        # GNM's frame rate (docs/design.md, "VNM contract")
DIST_MAX_STEPS = 20.0      # GNM's trained distance range 0-20 steps (gnm.yaml)
NEGATIVE_FACTOR = 1.5      # negatives are labelled 1.5 x the range
NOMINAL_SPEED_MPS = 1.0    # training drive speed: waypoint unit = NOMINAL_SPEED_MPS / FRAME_RATE_HZ metres
CONTEXT_SIZE, LEN_TRAJ_PRED = 5, 5
MATCH_ALONG_M, MATCH_LATERAL_M, MATCH_YAW_RAD = 0.4, 1.5, 0.35  # "the same place" (see DriveFrames.labels)
PHYSICS_HZ = 40.0
VNM_W, VNM_H = 85, 64


@dataclass
class Drive:
    """One simulated drive: frames at 4 Hz and the true pose of each.

    Attributes
    ----------
    frames : (N, H, W, 3) uint8 RGB (VNM input size unless rendered full size)
    pose : (N, 3) float64, x_m, y_m, yaw_rad (ENU, REP-103) at each frame
    disturbed : (N,) bool, a yaw-rate disturbance acted in the interval before the frame
    collided : bool, the drive ended at a collision
    """

    frames: np.ndarray
    pose: np.ndarray
    disturbed: np.ndarray
    collided: bool = False


@dataclass(frozen=True)
class RoutePlan:
    """A route for :func:`simulate_drive`: (N, 2) points m ENU and the path half-width margin at each (m)."""

    points: np.ndarray
    half_width_m: np.ndarray


def path_network(world: World, *, spacing_m: float = 1.0, join_m: float = 1.0) -> tuple:
    """The world's paths as a graph: (positions (V, 2) m, half widths (V,) m, adjacency list of sets).

    Paths are sampled every ``spacing_m`` at most; samples of different paths (or far apart along one
    path, e.g. a closed ring) within ``join_m`` become one vertex: a junction.
    """
    from scipy.spatial import cKDTree

    pts, half, pid, pos_in_path = [], [], [], []
    for k, path in enumerate(world.paths):
        p = np.asarray(path.points, dtype=np.float64)
        dens = [p[0]]
        for a, b in zip(p[:-1], p[1:]):
            n = max(1, int(math.ceil(np.linalg.norm(b - a) / spacing_m)))
            dens += [a + (b - a) * t / n for t in range(1, n + 1)]
        for j, q in enumerate(dens):
            pts.append(q)
            half.append(path.width_m / 2.0)
            pid.append(k)
            pos_in_path.append(j)
    pts = np.asarray(pts)
    parent = list(range(len(pts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in cKDTree(pts).query_pairs(join_m):
        if pid[a] != pid[b] or abs(pos_in_path[a] - pos_in_path[b]) > 3:
            parent[root(a)] = root(b)
    roots = sorted({root(i) for i in range(len(pts))})
    vid = {r: j for j, r in enumerate(roots)}
    members: list[list[int]] = [[] for _ in roots]
    for i in range(len(pts)):
        members[vid[root(i)]].append(i)
    pos = np.array([pts[m].mean(axis=0) for m in members])
    hw = np.array([min(half[i] for i in m) for m in members])
    adj: list[set] = [set() for _ in roots]
    for i in range(len(pts) - 1):
        if pid[i] == pid[i + 1]:
            a, b = vid[root(i)], vid[root(i + 1)]
            if a != b:
                adj[a].add(b)
                adj[b].add(a)
    return pos, hw, adj


def random_route(network: tuple, rng: np.random.Generator, *, length_m: float,
                 max_turn_rad: float = math.radians(100)) -> RoutePlan:
    """A random walk of about ``length_m`` over :func:`path_network` (no U-turns, random at junctions)."""
    pos, hw, adj = network
    for _ in range(100):
        cur = int(rng.integers(len(pos)))
        if not adj[cur]:
            continue
        prev, walk, total = None, [cur], 0.0
        while total < length_m:
            cand = [n for n in adj[cur] if n != prev]
            if prev is not None:
                h_in = pos[cur] - pos[prev]
                keep = []
                for n in cand:
                    h_out = pos[n] - pos[cur]
                    c = float(h_in @ h_out) / (np.linalg.norm(h_in) * np.linalg.norm(h_out) + 1e-12)
                    if math.acos(max(-1.0, min(1.0, c))) < max_turn_rad:
                        keep.append(n)
                cand = keep
            if not cand:
                break
            nxt = int(cand[int(rng.integers(len(cand)))])
            total += float(np.linalg.norm(pos[nxt] - pos[cur]))
            walk.append(nxt)
            prev, cur = cur, nxt
        if total >= min(length_m, 20.0):
            return RoutePlan(pos[walk], hw[walk])
    raise ValueError("random_route: the world's paths hold no walk of 20 m")


def _offset_route(plan: RoutePlan, rng: np.random.Generator, max_offset_m: float, clearance_m: float) -> np.ndarray:
    """The route shifted sideways by a smooth random offset (two sinusoids), kept inside the path."""
    p = plan.points
    if max_offset_m <= 0:
        return p.copy()
    d = np.gradient(p, axis=0)
    d /= np.linalg.norm(d, axis=1, keepdims=True) + 1e-12
    normal = np.stack([-d[:, 1], d[:, 0]], axis=1)
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p, axis=0), axis=1))])
    a1, a2 = rng.uniform(0.0, 1.0, 2) * max_offset_m * np.array([0.7, 0.3])
    l1, l2 = rng.uniform(15.0, 40.0), rng.uniform(6.0, 12.0)
    off = a1 * np.sin(2 * np.pi * s / l1 + rng.uniform(0, 2 * np.pi)) + a2 * np.sin(
        2 * np.pi * s / l2 + rng.uniform(0, 2 * np.pi)
    )
    lim = np.maximum(plan.half_width_m - clearance_m, 0.0)
    off = np.clip(off, -lim, lim)
    return p + normal * off[:, None]


def simulate_drive(world: World, plan: RoutePlan, renderer, rng: np.random.Generator, *,
                   speed_mps: float = NOMINAL_SPEED_MPS, max_offset_m: float = 0.8, yaw_error_rad: float = 0.3,
                   disturb_prob: float = 0.04, frame_index0: int = 0, resize: bool = True,
                   frame_rate_hz: float = FRAME_RATE_HZ, start_wait: bool = True) -> Drive:
    """Drive ``plan`` on the simulation clock and render a frame every 1 / ``frame_rate_hz`` s.

    Pure pursuit (lookahead 1.5 x speed, at least 1.5 m) follows the offset route through a
    :class:`WorldPlant` (Jackal kinematics, collisions); the drive starts on the route's first point
    with a heading error up to ``yaw_error_rad``; with probability ``disturb_prob`` per frame a
    yaw-rate disturbance of 0.5-0.9 rad/s acts for 0.5-1 s. With ``start_wait`` the robot first stands
    still for 0-9 frames, as a navigator does while its context queue fills. The drive ends at the route's end, at a
    collision or after twice the nominal time. ``renderer`` is a :class:`WorldRenderer`; frame ``j``
    uses noise index ``frame_index0 + j``. ``resize`` stores frames at the VNM input size (85 x 64,
    Pillow bicubic) instead of the render size.

    Raises
    ------
    ValueError
        If the start pose touches an obstacle.
    """
    from PIL import Image

    route = _offset_route(plan, rng, max_offset_m, clearance_m=0.45)
    start_yaw = math.atan2(route[1, 1] - route[0, 1], route[1, 0] - route[0, 0])
    start_yaw += float(np.clip(rng.normal(0.0, yaw_error_rad / 2), -yaw_error_rad, yaw_error_rad))
    plant = WorldPlant(world, start=(route[0, 0], route[0, 1], start_yaw))
    pp = _PurePursuit(route, lookahead_m=max(1.5, 1.5 * speed_mps))
    dt = 1.0 / PHYSICS_HZ
    per_frame = int(round(PHYSICS_HZ / frame_rate_hz))
    max_frames = int(2.0 * pp.s[-1] / speed_mps * frame_rate_hz) + 40
    frames, poses, dist_flags = [], [], []
    burst, burst_w, disturbed = 0, 0.0, False
    collided = False
    wait = int(rng.integers(0, 2 * CONTEXT_SIZE)) if start_wait else 0  # stands still first, as a navigator does
    for j in range(max_frames + wait):
        st = plant.state()
        img = renderer.render(st.x_m, st.y_m, st.yaw_rad, index=frame_index0 + j)
        if resize:
            img = np.asarray(Image.fromarray(img).resize((VNM_W, VNM_H), Image.BICUBIC))
        frames.append(img)
        poses.append((st.x_m, st.y_m, st.yaw_rad))
        dist_flags.append(disturbed)
        if pp.remaining_m() < 0.3 and math.hypot(st.x_m - route[-1, 0], st.y_m - route[-1, 1]) < 0.8:
            break
        if j < wait:
            plant.step(0.0, 0.0, 1.0 / frame_rate_hz)
            continue
        if burst == 0 and rng.random() < disturb_prob:
            burst = int(rng.integers(2, 5))
            burst_w = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 0.9))
        disturbed = burst > 0
        for _ in range(per_frame):
            s = plant.state()
            kappa, alpha = pp.curvature(s.x_m, s.y_m, s.yaw_rad)
            if abs(alpha) < math.pi / 2:
                v = speed_mps * max(0.2, math.cos(alpha))
                w = float(np.clip(kappa * max(v, 0.3 * speed_mps), -2.0, 2.0))
            else:
                v, w = 0.0, 1.0 if alpha >= 0 else -1.0
            if burst > 0:
                w += burst_w
            left, right = twist_to_wheels(v, w, wheel_radius_m=plant.r, wheel_separation_m=plant.ws)
            plant.step(left, right, dt)
            if plant.collisions:
                break
        burst = max(0, burst - 1)
        if plant.collisions:
            collided = True
            break
    return Drive(np.stack(frames), np.asarray(poses, dtype=np.float64), np.asarray(dist_flags, dtype=bool), collided)


def wrap_rad(a: np.ndarray) -> np.ndarray:
    """Angles (radians, any shape) wrapped to [-pi, pi)."""
    return (a + np.pi) % (2 * np.pi) - np.pi


class DriveFrames:
    """Drives concatenated, with context indices, waypoint labels and the distance labelling."""

    def __init__(self, drives: Sequence[Drive], *, dmax: float):
        from scipy.spatial import cKDTree

        self.frames = np.concatenate([d.frames for d in drives])
        self.pose = np.concatenate([d.pose for d in drives])
        disturbed = np.concatenate([d.disturbed for d in drives])
        lens = np.array([len(d.pose) for d in drives])
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        self.drive = np.repeat(np.arange(len(drives)), lens)
        self.start, self.end = np.repeat(starts, lens), np.repeat(starts + lens, lens)
        m = len(self.pose)
        self.dmax = dmax
        i = np.arange(m)
        self.ctx = np.maximum(i[:, None] - np.arange(CONTEXT_SIZE, -1, -1)[None], self.start[:, None])
        fut = i[:, None] + np.arange(1, LEN_TRAJ_PRED + 1)[None]
        self.wp_ok = (fut[:, -1] < self.end)
        fut = np.minimum(fut, m - 1)
        self.wp_ok &= ~disturbed[fut].any(axis=1)
        c, s = np.cos(self.pose[:, 2])[:, None], np.sin(self.pose[:, 2])[:, None]
        dx, dy = self.pose[fut, 0] - self.pose[i, 0, None], self.pose[fut, 1] - self.pose[i, 1, None]
        unit = NOMINAL_SPEED_MPS / FRAME_RATE_HZ
        dyaw = self.pose[fut, 2] - self.pose[i, 2, None]
        self.wp = np.stack([(c * dx + s * dy) / unit, (-s * dx + c * dy) / unit, np.cos(dyaw), np.sin(dyaw)],
                           axis=-1).astype(np.float32)
        self.xy_tree = cKDTree(self.pose[:, :2])
        # another drive's frame at (nearly) the same pose: cross-drive positives
        feat = np.concatenate(
            [self.pose[:, :2], 2.0 * np.stack([np.cos(self.pose[:, 2]), np.sin(self.pose[:, 2])], 1)], 1
        )
        # (a drive has ~4 frames per metre, so look far enough to get past the frame's own drive)
        _, nn = cKDTree(feat).query(feat, k=min(64, m))
        nn = nn.reshape(m, -1)
        ok = (self.drive[nn] != self.drive[:, None]) & self._matches(nn, np.repeat(i[:, None], nn.shape[1], 1))
        pick = np.argmax(ok * np.random.default_rng(m).random(ok.shape), axis=1)  # a random valid one
        self.partner = np.where(ok.any(1), nn[i, pick], -1)
        log.info("%d frames, %.0f %% with another drive's frame at the same pose", m, 100 * ok.any(1).mean())

    def __len__(self) -> int:
        return len(self.pose)

    def _along_lateral(self, a: np.ndarray, g: np.ndarray) -> tuple:
        """|offset| of frames ``a`` from frames ``g`` along and across g's heading, m."""
        dx, dy = self.pose[a, 0] - self.pose[g, 0], self.pose[a, 1] - self.pose[g, 1]
        c, s = np.cos(self.pose[g, 2]), np.sin(self.pose[g, 2])
        return np.abs(c * dx + s * dy), np.abs(-s * dx + c * dy)

    def _matches(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        along, lateral = self._along_lateral(a, g)
        return ((along < MATCH_ALONG_M) & (lateral < MATCH_LATERAL_M)
                & (np.abs(wrap_rad(self.pose[a, 2] - self.pose[g, 2])) < MATCH_YAW_RAD))

    def labels(self, a: np.ndarray, g: np.ndarray) -> tuple:
        """Distance labels (float32), loss weights and the positive mask of pairs (obs frame a, goal frame g)."""
        w = int(NEGATIVE_FACTOR * self.dmax) + 2
        cols = a[:, None] + np.arange(w + 1)[None]
        inside = cols < self.end[a][:, None]
        cols = np.minimum(cols, len(self) - 1)
        gg = np.broadcast_to(g[:, None], cols.shape)
        dp, _ = self._along_lateral(cols, gg)
        match = inside & self._matches(cols, gg)
        has = match.any(axis=1)
        first = np.argmax(match, axis=1)
        score = np.where(match & (np.arange(w + 1)[None] <= first[:, None] + 3), dp, np.inf)
        k = np.argmin(score, axis=1)
        pos = has & (k <= self.dmax)
        label = np.where(pos, k, NEGATIVE_FACTOR * self.dmax).astype(np.float32)
        weight = np.where(has & ~pos, 0.0, 1.0).astype(np.float32)  # reached just beyond the range: ambiguous
        return label, weight, pos

    def sample_goals(self, rng: np.random.Generator, anchors: np.ndarray, per_anchor: int,
                     kinds_p=(0.0, 0.55, 0.15, 0.15, 0.05, 0.1)) -> np.ndarray:
        """Goal frames for each anchor (repeated ``per_anchor`` times), by kind: the same drive ahead,
        another drive at a pose ahead, another drive at a pose 3-24 frames behind, a frame within
        2-25 m, the same drive's past / far future, a random frame. Frames of the anchor's own drive
        are nearly pixel-identical near the anchor (a network learns "identical = 0" from them and little
        else), so by default positives come from other drives, as map nodes do when the robot
        navigates; the same drive stands in where no other drive passed."""
        a = np.repeat(anchors, per_anchor)
        n, m, dmax = a.size, len(self), int(self.dmax)
        kind = rng.choice(len(kinds_p), n, p=np.asarray(kinds_p) / np.sum(kinds_p))
        fut = np.minimum(a + rng.integers(0, dmax + 1, n), self.end[a] - 1)
        g = fut.copy()
        sel = kind == 1
        part = self.partner[fut[sel]]
        g[sel] = np.where(part >= 0, part, fut[sel])
        sel = kind == 2
        behind = np.maximum(a - rng.integers(3, 25, n), self.start[a])[sel]
        part = self.partner[behind]
        g[sel] = np.where(part >= 0, part, behind)
        sel = kind == 3
        r, th = rng.uniform(2.0, 25.0, sel.sum()), rng.uniform(0, 2 * np.pi, sel.sum())
        _, g[sel] = self.xy_tree.query(self.pose[a[sel], :2] + np.stack([r * np.cos(th), r * np.sin(th)], 1))
        sel = kind == 4
        back = rng.random(n) < 0.5
        past = np.maximum(a - rng.integers(3, 60, n), self.start[a])
        far = np.minimum(a + rng.integers(dmax + 6, dmax + 80, n), self.end[a] - 1)
        g[sel] = np.where(back, past, far)[sel]
        sel = kind == 5
        g[sel] = rng.integers(0, m, sel.sum())
        return g

    def images(self, idx: np.ndarray):
        """(len(idx), 3, H, W) float32 torch tensor, ImageNet-normalised as VnmModel.preprocess."""
        import torch

        x = torch.from_numpy(self.frames[idx]).permute(0, 3, 1, 2).float().div_(255.0)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        return (x - mean) / std

    def obs(self, anchors: np.ndarray):
        """(A, 3 (C+1), H, W) float32 torch tensor: the context frames of each anchor, oldest first."""
        x = self.images(self.ctx[anchors].reshape(-1))
        return x.reshape(len(anchors), -1, VNM_H, VNM_W)
