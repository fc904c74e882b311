"""llama.cpp calls shared by the in-process client and the worker process.

One request is a plain dict (so it crosses a ``multiprocessing`` pipe unchanged)::

    {"kind": "complete", "prompt": str}  or  {"kind": "chat", "messages": [{"role", "content"}]}
    + "grammar": str | None, "max_tokens": int, "temperature": float, "timeout_s": float,
      "stop": list[str] | None
    or {"kind": "score", "prompt": str, "continuations": [str], "timeout_s": float}
      (log-likelihoods, :mod:`models.llm.scoring`)

and one response is ``{"ok": True, "text", "prompt_tokens", "completion_tokens", "seconds"}`` or
``{"ok": False, "error": "timeout" | "error", "message": str}``. Generation stops at the deadline
(a llama-cpp-python stopping criterion checked after every token); prompt evaluation cannot be
interrupted, which is why the worker's parent also keeps a hard deadline.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from models.llm.errors import LlmError
from models.llm.grammar import validate_gbnf
from models.llm.scoring import score_request

log = logging.getLogger(__name__)


def load_llama(model_path: str | Path, *, n_ctx: int, n_threads: int, n_gpu_layers: int, seed: int,
               verbose: bool = False, extra_buffers: bool | None = None) -> Any:
    """Open a GGUF model with llama-cpp-python.

    Parameters
    ----------
    model_path : str or Path
        GGUF file.
    n_ctx : int
        Context window in tokens (prompt + answer).
    n_threads : int
        CPU threads for generation and prompt evaluation (1 on a busy 2-core machine: llama.cpp's
        threads spin-wait).
    n_gpu_layers : int
        Layers offloaded to the GPU (Jetson CUDA build of llama.cpp; 0 = CPU only, -1 = all).
    seed : int
        Sampling seed (irrelevant at temperature 0, which is greedy).
    extra_buffers : bool, optional
        llama.cpp's extra weight buffer types (``use_extra_bufts``: CPU repacking, Intel AMX). None
        (default): off when llama.cpp reports AMX, whose kernel crashed (SIGSEGV in
        ``ggml_backend_amx_mul_mat``) on the first Q4_K decode on this project's Xeon; on otherwise.

    Raises
    ------
    LlmError
        If llama-cpp-python is not installed, the file is missing, or llama.cpp cannot load it.
    """
    path = Path(model_path)
    if not path.is_file():
        raise LlmError(f"LLM model file not found: {path}")
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise LlmError("llama-cpp-python is not installed (pip install 'robot-app[llm]')") from exc
    if extra_buffers is None:
        extra_buffers = not amx_reported()
    try:
        with _model_params(use_extra_bufts=extra_buffers):
            return Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads,
                         n_threads_batch=n_threads, n_gpu_layers=n_gpu_layers, seed=seed,
                         verbose=verbose)
    except (ValueError, RuntimeError, OSError) as exc:
        raise LlmError(f"llama.cpp could not load {path}: {exc}") from exc


def amx_reported() -> bool:
    """Whether llama.cpp's CPU backend was built with and detects Intel AMX (``AMX_INT8 = 1``)."""
    import llama_cpp

    try:
        info = llama_cpp.llama_print_system_info()
    except (AttributeError, OSError):  # pragma: no cover - an older binding
        return False
    return b"AMX_INT8 = 1" in (info if isinstance(info, bytes) else str(info).encode())


@contextlib.contextmanager
def _model_params(**fields: Any) -> Iterator[None]:
    """Set fields of llama.cpp's model parameters that ``Llama()`` does not expose (``use_extra_bufts``):
    its default-parameter factory is wrapped while the model loads. Fields this llama.cpp lacks are
    ignored. The factory is module state, so loads in one process are serialised (:data:`_LOAD_LOCK`): two
    threads loading at once would otherwise see each other's settings."""
    import llama_cpp.llama_cpp as lib

    with _LOAD_LOCK:
        original = lib.llama_model_default_params

        def params() -> Any:
            p = original()
            for name, value in fields.items():
                if hasattr(p, name):
                    setattr(p, name, value)
            return p

        lib.llama_model_default_params = params
        try:
            yield
        finally:
            lib.llama_model_default_params = original


#: held while a model loads with :func:`_model_params` (see there)
_LOAD_LOCK = threading.Lock()


class GrammarCache:
    """Validated, compiled grammars by source text (compiling is cheap but not free)."""

    def __init__(self) -> None:
        self._compiled: dict[str, Any] = {}

    def get(self, text: str) -> Any:
        if text not in self._compiled:
            validate_gbnf(text)
            from llama_cpp import LlamaGrammar

            try:
                self._compiled[text] = LlamaGrammar.from_string(text, verbose=False)
            except (ValueError, RuntimeError) as exc:
                raise LlmError(f"llama.cpp rejected the grammar: {exc}") from exc
        return self._compiled[text]


def run_request(llama: Any, request: dict, grammars: GrammarCache) -> dict:
    """Run one completion or chat request on a loaded model; never raises for bad requests.

    Returns
    -------
    dict
        The response described in the module docstring.
    """
    try:
        return _run(llama, request, grammars)
    except LlmError as exc:
        return {"ok": False, "error": "error", "message": str(exc)}
    except (ValueError, RuntimeError, KeyError, TypeError) as exc:  # e.g. prompt longer than n_ctx
        return {"ok": False, "error": "error", "message": f"{type(exc).__name__}: {exc}"}


def _chat_prompt(llama: Any, request: dict, kwargs: dict) -> str:
    """Render chat messages with the model's own template (GGUF ``tokenizer.chat_template``)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        raise LlmError("the model has no chat template (tokenizer.chat_template); use the plain prompt")
    eos = llama.detokenize([llama.token_eos()], special=True).decode("utf-8", errors="replace")
    bos = llama.detokenize([llama.token_bos()], special=True).decode("utf-8", errors="replace")
    formatted = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)(messages=request["messages"])
    extra = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop] if formatted.stop else []
    kwargs["stop"] = list(kwargs["stop"]) + extra
    prompt = formatted.prompt
    if bos and prompt.startswith(bos):  # llama-cpp-python adds the BOS token itself
        prompt = prompt[len(bos):]
    return prompt


def _run(llama: Any, request: dict, grammars: GrammarCache) -> dict:
    from llama_cpp import StoppingCriteriaList

    if request["kind"] == "score":
        return score_request(llama, request)

    t0 = time.monotonic()
    deadline = t0 + float(request["timeout_s"])
    timed_out = []

    def past_deadline(_input_ids: Any, _logits: Any) -> bool:
        if time.monotonic() > deadline:
            timed_out.append(True)
            return True
        return False

    kwargs = dict(max_tokens=int(request["max_tokens"]), temperature=float(request["temperature"]),
                  stop=request.get("stop") or [], stopping_criteria=StoppingCriteriaList([past_deadline]))
    if request.get("grammar"):
        kwargs["grammar"] = grammars.get(request["grammar"])
    prompt = request["prompt"] if request["kind"] != "chat" else _chat_prompt(llama, request, kwargs)
    out = llama.create_completion(prompt=prompt, **kwargs)
    text = out["choices"][0]["text"]
    seconds = time.monotonic() - t0
    if timed_out or seconds > float(request["timeout_s"]):
        return {"ok": False, "error": "timeout",
                "message": f"LLM request took longer than {request['timeout_s']} s"}
    usage = out.get("usage", {})
    return {"ok": True, "text": text, "prompt_tokens": int(usage.get("prompt_tokens", 0)),
            "completion_tokens": int(usage.get("completion_tokens", 0)), "seconds": seconds}
