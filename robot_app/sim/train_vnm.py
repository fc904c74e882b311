"""Train the sim-only stand-in VNM on simulated drives (self-supervised, as ViNG / GNM train on real ones).

Data (ViNG, Shah et al. ICRA 2021 Sec. IV; GNM, Shah et al. ICRA 2023 Sec. IV-A):

- Drives: random walks over the world's path network (junctions joined, no U-turns), driven on the
  simulation clock by pure pursuit (:mod:`robot_app.sim.explore`) through :class:`WorldPlant`, with a
  smooth lateral offset from the centreline (within the path's width), a per-drive speed of
  0.9-1.1 m/s (temporal distance labels stay close to geometric ones), an initial heading error
  and short yaw-rate disturbances, so the data holds recoveries.
  Frames are rendered with :class:`WorldRenderer` at the VNM frame rate (4 Hz) and resized to the
  VNM input (85 x 64, Pillow bicubic) exactly as :meth:`models.vnm.VnmModel.preprocess` does.
- Distance label of (observation frame i of drive A, goal frame g): the temporal distance in frames
  k - i to the first frame k >= i of drive A at g's place (within 0.4 m along g's heading, 1.5 m
  across it and 0.35 rad); for a goal from A itself that is the plain temporal distance. Each
  training route is driven three times with different offsets, and most goals come from another
  drive of the same place, as map nodes do when the robot navigates. Goals that A does not reach within
  the window are negatives (ViNG's negative mining: other drives, far future, the past, random
  frames and frames within 25 m, the map builder's candidate radius) with the label
  :data:`NEGATIVE_FACTOR` (1.5) x the trained range, so they sit above the map builder's edge threshold
  (75 % of the range) and above the navigator's "lost" level (the range).
- Waypoints: drive A's next ``len_traj_pred`` poses in the robot frame of frame i (REP-103), divided
  by the metres per frame at the nominal speed (GNM's normalisation by max_v / frame rate), plus
  (cos, sin) of the relative heading; only for positive goals and windows without a disturbance.

Quality is measured with the EXPORTED file through the production runtime (:func:`models.vnm.open_vnm`)
on held-out drives (another seed: other routes, offsets, disturbances and sensor noise), each route
driven twice, and written to ``sim-vnm-quality.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from firmware_bridge.kinematics import twist_to_wheels
from robot_app.sim.explore import _PurePursuit
from robot_app.sim.plant import WorldPlant
from robot_app.sim.world import World, load_world

__all__ = ["Drive", "RoutePlan", "path_network", "random_route", "simulate_drive", "train_sim_vnm",
           "DIST_MAX_STEPS", "NOMINAL_SPEED_MPS", "FRAME_RATE_HZ"]

log = logging.getLogger(__name__)

FRAME_RATE_HZ = 4.0        # GNM's frame rate (DESIGN.md VNM contract)
DIST_MAX_STEPS = 20.0      # GNM's trained distance range 0-20 steps (gnm.yaml)
NEGATIVE_FACTOR = 1.5      # negatives are labelled 1.5 x the range
NOMINAL_SPEED_MPS = 1.0    # training drive speed: waypoint unit = NOMINAL_SPEED_MPS / FRAME_RATE_HZ metres
CONTEXT_SIZE, LEN_TRAJ_PRED = 5, 5
MATCH_ALONG_M, MATCH_LATERAL_M, MATCH_YAW_RAD = 0.4, 1.5, 0.35  # "the same place" (see _Frames.labels)
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
    off = a1 * np.sin(2 * np.pi * s / l1 + rng.uniform(0, 2 * np.pi)) + a2 * np.sin(2 * np.pi * s / l2 + rng.uniform(0, 2 * np.pi))
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


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi


class _Frames:
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
        feat = np.concatenate([self.pose[:, :2], 2.0 * np.stack([np.cos(self.pose[:, 2]), np.sin(self.pose[:, 2])], 1)], 1)
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
                & (np.abs(_wrap(self.pose[a, 2] - self.pose[g, 2])) < MATCH_YAW_RAD))

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

        from models.export.vnm_export import IMAGENET_MEAN, IMAGENET_STD

        x = torch.from_numpy(self.frames[idx]).permute(0, 3, 1, 2).float().div_(255.0)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        return (x - mean) / std

    def obs(self, anchors: np.ndarray):
        """(A, 3 (C+1), H, W) float32 torch tensor: the context frames of each anchor, oldest first."""
        x = self.images(self.ctx[anchors].reshape(-1))
        return x.reshape(len(anchors), -1, VNM_H, VNM_W)


@dataclass(frozen=True)
class _Plan:
    train_drives_per_world: int
    train_repeats: int
    train_route_m: float
    heldout_routes_per_world: int
    heldout_route_m: float
    epochs: int
    goals_per_anchor: int
    batch_anchors: int
    lr: float
    eval_stride: int


_FULL = _Plan(train_drives_per_world=12, train_repeats=3, train_route_m=90.0, heldout_routes_per_world=2,
              heldout_route_m=60.0, epochs=4, goals_per_anchor=4, batch_anchors=32, lr=2e-3, eval_stride=3)
_QUICK = _Plan(train_drives_per_world=2, train_repeats=2, train_route_m=25.0, heldout_routes_per_world=1, heldout_route_m=20.0,
               epochs=1, goals_per_anchor=4, batch_anchors=32, lr=2e-3, eval_stride=4)


def _render_drives(worlds: list, plan: _Plan, *, seed: int, heldout: bool, progress: bool) -> list:
    """Training drives (random routes) or held-out route pairs (each route driven twice, another seed)."""
    from tqdm import tqdm

    from robot_app.sim.render import WorldRenderer

    tqdm.monitor_interval = 0  # no monitor thread: nothing outlives the job

    rng = np.random.default_rng([seed, 1 if heldout else 0])
    out = []
    n = plan.heldout_routes_per_world * 2 if heldout else plan.train_drives_per_world
    repeats = 2 if heldout else plan.train_repeats
    with tqdm(total=n * len(worlds), desc="held-out drives" if heldout else "training drives", unit="drive",
              disable=not progress, leave=False) as bar:
        for wi, w in enumerate(worlds):
            net = path_network(w)
            with WorldRenderer(w, seed=seed * 1000 + wi + (500 if heldout else 0)) as ren:
                index0 = 0
                for k in range(n):
                    if k % repeats == 0:
                        route = random_route(net, rng, length_m=plan.heldout_route_m if heldout else plan.train_route_m)
                    d = simulate_drive(w, route, ren, rng, speed_mps=NOMINAL_SPEED_MPS * rng.uniform(0.9, 1.1),
                                       frame_index0=index0)
                    if d.collided:
                        log.info("%s: a training drive ended at a collision after %d frames", w.name, len(d.pose))
                    index0 += len(d.pose)
                    out.append(d)
                    bar.update(1)
    return out


def _train(data: _Frames, plan: _Plan, *, seed: int, progress: bool):
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from models.export.sim_vnm import build_sim_vnm

    tqdm.monitor_interval = 0
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 2])
    net = build_sim_vnm(context_size=CONTEXT_SIZE, len_traj_pred=LEN_TRAJ_PRED)
    opt = torch.optim.AdamW(net.parameters(), lr=plan.lr, weight_decay=1e-4)
    # anchors before a turn (heading changes > 0.4 rad within 3 s) are three times as frequent: junctions are
    # where the goal decides the way and where a follower is most easily lost
    ahead = np.minimum(np.arange(len(data)) + 12, data.end - 1)
    turning = np.flatnonzero(np.abs(_wrap(data.pose[ahead, 2] - data.pose[:, 2])) > 0.4)
    pool = np.concatenate([np.arange(len(data)), turning, turning])
    per_epoch = int(math.ceil(len(pool) / plan.batch_anchors))
    total = per_epoch * plan.epochs
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=plan.lr, total_steps=max(total, 4),
                                                pct_start=max(0.1, 3.0 / max(total, 4)))
    wp_all, wp_ok_all = torch.from_numpy(data.wp), torch.from_numpy(data.wp_ok)
    net.train()
    history = []
    with tqdm(total=total, desc="training sim VNM", unit="batch", disable=not progress, leave=False) as bar:
        for _epoch in range(plan.epochs):
            order = rng.permutation(pool)
            run = []
            for b in range(per_epoch):
                anchors = order[b * plan.batch_anchors:(b + 1) * plan.batch_anchors]
                if anchors.size < 2:
                    bar.update(1)
                    continue
                g = data.sample_goals(rng, anchors, plan.goals_per_anchor)
                a = np.repeat(anchors, plan.goals_per_anchor)
                label, weight, pos = (torch.from_numpy(x) for x in data.labels(a, g))
                obs = data.obs(anchors)
                enc, cur = (x.repeat_interleave(plan.goals_per_anchor, 0) for x in net.encode_obs(obs))
                dist, wp = net.heads(enc, cur, data.images(g))
                loss_d = (F.huber_loss(dist[:, 0], label, reduction="none", delta=2.0) * weight).sum() / weight.sum()
                mask = pos & wp_ok_all[torch.from_numpy(a)]
                loss = 0.5 * loss_d
                if mask.any():
                    target = wp_all[torch.from_numpy(a)][mask]
                    loss = loss + F.mse_loss(wp[mask, :, :2], target[..., :2]) + F.mse_loss(wp[mask, :, 2:], target[..., 2:])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                run.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(run[-50:]):.3f}")
            history.append(float(np.mean(run)) if run else float("nan"))
    net.eval()
    return net, history


def evaluate_vnm(vnm, drives: Sequence[Drive], *, tau_steps: float | None = None, stride: int = 3,
                 window: int = 20, seed: int = 0) -> dict:
    """Quality of a VNM (:class:`models.vnm.VnmModel`) on held-out drives given as (reference, query) pairs.

    Parameters
    ----------
    vnm : VnmModel
        The model through the production runtime.
    drives : sequence of Drive
        Pairs of drives along the same route: drives[2r] is the reference ("map"), drives[2r + 1] the query.
    tau_steps : float, optional
        The map builder's edge threshold; default 75 % of the trained range ([mapping] tau_steps = 0).
    stride : int
        Every ``stride``-th query frame is an anchor.
    window : int
        Localisation candidates: reference frames within +-``window`` of the true one.

    Returns
    -------
    dict: ``dist_mae_steps`` (same-drive goals within range), ``dist_mae_cross_steps`` (goals from the
    reference drive within range), ``negative_rejection`` (fraction of negatives predicted >= tau),
    ``near_negative_rejection`` (negatives within 25 m), ``localisation_acc`` (argmin within +-2
    frames of the truth) and its ``localisation_chance``, ``waypoint_err_m`` (mean over the 5
    waypoints) and ``waypoint2_err_m``, ``predict_ms_9_goals`` (median), and the counts.
    """
    dmax = vnm.dist_range_steps[1]
    tau = 0.75 * dmax if tau_steps is None else tau_steps
    data = _Frames(drives, dmax=dmax)
    pre = vnm.preprocess_many(list(data.frames))
    unit = NOMINAL_SPEED_MPS / FRAME_RATE_HZ

    def obs(q: int) -> np.ndarray:
        return pre[data.ctx[q]].reshape(1, -1, vnm.image_height, vnm.image_width)

    queries = np.flatnonzero(data.drive % 2 == 1)
    anchors = queries[::stride]
    err, wp_err, wp2_err = [], [], []
    for q in anchors:
        g = np.unique(np.minimum(q + np.arange(0, int(dmax) + 1, 2), data.end[q] - 1))
        label, _, pos = data.labels(np.full(g.size, q), g)
        pred = vnm.predict(obs(q), pre[g])
        err += list(np.abs(pred.dist_steps[pos] - label[pos]))
        if data.wp_ok[q] and pos.any():
            e = np.linalg.norm(pred.waypoints[pos, :, :2] - data.wp[q, None, :, :2], axis=-1) * unit
            wp_err += list(e.mean(axis=1))
            wp2_err += list(e[:, 2])
    # localisation of each query frame among the reference drive's frames
    hits, chance, cross_err = [], [], []
    for q in queries[::max(1, stride // 2)]:
        ref = np.flatnonzero(data.drive == data.drive[q] - 1)
        along, lateral = data._along_lateral(ref, np.full(ref.size, q))
        along[(lateral > MATCH_LATERAL_M) | (np.abs(_wrap(data.pose[ref, 2] - data.pose[q, 2])) > 0.6)] = np.inf
        t = int(np.argmin(along))  # the reference frame at the query's place (along its heading)
        if not along[t] < 1.0:
            continue
        cand = np.arange(max(0, t - window), min(ref.size, t + window + 1))
        pred = vnm.predict(obs(q), pre[ref[cand]])
        hits.append(abs(int(cand[np.argmin(pred.dist_steps)]) - t) <= 2)
        chance.append(float(np.sum(np.abs(cand - t) <= 2)) / cand.size)
        label, _, pos = data.labels(np.full(cand.size, q), ref[cand])
        cross_err += list(np.abs(pred.dist_steps[pos] - label[pos]))
    # negatives: frames within 25 m, the past / far future, random frames
    rng = np.random.default_rng([seed, 3])
    neg_pred, neg_near = [], []
    for q in anchors:
        g = data.sample_goals(rng, np.array([q]), 8, kinds_p=(0.0, 0.0, 0.3, 0.35, 0.15, 0.2))
        _, weight, pos = data.labels(np.full(g.size, q), g)
        neg = ~pos & (weight > 0)
        if neg.any():
            neg_pred += list(vnm.predict(obs(q), pre[g[neg]]).dist_steps)
            neg_near += list(np.hypot(*(data.pose[g[neg], :2] - data.pose[q, :2]).T) < 25.0)
    neg_pred, neg_near = np.asarray(neg_pred), np.asarray(neg_near, dtype=bool)
    t_ms = []
    g9 = pre[anchors[:9]] if anchors.size >= 9 else pre[:9]
    for _ in range(30):
        t0 = time.perf_counter()
        vnm.predict(obs(anchors[0]), g9)
        t_ms.append((time.perf_counter() - t0) * 1000)

    def mean(x):
        return float(np.mean(x)) if len(x) else float("nan")

    return {"dist_mae_steps": mean(err), "dist_mae_cross_steps": mean(cross_err), "dist_pairs": len(err),
            "negative_rejection": mean(neg_pred >= tau), "near_negative_rejection": mean(neg_pred[neg_near] >= tau),
            "negatives": int(neg_pred.size), "tau_steps": float(tau),
            "localisation_acc": mean(hits), "localisation_chance": mean(chance), "localisation_queries": len(hits),
            "localisation_window_frames": window, "waypoint_err_m": mean(wp_err), "waypoint2_err_m": mean(wp2_err),
            "predict_ms_9_goals": float(np.median(t_ms)), "heldout_frames": int(len(data)),
            "heldout_drives": len(drives)}


def _as_world(w) -> World:
    return w if isinstance(w, World) else load_world(w)


def train_sim_vnm(worlds, out_dir: str | os.PathLike, *, seed: int = 0, quick: bool = False,
                  progress: bool = True, threads: int | None = None) -> dict:
    """Train the sim-only VNM on drives in ``worlds``, export it into ``out_dir`` and measure it.

    Parameters
    ----------
    worlds : World, str, Path or a sequence of them
        Loaded worlds, shipped world names (``campus``, ``industrial``) or world files.
    out_dir : path
        Receives ``vnm.onnx``, ``vnm.onnx.json`` (kind ``vnm``, architecture ``sim-vnm-cnn``,
        ``sim_only: true``), ``vnm-reference.npz`` and ``sim-vnm-quality.json``.
    seed : int
        Seeds routes, offsets, disturbances, sensor noise, sampling and the weights (held-out drives use
        a separate stream of the same seed).
    quick : bool
        Tiny data and one epoch (tests): files load and run, quality is not meaningful.
    progress : bool
        tqdm progress bars on stderr.
    threads : int, optional
        torch CPU threads; default 1 when the machine is busy (load average >= its cores - 1: small
        convolutions on an oversubscribed CPU run several times slower with more threads), else up
        to 4. The figures differ across thread counts only by float rounding.

    Returns
    -------
    dict: the quality figures of :func:`evaluate_vnm` on held-out drives, plus ``train_frames``,
    ``epochs``, ``loss_history``, ``timing_s`` (render / train / export / evaluate / total), ``files``.

    Raises
    ------
    robot_app.sim.world.WorldError
        A world does not load.
    models.export.common.ExportError
        The export fails its parity checks.
    """
    import torch

    from models.export.sim_vnm import export_sim_vnm
    from models.vnm import open_vnm

    t_start = time.perf_counter()
    if isinstance(worlds, (World, str, os.PathLike)):
        worlds = [worlds]
    worlds = [_as_world(w) for w in worlds]
    if not worlds:
        raise ValueError("train_sim_vnm: no world given")
    plan = _QUICK if quick else _FULL
    threads_before = torch.get_num_threads()
    if threads is None:
        cores = os.cpu_count() or 1
        threads = 1 if os.getloadavg()[0] >= cores - 1 else min(4, cores)
    torch.set_num_threads(max(1, int(threads)))
    try:
        timing = {}
        t0 = time.perf_counter()
        train = _Frames(_render_drives(worlds, plan, seed=seed, heldout=False, progress=progress), dmax=DIST_MAX_STEPS)
        held = _render_drives(worlds, plan, seed=seed, heldout=True, progress=progress)
        timing["render"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        net, history = _train(train, plan, seed=seed, progress=progress)
        timing["train"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        hf = _Frames(held, dmax=DIST_MAX_STEPS)
        q = int(np.flatnonzero(hf.drive == 1)[min(CONTEXT_SIZE, int(np.sum(hf.drive == 1)) - 1)])
        goals = np.minimum(q + np.arange(0, 27, 3), len(hf) - 1)
        with torch.no_grad():
            ref_obs, ref_goals = hf.obs(np.array([q])).numpy(), hf.images(goals).numpy()
        params = {"context_size": CONTEXT_SIZE, "len_traj_pred": LEN_TRAJ_PRED, "frame_rate_hz": FRAME_RATE_HZ,
                  "dist_min_steps": 0.0, "dist_max_steps": DIST_MAX_STEPS,
                  "negative_label_steps": NEGATIVE_FACTOR * DIST_MAX_STEPS,
                  "trained_speed_mps": NOMINAL_SPEED_MPS, "trained_worlds": [w.name for w in worlds],
                  "trained_frames": int(len(train)), "seed": int(seed), "quick": bool(quick)}
        out = Path(out_dir)
        exp = export_sim_vnm(net, out, obs=ref_obs, goals=ref_goals, params=params,
                             weights=f"sim-trained: robot_app.sim.train_vnm on {'+'.join(w.name for w in worlds)}, "
                                     f"seed {seed}{' (quick)' if quick else ''}")
        timing["export"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        vnm = open_vnm(out)
        quality = evaluate_vnm(vnm, held, stride=plan.eval_stride, seed=seed)
        timing["evaluate"] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads_before)
    timing["total"] = time.perf_counter() - t_start
    report = {"model": "sim-vnm-cnn (sim-only stand-in)", "worlds": [w.name for w in worlds], "seed": seed,
              "quick": quick, **quality, "train_frames": int(len(train)), "train_drives": int(train.drive.max() + 1),
              "epochs": plan.epochs, "loss_history": history, "parity_max_abs": exp["parity_max_abs"],
              "parameters": int(sum(p.numel() for p in net.parameters())),
              "onnx_bytes": int((out / "vnm.onnx").stat().st_size), "timing_s": timing,
              "torch_threads": int(threads)}
    (out / "sim-vnm-quality.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    report["files"] = exp["files"] + [str(out / "sim-vnm-quality.json")]
    log.info("sim VNM: MAE %.2f steps, localisation %.2f (chance %.2f), negatives rejected %.2f, %.0f s",
             quality["dist_mae_steps"], quality["localisation_acc"], quality["localisation_chance"],
             quality["negative_rejection"], timing["total"])
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m robot_app.sim.train_vnm OUT_DIR [--world W ...] [--seed N] [--quick]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m robot_app.sim.train_vnm",
                                 description="train the SIM-ONLY stand-in VNM on simulated drives and export it")
    ap.add_argument("out_dir", help="folder for vnm.onnx, its sidecar, vnm-reference.npz, sim-vnm-quality.json")
    ap.add_argument("--world", action="append", help="shipped world name or world file (repeatable; "
                                                     "default campus and industrial)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny data, one epoch (smoke test)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: 1 on a busy machine)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rep = train_sim_vnm(args.world or ["campus", "industrial"], args.out_dir, seed=args.seed, quick=args.quick,
                        threads=args.threads)
    keys = ("dist_mae_steps", "dist_mae_cross_steps", "negative_rejection", "localisation_acc",
            "localisation_chance", "waypoint_err_m", "predict_ms_9_goals")
    print(json.dumps({k: rep[k] for k in keys} | {"timing_s": rep["timing_s"]}, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover - command line
    raise SystemExit(main())
