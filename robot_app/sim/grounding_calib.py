"""``robot-app models calibrate-grounding --worlds``: the "not in the map" threshold of a CLIP model pair, measured
on maps of simulated worlds whose landmarks are known.

For each world (a shipped name or a world file: generated development worlds can be passed as files) and
each of its explorations (:func:`explorations`: the route of the world's shipped instruction set if it has
one, and each of its paths), the exploration is recorded and the map built as
``robot-app eval sim`` does (cached in the output folder), every node gets its TRUE pose, and each
landmark phrase is labelled against the map:

- **present**: a category of the world that at least :data:`MIN_SEEN_NODES` map nodes see (the ground
  truth of :mod:`robot_app.sim.eval_truth`), with each of its phrasings (:data:`robot_app.sim.views.PHRASES`,
  the train and the held-out ones, reported apart);
- **absent**: a catalogue category that no map node comes near even by the wide rules of
  :data:`FAR_TRUTH` (twice the view distances, all round; the world lacks it or the drive never came
  near one), with each of its phrasings, and every phrase of :data:`MADE_UP_ABSENT` (things no world
  has: "purple elephant", "red telephone box", ...);
- neither (seen from a node or four, or only by the wide rules): left out, and counted.

Each (map, phrase) is one sample. Its presence score (:mod:`core.presence`) at ``median_weight`` is
computed from the map's node cosines, the threshold with the best balanced accuracy is chosen
(:func:`core.presence.choose_threshold`), and the report gives the confusion figures overall, per world,
per kind of phrase, with each world left out in turn (threshold chosen on the others), for the raw best
cosine, and for the uncalibrated config rule. The figures are IN-SAMPLE for the worlds given: the
shipped worlds are tuning material (and the worlds the shipped sim VLM was trained on, which the report
says when the model's sidecar lists them); report real figures on held-out worlds.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.grounding import node_similarity
from core.mapstore import open_map
from core.presence import DEFAULT_MEDIAN_WEIGHT, choose_threshold, confusion, presence_scores, threshold_for_absent_rate
from robot_app.sim import eval as ev
from robot_app.sim.eval_truth import TruthParams, truth_node_sets
from robot_app.sim.views import PHRASES
from robot_app.sim.world import load_world

__all__ = ["CalibrationSettings", "MADE_UP_ABSENT", "FAR_TRUTH", "MIN_SEEN_NODES", "MIN_BALANCED_ACCURACY",
           "MIN_SAMPLES", "QUICK_M", "explorations", "label_phrases", "summarise", "run_grounding_calibration",
           "calibration_doc", "write_refusal"]

log = logging.getLogger(__name__)

#: Things no simulated world has (absent from every map): everyday outdoor things, some of them near a
#: catalogue category in words or colour (a red telephone box, a red fire truck, a traffic light, a flag pole).
MADE_UP_ABSENT: tuple[str, ...] = (
    "purple elephant", "red telephone box", "a yellow school bus", "a fountain", "a bicycle", "a swimming pool",
    "a helicopter", "a statue of a horse", "a red fire truck", "a wind turbine", "a giraffe", "a sailboat",
    "a windmill", "a playground slide", "a hot air balloon", "a phone booth", "a bus stop", "a motorcycle",
    "a vending machine", "a flag pole", "a pink flamingo", "a church", "a parking meter", "a traffic light")
#: The wide truth rules an ABSENT category must escape: twice the distances of the ground truth, all round.
FAR_TRUTH = TruthParams(object_near_m=14.0, object_view_m=30.0, object_view_max_m=60.0, building_near_m=20.0,
                        building_view_m=60.0, hfov_deg=360.0)
#: A category is PRESENT in a map when at least this many nodes see it (about metres of the drive; as
#: ``robot-app eval sim-tune``'s development instructions).
MIN_SEEN_NODES = 5
#: Length (m) of the one drive per world of a ``quick`` calibration (tests, a first look).
QUICK_M = 60.0
#: ``--write`` refuses a calibration whose balanced accuracy is below this ...
MIN_BALANCED_ACCURACY = 0.75
#: ... or that rests on fewer present or absent samples than this (the shipped worlds give about 580 and 270;
#: one 60 m ``quick`` drive about 50 of each, a first look only).
MIN_SAMPLES = 100

_Route = namedtuple("_Route", "route speed_mps source")


@dataclass(frozen=True)
class CalibrationSettings:
    """What ``robot-app models calibrate-grounding --worlds`` runs (CLI options)."""

    worlds: tuple = ("campus", "industrial")
    out_dir: str = "calibrate-grounding"
    models_dir: str | None = None
    seed: int = 0
    quick: bool = False
    median_weight: float = DEFAULT_MEDIAN_WEIGHT
    progress: bool = False


def explorations(world, *, quick: bool = False) -> list[tuple[str, list]]:
    """``[(name, route), ...]``: the drives that map ``world`` for the calibration, one map each: the route
    of the world's shipped instruction set (``eval``, when it has one) and each of the world's paths
    driven from its first point (``path <name>``); ``quick`` = only the first :data:`QUICK_M` metres of the
    first path (``quick``). Routes are lists of (x, y) m; duplicates are dropped.

    Raises
    ------
    ValueError
        A world without a path.
    """
    from robot_app.sim.eval_instructions import InstructionFileError, load_instructions, shipped_instructions

    if not world.paths:
        raise ValueError(f"world {world.name!r} has no path to explore")
    if quick:
        out = [("quick", _first_metres(world.paths[0].points, QUICK_M))]
    else:
        out = []
        try:
            out.append(("eval", load_instructions(shipped_instructions(world.name), world=world).route))
        except InstructionFileError:
            pass
        out += [(f"path {p.name}", p.points) for p in world.paths]
    seen, unique = set(), []
    for name, route in out:
        key = tuple(tuple(float(v) for v in p) for p in route)
        if key not in seen:
            seen.add(key)
            unique.append((name, [list(p) for p in key]))
    return unique


def _first_metres(points, length_m: float) -> list:
    """The polyline ``points`` cut after ``length_m`` metres."""
    pts = np.asarray(points, dtype=np.float64)
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
    keep = [tuple(p) for p, si in zip(pts, s) if si < length_m]
    if s[-1] > length_m:
        keep.append((float(np.interp(length_m, s, pts[:, 0])), float(np.interp(length_m, s, pts[:, 1]))))
    return [list(p) for p in keep]


def label_phrases(world, true_xy: np.ndarray, true_yaw: np.ndarray) -> tuple[list[dict], dict]:
    """The labelled phrases of one map (module docstring) and the count of left-out categories.

    Parameters
    ----------
    world : robot_app.sim.world.World
    true_xy, true_yaw : (N, 2) float64 m and (N,) float64 rad, the map nodes' true poses.

    Returns
    -------
    (list of dict, dict)
        Samples ``{"phrase", "category", "kind", "label", "seen_nodes"}`` (``kind``: ``train phrasing`` or
        ``held-out phrasing`` of a present category, ``catalogue category, train phrasing`` or ``catalogue
        category, held-out phrasing`` of an absent one, or ``made-up``; ``label``: ``present`` or
        ``absent``), and ``{"left_out": [categories]}``.
    """
    by_cat: dict = {}
    for name, cat, _, _ in world.landmarks():
        by_cat.setdefault(cat, []).append(name)
    samples, left_out = [], []
    for cat in PHRASES:
        names = by_cat.get(cat, [])
        seen = far = 0
        if names:
            (near,) = truth_node_sets(world, [names], true_xy, true_yaw)
            (wide,) = truth_node_sets(world, [names], true_xy, true_yaw, params=FAR_TRUTH)
            seen, far = int(near.size), int(wide.size)
        if seen >= MIN_SEEN_NODES:
            label = "present"
        elif far == 0:
            label = "absent"
        else:
            left_out.append(cat)
            continue
        prefix = "" if label == "present" else "catalogue category, "
        for kind, phrases in (("train phrasing", PHRASES[cat][0]), ("held-out phrasing", PHRASES[cat][1])):
            samples.extend({"phrase": p, "category": cat, "kind": prefix + kind, "label": label, "seen_nodes": seen}
                           for p in phrases)
    samples.extend({"phrase": p, "category": None, "kind": "made-up", "label": "absent", "seen_nodes": 0}
                   for p in MADE_UP_ABSENT)
    return samples, {"left_out": left_out}


def _split(rows: list[dict], key: str = "score") -> tuple[np.ndarray, np.ndarray]:
    p = np.array([r[key] for r in rows if r["label"] == "present"], dtype=np.float64)
    a = np.array([r[key] for r in rows if r["label"] == "absent"], dtype=np.float64)
    return p, a


def _rate(rows: list[dict], threshold: float) -> dict | None:
    if not rows:
        return None
    flagged = sum(r["score"] < threshold for r in rows)
    return {"n": len(rows), "flagged": int(flagged), "flagged_rate": round(flagged / len(rows), 4)}


def summarise(rows: list[dict], *, median_weight: float, config_min_cosine: float) -> dict:
    """The calibration's figures from the samples (``score`` = presence score at ``median_weight``, ``best``
    = best cosine, ``label``, ``kind``, ``world``).

    Returns
    -------
    dict
        ``chosen`` (:func:`core.presence.choose_threshold`), ``absent_95`` (the threshold that flags 95 % of
        the absent samples, :func:`core.presence.threshold_for_absent_rate`), ``by_kind``, ``by_world``,
        ``leave_one_world_out`` (with two worlds or more), ``raw_cosine_best`` (the best threshold on the raw
        best cosine) and ``config_fallback`` (the raw best cosine at ``[models] landmark_min_cosine``).

    Raises
    ------
    ValueError
        No present or no absent sample.
    """
    p, a = _split(rows)
    if p.size == 0 or a.size == 0:
        raise ValueError(f"the maps gave {p.size} present and {a.size} absent landmark phrases: "
                         "calibration needs both (explore more of the worlds, or other worlds)")
    chosen = choose_threshold(p, a)
    t = chosen["threshold"]
    out = {"median_weight": median_weight, "chosen": chosen, "absent_95": threshold_for_absent_rate(p, a),
           "by_kind": {}, "by_world": {}}
    for label in ("present", "absent"):
        for kind in sorted({r["kind"] for r in rows if r["label"] == label}):
            same = [r for r in rows if r["label"] == label and r["kind"] == kind]
            out["by_kind"][f"{label}, {kind}"] = _rate(same, t)
    worlds = sorted({r["world"] for r in rows})
    for w in worlds:
        wp, wa = _split([r for r in rows if r["world"] == w])
        out["by_world"][w] = confusion(wp, wa, t) if wp.size and wa.size else None
    if len(worlds) > 1:
        out["leave_one_world_out"] = {}
        for w in worlds:
            tp, ta = _split([r for r in rows if r["world"] != w])
            wp, wa = _split([r for r in rows if r["world"] == w])
            if tp.size and ta.size and wp.size and wa.size:
                out["leave_one_world_out"][w] = confusion(wp, wa, choose_threshold(tp, ta)["threshold"])
    bp, ba = _split(rows, "best")
    out["raw_cosine_best"] = choose_threshold(bp, ba)
    out["config_fallback"] = confusion(bp, ba, config_min_cosine)
    return out


def _world_file(world) -> str:
    """The world file as recorded: relative to the checkout for a shipped world, else as given."""
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(world.source).resolve().relative_to(root))
    except (ValueError, TypeError, OSError):
        return str(world.source)


def _world_digest(world) -> str | None:
    try:
        return hashlib.sha256(Path(world.source).read_bytes()).hexdigest()
    except (OSError, TypeError):
        return None


def run_grounding_calibration(settings: CalibrationSettings, config) -> dict:
    """Build the maps, label and score the phrases, choose the threshold (module docstring).

    Returns the JSON-ready report: ``summary`` (:func:`summarise`), ``worlds`` (per world its file, sha256,
    whether the model was trained on it, and per exploration the map's nodes, the left-out categories and
    the sample counts), ``samples`` (every (map, phrase) with its cosines and score), ``material`` (what
    the figures are measured on, in words), ``models_dir``, ``clip_model``, ``seed``, ``wall_s``.

    Raises
    ------
    robot_app.sim.world.WorldError
        A bad world file or name.
    robot_app.sim.eval.EvalError
        No CLIP-format model in the models folder, an exploration that does not reach its end.
    ValueError
        No present or no absent sample, or ``median_weight`` outside [0, 1].
    """
    from models.clip import open_clip_model

    t0 = time.perf_counter()
    out = Path(settings.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models_dir = Path(settings.models_dir) if settings.models_dir else ev.default_models_dir(config)
    if not (models_dir / config.models.clip_image_file).is_file():
        raise ev.EvalError(f"{models_dir}: no CLIP-format model ({config.models.clip_image_file}) to calibrate")
    cfg = ev._eval_config(config, models_dir, None, 1.0)
    clip = open_clip_model(models_dir, config=cfg)
    trained_on = set(_trained_worlds(models_dir, cfg.models.clip_image_file))
    rows: list[dict] = []
    worlds_report: dict = {}
    for wname in settings.worlds:
        world = load_world(wname)
        wrep = {"file": _world_file(world), "sha256": _world_digest(world),
                "model_trained_on_it": world.name in trained_on, "explorations": {}}
        for rname, route in explorations(world, quick=settings.quick):
            wout = out / world.name / rname
            wout.mkdir(parents=True, exist_ok=True)
            es = ev.EvalSettings(world=str(wname), out_dir=str(wout), models_dir=str(models_dir), seed=settings.seed,
                                 progress=settings.progress)
            log_dir, info, _ = ev._explore(world, _Route(route, 1.0, f"{world.name} {rname} route"), es, wout)
            map_path, build, _ = ev._build(log_dir, models_dir, cfg, info["key"], wout, settings.progress)
            with open_map(map_path) as topomap:
                ctx = ev._Context(world, topomap, cfg, models_dir, log_dir, es)
                samples, extra = label_phrases(world, ctx.true_xy, ctx.true_yaw)
                text = clip.encode_landmarks([s["phrase"] for s in samples])
                cos = node_similarity(ctx.image_emb, ctx.image_node, text, n_nodes=len(topomap.nodes))
            score, best, median = presence_scores(cos, median_weight=settings.median_weight)
            for s, sc, b, m in zip(samples, score, best, median):
                rows.append({**s, "world": world.name, "exploration": rname, "best": round(float(b), 4),
                             "median": round(float(m), 4), "score": round(float(sc), 4)})
            wrep["explorations"][rname] = {
                "route": route, "nodes": int(build["nodes"]), "distance_m": info.get("distance_m"),
                "left_out_categories": extra["left_out"],
                "present": sum(s["label"] == "present" for s in samples),
                "absent": sum(s["label"] == "absent" for s in samples)}
        worlds_report[world.name] = wrep
    summary = summarise(rows, median_weight=settings.median_weight,
                        config_min_cosine=config.models.landmark_min_cosine)
    report = {"models_dir": str(models_dir), "clip_model": clip.model_id, "seed": settings.seed,
              "quick": settings.quick, "material": _material(worlds_report), "worlds": worlds_report,
              "summary": summary, "samples": rows}
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    return report


def _trained_worlds(models_dir: Path, image_file: str) -> list:
    """The worlds the sim VLM's sidecar says it was trained on (``params.train_worlds``), else []."""
    import json

    try:
        return list(json.loads((models_dir / (image_file + ".json")).read_text(encoding="utf-8"))["params"]
                    .get("train_worlds") or [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _material(worlds: dict) -> str:
    names = ", ".join(worlds)
    trained = [w for w, r in worlds.items() if r["model_trained_on_it"]]
    text = f"TUNING worlds {names} (in-sample figures; not a held-out measure)"
    if trained:
        text += f"; the model was also trained on {', '.join(trained)}"
    return text


def write_refusal(summary: dict) -> str | None:
    """Why a calibration must not be written (None when it may): too few present or absent samples
    (:data:`MIN_SAMPLES`), a balanced accuracy below :data:`MIN_BALANCED_ACCURACY`, or not better than
    the uncalibrated config rule on the same samples."""
    c, fb = summary["chosen"], summary["config_fallback"]
    if c["present"] < MIN_SAMPLES or c["absent"] < MIN_SAMPLES:
        return (f"only {c['present']} present and {c['absent']} absent landmark phrases (at least {MIN_SAMPLES} "
                "of each are needed)")
    if c["balanced_accuracy"] < MIN_BALANCED_ACCURACY:
        return f"balanced accuracy {c['balanced_accuracy']:.2f} is below {MIN_BALANCED_ACCURACY}"
    if c["balanced_accuracy"] <= fb["balanced_accuracy"]:
        return (f"balanced accuracy {c['balanced_accuracy']:.2f} is no better than the uncalibrated "
                f"[models] landmark_min_cosine rule's {fb['balanced_accuracy']:.2f}")
    return None


def calibration_doc(report: dict) -> dict:
    """What ``--write`` records (:func:`models.grounding_calibration.write_calibration` adds the format and
    the model's sha256): the rule, what it was measured on and its figures."""
    s = report["summary"]
    keep = ("chosen", "absent_95", "by_kind", "by_world", "leave_one_world_out", "raw_cosine_best", "config_fallback")
    return {"statistic": "best_cosine - median_weight * median_cosine over the map's nodes (core.presence)",
            "median_weight": s["median_weight"], "threshold": s["chosen"]["threshold"],
            "rule": "maximum balanced accuracy", "material": report["material"],
            "calibrated_by": "robot-app models calibrate-grounding", "exploration_seed": report["seed"],
            "quick": report["quick"],
            "worlds": {w: {k: r[k] for k in ("file", "sha256", "model_trained_on_it")}
                       | {"explorations": {e: {k: x[k] for k in ("nodes", "present", "absent")}
                                           for e, x in r["explorations"].items()}}
                       for w, r in report["worlds"].items()},
            "figures": {k: s[k] for k in keep if k in s},
            "calibrated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

