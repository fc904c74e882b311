"""Train the sim-only stand-in VNM on simulated drives (self-supervised, as ViNG / GNM train on real ones).

Data (ViNG, Shah et al. ICRA 2021 Sec. IV; GNM, Shah et al. ICRA 2023 Sec. IV-A):

- Drives (:mod:`robot_app.sim.vnm_data`): random walks over the world's path network (junctions
  joined, no U-turns; each route driven three times), driven on the
  simulation clock by pure pursuit (:mod:`robot_app.sim.explore`) through :class:`WorldPlant`, with a
  smooth lateral offset from the centreline (within the path's width), a per-drive speed of
  0.9-1.1 m/s (temporal distance labels stay close to geometric ones), 0-9 frames standing still
  first (as a navigator does while its context fills), an initial heading error and short yaw-rate
  disturbances, so the data holds recoveries.
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

from models.export.sim_vnm import build_sim_vnm, export_sim_vnm
from models.vnm import open_vnm
from robot_app.sim.render import WorldRenderer
from robot_app.sim.vnm_data import (
    CONTEXT_SIZE,
    DIST_MAX_STEPS,
    FRAME_RATE_HZ,
    LEN_TRAJ_PRED,
    MATCH_LATERAL_M,
    NEGATIVE_FACTOR,
    NOMINAL_SPEED_MPS,
    Drive,
    DriveFrames,
    RoutePlan,
    path_network,
    random_route,
    simulate_drive,
    wrap_rad,
)
from robot_app.sim.world import World, load_world

__all__ = ["Drive", "RoutePlan", "path_network", "random_route", "simulate_drive", "train_sim_vnm",
           "DIST_MAX_STEPS", "NOMINAL_SPEED_MPS", "FRAME_RATE_HZ"]

log = logging.getLogger(__name__)

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


_FULL = _Plan(train_drives_per_world=24, train_repeats=3, train_route_m=90.0, heldout_routes_per_world=2,
              heldout_route_m=60.0, epochs=12, goals_per_anchor=4, batch_anchors=32, lr=2e-3, eval_stride=3)
_QUICK = _Plan(
    train_drives_per_world=2,
    train_repeats=2,
    train_route_m=25.0,
    heldout_routes_per_world=1,
    heldout_route_m=20.0,
    epochs=1,
    goals_per_anchor=4,
    batch_anchors=32,
    lr=2e-3,
    eval_stride=4,
)


def _render_drives(worlds: list, plan: _Plan, *, seed: int, heldout: bool, progress: bool) -> list:
    """Training drives (random routes) or held-out route pairs (each route driven twice, another seed)."""
    from tqdm import tqdm

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


def _train(data: DriveFrames, plan: _Plan, *, seed: int, progress: bool):
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 2])
    net = build_sim_vnm(context_size=CONTEXT_SIZE, len_traj_pred=LEN_TRAJ_PRED)
    opt = torch.optim.AdamW(net.parameters(), lr=plan.lr, weight_decay=1e-4)
    # anchors before a turn (heading changes > 0.4 rad within 3 s) are three times as frequent: junctions are
    # where the goal decides the way and where a follower is most easily lost
    ahead = np.minimum(np.arange(len(data)) + 12, data.end - 1)
    turning = np.flatnonzero(np.abs(wrap_rad(data.pose[ahead, 2] - data.pose[:, 2])) > 0.4)
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
                    loss = (
                        loss
                        + F.mse_loss(wp[mask, :, :2], target[..., :2])
                        + F.mse_loss(wp[mask, :, 2:], target[..., 2:])
                    )
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
    reference drive within +-``window`` frames and the range), each with ``..._const_steps``, the MAE
    of the best constant guess (the median label) on the same pairs: a head without distance
    information scores about that; ``negative_rejection`` (fraction of negatives predicted >= tau),
    ``near_negative_rejection`` (negatives within 25 m), ``localisation_acc`` (argmin within +-2
    frames of the truth) and its ``localisation_chance``, ``localisation_wide_acc`` and
    ``localisation_wide_chance`` (candidates within +-4 ``window`` frames, hit within +-4 frames),
    ``waypoint_err_m`` (mean over the 5 waypoints) and ``waypoint2_err_m``, ``predict_ms_9_goals``
    (median), ``dist_order_acc`` (of two same-drive goals ahead at different true distances, the share
    whose predicted distances are in the same order; 0.5 for a head without distance information: the
    navigator only uses the order, the arg-min), and the counts.
    """
    dmax = vnm.dist_range_steps[1]
    tau = 0.75 * dmax if tau_steps is None else tau_steps
    data = DriveFrames(drives, dmax=dmax)
    pre = vnm.preprocess_many(list(data.frames))
    unit = NOMINAL_SPEED_MPS / FRAME_RATE_HZ

    def obs(q: int) -> np.ndarray:
        return pre[data.ctx[q]].reshape(1, -1, vnm.image_height, vnm.image_width)

    queries = np.flatnonzero(data.drive % 2 == 1)
    anchors = queries[::stride]
    err, wp_err, wp2_err, lab = [], [], [], []
    order_ok, order_n = 0, 0
    for q in anchors:
        g = np.unique(np.minimum(q + np.arange(0, int(dmax) + 1, max(2, int(dmax) // 10)), data.end[q] - 1))
        label, _, pos = data.labels(np.full(g.size, q), g)
        pred = vnm.predict(obs(q), pre[g])
        err += list(np.abs(pred.dist_steps[pos] - label[pos]))
        lab += list(label[pos])
        # ordering: of two goals ahead at different true distances, is the nearer one predicted nearer?
        lp, dp = label[pos], pred.dist_steps[pos]
        i, j = np.triu_indices(lp.size, k=1)
        differ = lp[i] != lp[j]
        order_ok += int(np.sum(np.sign(dp[i] - dp[j])[differ] == np.sign(lp[i] - lp[j])[differ]))
        order_n += int(np.count_nonzero(differ))
        if data.wp_ok[q] and pos.any():
            e = np.linalg.norm(pred.waypoints[pos, :, :2] - data.wp[q, None, :, :2], axis=-1) * unit
            wp_err += list(e.mean(axis=1))
            wp2_err += list(e[:, 2])
    # localisation of each query frame among the reference drive's frames
    hits, chance, cross_err, cross_lab, hits_wide, chance_wide = [], [], [], [], [], []
    for q in queries[::max(1, stride // 2)]:
        ref = np.flatnonzero(data.drive == data.drive[q] - 1)
        along, lateral = data._along_lateral(ref, np.full(ref.size, q))
        along[(lateral > MATCH_LATERAL_M) | (np.abs(wrap_rad(data.pose[ref, 2] - data.pose[q, 2])) > 0.6)] = np.inf
        t = int(np.argmin(along))  # the reference frame at the query's place (along its heading)
        if not along[t] < 1.0:
            continue
        wide = np.arange(max(0, t - 4 * window), min(ref.size, t + 4 * window + 1))
        d_wide = vnm.predict(obs(q), pre[ref[wide]]).dist_steps
        hits_wide.append(abs(int(wide[np.argmin(d_wide)]) - t) <= 4)
        chance_wide.append(float(np.sum(np.abs(wide - t) <= 4)) / wide.size)
        near = np.abs(wide - t) <= window  # the distances of one goal do not depend on the others in the call
        cand, d = wide[near], d_wide[near]
        hits.append(abs(int(cand[np.argmin(d)]) - t) <= 2)
        chance.append(float(np.sum(np.abs(cand - t) <= 2)) / cand.size)
        label, _, pos = data.labels(np.full(cand.size, q), ref[cand])
        cross_err += list(np.abs(d[pos] - label[pos]))
        cross_lab += list(label[pos])
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

    def const_mae(labels):  # the best constant guess (the median label): a head without distance information
        return mean(np.abs(np.asarray(labels) - np.median(labels))) if len(labels) else float("nan")

    return {
        "dist_mae_steps": mean(err),
        "dist_mae_const_steps": const_mae(lab),
        "dist_mae_cross_steps": mean(cross_err),
        "dist_mae_cross_const_steps": const_mae(cross_lab),
        "dist_pairs": len(err),
        "dist_order_acc": order_ok / order_n if order_n else float("nan"),
        "negative_rejection": mean(neg_pred >= tau),
        "near_negative_rejection": mean(neg_pred[neg_near] >= tau),
        "negatives": int(neg_pred.size),
        "tau_steps": float(tau),
        "localisation_acc": mean(hits),
        "localisation_chance": mean(chance),
        "localisation_queries": len(hits),
        "localisation_window_frames": window,
        "localisation_wide_acc": mean(hits_wide),
        "localisation_wide_chance": mean(chance_wide),
        "waypoint_err_m": mean(wp_err),
        "waypoint2_err_m": mean(wp2_err),
        "predict_ms_9_goals": float(np.median(t_ms)),
        "heldout_frames": int(len(data)),
        "heldout_drives": len(drives),
    }


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
        train = DriveFrames(
            _render_drives(worlds, plan, seed=seed, heldout=False, progress=progress), dmax=DIST_MAX_STEPS
        )
        held = _render_drives(worlds, plan, seed=seed, heldout=True, progress=progress)
        timing["render"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        net, history = _train(train, plan, seed=seed, progress=progress)
        timing["train"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        hf = DriveFrames(held, dmax=DIST_MAX_STEPS)
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
