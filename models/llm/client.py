"""The LLM client API shared by landmark extraction and LASP: :func:`open_llm` and :class:`LlmClient`.

One model serves every caller. On the robot it runs in a worker process (``in_process=False``): a
llama.cpp abort or a hung request costs a worker restart, never the drive loop. Tests and tools may run
it in-process. Both clients are thread-safe (one request at a time) and blocking; asyncio callers use
``loop.run_in_executor``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from models.llm.engine import GrammarCache, load_llama, run_request
from models.llm.errors import LlmError, LlmTimeout
from models.llm.grammar import validate_gbnf

log = logging.getLogger(__name__)

HARD_DEADLINE_GRACE_S = 5.0
"""How long past a request's ``timeout_s`` the parent waits before killing a worker that hangs in
prompt evaluation (generation itself stops at ``timeout_s``)."""


class LlmClient:
    """A loaded LLM. Use :func:`open_llm` to get one; close it (or use ``with``) when done.

    Attributes
    ----------
    model_path : Path
        The GGUF file.
    load_s : float
        Seconds the last (re)load took.
    last_usage : dict
        ``prompt_tokens``, ``completion_tokens`` and ``seconds`` of the last successful request.
    """

    def __init__(self, model_path: Path) -> None:
        self.model_path = model_path
        self.load_s = 0.0
        self.last_usage: dict[str, float] = {}
        self._lock = threading.Lock()

    def complete(self, prompt: str, *, grammar: str | None = None, max_tokens: int = 128,
                 temperature: float = 0.0, timeout_s: float = 30.0, stop: list[str] | None = None) -> str:
        """Continue ``prompt``; return the generated text (without the prompt).

        Parameters
        ----------
        prompt : str
            Raw prompt text (the model's BOS token is added).
        grammar : str, optional
            GBNF grammar constraining the output; validated (:func:`models.llm.grammar.validate_gbnf`)
            before llama.cpp sees it.
        max_tokens : int
            Upper bound on generated tokens (>= 1).
        temperature : float
            0 = greedy (deterministic).
        timeout_s : float
            Wall-clock limit of the request, seconds (> 0).
        stop : list of str, optional
            Strings that end generation (not included in the result).

        Raises
        ------
        LlmTimeout
            If the answer took longer than ``timeout_s``.
        GrammarError
            If ``grammar`` is malformed.
        LlmError
            If the request is invalid (e.g. prompt longer than the context), or the model or its worker
            failed.
        """
        _check_args(max_tokens, temperature, timeout_s)
        if not isinstance(prompt, str):
            raise LlmError(f"prompt must be a string, got {type(prompt).__name__}")
        return self._request({"kind": "complete", "prompt": prompt, "grammar": grammar,
                              "max_tokens": max_tokens, "temperature": temperature,
                              "timeout_s": timeout_s, "stop": stop})

    def complete_chat(self, messages: list[dict[str, str]], *, grammar: str | None = None,
                      max_tokens: int = 128, temperature: float = 0.0, timeout_s: float = 30.0,
                      stop: list[str] | None = None) -> str:
        """Like :meth:`complete`, for instruction-tuned models: ``messages`` go through the model's chat
        template (GGUF ``tokenizer.chat_template``); returns the assistant's reply."""
        _check_args(max_tokens, temperature, timeout_s)
        if not messages or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in messages):
            raise LlmError("messages must be a non-empty list of {'role', 'content'} dicts")
        return self._request({"kind": "chat", "messages": messages, "grammar": grammar,
                              "max_tokens": max_tokens, "temperature": temperature,
                              "timeout_s": timeout_s, "stop": stop})

    def score(self, prompt: str, continuations: list[str], *, timeout_s: float = 30.0) -> list[float]:
        """Log-likelihood of each continuation after ``prompt`` (:mod:`models.llm.scoring`).

        Parameters
        ----------
        prompt : str
            Raw prompt text (the model's BOS token is added).
        continuations : list of str
            1..64 non-empty texts, each scored as if it followed ``prompt`` directly.
        timeout_s : float
            Wall-clock limit of the request, seconds (> 0).

        Returns
        -------
        list of float
            Per continuation, the sum of its tokens' log-probabilities (nats, <= 0); the token counts
            are in ``last_usage["tokens"]``.

        Raises
        ------
        LlmTimeout
            If scoring took longer than ``timeout_s``.
        LlmError
            On a bad request (empty list, a continuation past the context) or a failed model/worker.
        """
        _check_args(1, 0.0, timeout_s)
        if not isinstance(prompt, str) or not prompt:
            raise LlmError("prompt must be a non-empty string")
        if not isinstance(continuations, (list, tuple)) or not continuations:
            raise LlmError("continuations must be a non-empty list of strings")
        response = self._raw({"kind": "score", "prompt": prompt, "continuations": list(continuations),
                              "timeout_s": timeout_s})
        self.last_usage["tokens"] = response["tokens"]
        return [float(x) for x in response["logprobs"]]

    def _request(self, request: dict) -> str:
        return self._raw(request)["text"]

    def _raw(self, request: dict) -> dict:
        if request.get("grammar"):
            validate_gbnf(request["grammar"])
        with self._lock:
            response = self._send(request)
        if not response["ok"]:
            if response["error"] == "timeout":
                raise LlmTimeout(response["message"])
            raise LlmError(response["message"])
        self.last_usage = {k: response[k] for k in ("prompt_tokens", "completion_tokens", "seconds")}
        return response

    def _send(self, request: dict) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release the model (and end the worker process). Idempotent."""

    def __enter__(self) -> "LlmClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_args(max_tokens: int, temperature: float, timeout_s: float) -> None:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise LlmError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if not temperature >= 0.0:
        raise LlmError(f"temperature must be >= 0, got {temperature!r}")
    if not timeout_s > 0.0:
        raise LlmError(f"timeout_s must be > 0, got {timeout_s!r}")


class InProcessLlm(LlmClient):
    """llama.cpp in this process (tests, tools). A llama.cpp abort ends this process."""

    def __init__(self, model_path: Path, load_kwargs: dict) -> None:
        super().__init__(model_path)
        t0 = time.monotonic()
        self._llama = load_llama(model_path, **load_kwargs)
        self.load_s = time.monotonic() - t0
        self._grammars = GrammarCache()

    def _send(self, request: dict) -> dict:
        if self._llama is None:
            raise LlmError("the LLM client is closed")
        return run_request(self._llama, request, self._grammars)

    def close(self) -> None:
        llama, self._llama = self._llama, None
        if llama is not None and hasattr(llama, "close"):
            llama.close()


class WorkerLlm(LlmClient):
    """llama.cpp in a worker process, (re)started on demand; requests over a pipe with deadlines.

    A worker that dies (llama.cpp abort) or hangs past ``timeout_s + HARD_DEADLINE_GRACE_S`` is
    killed and started again on the next request; after ``max_failures`` such failures in a row the
    client gives up and raises :class:`LlmError` at once (callers fall back to rules).
    """

    def __init__(self, model_path: Path, load_kwargs: dict, *, load_timeout_s: float = 120.0,
                 max_failures: int = 3, hard_grace_s: float = HARD_DEADLINE_GRACE_S) -> None:
        super().__init__(model_path)
        self.hard_grace_s = hard_grace_s
        self._load_kwargs = dict(load_kwargs, model_path=str(model_path))
        self._load_timeout_s = load_timeout_s
        self._max_failures = max_failures
        self._failures = 0
        self.restarts = 0
        self._proc: Any = None
        self._conn: Any = None
        self._finalizer: Any = None
        self._closed = False
        self._start()

    @property
    def pid(self) -> int | None:
        """Process id of the running worker, None when none runs."""
        return self._proc.pid if self._alive() else None

    def _start(self) -> None:
        # A fresh interpreter running ``python -m models.llm.worker FD`` (not multiprocessing's
        # "spawn", which re-runs the parent's main script), talking over an inherited socket pair.
        parent, child = multiprocessing.Pipe(duplex=True)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen([sys.executable, "-m", "models.llm.worker", str(child.fileno())],
                                    pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL)
        except OSError as exc:
            parent.close()
            raise LlmError(f"cannot start the LLM worker: {exc}") from exc
        finally:
            child.close()
        self._proc, self._conn = proc, parent
        # a client dropped without close() must not leave its worker behind
        self._finalizer = weakref.finalize(self, _reap, proc)
        try:
            parent.send(self._load_kwargs)
            ready = self._receive(self._load_timeout_s, what="loading the model")
        except (LlmError, OSError) as exc:  # LlmTimeout is both LlmError and OSError
            self._kill()
            if isinstance(exc, LlmError):
                raise
            raise LlmError(f"LLM worker pipe failed: {exc}") from exc
        if not ready.get("ok"):
            self._kill()
            raise LlmError(ready.get("message", "LLM worker failed to start"))
        self.load_s = time.monotonic() - t0
        log.info("LLM worker %d ready in %.2f s (%s)", proc.pid, self.load_s, self.model_path.name)

    def _receive(self, timeout_s: float, *, what: str) -> dict:
        try:
            answered = self._conn.poll(timeout_s)
            if answered:
                return self._conn.recv()
        except (EOFError, OSError) as exc:
            try:
                code = self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                code = None
            raise LlmError(f"LLM worker died while {what} (exit code {code})") from exc
        raise LlmTimeout(f"LLM worker gave no answer within {timeout_s:.1f} s while {what}")

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10.0)

    def _send(self, request: dict) -> dict:
        if self._closed:
            raise LlmError("the LLM client is closed")
        if not self._alive():
            if self._failures >= self._max_failures:
                raise LlmError(f"LLM worker failed {self._failures} times in a row; not restarting")
            self._kill()
            log.warning("restarting the LLM worker (%d failure(s) so far)", self._failures)
            self.restarts += 1
            self._start()
        try:
            self._conn.send(request)
            response = self._receive(float(request.get("timeout_s", 30.0)) + self.hard_grace_s,
                                     what="answering a request")
        except (LlmError, OSError, ValueError) as exc:  # LlmTimeout is both LlmError and OSError
            self._failures += 1
            self._kill()
            if isinstance(exc, LlmError):
                raise
            raise LlmError(f"LLM worker pipe failed: {exc}") from exc
        self._failures = 0
        return response

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._conn is not None and self._alive():
            try:
                self._conn.send({"kind": "exit"})
                self._proc.wait(timeout=5.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass


def open_llm(model_path: str | Path, *, n_ctx: int = 2048, n_threads: int = 1, n_gpu_layers: int = 0,
             seed: int = 0, in_process: bool = False, load_timeout_s: float = 120.0) -> LlmClient:
    """Load a GGUF model, in a worker process (robot) or in this process (tests, tools).

    Parameters
    ----------
    model_path : str or Path
        GGUF file (on the robot ``<models_dir>/llm.gguf``).
    n_ctx, n_threads, n_gpu_layers, seed
        See :func:`models.llm.engine.load_llama`.
    in_process : bool
        False (default): run llama.cpp in a worker process started and restarted by the client.
    load_timeout_s : float
        Limit on starting the worker and loading the model, seconds (worker mode).

    Returns
    -------
    LlmClient

    Raises
    ------
    LlmError
        If the file is missing, llama-cpp-python is not installed, or the model cannot be loaded.
    LlmTimeout
        If the worker did not finish loading within ``load_timeout_s``.
    """
    path = Path(model_path)
    if not path.is_file():
        raise LlmError(f"LLM model file not found: {path}")
    for name, value, lo in (("n_ctx", n_ctx, 16), ("n_threads", n_threads, 1), ("n_gpu_layers", n_gpu_layers, -1)):
        if not isinstance(value, int) or value < lo:
            raise LlmError(f"{name} must be an integer >= {lo}, got {value!r}")
    load_kwargs = dict(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, seed=seed)
    if in_process:
        return InProcessLlm(path, load_kwargs)
    return WorkerLlm(path, load_kwargs, load_timeout_s=load_timeout_s)
