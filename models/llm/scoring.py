"""Log-likelihood of continuations of a prompt on a loaded llama.cpp model (the ``score`` request).

A request ``{"kind": "score", "prompt": str, "continuations": [str, ...], "timeout_s": float}`` is
answered with ``{"ok": True, "logprobs": [float, ...], "tokens": [int, ...], "prompt_tokens",
"completion_tokens": 0, "seconds"}``: for each continuation the sum of its tokens' natural-log
probabilities given the prompt (nats, <= 0) and its token count. The prompt is evaluated once (its
common prefix with what the model last saw is reused) and every continuation is decoded after it in
one batch with a logit row per token; the context is then truncated back to the prompt.

Used to rank a closed set of answers (the numbered candidates of LASP's choice diagnoser) by the
model's own probabilities, without generating text.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from models.llm.errors import LlmError

MAX_CONTINUATIONS = 64


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    m = float(row.max())
    return row - m - float(np.log(np.exp(row - m).sum()))


def _logits(llama: Any, i: int) -> np.ndarray:
    ptr = llama._ctx.get_logits_ith(i)
    if not ptr:
        raise LlmError("llama.cpp returned no logits")
    return np.ctypeslib.as_array(ptr, shape=(llama.n_vocab(),))


def _decode(llama: Any, tokens: list, n_past: int, *, all_logits: bool) -> None:
    """Decode ``tokens`` at positions ``n_past...`` (one batch; ``len(tokens) <= n_batch``)."""
    llama._batch.set_batch(batch=tokens, n_past=n_past, logits_all=all_logits)
    llama._ctx.decode(llama._batch)


def _truncate(llama: Any, n: int) -> None:
    """Forget every position from ``n`` on (the KV cache and llama-cpp-python's token record)."""
    if not llama._ctx.kv_cache_seq_rm(-1, n, -1):
        llama.reset()
        llama._ctx.kv_cache_seq_rm(-1, 0, -1)
        n = 0
    llama.n_tokens = n
    llama._requires_eval = True  # the next completion replays a token: our logits are not its own


def _eval_prompt(llama: Any, tokens: list) -> np.ndarray:
    """Evaluate ``tokens`` (reusing the cached common prefix); the log-probabilities after the last."""
    cached = llama.input_ids[: llama.n_tokens].tolist()
    keep = 0
    for a, b in zip(cached, tokens):
        if a != b:
            break
        keep += 1
    keep = min(keep, len(tokens) - 1)  # at least one token is decoded: its logits are needed
    _truncate(llama, keep)
    n_past = llama.n_tokens
    rest = tokens[n_past:]
    step = int(llama.n_batch)
    for i in range(0, len(rest), step):
        _decode(llama, rest[i:i + step], n_past + i, all_logits=False)
    llama.input_ids[: len(tokens)] = tokens
    llama.n_tokens = len(tokens)
    return _log_softmax(_logits(llama, -1))


def _continuation_tokens(llama: Any, prompt: str, prompt_tokens: list, text: str) -> list:
    full = llama.tokenize((prompt + text).encode("utf-8"), add_bos=True, special=False)
    if full[: len(prompt_tokens)] == prompt_tokens and len(full) > len(prompt_tokens):
        return full[len(prompt_tokens):]
    return llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)


def score_request(llama: Any, request: dict) -> dict:
    """Answer one ``score`` request (module doc).

    Raises
    ------
    LlmError
        On an empty or too long list of continuations, a continuation with no tokens, a prompt and
        continuation longer than the context, or llama.cpp failing to decode.
    """
    t0 = time.monotonic()
    deadline = t0 + float(request["timeout_s"])
    prompt, conts = request.get("prompt"), request.get("continuations")
    if not isinstance(prompt, str) or not prompt:
        raise LlmError("score: prompt must be a non-empty string")
    if not isinstance(conts, list) or not conts or not all(isinstance(c, str) and c for c in conts):
        raise LlmError("score: continuations must be a non-empty list of non-empty strings")
    if len(conts) > MAX_CONTINUATIONS:
        raise LlmError(f"score: at most {MAX_CONTINUATIONS} continuations, got {len(conts)}")
    p_toks = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
    c_toks = [_continuation_tokens(llama, prompt, p_toks, c) for c in conts]
    for c, toks in zip(conts, c_toks):
        if not toks:
            raise LlmError(f"score: continuation {c!r} has no tokens")
    n_ctx, n_batch = int(llama.n_ctx()), int(llama.n_batch)
    longest = max(len(t) for t in c_toks)
    if len(p_toks) + longest > n_ctx:
        raise LlmError(f"score: prompt ({len(p_toks)} tokens) + continuation ({longest}) exceed the "
                       f"context of {n_ctx} tokens")
    if longest > n_batch:
        raise LlmError(f"score: a continuation of {longest} tokens is longer than the batch ({n_batch})")
    base = _eval_prompt(llama, p_toks)
    n_p = len(p_toks)
    out = []
    try:
        for toks in c_toks:
            if time.monotonic() > deadline:
                return {"ok": False, "error": "timeout",
                        "message": f"LLM scoring took longer than {request['timeout_s']} s"}
            lp = float(base[toks[0]])
            if len(toks) > 1:
                _decode(llama, toks[:-1], n_p, all_logits=True)
                for k in range(1, len(toks)):
                    lp += float(_log_softmax(_logits(llama, k - 1))[toks[k]])
                if not llama._ctx.kv_cache_seq_rm(-1, n_p, -1):  # a cache that cannot drop a tail
                    _eval_prompt(llama, p_toks)
            out.append(lp)
    finally:
        llama.n_tokens = n_p
        llama._requires_eval = True
    seconds = time.monotonic() - t0
    if seconds > float(request["timeout_s"]):
        return {"ok": False, "error": "timeout", "message": f"LLM scoring took longer than {request['timeout_s']} s"}
    return {"ok": True, "logprobs": out, "tokens": [len(t) for t in c_toks], "prompt_tokens": n_p,
            "completion_tokens": 0, "seconds": seconds}
