"""Landmark extraction with the LLM: LM-Nav App. A prompt, grammar-constrained, temperature 0."""

from __future__ import annotations

import logging

from models.llm.client import LlmClient
from models.llm.errors import LlmError
from models.llm.grammar import LANDMARK_LIST_GBNF
from models.llm.prompts import landmark_messages, landmark_prompt, parse_numbered_list

log = logging.getLogger(__name__)


def extract_landmarks_llm(client: LlmClient, instruction: str, *, chat: bool = False,
                          max_tokens: int = 96, timeout_s: float = 20.0) -> list[str]:
    """Ordered landmarks of ``instruction`` from the LLM.

    Parameters
    ----------
    client : LlmClient
        An open model (:func:`models.llm.open_llm`).
    instruction : str
        The route instruction.
    chat : bool
        Use the chat-template variant (instruction-tuned models) instead of the plain few-shot prompt.
    max_tokens : int
        Limit on generated tokens.
    timeout_s : float
        Limit on the request, seconds.

    Returns
    -------
    list of str
        1..10 landmarks in visiting order.

    Raises
    ------
    LlmTimeout
        If the model did not answer in time.
    LlmError
        If the model failed or its answer held no landmark.
    ValueError
        If ``instruction`` is empty.
    """
    if chat:
        text = client.complete_chat(landmark_messages(instruction), grammar=LANDMARK_LIST_GBNF,
                                    max_tokens=max_tokens, temperature=0.0, timeout_s=timeout_s)
    else:
        text = client.complete(landmark_prompt(instruction), grammar=LANDMARK_LIST_GBNF,
                               max_tokens=max_tokens, temperature=0.0, timeout_s=timeout_s,
                               stop=["\n\n"])
    landmarks = parse_numbered_list(text)
    if not landmarks:
        raise LlmError(f"the LLM answer held no landmark list: {text[:200]!r}")
    log.debug("LLM landmarks for %r: %s", instruction, landmarks)
    return landmarks
