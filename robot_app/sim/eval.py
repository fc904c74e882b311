"""``robot-app eval sim``: LM-Nav search vs the max-likelihood planner vs GPS-only driving in a simulated world.

The paper's evaluation (Shah et al., CoRL 2022, Sec. 5, Tables 1 and 4) on a world with ground truth:

1. a scripted exploration of the world (the instruction file's route, on the simulation clock) is
   recorded into a traversal log, and the map is built from it with the VNM (LM-Nav Algorithm 2);
   both are cached in the output folder and reused while their inputs are unchanged;
2. every map node gets its TRUE pose from the log, and each instruction's landmarks their ground-truth
   node sets (:mod:`robot_app.sim.eval_truth`);
3. per instruction: the landmarks are parsed (rules, or the LLM when installed and configured), grounded
   with the CLIP-format VLM, and planned with LM-Nav's search (:func:`core.search.plan_walk`) and the
   max-likelihood baseline (:func:`core.search.plan_max_likelihood`); planning success and planning
   efficiency (:mod:`core.metrics`) against the intended walk, the shortest walk through the truth sets
   in order (the same search with log-likelihood 0 on truth nodes and -inf elsewhere);
4. the LM-Nav walk is executed on the simulation clock with the VNM and with GPS only
   (:mod:`robot_app.sim.eval_drive`): reached, disengagements, executed efficiency
   ``min(1, intended metres / driven metres)``.

The report (:mod:`robot_app.sim.eval_report`) has per-instruction rows and totals.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.mapstore import open_map
from core.metrics import planning_efficiency, planning_success
from core.search import plan_max_likelihood, plan_walk
from core.tlog import read_log
from models.clip import ground_landmarks, open_clip_model
from models.sidecar import ModelMissing
from robot_app.config import nav_options
from robot_app.mapping.map_build import build_map, decode_jpeg
from robot_app.route.grounding_service import presence_rule
from robot_app.route.landmark_parsing import parse_instruction
from robot_app.sim import model_clip_crops, sim_nav_config, tuned_planner
from robot_app.sim.eval_drive import DriveParams, SimWalk, drive_walk
from robot_app.sim.eval_instructions import InstructionSet, load_instructions, shipped_instructions
from robot_app.sim.eval_report import summarise, write_chart
from robot_app.sim.eval_truth import TruthParams, node_true_poses, truth_node_sets
from robot_app.sim.explore import record_exploration
from robot_app.sim.world import World, load_world

__all__ = ["EvalSettings", "EvalError", "run_sim_eval", "default_models_dir"]

log = logging.getLogger(__name__)

PLANNERS = ("lmnav", "max-likelihood")
EXECUTIONS = ("lmnav-vnm", "lmnav-gps")


class EvalError(ValueError):
    """The evaluation cannot run as asked (missing CLIP model, bad files); the message says what to do."""


@dataclass(frozen=True)
class EvalSettings:
    """What ``robot-app eval sim`` runs (CLI options; units in the names)."""

    world: str
    out_dir: str
    instructions: str | None = None
    models_dir: str | None = None
    seed: int = 0
    width: int = 160
    height: int = 120
    hfov_deg: float = 90.0
    parser: str | None = None
    grounding: str = "vlm"
    alpha: float | None = None
    max_cosine: float | None = None  # the grounding's cosine cap; None = planner-tuning.json, else [planner]
    node_spacing_m: float | None = 1.0
    execute: bool = True
    limit: int | None = None
    progress: bool = False
    drive: DriveParams = DriveParams()
    truth: TruthParams = TruthParams()


def default_models_dir(config) -> Path:
    """The shipped sim models (``robot_app.sim.shipped_models_dir()``) when present, else ``[paths] models_dir``."""
    try:
        from robot_app.sim import shipped_models_dir

        d = Path(shipped_models_dir())
        if (d / "clip-image.onnx").is_file():
            return d
    except (ImportError, AttributeError):
        pass
    return Path(config.paths.models_dir)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _sidecar_text(models_dir: Path, name: str) -> str:
    p = models_dir / (name + ".json")
    return p.read_text(encoding="utf-8") if p.is_file() else ""


def _explore(world: World, iset: InstructionSet, s: EvalSettings, out: Path) -> tuple[Path, dict, bool]:
    """Record the exploration log (or reuse the cached one). Returns (log folder, info, cached)."""
    key = {"world": Path(world.source).read_text(encoding="utf-8") if Path(world.source).is_file() else world.name,
           "route": iset.route, "speed": iset.speed_mps, "seed": s.seed, "size": [s.width, s.height],
           "hfov": s.hfov_deg, "version": 2}
    digest = _digest(key)
    folder, meta = out / "exploration", out / "exploration.json"
    if folder.is_dir() and meta.is_file():
        info = json.loads(meta.read_text(encoding="utf-8"))
        if info.get("key") == digest:
            return folder, info, True
    shutil.rmtree(folder, ignore_errors=True)
    meta.unlink(missing_ok=True)
    rep = record_exploration(world, [list(p) for p in iset.route], folder, speed_mps=iset.speed_mps, seed=s.seed,
                             width=s.width, height=s.height, hfov_deg=s.hfov_deg)
    if not rep.reached_end:
        raise EvalError(f"{iset.source}: the exploration route did not reach its end "
                        f"({'collision with ' + rep.collisions[0].name if rep.collisions else 'time limit'}); "
                        "fix exploration.route")
    info = {"key": digest, "frames": rep.frames, "distance_m": round(rep.distance_m, 1),
            "sim_time_s": round(rep.sim_time_s, 1), "wall_s": round(rep.wall_s, 1)}
    meta.write_text(json.dumps(info, indent=2), encoding="utf-8")
    return folder, info, False


def _build(
    log_dir: Path, models_dir: Path, config, explore_key: str, out: Path, progress: bool
) -> tuple[Path, dict, bool]:
    """Build the map from the exploration (or reuse it). Returns (map file, build report, cached)."""
    key = _digest({"explore": explore_key, "mapping": dataclasses.asdict(config.mapping),
                   "clip_crops": config.camera.clip_crops,
                   "models": [_sidecar_text(models_dir, f) for f in ("vnm.onnx", "clip-image.onnx", "clip-text.onnx")]})
    path, meta = out / "map.sqlite", out / "map.json"
    if path.is_file() and meta.is_file():
        info = json.loads(meta.read_text(encoding="utf-8"))
        if info.get("key") == key:
            return path, info["report"], True
    meta.unlink(missing_ok=True)
    rep = build_map([log_dir], path, config=config, models_dir=models_dir, overwrite=True, progress=progress)
    report = {k: rep.as_dict()[k] for k in ("nodes", "edges", "components", "distance_source", "clip_model")}
    meta.write_text(json.dumps({"key": key, "report": report}, indent=2), encoding="utf-8")
    return path, report, False


def _eval_config(config, models_dir: Path, alpha: float | None = None, node_spacing_m: float | None = None):
    """The config with the models folder set, no fisheye rectification (the sim camera is a pinhole), the
    crops the sim VLM was trained on (``[camera] clip_crops``, :func:`robot_app.sim.model_clip_crops`;
    the config's where the model records none) and, when given, the planner's alpha and the map's node
    spacing (``[mapping] min_travel_m``). Raises :class:`EvalError` for a bad recorded ``clip_crops``."""
    try:
        crops = model_clip_crops(models_dir)
    except ValueError as exc:
        raise EvalError(str(exc)) from exc
    planner = config.planner if alpha is None else dataclasses.replace(config.planner, alpha=float(alpha))
    if node_spacing_m is not None:
        config = dataclasses.replace(config, mapping=dataclasses.replace(config.mapping,
                                                                         min_travel_m=float(node_spacing_m)))
    return dataclasses.replace(config, paths=dataclasses.replace(config.paths, models_dir=str(models_dir)),
                               camera=dataclasses.replace(config.camera, fisheye_k=[], fisheye_d=[],
                                                          clip_crops=crops or config.camera.clip_crops),
                               planner=planner)


def _setting(given, flag: str, tuned, config_key: str) -> tuple:
    """(value, where it came from): ``given`` on the command line, else ``tuned`` from
    planner-tuning.json, else None (the config's ``config_key``)."""
    if given is not None:
        return given, flag
    if tuned is not None:
        return tuned, "planner-tuning.json (eval sim-tune)"
    return None, config_key


def _start_node(xy: np.ndarray, yaw: np.ndarray, start: tuple) -> int:
    d = np.hypot(xy[:, 0] - start[0], xy[:, 1] - start[1])
    cost = d + 2.0 * (1.0 - np.cos(yaw - start[2]))
    return int(np.argmin(cost))


def _length_m(xy: np.ndarray, nodes) -> float:
    nodes = np.asarray(nodes, dtype=np.int64)
    return float(np.linalg.norm(np.diff(xy[nodes], axis=0), axis=1).sum()) if nodes.size > 1 else 0.0


class _Context:
    """Everything shared by the instructions of one run: map, models, node poses."""

    def __init__(self, world, topomap, config, models_dir: Path, log_dir: Path, settings: EvalSettings):
        import utm

        self.world, self.map, self.config, self.s = world, topomap, config, settings
        try:
            self.clip = open_clip_model(models_dir, config=config)
        except ModelMissing as exc:
            raise EvalError(f"eval sim grounds instructions with the CLIP-format VLM: {exc}") from exc
        try:
            from models.vnm import open_vnm

            self.vnm = open_vnm(models_dir, config=config)
        except ModelMissing as exc:
            log.warning("no VNM in %s (%s): the VNM execution is skipped", models_dir, exc)
            self.vnm = None
        tl = read_log(log_dir)
        n = topomap.nodes
        self.true_xy, self.true_yaw = node_true_poses(n.timestamp_s, tl.odom)
        e0, n0, _, _ = utm.from_latlon(*world.anchor_latlon)
        self.map_xy = np.stack([n.easting_m - e0, n.northing_m - n0], axis=1)
        self.map_heading = np.asarray(n.heading_rad, dtype=np.float64)
        self.csr = topomap.csr()
        self.image_emb, self.image_node = topomap.embeddings(self.clip.model_id)
        self.presence = presence_rule(config, models_dir)  # "not in the map": calibrated, else landmark_min_cosine

    def node_image(self, v: int) -> np.ndarray:
        return decode_jpeg(self.map.images(int(v))[0])


def _intended(ctx: _Context, truth: list, start: int, alpha: float):
    n = len(ctx.map.nodes)
    logp = np.full((n, len(truth)), -np.inf)
    for i, nodes in enumerate(truth):
        logp[nodes, i] = 0.0
    return plan_walk(*ctx.csr, logp, start, alpha=max(alpha, 1e-6))


#: log-likelihood of a node that shows no instance of the landmark's category, for ``grounding = "oracle"``
ORACLE_MISS_LOGP = -20.0


def _oracle_logp(ctx: _Context, ins) -> np.ndarray:
    """(N, K) log-likelihoods of a perfect CATEGORY detector: 0 at every node that counts (truth rules) as
    at ANY building or object of the category of landmark k's targets, :data:`ORACLE_MISS_LOGP` elsewhere.
    Instances stay ambiguous (every stop sign scores alike), so only the instruction's order and the walk's
    length can pick the right one: an ablation that separates the search from the VLM's errors."""
    cat = {n: c for n, c, _, _ in ctx.world.landmarks()}
    logp = np.full((len(ctx.map.nodes), len(ins.landmarks)), ORACLE_MISS_LOGP)
    for k, lm in enumerate(ins.landmarks):
        cats = {cat[t] for t in lm.targets}
        same = [n for n, c, _, _ in ctx.world.landmarks() if c in cats]
        (nodes,) = truth_node_sets(ctx.world, [same], ctx.true_xy, ctx.true_yaw, params=ctx.s.truth)
        logp[nodes, k] = 0.0
    return logp


def _plan_row(ctx: _Context, ins, parse_fn) -> tuple[dict, dict]:
    """Parse, ground and plan one instruction with both planners. Returns (row, walks by planner)."""
    cfg = ctx.config
    truth = truth_node_sets(ctx.world, [lm.targets for lm in ins.landmarks], ctx.true_xy, ctx.true_yaw,
                            params=ctx.s.truth)
    start = _start_node(ctx.true_xy, ctx.true_yaw, ins.start)
    row = {"id": ins.id, "text": ins.text, "start_node": start,
           "truth": [{"phrase": lm.phrase, "targets": list(lm.targets), "nodes": int(t.size)}
                     for lm, t in zip(ins.landmarks, truth)]}
    if ctx.s.grounding == "oracle":  # the truth's landmarks, in order (no parser)
        landmarks, used = [lm.phrase for lm in ins.landmarks], "truth"
    else:
        landmarks, used = parse_fn(ins.text)
    row["parser"], row["landmarks"] = used, landmarks
    empty = [lm.phrase for lm, t in zip(ins.landmarks, truth) if t.size == 0]
    intended = _intended(ctx, truth, start, cfg.planner.alpha) if not empty else None
    if intended is None or not intended.ok:
        row["error"] = (f"no map node counts as {', '.join(empty)}" if empty
                        else "the truth landmarks cannot be reached in order on the map")
        return row, {}
    row["intended"] = {"length_steps": round(intended.length, 2),
                       "length_m": round(_length_m(ctx.true_xy, intended.nodes), 2)}
    if ctx.s.grounding == "oracle":
        logp = _oracle_logp(ctx, ins)
    else:
        g = ground_landmarks(ctx.clip, landmarks, ctx.image_emb, ctx.image_node, n_nodes=len(ctx.map.nodes),
                             logit_scale=cfg.planner.logit_scale or None, normalise=cfg.planner.normalise,
                             min_cosine=cfg.models.landmark_min_cosine, max_cosine=cfg.planner.max_cosine,
                             presence=ctx.presence)
        logp = g.log_likelihood
        # every landmark of an instruction is in the world: a flag here is a false alarm the operator would see
        row["not_in_map"] = [lm for lm, f in zip(landmarks, g.found) if not f]
    walks, row["planners"] = {}, {}
    for name, fn in (("lmnav", plan_walk), ("max-likelihood", plan_max_likelihood)):
        r = fn(*ctx.csr, logp, start, alpha=cfg.planner.alpha)
        item = {"status": r.status.value, "success": False, "efficiency": 0.0}
        if r.ok:
            lm_nodes = r.landmark_nodes
            hits = (
                [bool(int(v) in set(t.tolist())) for v, t in zip(lm_nodes, truth)]
                if len(lm_nodes) == len(truth)
                else []
            )
            item.update(success=len(lm_nodes) == len(truth) and planning_success(lm_nodes, truth),
                        efficiency=round(planning_efficiency(intended.length, r.length), 4),
                        length_steps=round(r.length, 2), length_m=round(_length_m(ctx.true_xy, r.nodes), 2),
                        landmark_nodes=[int(v) for v in lm_nodes], landmark_hits=hits, walk_nodes=len(r.nodes))
            if len(lm_nodes) != len(truth):
                item["note"] = f"parser found {len(lm_nodes)} landmark(s), the truth has {len(truth)}"
            walks[name] = r
        row["planners"][name] = item
    return row, walks


def _execute(ctx: _Context, row: dict, walk, seed: int) -> None:
    """Drive the LM-Nav walk with the VNM and with GPS only, re-planned as the route job does after a
    failure; add the results to ``row``."""
    cfg = sim_nav_config(ctx.config)
    options = nav_options(cfg)
    nodes = np.asarray(walk.nodes)
    intended_m = row["intended"]["length_m"]
    row["executions"] = {}
    modes = (["vnm"] if ctx.vnm is not None else []) + ["gps"]
    camera = {"width": ctx.s.width, "height": ctx.s.height, "hfov_deg": ctx.s.hfov_deg}
    for mode in modes:
        sw = _sim_walk(ctx, nodes, tuple(int(p) for p in walk.landmark_positions), images=mode == "vnm")
        res = drive_walk(ctx.world, sw, mode=mode, options=options, vnm=ctx.vnm, camera=camera, params=ctx.s.drive,
                         seed=seed, replan=_replanner(ctx, cfg, images=mode == "vnm"),
                         max_replans=cfg.mission.max_replans, gps_after_lost_m=cfg.vnm_nav.gps_after_lost_m)
        item = res.as_dict()
        item["efficiency"] = round(min(1.0, intended_m / res.driven_m), 4) if res.reached and res.driven_m > 0 else 0.0
        item["success"] = bool(res.reached and row["planners"]["lmnav"]["success"])
        row["executions"][f"lmnav-{mode}"] = item


def _sim_walk(ctx: _Context, nodes: np.ndarray, landmarks: tuple, *, images: bool):
    return SimWalk(ctx.true_xy[nodes], ctx.map_xy[nodes], ctx.map_heading[nodes],
                   [ctx.node_image(v) for v in nodes] if images else None, nodes, landmarks)


def _replanner(ctx: _Context, cfg, *, images: bool):
    """The route job's re-plan (:meth:`robot_app.jobs.mission.MissionExecutive.replan_from_here`) on the eval's
    map: from the map node nearest the fix (within ``[mission] start_max_distance_m``) through the walk's
    landmarks after the walk index reached, with ``[planner] planner``; None when it cannot."""
    from robot_app.route.planning import PLANNERS

    def replan(sw, reached: int, fix_xy):
        d = np.hypot(ctx.map_xy[:, 0] - fix_xy[0], ctx.map_xy[:, 1] - fix_xy[1])
        start = int(np.argmin(d))
        if not d[start] <= cfg.mission.start_max_distance_m or sw.nodes is None:
            return None
        targets = [int(sw.nodes[p]) for p in sw.landmarks if p > reached] or [int(sw.nodes[-1])]
        logp = np.full((len(ctx.map.nodes), len(targets)), -np.inf)
        logp[np.asarray(targets), np.arange(len(targets))] = 0.0
        r = PLANNERS[cfg.planner.planner](*ctx.csr, logp, start, alpha=max(cfg.planner.alpha, 1e-6))
        if not r.ok:
            return None
        return _sim_walk(ctx, np.asarray(r.nodes), tuple(int(p) for p in r.landmark_positions), images=images)

    return replan


def eval_instruction(ctx: _Context, k: int, ins, parse_fn) -> dict:
    """The report row of instruction ``k`` of the set: parsed, grounded and planned, then (``execute``)
    driven with the seed ``seed + 101 k``, so a row does not depend on which process computes it."""
    row, walks = _plan_row(ctx, ins, parse_fn)
    if ctx.s.execute and "lmnav" in walks:
        _execute(ctx, row, walks["lmnav"], ctx.s.seed + 101 * k)
    return row


def open_eval_context(settings: EvalSettings, cfg, models_dir, map_path, log_dir):
    """``(context, parse_fn, close)`` for evaluating instructions on a built map in this process (the
    local loop, or one Ray worker of ``eval sim --engine ray``: robot_app.sim.eval_ray)."""
    topomap = open_map(map_path)
    try:
        ctx = _Context(load_world(settings.world), topomap, cfg, Path(models_dir), Path(log_dir), settings)
    except BaseException:
        topomap.close()
        raise

    def parse_fn(text):
        return parse_instruction(text, config=cfg, parser=settings.parser)
    return ctx, parse_fn, topomap.close


def run_sim_eval(settings: EvalSettings, config, rows_fn=None) -> dict:
    """Run the evaluation (module docstring); returns the JSON-ready report and writes it to the output folder.

    ``rows_fn(settings, cfg, models_dir, map_path, log_dir, items) -> list of rows`` evaluates the
    instructions elsewhere (``eval sim --engine ray``: :func:`robot_app.sim.eval_ray.eval_rows_on_ray`); by
    default they run here, one after the other. Either way each row is :func:`eval_instruction`'s.

    Raises
    ------
    EvalError
        Missing CLIP model, an exploration route that does not reach its end.
    robot_app.sim.world.WorldError, robot_app.sim.eval_instructions.InstructionFileError
        Bad world or instruction file.
    """
    from tqdm import tqdm

    t0 = time.perf_counter()
    world = load_world(settings.world)
    ipath = Path(settings.instructions) if settings.instructions else shipped_instructions(world.name)
    iset = load_instructions(ipath, world=world)
    items = iset.instructions[: settings.limit] if settings.limit else iset.instructions
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models_dir = Path(settings.models_dir) if settings.models_dir else default_models_dir(config)
    if not (models_dir / config.models.clip_image_file).is_file():
        raise EvalError(f"{models_dir}: no CLIP-format model ({config.models.clip_image_file}); eval sim needs the "
                        "sim VLM (robot_app/data/models/sim) or --models DIR")

    tuned = tuned_planner(models_dir) or {}
    # each from the command line, else as chosen with the models (eval sim-tune), else the config
    alpha, alpha_source = _setting(settings.alpha, "--alpha", tuned.get("alpha"), "[planner] alpha")
    cap, cap_source = _setting(settings.max_cosine, "--max-cosine", tuned.get("max_cosine"), "[planner] max_cosine")
    cfg = _eval_config(config, models_dir, alpha, settings.node_spacing_m)
    if cap is not None:
        cfg = dataclasses.replace(cfg, planner=dataclasses.replace(cfg.planner, max_cosine=float(cap)))
    log_dir, explore_info, explore_cached = _explore(world, iset, settings, out)
    map_path, build_info, map_cached = _build(log_dir, models_dir, cfg, explore_info["key"], out, settings.progress)
    ctx, parse_fn, close = open_eval_context(settings, cfg, models_dir, map_path, log_dir)
    try:
        if rows_fn is not None:
            rows = rows_fn(settings, cfg, models_dir, map_path, log_dir, items)
        else:
            rows = [eval_instruction(ctx, k, ins, parse_fn)
                    for k, ins in enumerate(tqdm(items, desc=f"eval {world.name}", unit="instruction",
                                                 disable=not settings.progress, leave=False, dynamic_ncols=True))]
    finally:
        close()
    report = {"world": world.name, "instructions_file": str(ipath), "models_dir": str(models_dir),
              "models": {"clip": ctx.clip.model_id, "vnm": getattr(ctx.vnm, "model_id", None)},
              "seed": settings.seed, "alpha": cfg.planner.alpha, "alpha_source": alpha_source,
              "max_cosine": cfg.planner.max_cosine, "max_cosine_source": cap_source,
              "grounding": settings.grounding,
              "logit_scale": cfg.planner.logit_scale or ctx.clip.logit_scale, "normalise": cfg.planner.normalise,
              "presence_rule": {"threshold": ctx.presence.threshold, "median_weight": ctx.presence.median_weight,
                                "source": ctx.presence.source},
              "node_spacing_m": cfg.mapping.min_travel_m,
              "parser": settings.parser or cfg.llm.landmark_parser,
              "engine": "local" if rows_fn is None else "ray",
              "exploration": {**{k: v for k, v in explore_info.items() if k != "key"}, "cached": explore_cached},
              "map": {**build_info, "cached": map_cached},
              "truth_params": dataclasses.asdict(settings.truth), "drive_params": dataclasses.asdict(settings.drive),
              "nav_options": _nav_options_dict(cfg),
              "instructions": rows}
    report["totals"] = summarise(rows, executed=settings.execute)
    report["targets"] = _targets(report["totals"])
    report["chart"] = str(write_chart(report, out / f"eval-{world.name}.png"))
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    path = out / f"eval-{world.name}.json"
    report["report"] = str(path)
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


def _nav_options_dict(cfg) -> dict:
    """The navigation policy's options the walks were driven with (JSON-ready)."""
    return dataclasses.asdict(nav_options(sim_nav_config(cfg)))


def _targets(totals: dict) -> dict:
    """The evaluation's targets: LM-Nav planning success >= 85 % (the paper's figure, LM-Nav Sec. 5), planning
    efficiency above the max-likelihood planner's.

    Efficiency is compared over all instructions with 0 for a failed plan (``efficiency_mean_all``):
    the mean over successful plans is undefined for a planner without any.
    """
    p = totals["planning"]
    lm, ml = p.get("lmnav", {}), p.get("max-likelihood", {})
    ok_rate = lm.get("success_rate")
    e_lm, e_ml = lm.get("efficiency_mean_all"), ml.get("efficiency_mean_all")
    return {"lmnav_planning_success_at_least_0.85": bool(ok_rate is not None and ok_rate >= 0.85),
            "lmnav_efficiency_above_max_likelihood": bool(e_lm is not None and e_ml is not None and e_lm > e_ml)}
