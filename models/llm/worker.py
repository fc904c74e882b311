"""The LLM worker process: loads the model once, then answers requests over a pipe until told to exit.

llama.cpp aborts its whole process on some errors (failed asserts, some malformed grammars); running it
here keeps such a crash away from the robot's drive loop. The parent (:class:`models.llm.client.WorkerLlm`)
starts it as ``python -m models.llm.worker FD`` (FD: its end of a socket pair), sees a crash as a closed
pipe and restarts the worker.

Messages: the parent first sends the keyword arguments of :func:`models.llm.engine.load_llama`; the
first message the worker sends is ``{"ok": True, "ready": True, "load_s": float}`` or
``{"ok": False, "error": "error", "message": str}``; after that, one response per request
(:mod:`models.llm.engine`). A request ``{"kind": "exit"}`` ends the loop; so does a closed pipe.
A request ``{"kind": "crash"}`` aborts the process (used by tests of the restart logic).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from models.llm.engine import GrammarCache, load_llama, run_request
from models.llm.errors import LlmError


def worker_main(conn: Any) -> None:
    """Serve requests on ``conn`` (a ``multiprocessing`` connection) until exit or a closed pipe."""
    try:
        load_kwargs = conn.recv()
    except (EOFError, OSError):
        return
    t0 = time.monotonic()
    try:
        llama = load_llama(**load_kwargs)
    except LlmError as exc:
        conn.send({"ok": False, "error": "error", "message": str(exc)})
        conn.close()
        return
    conn.send({"ok": True, "ready": True, "load_s": time.monotonic() - t0})
    grammars = GrammarCache()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        kind = request.get("kind") if isinstance(request, dict) else None
        if kind == "exit":
            break
        if kind == "crash":
            os.abort()
        if kind == "sleep":  # hold the worker busy (tests of the parent's hard deadline)
            time.sleep(float(request.get("seconds", 1.0)))
            conn.send({"ok": True, "text": "", "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0})
            continue
        if kind not in ("complete", "chat", "score"):
            conn.send({"ok": False, "error": "error", "message": f"unknown request kind {kind!r}"})
            continue
        conn.send(run_request(llama, request, grammars))
    if hasattr(llama, "close"):
        llama.close()
    conn.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m models.llm.worker FD``: serve on the inherited socket ``FD``."""
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends us
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        sys.stderr.write("usage: python -m models.llm.worker FD\n")
        return 2
    worker_main(Connection(int(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
