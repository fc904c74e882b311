"""``robot-app eval sim-tune``: choose the planner's alpha on generated DEVELOPMENT instructions.

The walk objective (LM-Nav, Shah et al. 2022, Sec. 4; docs/design.md, "Walk-search objective") trades the grounding
log-likelihoods ``G(v, i)`` against ``alpha`` times the walk length in VNM time steps. What matters is
alpha against the logit scale of the grounding model; neither has a value that holds for every pair of
models, so alpha is chosen on data. It must not be chosen on the instruction sets that report the
figures (``robot-app eval sim``): this module generates a separate development set per world from the
world's ground truth alone, seeded, and measures LM-Nav planning success on it over a grid of alphas.

A development instruction (:func:`generate_dev_set`):

- a stretch of the exploration drive (:data:`DRIVE_NODES` consecutive map nodes from a random start
  node, which is the instruction's start);
- K = 2-4 distinct landmark categories that the stretch passes, in the order it first sees them (as an
  operator who watched that drive would name them), each with an instance seen from at least
  :data:`MIN_SEEN_NODES` map nodes (ground truth of :mod:`robot_app.sim.eval_truth`), named by one of
  the category's phrasings (:data:`robot_app.sim.views.PHRASES`, train and held-out phrasings alike, as
  an operator words them);
- its truth: the walk a perfect CATEGORY detector plans (log-likelihood 0 at every node that sees an
  instance of the category, :data:`robot_app.sim.eval.ORACLE_MISS_LOGP` elsewhere) on the TRUE
  geometry of the map's nodes (:func:`true_graph`: nodes at most :data:`TRUE_LINK_M` apart in the world
  are joined, weighted by their true distance), not on the map's own edges: the instance of
  each category that the shortest walk visiting them in order passes (an instruction whose walk would
  use an instance seen from fewer nodes is not asked). That is the premise of LM-Nav's search: where a
  category has several instances, the instruction's order picks the one on the way. Where another
  instance gives a walk at most :data:`AMBIGUOUS_LENGTH` longer, the order does not pick one (an operator
  would have to say which) and either counts. A plan succeeds when each of its landmark nodes sees one
  of the truth's instances (LM-Nav Sec. 5, planning success).

The truth must not come from the map under test: the map's VNM edges can hold false shortcuts (the
VNM calling two places close that are not), and a truth planned on them would call the walk through a
wall right. On the true geometry, the development set measures the map's edges as well as alpha.

No parser runs (the phrases are given): the tuning concerns grounding and search only.

The same development sets choose the grounding's cosine cap (``[planner] max_cosine``,
:mod:`core.grounding`) from a grid that includes 1 (off). With ``write``, the chosen alpha and cap are
recorded in the models folder (:func:`write_tuning`); ``robot-app eval sim`` and ``robot-app demo`` then
plan with them for those model files (:func:`robot_app.sim.tuned_planner`; ``--alpha`` overrides the
alpha).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.grounding import log_likelihoods, node_similarity
from core.mapstore import open_map
from core.search import plan_walk
from robot_app.sim import TUNING_FILE, _model_digest
from robot_app.sim import eval as ev
from robot_app.sim.eval import ORACLE_MISS_LOGP
from robot_app.sim.eval_instructions import load_instructions, shipped_instructions
from robot_app.sim.eval_truth import TruthParams, truth_node_sets
from robot_app.sim.views import PHRASES
from robot_app.sim.world import load_world

__all__ = ["DevInstruction", "TuneSettings", "DEFAULT_ALPHAS", "DEFAULT_MAX_COSINES", "MIN_SEEN_NODES",
           "generate_dev_set", "dev_success", "pick_alpha", "pick_cap", "run_sim_tune", "write_tuning", "true_graph",
           "TRUE_LINK_M"]

log = logging.getLogger(__name__)

#: Default alpha grid (per VNM time step), log-spaced over two and a half decades.
DEFAULT_ALPHAS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
#: Default grid of the grounding's cosine saturation (``[planner] max_cosine``, :mod:`core.grounding`):
#: 1 = off (LM-Nav's objective), then caps around the sim VLM's seen-target cosine (0.5). Fitted to the
#: sim VLM: real CLIP's cosines sit around 0.2-0.35, where every cap of this grid but the last is off.
DEFAULT_MAX_COSINES: tuple[float, ...] = (1.0, 0.5, 0.48, 0.46, 0.44, 0.42)
#: A landmark instance is asked for only when at least this many map nodes see it (ground truth): about
#: as many metres of the exploration (1 m node spacing). Instances glimpsed from a node or two (an object
#: at the edge of the frame at the end of its viewing range) are not landmarks an operator would name.
MIN_SEEN_NODES = 5
#: Relative walk-length margin within which two instances of a landmark are both accepted (see above).
AMBIGUOUS_LENGTH = 0.1
#: Length of the stretch of the exploration drive a development instruction describes, in map nodes
#: (about metres at the 1 m node spacing): low, high.
DRIVE_NODES = (40, 200)
#: Map nodes at most this far apart (true positions, metres) are joined in the truth's graph: with the
#: 1 m node spacing, neighbours along a path and across its width and crossings, never through a
#: building (paths are farther apart than this). Scaled up with a wider node spacing (:func:`true_graph`).
TRUE_LINK_M = 3.0
#: The generic building category names every building: not a landmark of its own here.
_SKIP_CATEGORIES = frozenset({"building"})


@dataclass(frozen=True)
class DevInstruction:
    """One generated development instruction (module docstring).

    ``truth_nodes[k]`` is the (M,) int64 array of map nodes that see one of ``targets[k]``.
    """

    id: str
    start_node: int
    categories: tuple[str, ...]
    phrases: tuple[str, ...]
    targets: tuple[tuple[str, ...], ...]
    truth_nodes: tuple[np.ndarray, ...]

    def as_dict(self) -> dict:
        return {"id": self.id, "start_node": self.start_node, "categories": list(self.categories),
                "phrases": list(self.phrases), "targets": [list(t) for t in self.targets],
                "truth_nodes": [int(t.size) for t in self.truth_nodes]}


@dataclass(frozen=True)
class TuneSettings:
    """What ``robot-app eval sim-tune`` runs (CLI options)."""

    worlds: tuple[str, ...]
    out_dir: str
    models_dir: str | None = None
    instructions: str | None = None  # whose exploration route records the map (default: the world's shipped set)
    n: int = 300  # per world: 60 chose within the noise (docs/evaluation.md, "Evaluation in simulation": alpha)
    seed: int = 1
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    max_cosines: tuple[float, ...] = DEFAULT_MAX_COSINES
    logit_scale: float | None = None
    write: bool = False  # record the chosen alpha and cap in the models folder (robot_app.sim.TUNING_FILE)
    progress: bool = False
    truth: TruthParams = TruthParams()


def true_graph(xy: np.ndarray, *, link_m: float = TRUE_LINK_M) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The map nodes' true geometry as a graph, in :func:`core.search.plan_walk`'s CSR form.

    Parameters
    ----------
    xy
        (N, 2) float true node positions (m, world frame), in recording order.
    link_m
        Join nodes at most this far apart. Raised to 1.6 x the median distance between consecutive
        nodes when that is larger (a map built with a wider node spacing).

    Returns
    -------
    indptr (N+1,) int64, indices (E,) int64, weights (E,) float32: true distances in metres, each edge
    listed in both directions.

    Raises
    ------
    ValueError
        ``xy`` not (N, 2) finite, or ``link_m <= 0``.
    """
    from scipy.spatial import cKDTree

    xy = np.asarray(xy, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2 or not np.all(np.isfinite(xy)):
        raise ValueError(f"xy: expected (N, 2) finite positions, got shape {xy.shape}")
    if not link_m > 0:
        raise ValueError(f"link_m: expected > 0, got {link_m}")
    n = xy.shape[0]
    if n > 2:
        link_m = max(link_m, 1.6 * float(np.median(np.hypot(*np.diff(xy, axis=0).T))))
    pairs = cKDTree(xy).query_pairs(link_m, output_type="ndarray") if n > 1 else np.zeros((0, 2), np.int64)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]]).astype(np.int64)
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]]).astype(np.int64)
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, src + 1, 1)
    w = np.hypot(*(xy[src] - xy[dst]).T).astype(np.float32)
    return np.cumsum(indptr), np.ascontiguousarray(dst[order]), np.ascontiguousarray(w[order])


def generate_dev_set(world, csr, xy: np.ndarray, yaw: np.ndarray, *, n: int, seed: int,
                     params: TruthParams = TruthParams(), k_range: tuple[int, int] = (2, 4)) -> list[DevInstruction]:
    """Generate ``n`` development instructions for a map of ``world`` (module docstring).

    Parameters
    ----------
    world
        The :class:`robot_app.sim.world.World` the map was recorded in.
    csr
        ``(indptr, indices, weights)`` of the graph the truth is planned on: :func:`true_graph` of
        ``xy`` (what :func:`run_sim_tune` passes), or ``None`` for that.
    xy, yaw
        (N, 2) float true node positions (m, world frame) and (N,) headings (rad).
    n, seed
        Number of instructions and the seed of their draw (``numpy.random.default_rng``).
    params
        Ground-truth viewing rules.
    k_range
        Smallest and largest number of landmarks per instruction.

    Returns
    -------
    list of :class:`DevInstruction` (fewer than ``n`` only when the world offers too few categories).

    Raises
    ------
    ValueError
        ``n < 1`` or a bad ``k_range``.
    """
    if n < 1:
        raise ValueError(f"n: expected >= 1, got {n}")
    if not 1 <= k_range[0] <= k_range[1]:
        raise ValueError(f"k_range: expected 1 <= low <= high, got {k_range}")
    xy = np.asarray(xy, dtype=np.float64)
    n_nodes = xy.shape[0]
    if csr is None:
        csr = true_graph(xy)
    by_cat: dict[str, list[str]] = {}
    for name, cat, _, _ in world.landmarks():
        if cat in PHRASES and cat not in _SKIP_CATEGORIES:
            by_cat.setdefault(cat, []).append(name)
    inst_nodes: dict[str, np.ndarray] = {}
    for names in by_cat.values():
        for name, nodes in zip(names, truth_node_sets(world, [[m] for m in names], xy, yaw, params=params)):
            inst_nodes[name] = nodes
    cats = sorted(c for c, names in by_cat.items() if any(inst_nodes[m].size >= MIN_SEEN_NODES for m in names))
    if len(cats) < k_range[0]:
        log.warning("%s: only %d landmark categories seen from the map: no development set", world.name, len(cats))
        return []
    rng = np.random.default_rng(seed)
    out: list[DevInstruction] = []
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        # a stretch of the exploration drive (node ids are in recording order), and the categories in
        # the order it first sees them: what an operator who watched that drive would name
        start = int(rng.integers(n_nodes))
        end = min(n_nodes, start + int(rng.uniform(*DRIVE_NODES)))
        first: dict[str, int] = {}
        for c in cats:
            for m in by_cat[c]:
                nodes = inst_nodes[m]
                if nodes.size >= MIN_SEEN_NODES:
                    on = nodes[(nodes >= start) & (nodes < end)]
                    if on.size:
                        first[c] = min(first.get(c, n_nodes), int(on[0]))
        if len(first) < k_range[0]:
            continue
        seen = sorted(first, key=first.__getitem__)
        k = int(rng.integers(k_range[0], min(k_range[1], len(seen)) + 1))
        chosen = [seen[i] for i in sorted(rng.choice(len(seen), size=k, replace=False))]
        logp = np.full((n_nodes, k), ORACLE_MISS_LOGP)
        for j, c in enumerate(chosen):
            for m in by_cat[c]:
                logp[inst_nodes[m], j] = 0.0
        r = plan_walk(*csr, logp, start, alpha=0.01)
        if not r.ok or np.any(logp[r.landmark_nodes, np.arange(k)] < 0):
            continue
        targets = tuple(tuple(m for m in by_cat[c] if int(v) in set(inst_nodes[m].tolist()))
                        for c, v in zip(chosen, r.landmark_nodes))
        if any(max(inst_nodes[m].size for m in t) < MIN_SEEN_NODES for t in targets):
            continue
        targets = tuple(t + _near_equal(csr, logp, start, j, [m for m in by_cat[c] if m not in t], inst_nodes,
                                        r.length * (1.0 + AMBIGUOUS_LENGTH))
                        for j, (c, t) in enumerate(zip(chosen, targets)))
        truth = tuple(np.unique(np.concatenate([inst_nodes[m] for m in t])) for t in targets)
        phrases = tuple(str(rng.choice(PHRASES[c][0] + PHRASES[c][1])) for c in chosen)
        out.append(DevInstruction(id=f"{world.name}-dev-{len(out) + 1:03d}", start_node=start,
                                  categories=tuple(chosen), phrases=phrases, targets=targets, truth_nodes=truth))
    return out


def _near_equal(csr, logp: np.ndarray, start: int, k: int, others, inst_nodes, max_length: float) -> tuple:
    """The instances among ``others`` that landmark ``k``'s walk can use at most ``max_length`` long."""
    out = []
    for m in others:
        if inst_nodes[m].size < MIN_SEEN_NODES:
            continue
        forced = logp.copy()
        forced[:, k] = ORACLE_MISS_LOGP
        forced[inst_nodes[m], k] = 0.0
        r = plan_walk(*csr, forced, start, alpha=0.01)
        if r.ok and r.length <= max_length and np.isin(r.landmark_nodes[k], inst_nodes[m]) \
                and np.all(forced[r.landmark_nodes, np.arange(forced.shape[1])] == 0.0):
            out.append(m)
    return tuple(out)


def dev_success(csr, logp: np.ndarray, ins: DevInstruction, alpha: float) -> bool:
    """Planning success of LM-Nav search on one development instruction (each landmark node of the
    planned walk sees the truth's instance)."""
    r = plan_walk(*csr, logp, ins.start_node, alpha=alpha)
    if not r.ok or len(r.landmark_nodes) != len(ins.truth_nodes):
        return False
    return all(bool(np.isin(int(v), t)) for v, t in zip(r.landmark_nodes, ins.truth_nodes))


def pick_alpha(alphas, success) -> float:
    """The alpha of the highest success rate; among ties, the middle of the longest run of neighbouring
    grid values that tie (the centre of the plateau, the choice least sensitive to the grid): its middle
    value, or the geometric mean of its two middle values.

    Parameters
    ----------
    alphas : (A,) increasing floats > 0
    success : (A,) success rates, or (A, W) per world (the mean over worlds counts)
    """
    a = np.asarray(alphas, dtype=np.float64)
    s = np.asarray(success, dtype=np.float64)
    s = s.mean(axis=1) if s.ndim == 2 else s
    if a.ndim != 1 or a.size == 0 or s.shape != a.shape:
        raise ValueError(f"alphas {a.shape} and success {s.shape}: expected matching non-empty 1-D arrays")
    best = np.flatnonzero(np.isclose(s, s.max()))
    runs = np.split(best, np.flatnonzero(np.diff(best) > 1) + 1)
    run = a[max(runs, key=len)]
    mid = len(run) // 2
    return float(run[mid]) if len(run) % 2 else float(math.sqrt(run[mid - 1] * run[mid]))


def pick_cap(caps, alphas, rates_by_cap) -> tuple[float, float]:
    """The cosine cap and alpha to plan with: the cap whose mean success over the worlds is highest at
    its best alpha, then that cap's :func:`pick_alpha`.

    A lower cap must be strictly better than every larger one: among ties the largest cap is kept, the
    nearest to LM-Nav's objective (1 = off). Any gain counts, even one instruction; the caller's
    development sets must be large enough for that to mean something.

    Parameters
    ----------
    caps : iterable of floats in (-1, 1]
    alphas : (A,) increasing floats > 0
    rates_by_cap : {cap: (W, A) success rates per world and alpha}

    Returns
    -------
    (cap, alpha)

    Raises
    ------
    ValueError
        No cap, or a cap without its rates or with rates of the wrong shape.
    """
    caps = sorted((float(c) for c in caps), reverse=True)
    if not caps:
        raise ValueError("caps: expected at least one cap")
    best = None
    for cap in caps:
        if cap not in rates_by_cap:
            raise ValueError(f"rates_by_cap: no success rates for the cap {cap:g}")
        rates = np.asarray(rates_by_cap[cap], dtype=np.float64)
        if rates.ndim != 2 or rates.shape[1] != len(alphas):
            raise ValueError(f"rates_by_cap[{cap:g}]: expected shape (worlds, {len(alphas)}), got {rates.shape}")
        score = float(rates.mean(axis=0).max())  # pick_alpha's choice lies on this plateau
        if best is None or score > best[0] + 1e-9:
            best = (score, cap, pick_alpha(alphas, rates.T))
    return best[1], best[2]


def dev_grid(ctx, ins: DevInstruction, caps, alphas, scale: float) -> np.ndarray:
    """Planning success of one development instruction for every (cosine cap, alpha): bool
    ``(len(caps), len(alphas))``; ``ctx`` is an evaluation context (robot_app.sim.eval.open_eval_context)."""
    text = ctx.clip.encode_landmarks(list(ins.phrases))
    cos = node_similarity(ctx.image_emb, ctx.image_node, text, n_nodes=len(ctx.map.nodes))
    out = np.zeros((len(caps), len(alphas)), dtype=bool)
    for c, cap in enumerate(caps):
        logp = log_likelihoods(cos, logit_scale=scale, normalise=ctx.config.planner.normalise, max_cosine=cap)
        for i, a in enumerate(alphas):
            out[c, i] = dev_success(ctx.csr, logp, ins, a)
    return out


def run_sim_tune(settings: TuneSettings, config, grid_fn=None) -> dict:
    """Generate the development sets, measure LM-Nav planning success per alpha and per cosine cap
    (``[planner] max_cosine``), and pick both (:func:`pick_cap`).

    The report holds ``alphas``, ``max_cosines`` (the grid, largest first), the chosen ``alpha`` and
    ``max_cosine``, ``mean_success_rate`` per alpha at the chosen cap, and per world
    ``success_rate_by_max_cosine`` (keyed by the cap as ``f"{cap:g}"``: ``"1"``, ``"0.46"``) and
    ``success_rate`` (the chosen cap's).

    Uses (or records and builds) the same exploration and map as ``robot-app eval sim`` in
    ``out_dir/<world>``. Returns the JSON-ready report, also written to ``out_dir/sim-tune.json``, with a
    chart ``out_dir/sim-tune.png`` (success rate against alpha, per world); with ``settings.write`` also
    :func:`write_tuning` (the report's ``written`` is that file). ``grid_fn(settings, cfg, models_dir, map_path,
    log_dir, dev, caps, alphas, logit_scale) -> bool (caps, alphas, instructions)`` computes the grid
    elsewhere (``--engine ray``: :func:`robot_app.sim.eval_ray.dev_grid_on_ray`); each column is
    :func:`dev_grid`'s either way.

    Raises
    ------
    robot_app.sim.eval.EvalError, robot_app.sim.world.WorldError,
    robot_app.sim.eval_instructions.InstructionFileError
        As ``robot-app eval sim``.
    ValueError
        An empty or non-positive alpha grid, an empty cap grid or a cap outside (-1, 1], ``n < 1``.
    """
    alphas = tuple(sorted(float(a) for a in settings.alphas))
    if not alphas or alphas[0] <= 0 or not all(math.isfinite(a) for a in alphas):
        raise ValueError(f"alphas: expected finite values > 0, got {settings.alphas}")
    try:  # each cap as its report key reads back ("0.46"), so that two caps never share a key
        caps = tuple(sorted({float(f"{float(c):g}") for c in settings.max_cosines}, reverse=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"max_cosines: expected numbers, got {settings.max_cosines}") from exc
    if not caps or not all(math.isfinite(c) and -1.0 < c <= 1.0 for c in caps):
        raise ValueError(f"max_cosines: expected values in (-1, 1], got {settings.max_cosines}")
    t0 = time.perf_counter()
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models_dir = Path(settings.models_dir) if settings.models_dir else ev.default_models_dir(config)
    cfg = ev._eval_config(config, models_dir, None, 1.0)
    report: dict = {"models_dir": str(models_dir), "n": settings.n, "seed": settings.seed, "alphas": list(alphas),
                    "max_cosines": list(caps), "worlds": {}}
    for wname in settings.worlds:
        world = load_world(wname)
        es = ev.EvalSettings(world=wname, out_dir=str(out / world.name), models_dir=str(models_dir),
                             truth=settings.truth, progress=settings.progress)
        wout = Path(es.out_dir)
        wout.mkdir(parents=True, exist_ok=True)
        sibling = Path(wname).with_name(f"{Path(wname).stem}-instructions.json")  # a generated world's set
        ipath = (Path(settings.instructions) if settings.instructions
                 else sibling if Path(wname).suffix == ".toml" and sibling.is_file()
                 else shipped_instructions(world.name))
        iset = load_instructions(ipath, world=world)  # its exploration route only, never its instructions
        log_dir, info, _ = ev._explore(world, iset, es, wout)
        map_path, _, _ = ev._build(log_dir, models_dir, cfg, info["key"], wout, settings.progress)
        with open_map(map_path) as topomap:
            ctx = ev._Context(world, topomap, cfg, models_dir, log_dir, es)
            scale = settings.logit_scale or cfg.planner.logit_scale or ctx.clip.logit_scale
            dev = generate_dev_set(world, None, ctx.true_xy, ctx.true_yaw, n=settings.n, seed=settings.seed,
                                   params=settings.truth)
            if grid_fn is not None and dev:
                ok = grid_fn(es, cfg, models_dir, map_path, log_dir, dev, caps, alphas, float(scale))
            else:
                ok = np.zeros((len(caps), len(alphas), len(dev)), dtype=bool)
                for j, ins in enumerate(dev):
                    ok[:, :, j] = dev_grid(ctx, ins, caps, alphas, scale)
        report["worlds"][world.name] = {
            "instructions": len(dev), "logit_scale": float(scale), "clip_model": ctx.clip.model_id,
            "vnm_model": getattr(ctx.vnm, "model_id", None),
            "success_rate_by_max_cosine": {f"{cap:g}": [round(float(x), 4) for x in ok[c].mean(axis=1)] if dev else []
                                           for c, cap in enumerate(caps)},
            "dev_set": [d.as_dict() for d in dev]}
    worlds = [w for w in report["worlds"].values() if w["instructions"]]
    if not worlds:
        raise ValueError("no development instruction could be generated for these worlds")
    report["max_cosine"], report["alpha"] = pick_cap(
        caps, alphas, {cap: [w["success_rate_by_max_cosine"][f"{cap:g}"] for w in worlds] for cap in caps})
    key = f"{report['max_cosine']:g}"
    for w in report["worlds"].values():
        w["success_rate"] = w["success_rate_by_max_cosine"][key]
    rates = [w["success_rate"] for w in worlds]
    report["mean_success_rate"] = [round(float(x), 4) for x in np.mean(rates, axis=0)]
    report["chart"] = str(_chart(report, out / "sim-tune.png"))
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    path = out / "sim-tune.json"
    report["report"] = str(path)
    _write_json(path, report)
    if settings.write:
        report["written"] = str(write_tuning(models_dir, report))
        _write_json(path, report)
    return report


def _write_json(path: Path, doc: dict) -> None:
    """Write JSON atomically (a temporary file, then a rename): a power cut leaves the old file or the new."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    tmp.replace(path)


def write_tuning(models_dir, report: dict) -> Path:
    """Record the chosen alpha and cosine cap in ``models_dir/`` :data:`robot_app.sim.TUNING_FILE`, with the
    sha256 of the CLIP image encoder and of the VNM they were chosen for (:func:`robot_app.sim.tuned_planner`
    ignores them for other files) and the development figures. Returns the file's path.

    Raises
    ------
    OSError
        The folder is not writable.
    """
    d = Path(models_dir)
    i = int(np.argmin(np.abs(np.log(np.asarray(report["alphas"])) - math.log(report["alpha"]))))
    doc = {"alpha": report["alpha"], "unit": "per VNM time step (core.search)",
           "max_cosine": report.get("max_cosine", 1.0),
           "chosen_by": "robot-app eval sim-tune", "seed": report["seed"], "n_per_world": report["n"],
           "worlds": {name: {"instructions": w["instructions"], "logit_scale": w["logit_scale"],
                             "success_rate_at_alpha": w["success_rate"][i] if w["success_rate"] else None}
                      for name, w in report["worlds"].items()},
           "clip_image_sha256": _model_digest(d, "clip-image.onnx.json"),
           "vnm_sha256": _model_digest(d, "vnm.onnx.json")}
    gen = sorted(int(n[4:]) for n in report["worlds"] if n.startswith("gen-") and n[4:].isdigit())
    if gen:  # generated worlds: the seeds tuned on, checked against the training and test ranges
        from robot_app.sim.worldgen import split_of

        doc["tuning_seeds"] = gen
        doc["tuning_splits"] = sorted({split_of(g) or "none" for g in gen})
    path = d / TUNING_FILE
    _write_json(path, doc)
    return path


def _chart(report: dict, path: Path) -> Path:
    """Success rate against alpha (log axis), one line per world, the chosen alpha marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for name, w in report["worlds"].items():
        if w["success_rate"]:
            ax.plot(report["alphas"], [100 * x for x in w["success_rate"]], marker="o",
                    label=f"{name} ({w['instructions']} instructions)")
    off = [w["success_rate_by_max_cosine"].get("1") for w in report["worlds"].values() if w["instructions"]]
    if report.get("max_cosine", 1.0) < 1.0 and off and all(off):
        ax.plot(report["alphas"], [100 * x for x in np.mean(off, axis=0)], color="grey", linestyle=":", marker=".",
                label="mean without the cosine cap")
    ax.axvline(report["alpha"], color="k", linestyle="--", linewidth=1,
               label=f"chosen alpha {report['alpha']:.3g}, max_cosine {report.get('max_cosine', 1.0):g}")
    ax.set_xscale("log")
    ax.set_xlabel("alpha (per VNM time step)")
    ax.set_ylabel("LM-Nav planning success, dev. set (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

