"""From a route instruction to (landmarks, (N, K) log-likelihoods) on a map.

1. landmarks: :func:`robot_app.landmark_parsing.parse_instruction` (LLM when installed, else rules);
2. grounding: the CLIP text encoder embeds "This is a photo of <landmark>" (LM-Nav App. A) and
   :func:`core.grounding.landmark_log_likelihoods` scores every node's stored image embeddings.

Without the CLIP model files, planning from an instruction is refused with a message that says what
to install (DESIGN.md, Fallbacks); planning with given scores or to a chosen node still works.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from robot_app.planning import PlanningError

log = logging.getLogger(__name__)


def parse_landmarks(text: str, *, config, parser: str | None = None) -> tuple[list[str], str]:
    """Ordered landmarks of ``text`` and the name of the parser that produced them.

    Raises
    ------
    PlanningError
        Empty instruction, or no landmark found in it.
    """
    if not text or not text.strip():
        raise PlanningError("--instruction: the instruction is empty")
    from robot_app.landmark_parsing import parse_instruction

    landmarks, used = parse_instruction(text, config=config, parser=parser)
    if not landmarks:
        raise PlanningError(f"--instruction: no landmark found in {text!r}")
    return landmarks, used


def ground_instruction(text: str, topomap, *, config, parser: str | None = None) -> tuple[list[str], np.ndarray]:
    """Parse ``text`` and ground its landmarks in ``topomap`` with CLIP.

    Returns
    -------
    landmarks : list of K strings; logp : (N, K) float64 G(v, i).

    Raises
    ------
    PlanningError
        No landmark in the text, CLIP model not installed, or the map has no embeddings of the
        installed CLIP model.
    """
    landmarks, used = parse_landmarks(text, config=config, parser=parser)
    log.info("landmarks from %s parser: %s", used, landmarks)
    try:
        from models.clip import ModelMissing, open_clip_model
    except ImportError as exc:  # the CLIP runtime module is not part of this installation
        raise PlanningError(f"planning from an instruction needs the CLIP runtime ({exc}); "
                            "use --landmarks with --scores instead") from exc
    try:
        clip = open_clip_model(Path(config.paths.models_dir), config=config)
    except ModelMissing as exc:
        raise PlanningError(f"planning from an instruction needs CLIP: {exc}. Planning with --landmarks "
                            "and --scores, or to a chosen node, works without it.") from exc
    from core.grounding import landmark_log_likelihoods
    from core.mapstore import MapError

    try:
        image_emb, image_node = topomap.embeddings(clip.name)
    except MapError as exc:
        raise PlanningError(f"{exc}; rebuild the map with this CLIP model installed") from exc
    text_emb = clip.encode_text([clip.prompt(lm) for lm in landmarks])
    logp = landmark_log_likelihoods(image_emb, image_node, text_emb, n_nodes=len(topomap.nodes),
                                    logit_scale=config.planner.logit_scale, normalise=config.planner.normalise)
    return landmarks, logp
