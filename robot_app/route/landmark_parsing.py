"""Instruction -> landmarks for the app: the LLM when configured and available, else the rule parser.

``robot-app plan --instruction`` and the mission executive call :func:`parse_instruction`. Choice
(``[llm] landmark_parser`` or the caller's ``parser``):

- ``rules``: :func:`core.landmarks.parse_landmarks` (no model);
- ``auto``: the LLM if ``<paths.models_dir>/<llm.model_file>`` exists, else rules;
- ``llm``: the LLM writes the list (LM-Nav's few-shot prompt, free phrases); if the model is missing or
  fails (not installed, crash, timeout, empty answer), rules, with the reason logged as a warning;
- ``llm-spans``: the LLM chooses and orders phrases of the instruction itself
  (:func:`models.llm.spans.extract_landmarks_spans`), with the same fallback to rules.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from core.landmarks import parse_landmarks
from models.llm import LlmError, extract_landmarks_llm, open_llm
from models.llm.sidecar import verify_llm_sidecar
from models.llm.spans import extract_landmarks_spans
from models.sidecar import ModelError

if TYPE_CHECKING:  # pragma: no cover
    from models.llm import LlmClient
    from robot_app.config import Config

log = logging.getLogger(__name__)

PARSERS = ("auto", "rules", "llm", "llm-spans")


def llm_model_path(config: "Config") -> Path:
    """Where the configured GGUF model lives: ``<paths.models_dir>/<llm.model_file>``."""
    return Path(config.paths.models_dir) / config.llm.model_file


def open_configured_llm(config: "Config", *, model_path: str | Path | None = None) -> "LlmClient":
    """Open the shared LLM as ``[llm]`` configures it (worker process unless ``worker = false``).

    The configured model (``<models_dir>/<model_file>``) must have a valid JSON sidecar whose sha256
    matches (``robot-app models llm-sidecar`` writes it); an explicit ``model_path`` (CLI ``--model``,
    tools) is opened without one.

    Raises
    ------
    models.llm.LlmError
        If the model file or its sidecar is missing, the sha256 differs, llama-cpp-python is not
        installed or the model cannot load.
    """
    c = config.llm
    if model_path is None:
        model_path = llm_model_path(config)
        try:
            verify_llm_sidecar(model_path)
        except ModelError as exc:
            raise LlmError(f"{exc} (write the sidecar with `robot-app models llm-sidecar "
                           f"{model_path}`)") from exc
    return open_llm(model_path, n_ctx=c.n_ctx, n_threads=c.n_threads, n_gpu_layers=c.n_gpu_layers,
                    seed=c.seed, in_process=not c.worker, load_timeout_s=c.load_timeout_s)


def parse_instruction(text: str, *, config: "Config", parser: str | None = None,
                      llm: "LlmClient | None" = None,
                      model_path: str | Path | None = None) -> tuple[list[str], str]:
    """Ordered landmarks of a route instruction and the name of the parser that produced them.

    Parameters
    ----------
    text : str
        The operator's instruction.
    config : Config
        Uses ``[llm]`` and ``[paths] models_dir``.
    parser : {"auto", "rules", "llm", "llm-spans"}, optional
        Overrides ``[llm] landmark_parser``.
    llm : LlmClient, optional
        An already open model (the app's shared one); without it, one is opened and closed here.
    model_path : str or Path, optional
        GGUF file instead of the configured one (CLI ``--model``).

    Returns
    -------
    (list of str, str)
        The landmarks in visiting order and the parser that produced them: ``"llm"``, ``"llm-spans"``
        or ``"rules"`` (``auto`` reports ``"llm"``).

    Raises
    ------
    ValueError
        If ``parser`` is not one of :data:`PARSERS`, or the instruction is too long for the rules.
    TypeError
        If ``text`` is not a string.
    """
    choice = parser or config.llm.landmark_parser
    if choice not in PARSERS:
        raise ValueError(f"landmark parser must be one of {', '.join(PARSERS)}, got {choice!r}")
    if not isinstance(text, str):
        raise TypeError(f"instruction must be a string, got {type(text).__name__}")
    if choice == "rules" or not text.strip():
        return parse_landmarks(text), "rules"
    path = Path(model_path) if model_path is not None else llm_model_path(config)
    if llm is None and not path.is_file():
        if choice != "auto":
            log.warning("LLM model %s not found; using the rule-based landmark parser", path)
        else:
            log.info("no LLM model at %s: rule-based landmark parser", path)
        return parse_landmarks(text), "rules"

    used = "llm-spans" if choice == "llm-spans" else "llm"
    try:
        if llm is not None:
            landmarks = _ask(llm, text, config, used)
        else:
            with open_configured_llm(config, model_path=model_path) as client:
                landmarks = _ask(client, text, config, used)
    except (LlmError, ValueError) as exc:
        log.warning("LLM landmark extraction failed (%s); using the rule-based parser", exc)
        return parse_landmarks(text), "rules"
    return landmarks, used


def _ask(client: "LlmClient", text: str, config: "Config", mode: str) -> list[str]:
    if mode == "llm-spans":
        return extract_landmarks_spans(client, text, max_tokens=config.llm.max_tokens,
                                       timeout_s=config.llm.timeout_s)
    return extract_landmarks_llm(client, text, chat=config.llm.chat_template,
                                 max_tokens=config.llm.max_tokens, timeout_s=config.llm.timeout_s)
