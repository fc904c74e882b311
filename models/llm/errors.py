"""Exceptions of the LLM runtime (one tree, so callers can fall back on :class:`LlmError`)."""

from __future__ import annotations


class LlmError(RuntimeError):
    """The LLM could not answer: model missing or unloadable, worker died, bad request or output."""


class LlmTimeout(LlmError, TimeoutError):
    """The LLM did not answer within the request's ``timeout_s`` (the worker is restarted)."""


class GrammarError(LlmError, ValueError):
    """A GBNF grammar is malformed; raised before llama.cpp sees it (it aborts on some bad grammars)."""
