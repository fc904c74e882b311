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

    Returns ``(similarity, name)``; the fallback is logged as a warning (docs/design.md, "Fallbacks").
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


#: the LLM diagnosers (models.lasp_llm, models.lasp_choice) and every choice of ``[lasp] diagnoser``
LLM_DIAGNOSERS = ("llm", "llm-choice", "llm-score", "llm-pmi")
DIAGNOSERS = ("auto", "offline") + LLM_DIAGNOSERS
#: what ``auto`` takes when the LLM is installed: the constrained mode measured best with Gemma 3 270M
#: (docs/lasp.md, "Small local LLM")
AUTO_LLM_DIAGNOSER = "llm-pmi"


def resolve_diagnoser(choice: str, llm_available: bool) -> str:
    """The diagnoser ``choice`` stands for: ``auto`` is :data:`AUTO_LLM_DIAGNOSER` when an LLM is
    available, else ``offline``; any other choice is itself.

    Raises
    ------
    ValueError
        For a choice outside :data:`DIAGNOSERS`.
    """
    if choice not in DIAGNOSERS:
        raise ValueError(f"[lasp] diagnoser: unknown diagnoser {choice!r} ({', '.join(DIAGNOSERS)})")
    if choice == "auto":
        return AUTO_LLM_DIAGNOSER if llm_available else "offline"
    return choice


def build_diagnoser(config, choice: str, similarity, llm=None):
    """A fresh diagnoser for one LASP run.

    Parameters
    ----------
    config : Config
        ``[lasp] llm_max_tokens`` and ``[llm] timeout_s`` bound the LLM's answers.
    choice : str
        ``offline`` (:class:`core.lasp.diagnosis.OfflineDiagnoser`), ``llm`` (the paper's five free-text
        roles, :class:`models.lasp_llm.LlmDiagnoser`) or ``llm-choice`` / ``llm-score`` / ``llm-pmi``
        (the offline candidates re-ranked by the LLM, which may only pick among them,
        :class:`models.lasp_choice.ChoiceLlmDiagnoser`); ``auto`` is resolved first
        (:func:`resolve_diagnoser`).
    similarity : callable
        Text similarity of the offline ranking (:func:`make_similarity`).
    llm : models.llm.LlmClient, optional
        The open model; required by the LLM choices.

    Raises
    ------
    ValueError
        An unknown choice, or an LLM choice without ``llm``.
    """
    from core.lasp.diagnosis import OfflineDiagnoser

    choice = resolve_diagnoser(choice, llm is not None)
    if choice == "offline":
        return OfflineDiagnoser(similarity)
    if llm is None:
        raise ValueError(f"the {choice} diagnoser needs the LLM, which is not open")
    if choice == "llm":
        from models.lasp_llm import LlmDiagnoser

        return LlmDiagnoser(llm, similarity=similarity, max_tokens=config.lasp.llm_max_tokens,
                            timeout_s=config.llm.timeout_s)
    from models.lasp_choice import ChoiceLlmDiagnoser

    return ChoiceLlmDiagnoser(llm, similarity=similarity, mode=choice.split("-", 1)[1],
                              timeout_s=config.llm.timeout_s)
