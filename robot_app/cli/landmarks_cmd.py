"""``robot-app landmarks``, ``eval landmarks``, ``bench landmarks``, ``bench llm``: landmark extraction.

``landmarks "TEXT"`` prints the landmarks of one instruction; ``eval landmarks FILE.jsonl`` scores a
parser against truth with LM-Nav's extraction success (App. C); ``bench landmarks`` times the rule
parser; ``bench llm --model PATH`` (or ``--tiny``) times loading and prompting a GGUF model.
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from robot_app.errors import UsageError

log = logging.getLogger(__name__)

_PARSER_CHOICES = ("auto", "rules", "llm", "llm-spans")
# Used by `bench landmarks` / `bench llm` without --file: instructions in the style operators write.
_BENCH_INSTRUCTIONS = (
    "Drive past the yellow fire hydrant and stop at the bus shelter.",
    "Find the fountain, but first pass by a wooden bench near the oak tree.",
    "Look for a basketball hoop. It is past the tennis courts, which come after the swimming pool.",
    "Before you get to the water tower, you will drive by a stack of pallets. Continue to a fence.",
    "Turn left at the red pickup truck, go three blocks, then stop next to a silver van.",
    "Reach the concrete ramp. On the way, you should pass a vending machine and then a bike rack.",
    "Don't take the gravel road; follow the paved path to the greenhouse, passing a scarecrow.",
    "The final stop is the library entrance; go there by way of the bookstore and the clock tower.",
)


def register(sub, groups) -> None:
    p = sub.add_parser("landmarks", help="extract the ordered landmarks of a route instruction")
    p.add_argument("text", help="the instruction, in quotes")
    _common(p)
    p.set_defaults(func=_landmarks)

    e = groups["eval"].add_parser("landmarks", help="LM-Nav extraction success of a parser on a JSONL file")
    e.add_argument("file", type=Path, help='JSONL, one {"instruction": str, "landmarks": [str, ...]} per line')
    _common(e)
    e.set_defaults(func=_eval)

    b = groups["bench"].add_parser("landmarks", help="time the rule-based landmark parser per instruction")
    b.add_argument("--file", type=Path, help="JSONL instructions (default: built-in examples)")
    b.add_argument("--repeat", type=int, default=200, help="passes over the instructions (default 200)")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.set_defaults(func=_bench_rules)

    sc = groups["models"].add_parser("llm-sidecar", help="write the JSON sidecar (sha256, metadata) of a "
                                                          "GGUF model so the robot will load it")
    sc.add_argument("model", type=Path, help="GGUF file, e.g. llm.gguf before copying it to models_dir")
    sc.add_argument("--weights", default=None, help="where the weights came from (default: GGUF general.name)")
    sc.set_defaults(func=_llm_sidecar)

    m = groups["bench"].add_parser("llm", help="LLM load time, prompt+generation latency, tokens/s")
    src = m.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, help="GGUF model file")
    src.add_argument("--tiny", action="store_true", help="generate and time the tiny random test model")
    m.add_argument("--file", type=Path, help="JSONL instructions (default: built-in examples)")
    m.add_argument("--n-threads", type=int, default=None, help="override [llm] n_threads")
    m.add_argument("--in-process", action="store_true", help="run llama.cpp in this process, not a worker")
    m.add_argument("--json", action="store_true", help="machine-readable output")
    m.set_defaults(func=_bench_llm)


def _common(p) -> None:
    p.add_argument("--parser", choices=_PARSER_CHOICES, default=None,
                   help="rules, llm (the LLM writes the list), llm-spans (the LLM picks phrases of the instruction; "
                        "both fall back to rules on failure) or auto (default: [llm] landmark_parser)")
    p.add_argument("--model", type=Path, default=None, help="GGUF model instead of the configured llm.gguf")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _llm_sidecar(args, config) -> int:
    from models.llm.sidecar import write_llm_sidecar

    if not args.model.is_file():
        raise UsageError(f"{args.model}: no such model file")
    try:
        out = write_llm_sidecar(args.model, weights=args.weights)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    print(f"wrote {out}")
    return 0


def _check_model(args) -> None:
    if args.model is not None and not args.model.is_file():
        raise UsageError(f"--model {args.model}: no such file")


def _landmarks(args, config) -> int:
    from robot_app.route.landmark_parsing import parse_instruction

    _check_model(args)
    if not args.text.strip():
        raise UsageError("the instruction is empty")
    try:
        landmarks, used = parse_instruction(args.text, config=config, parser=args.parser,
                                            model_path=args.model)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps({"landmarks": landmarks, "parser": used}))
    else:
        for i, lm in enumerate(landmarks, 1):
            print(f"{i}. {lm}")
        print(f"({used} parser{'' if landmarks else '; no landmark found'})")
    return 0


def _read_items(path: Path, *, need_truth: bool) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{n}: not valid JSON: {exc.msg}") from exc
        if not isinstance(item, dict) or not isinstance(item.get("instruction"), str):
            raise UsageError(f"{path}:{n}: expected an object with a string 'instruction'")
        truth = item.get("landmarks")
        if need_truth and (not isinstance(truth, list) or not truth
                           or not all(isinstance(x, str) for x in truth)):
            raise UsageError(f"{path}:{n}: 'landmarks' must be a non-empty list of strings")
        items.append(item)
    if not items:
        raise UsageError(f"{path}: no instructions")
    return items


def _eval(args, config) -> int:
    from core.landmarks import extraction_success
    from robot_app.route.landmark_parsing import llm_model_path, open_configured_llm, parse_instruction

    _check_model(args)
    items = _read_items(args.file, need_truth=True)
    choice = args.parser or config.llm.landmark_parser
    client = None
    path = args.model or llm_model_path(config)
    if choice != "rules" and path.is_file():
        from models.llm import LlmError

        try:
            client = open_configured_llm(config, model_path=args.model)
        except LlmError as exc:
            log.warning("cannot open the LLM (%s); evaluating the rule-based parser", exc)
    elif choice in ("llm", "llm-spans"):
        log.warning("LLM model %s not found; evaluating the rule-based parser", path)
    if client is None:
        choice = "rules"  # open the model once here, not once per instruction
    results = []
    try:
        for item in items:
            got, used = parse_instruction(item["instruction"], config=config, parser=choice, llm=client)
            score = extraction_success(got, item["landmarks"])
            results.append({"instruction": item["instruction"], "truth": item["landmarks"],
                            "landmarks": got, "parser": used, "success": score})
    finally:
        if client is not None:
            client.close()
    mean = sum(r["success"] for r in results) / len(results)
    if args.json:
        print(json.dumps({"extraction_success": mean, "items": results}, indent=1))
    else:
        for r in results:
            mark = "ok  " if r["success"] == 1.0 else f"{r['success']:.2f}"
            print(f"{mark} {r['instruction']}")
            if r["success"] < 1.0:
                print(f"       got:   {r['landmarks']}\n       truth: {r['truth']}")
        parsers = sorted({r["parser"] for r in results})
        print(f"mean extraction success {mean:.3f} over {len(results)} instructions "
              f"(parser: {', '.join(parsers)})")
    return 0


def _instructions(path: Path | None) -> list[str]:
    if path is None:
        return list(_BENCH_INSTRUCTIONS)
    return [item["instruction"] for item in _read_items(path, need_truth=False)]


def _bench_rules(args, config) -> int:
    from core.landmarks import parse_landmarks

    if args.repeat < 1:
        raise UsageError("--repeat must be >= 1")
    texts = _instructions(args.file)
    for t in texts:  # warm-up
        parse_landmarks(t)
    times_ms = []
    for _ in range(args.repeat):
        for t in texts:
            t0 = time.perf_counter()
            parse_landmarks(t)
            times_ms.append((time.perf_counter() - t0) * 1e3)
    times_ms.sort()
    out = {"instructions": len(texts), "calls": len(times_ms), "mean_ms": statistics.fmean(times_ms),
           "p50_ms": times_ms[len(times_ms) // 2], "p95_ms": times_ms[int(len(times_ms) * 0.95)],
           "max_ms": times_ms[-1]}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"rule-based landmark parser, {out['calls']} calls over {out['instructions']} instructions: "
              f"mean {out['mean_ms']:.3f} ms, p50 {out['p50_ms']:.3f} ms, p95 {out['p95_ms']:.3f} ms, "
              f"max {out['max_ms']:.3f} ms per instruction")
    return 0


def _bench_llm(args, config) -> int:
    from models.llm import LlmError, extract_landmarks_llm, make_tiny_gguf, open_llm

    texts = _instructions(args.file)
    c = config.llm
    n_threads = args.n_threads or c.n_threads
    if n_threads < 1:
        raise UsageError("--n-threads must be >= 1")
    with tempfile.TemporaryDirectory(prefix="robot-app-bench-") as tmp:
        model = make_tiny_gguf(Path(tmp) / "tiny.gguf") if args.tiny else args.model
        if not model.is_file():
            raise UsageError(f"{model}: no such model file")
        try:
            t0 = time.monotonic()
            client = open_llm(model, n_ctx=c.n_ctx, n_threads=n_threads, n_gpu_layers=c.n_gpu_layers,
                              seed=c.seed, in_process=args.in_process, load_timeout_s=c.load_timeout_s)
            load_s = time.monotonic() - t0
        except LlmError as exc:
            print(f"robot-app: cannot load {model}: {exc}")
            return 1
        rows = []
        with client:
            for text in texts:
                t0 = time.monotonic()
                try:
                    extract_landmarks_llm(client, text, chat=c.chat_template, max_tokens=c.max_tokens,
                                          timeout_s=c.timeout_s)
                    ok = True
                except LlmError as exc:
                    log.warning("request failed: %s", exc)
                    ok = False
                rows.append({"seconds": time.monotonic() - t0, "ok": ok, **client.last_usage})
    done = [r for r in rows if r["ok"]]
    gen_tokens = sum(r["completion_tokens"] for r in done)
    gen_s = sum(r["seconds"] for r in done)
    out = {"model": str(args.model) if args.model else "tiny random llama (generated)",
           "worker": not args.in_process, "n_threads": n_threads, "load_s": load_s,
           "requests": len(rows), "failed": len(rows) - len(done),
           "first_request_s": rows[0]["seconds"],
           "mean_request_s": statistics.fmean(r["seconds"] for r in rows[1:]) if len(rows) > 1 else None,
           "mean_prompt_tokens": statistics.fmean(r["prompt_tokens"] for r in done) if done else None,
           "mean_completion_tokens": statistics.fmean(r["completion_tokens"] for r in done) if done else None,
           "tokens_per_s": gen_tokens / gen_s if gen_s > 0 else None}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"model: {out['model']} ({'worker process' if out['worker'] else 'in-process'}, "
              f"{n_threads} thread(s))")
        print(f"load: {load_s:.2f} s; first request {out['first_request_s']:.3f} s; "
              f"mean later request {out['mean_request_s'] or float('nan'):.3f} s "
              f"(prompt+generation, prompt prefix cached)")
        print(f"prompt {out['mean_prompt_tokens'] or 0:.0f} tokens, answer {out['mean_completion_tokens'] or 0:.0f} "
              f"tokens on average; {out['tokens_per_s'] or 0:.0f} answer tokens/s end to end; "
              f"{out['failed']} of {out['requests']} failed")
    return 0 if done else 1
