"""LASP's settings from the configuration: what ``robot-app lasp`` and the onboard task jobs share."""

from __future__ import annotations

import logging

from core.lasp.loop import LoopConfig
from core.lasp.similarity import lexical_similarity

log = logging.getLogger(__name__)


def loop_config(config) -> LoopConfig:
    """The bounds and planner settings of one LASP run, all from ``[lasp]``."""
    c = config.lasp
    return LoopConfig(engine=c.engine, planner_timeout_s=c.planner_timeout_s, max_depth=c.max_depth,
                      max_failures_per_error=c.max_failures_per_error, max_llm_calls=c.max_llm_calls,
                      max_objects_tried=c.max_objects_tried, max_plan_steps=c.max_plan_steps)


def make_similarity(config):
    """The offline diagnoser's similarity (``[lasp] similarity``): MiniLM embedding cosine, alone
    (``embedding``) or averaged with lexical overlap (``hybrid``, as hybrid dense + sparse
    retrieval). The model is the models directory's ``text-embed.onnx``, else the copy shipped with the
    package (models.text_embed.BUNDLED_DIR); lexical similarity when neither opens.

    Returns ``(similarity, name)``; the fallback is logged as a warning (DESIGN.md, Fallbacks).
    """
    mode = config.lasp.similarity
    if mode == "lexical":
        return lexical_similarity, "lexical ([lasp] similarity)"
    try:
        from models.text_embed import open_text_embedder

        embedder = open_text_embedder(config.paths.models_dir, config=config, bundled=True)
    except FileNotFoundError as exc:  # ModelMissing
        log.warning("LASP: text-embedding model not available (%s); using lexical similarity", exc)
        return lexical_similarity, "lexical (no text-embedding model)"
    except Exception as exc:  # noqa: BLE001 - a broken model must not stop planning
        log.warning("LASP: text-embedding model failed to load (%s); using lexical similarity", exc)
        return lexical_similarity, "lexical (text-embedding model failed to load)"

    def embedding(queries, candidates):
        import numpy as np

        q, c = embedder.embed(list(queries)), embedder.embed(list(candidates))
        return np.clip((q @ c.T).astype(np.float64), 0.0, 1.0)

    where = "bundled" if embedder.bundled else str(embedder.path)
    if mode == "embedding":
        return embedding, f"embedding ({embedder.model_id}, {where})"

    def hybrid(queries, candidates):
        return 0.5 * embedding(queries, candidates) + 0.5 * lexical_similarity(queries, candidates)
    return hybrid, f"hybrid: embedding ({embedder.model_id}, {where}) + lexical"
