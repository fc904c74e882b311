"""Demo stages 1-3, before the robot drives: explore and record, build the map, parse/ground/plan.

Each function takes the demo's :class:`~robot_app.demo.runner.DemoContext`, does one stage with the
product's own jobs (:func:`robot_app.sim.explore.record_exploration`, :func:`robot_app.mapping.map_build.build_map`,
:func:`robot_app.route.grounding_service.ground_instruction`, :func:`robot_app.route.planning.plan_on_map`) and
returns a JSON-ready dict for the report; failures raise :class:`~robot_app.demo.stages.StageFailed`
with the reason.
"""

from __future__ import annotations

import logging
import shutil

import numpy as np

from core.mapstore import open_map
from core.search import plan_walk
from core.tlog import read_log
from robot_app.demo.scenario import DemoInputError, phrase_categories
from robot_app.demo.stages import StageFailed
from robot_app.demo.truth import intended_walk, landmark_truth, node_true_poses, path_length_m, plan_metrics
from robot_app.mapping.map_build import build_map
from robot_app.route.grounding_service import ground_instruction, parse_landmarks
from robot_app.route.planning import PlanningError, plan_on_map
from robot_app.sim.explore import record_exploration

log = logging.getLogger(__name__)


def check_instruction(ctx) -> dict:
    """Parse the instruction and check that the world has each landmark's category (before any work).

    Raises
    ------
    robot_app.demo.scenario.DemoInputError
        No landmark in the instruction, or one that names nothing in the world.
    """
    try:
        landmarks, parser = parse_landmarks(ctx.scenario.instruction, config=ctx.config)
    except (PlanningError, ValueError) as exc:
        raise DemoInputError(str(exc)) from exc
    cats = sorted({c for _, c, _, _ in ctx.world.landmarks()})
    for phrase in landmarks:
        if not phrase_categories(phrase, cats):
            raise DemoInputError(f"--instruction: landmark {phrase!r} names nothing in world {ctx.world.name!r} "
                                 f"(it has: {', '.join(cats)})")
    ctx.landmarks = landmarks
    return {"landmarks": landmarks, "parser": parser}


def explore(ctx) -> dict:
    """Stage 1: the scripted exploration on the accelerated simulation clock, written as a traversal log."""
    cfg = ctx.config
    if ctx.log_dir.exists():
        shutil.rmtree(ctx.log_dir)  # record_exploration continues an existing log: start afresh
    rep = record_exploration(ctx.world, ctx.scenario.route, ctx.log_dir, rate_hz=cfg.mapping.frame_rate_hz,
                             speed_mps=ctx.scenario.speed_mps, seed=ctx.seed, width=cfg.camera.width,
                             height=cfg.camera.height, hfov_deg=cfg.sim.hfov_deg, gps_noise_m=cfg.sim.gps_noise_m,
                             jpeg_quality=cfg.camera.jpeg_quality, robot_radius_m=cfg.sim.robot_radius_m)
    out = {"log": str(ctx.log_dir), "frames": rep.frames, "gps_fixes": rep.gps_fixes,
           "distance_m": round(rep.distance_m, 1), "sim_time_s": round(rep.sim_time_s, 1),
           "speedup": round(rep.speedup, 1), "frame_size": [cfg.camera.width, cfg.camera.height],
           "collisions": [f"{c.name} ({c.category})" for c in rep.collisions]}
    if not rep.reached_end:
        raise StageFailed("exploration did not reach the route's end"
                          + (f" (collision with {out['collisions'][0]})" if rep.collisions else ""), out)
    return out


def build(ctx) -> dict:
    """Stage 2: LM-Nav Algorithm 2 on the log (VNM edges with the sim VNM, CLIP embeddings with the sim VLM)."""
    rep = build_map([ctx.log_dir], ctx.map_path, config=ctx.config, models_dir=ctx.models_dir, overwrite=True,
                    progress=ctx.progress_bars)
    out = rep.as_dict()
    out["map"] = str(ctx.map_path)
    out["phase_s"] = {k: round(v, 2) for k, v in out["phase_s"].items()}
    if rep.clip_model is None:
        raise StageFailed(f"no CLIP (sim VLM) in {ctx.models_dir}: the map has no image embeddings to ground "
                          "the instruction in", out)
    if rep.components != 1:
        log.warning("the map has %d connected components", rep.components)
    return out


def plan(ctx) -> dict:
    """Stage 3: parse the instruction, ground it with the sim VLM, plan the LM-Nav walk; metrics against
    the ground truth computed from the world and the recorded true poses."""
    cfg = ctx.config
    tlog = read_log(ctx.log_dir)
    with open_map(ctx.map_path) as m:
        poses = node_true_poses(m.nodes.timestamp_s, tlog.odom)
        x0, y0 = ctx.scenario.route[0]
        start = int(np.argmin(np.hypot(poses[:, 0] - x0, poses[:, 1] - y0)))
        try:
            landmarks, logp, info = ground_instruction(ctx.scenario.instruction, m, config=cfg)
            planned = plan_on_map(m, landmarks, logp, start=start, alpha=cfg.planner.alpha,
                                  planner=cfg.planner.planner)
        except PlanningError as exc:
            raise StageFailed(f"planning: {exc}") from exc
        truth = landmark_truth(ctx.world, poses, landmarks, hfov_deg=cfg.sim.hfov_deg)
        csr = m.csr()
        intended = intended_walk(csr, truth, start)
        desc = planned.describe(m)
        edges = np.stack([m.edges.src, m.edges.dst], axis=1)
        images = {int(lm["node"]): m.images(int(lm["node"]))[0] for lm in desc["landmarks"]}
    metrics = plan_metrics(planned.result, intended, truth, poses)
    direct = direct_walk(csr, start, int(planned.result.nodes[-1]))
    ctx.poses, ctx.edges, ctx.start_node, ctx.landmarks = poses, edges, start, landmarks
    ctx.plan_nodes = [int(v) for v in planned.result.nodes]
    ctx.landmark_images = images
    ctx.intended_m = metrics["intended_m"]
    out = {"instruction": ctx.scenario.instruction, "landmarks": landmarks, "parser": info["parser"],
           "clip_model": info["clip_model"], "grounding": info["landmarks"], "start_node": start,
           "walk": desc, **metrics, **_direct_record(direct, planned.result, poses)}
    if desc["status"] != "ok":
        raise StageFailed("no walk from the start reaches all landmarks in order", out)
    ctx.places = task_places(poses, ctx.plan_nodes[-1])
    out["task_places"] = ctx.places
    return out


def direct_walk(csr: tuple, start: int, goal: int):
    """The shortest walk from ``start`` to ``goal`` on the map (what an instruction naming only the goal
    would drive): :func:`core.search.plan_walk` with the goal as the one landmark."""
    n = len(csr[0]) - 1
    logp = np.full((n, 1), -np.inf)
    logp[goal, 0] = 0.0
    return plan_walk(*csr, logp, start, alpha=1.0)


def _direct_record(direct, planned, poses: np.ndarray) -> dict:
    """The direct walk beside the LM-Nav one (LM-Nav Fig. 5: the landmarks make the robot take another
    route than the shortest to the goal): its nodes and true metres, and whether the two differ."""
    if not direct.ok:
        return {"direct_nodes": [], "direct_m": None, "route_differs_from_direct": None}
    nodes = [int(v) for v in direct.nodes]
    planned_m = path_length_m(poses[planned.nodes, :2])
    direct_m = path_length_m(poses[nodes, :2])
    return {"direct_nodes": nodes, "direct_m": round(direct_m, 1), "planned_m": round(planned_m, 1),
            "route_differs_from_direct": bool(nodes != [int(v) for v in planned.nodes] and planned_m > direct_m + 5.0)}


def task_places(poses: np.ndarray, end: int, *, leg_m: float = 8.0) -> dict:
    """Map nodes for the task job's places: ``yard`` at the walk's end node (where the task starts),
    ``site-b`` about ``leg_m`` further along the explored route (node ids are in driving order; back
    along it when the route ends sooner), ``site-c`` another ``leg_m`` on, ``depot`` ``leg_m`` behind.

    Returns ``{place: node}``; the nodes differ when the map has at least 4.
    """
    n = len(poses)

    def along(order: np.ndarray, dist_m: float) -> int:
        if len(order) < 2:
            return int(order[0])
        arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(poses[order, :2], axis=0), axis=1))])
        return int(order[max(1, min(int(np.searchsorted(arc, dist_m)), len(order) - 1))])

    ahead, behind = np.arange(end, n), np.arange(end, -1, -1)
    if len(ahead) < 3:
        ahead, behind = behind, ahead
    return {"yard": int(end), "site-b": along(ahead, leg_m), "site-c": along(ahead, 2 * leg_m),
            "depot": along(behind, leg_m)}
