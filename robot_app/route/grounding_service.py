"""From a route instruction to (landmarks, (N, K) log-likelihoods) on a map.

1. landmarks: :func:`robot_app.route.landmark_parsing.parse_instruction` (LLM when installed, else rules);
2. grounding: the CLIP text encoder embeds "This is a photo of <landmark>" (LM-Nav App. A) and
   :func:`core.grounding.landmark_log_likelihoods` scores every node's stored image embeddings;
3. found or not: each landmark is judged in the map or not by the model's calibrated presence rule
   (:mod:`core.presence`, ``grounding-calibration.json`` in the models folder, written by ``robot-app
   models calibrate-grounding --write`` for these model files); without one (or for other model files),
   by its raw best cosine against ``[models] landmark_min_cosine`` (not calibrated).

Without the CLIP model files, planning from an instruction is refused with a message that says what
to install (docs/design.md, "Fallbacks"); planning with given scores or to a chosen node still works.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from core.mapstore import MapError
from core.presence import PresenceRule
from models.clip import ground_landmarks, open_clip_model
from models.grounding_calibration import fallback_rule, read_presence_rule
from models.sidecar import ModelMissing
from robot_app.route.landmark_parsing import parse_instruction
from robot_app.route.planning import PlanningError

log = logging.getLogger(__name__)


def parse_landmarks(text: str, *, config, parser: str | None = None, llm=None) -> tuple[list[str], str]:
    """Ordered landmarks of ``text`` and the name of the parser that produced them.

    Raises
    ------
    PlanningError
        Empty instruction, or no landmark found in it.
    """
    if not text or not text.strip():
        raise PlanningError("the instruction is empty: say where to go, e.g. 'past the stop sign to the mailbox'",
                            bad_input=True)

    landmarks, used = parse_instruction(text, config=config, parser=parser, llm=llm)
    if not landmarks:
        raise PlanningError(f"no landmark found in {text!r}: name things to pass or stop at, e.g. 'past the stop "
                            "sign to the mailbox'", bad_input=True)
    return landmarks, used


#: Nodes per landmark whose cosine a plan carries (for the map's and the report's grounding colours): the
#: best ones, so that a plan's size does not grow with the map.
SCORED_NODES = 300


def node_scores(cosine: np.ndarray, limit: int = SCORED_NODES) -> list:
    """``[[node, cosine], ...]`` of the ``limit`` nodes with the highest finite cosine, best first (3 decimals).

    ``cosine`` is one landmark's (N,) column of ``Grounding.cosine`` (-inf for nodes without an image).
    """
    c = np.asarray(cosine, dtype=np.float64)
    idx = np.flatnonzero(np.isfinite(c))
    idx = idx[np.argsort(-c[idx], kind="stable")[:limit]]
    return [[int(v), round(float(c[v]), 3)] for v in idx]


def presence_rule(config, models_dir: str | Path | None = None) -> PresenceRule:
    """The "found in the map" rule for the CLIP model in ``models_dir`` (default ``[paths] models_dir``): its
    calibration file when it was made for these model files, else the raw best cosine against
    ``[models] landmark_min_cosine``."""
    d = Path(config.paths.models_dir if models_dir is None else models_dir)
    rule = read_presence_rule(d, image_file=config.models.clip_image_file, text_file=config.models.clip_text_file)
    return rule if rule is not None else fallback_rule(config.models.landmark_min_cosine)


def presence_info(rule: PresenceRule) -> dict:
    """JSON-ready description of a presence rule (the plan's ``grounding.presence_rule``)."""
    return {"statistic": "best_cosine - median_weight * median_cosine", "threshold": rule.threshold,
            "median_weight": rule.median_weight, "calibrated": rule.calibrated, "source": rule.source}


def mark_found(summary: dict, grounding: dict | None) -> dict:
    """Copy each grounded landmark's ``found`` and presence score onto the walk's landmarks of ``summary``
    (:meth:`robot_app.route.planning.PlannedWalk.describe`, same order) and list the absent ones as
    ``absent_landmarks``; returns ``summary``. Nothing happens without a grounding (scores given, or a
    goal node)."""
    if not grounding:
        return summary
    items = grounding.get("landmarks", [])
    summary["absent_landmarks"] = [g["name"] for g in items if not g["found"]]
    walk = summary.get("landmarks", [])
    if len(walk) == len(items):
        for lm, g in zip(walk, items):
            lm.update(found=g["found"], presence_score=g["presence_score"])
    return summary


def ground_instruction(text: str, topomap, *, config, parser: str | None = None,
                       llm=None) -> tuple[list[str], np.ndarray, dict]:
    """Parse ``text`` and ground its landmarks in ``topomap`` with CLIP.

    Returns
    -------
    landmarks : list of K strings; logp : (N, K) float64 G(v, i); info : JSON-ready dict with the parser
    used, the ``presence_rule`` (:func:`presence_info`) and, per landmark, the best node, its raw cosine,
    the top-3 nodes, ``found`` (judged in the map by the rule; False: the operator should confirm or
    rephrase), ``presence_score`` and ``presence_threshold`` (found = score >= threshold),
    ``median_cosine``, and ``not_in_map`` (= not found, kept for older clients).

    Raises
    ------
    PlanningError
        No landmark in the text, CLIP model not installed, or the map has no embeddings of the
        installed CLIP model.
    """
    landmarks, used = parse_landmarks(text, config=config, parser=parser, llm=llm)
    log.info("landmarks from %s parser: %s", used, landmarks)

    try:
        clip = open_clip_model(Path(config.paths.models_dir), config=config)
    except ModelMissing as exc:
        raise PlanningError(f"planning from an instruction needs CLIP: {exc}. Planning with --landmarks "
                            "and --scores, or to a chosen node, works without it.") from exc

    try:
        image_emb, image_node = topomap.embeddings(clip.model_id)
    except MapError as exc:
        raise PlanningError(f"{exc}; rebuild the map with this CLIP model installed") from exc
    rule = presence_rule(config)
    g = ground_landmarks(clip, landmarks, image_emb, image_node, n_nodes=len(topomap.nodes),
                         logit_scale=config.planner.logit_scale or None, normalise=config.planner.normalise,
                         min_cosine=config.models.landmark_min_cosine, max_cosine=config.planner.max_cosine,
                         presence=rule)
    info = {"parser": used, "clip_model": clip.model_id, "presence_rule": presence_info(rule), "landmarks": [
        {"name": lm, "best_node": int(g.best_node[i]), "best_cosine": _num(g.best_cosine[i]),
         "found": bool(g.found[i]), "presence_score": _num(g.presence_score[i]),
         "presence_threshold": rule.threshold, "median_cosine": _num(g.median_cosine[i]),
         "not_in_map": bool(g.not_in_map[i]), "top_nodes": [int(v) for v in g.top_nodes[i] if v >= 0],
         "scores": node_scores(g.cosine[:, i])}
        for i, lm in enumerate(landmarks)]}
    return landmarks, g.log_likelihood, info


def _num(x) -> float | None:
    """A float for JSON; None for -inf (a map without any image of this model)."""
    x = float(x)
    return x if np.isfinite(x) else None
