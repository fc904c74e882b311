"""Generated worlds on disk for training, tuning and evaluation, and ``eval sim`` over many of them.

A split's worlds are the first N seeds of :data:`robot_app.sim.worldgen.SEED_RANGES` ``[split]`` (train
1000-1999, dev 2000-2099, test 3000-3099; never overlapping): :func:`materialise` writes each world's TOML
and its instruction set (:func:`robot_app.sim.worldgen_instructions.generate_instructions`, seeded with the
world's seed) into a folder, unchanged files left as they are. The stand-in VLM is trained on train seeds,
the planner's alpha and cosine cap are chosen on dev seeds, and the headline figures come from test seeds:
worlds that nothing was trained or tuned on (:func:`run_generated_eval`, ``robot-app eval sim --generated N
--seed-range test``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["GeneratedFiles", "materialise", "run_generated_eval"]


@dataclass(frozen=True)
class GeneratedFiles:
    """One generated world on disk: its seed, split, world file and instruction file."""

    seed: int
    split: str
    world: Path
    instructions: Path


def materialise(split: str, n: int, folder: str | Path, *, n_instructions: int = 20,
                first: int = 0) -> list[GeneratedFiles]:
    """Write the worlds of seeds ``first .. first + n - 1`` of ``split`` (and their instruction sets) into
    ``folder`` as ``gen-SEED.toml`` and ``gen-SEED-instructions.json``; files whose text is already the
    generated one are not rewritten.

    Raises
    ------
    ValueError
        An unknown split, ``n`` < 1, or more seeds than the split holds.
    OSError
        If the folder cannot be written.
    """
    from robot_app.sim.worldgen import generate, seeds
    from robot_app.sim.worldgen_instructions import generate_instructions, instructions_json

    pool = seeds(split)
    if not 1 <= n or first < 0 or first + n > len(pool):
        raise ValueError(f"{split}: seeds {first}..{first + n - 1} of the split's {len(pool)} are not there "
                         f"(n must be 1-{len(pool) - first})")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for seed in pool[first:first + n]:
        gw = generate(seed)
        wpath, ipath = out / f"gen-{seed}.toml", out / f"gen-{seed}-instructions.json"
        _write_if_changed(wpath, gw.text)
        _write_if_changed(ipath, instructions_json(generate_instructions(gw.world, seed, n=n_instructions)))
        files.append(GeneratedFiles(seed, split, wpath, ipath))
    return files


def _write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def run_generated_eval(split: str, n: int, settings, config, *, progress=None) -> dict:
    """``eval sim`` on the first ``n`` generated worlds of ``split``, one after the other.

    Parameters
    ----------
    split : str
        ``test`` for figures on worlds nothing was trained or tuned on; ``dev`` / ``train`` for the others.
    n : int
        Worlds (1 to the split's size).
    settings : robot_app.sim.eval.EvalSettings
        The per-world settings; ``world``, ``instructions`` and ``out_dir`` are replaced per world
        (``out_dir/gen-SEED``; the generated files go to ``out_dir/worlds``).
    config : robot_app.config.Config
    progress : callable, optional
        ``progress(i, n, seed)`` before each world.

    Returns
    -------
    dict
        ``split``, ``seeds``, ``worlds`` (per seed: planning success rates and counts of LM-Nav and the
        max-likelihood planner, or ``error`` where the world could not be evaluated), ``totals`` (pooled over
        every instruction of the evaluated worlds), ``report`` (the JSON file written to ``out_dir``).
    """
    from robot_app.sim.eval import EvalError, run_sim_eval

    out = Path(settings.out_dir)
    files = materialise(split, n, out / "worlds")
    t0 = time.perf_counter()
    worlds: dict = {}
    pooled = {"lmnav": [0, 0], "max-likelihood": [0, 0]}  # successes, instructions
    for i, f in enumerate(files):
        if progress is not None:
            progress(i, len(files), f.seed)
        s = dataclasses.replace(settings, world=str(f.world), instructions=str(f.instructions),
                                out_dir=str(out / f"gen-{f.seed}"), progress=False)
        try:
            rep = run_sim_eval(s, config)
        except EvalError as exc:  # e.g. an exploration that did not reach its end: say so, go on
            log.warning("gen-%d: %s", f.seed, exc)
            worlds[str(f.seed)] = {"error": str(exc)}
            continue
        pl = rep["totals"]["planning"]
        n_instr = rep["totals"]["instructions"]
        entry = {"instructions": n_instr, "report": rep["report"]}
        for planner in pooled:
            entry[planner] = pl[planner]["success_rate"]
            pooled[planner][0] += pl[planner]["successes"]
            pooled[planner][1] += n_instr
        worlds[str(f.seed)] = entry
    totals = {p: {"successes": s, "instructions": k, "success_rate": round(s / k, 4) if k else None}
              for p, (s, k) in pooled.items()}
    ok = [w for w in worlds.values() if "error" not in w]
    doc = {"split": split, "seeds": [f.seed for f in files], "unseen": split == "test",
           "grounding": settings.grounding, "models_dir": str(settings.models_dir or ""),
           "worlds_evaluated": len(ok), "worlds_failed": len(worlds) - len(ok), "worlds": worlds, "totals": totals,
           "lmnav_success_min_world": min((w["lmnav"] for w in ok), default=None),
           "wall_s": round(time.perf_counter() - t0, 1)}
    path = out / f"eval-generated-{split}-{settings.grounding}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    doc["report"] = str(path)
    return doc


def record_unseen_eval(models_dir, doc: dict) -> Path:
    """Record a test-range result of :func:`run_generated_eval` beside the models, in
    ``models_dir/`` :data:`robot_app.demo.report.UNSEEN_EVAL_FILE` (the demo's report quotes it first).

    A VLM run sets ``lmnav_success_rate``, an oracle run ``oracle_success_rate``; both are kept when the file
    was written for the same CLIP image encoder and VNM (their sha256), else the file starts again. Written
    atomically (a power cut leaves the old file or the new one).

    Raises
    ------
    ValueError
        ``doc`` is not on the test seeds (figures on worlds the models were tuned or trained on are not
        recorded as unseen), or no world was evaluated. OSError: the folder is not writable.
    """
    from robot_app.sim import _model_digest

    if doc.get("split") != "test":
        raise ValueError(f"only the test seed range is recorded as unseen worlds, not {doc.get('split')!r}")
    if not doc.get("worlds_evaluated"):
        raise ValueError("no world was evaluated: nothing to record")
    d = Path(models_dir)
    path = d / "unseen-worlds-eval.json"
    ids = {"clip_image_sha256": _model_digest(d, "clip-image.onnx.json"),
           "vnm_sha256": _model_digest(d, "vnm.onnx.json")}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    seeds = [int(s) for s, w in doc["worlds"].items() if "error" not in w]
    base = {"split": "test", "seed_first": min(seeds), "seed_last": max(seeds), "worlds": len(seeds),
            "instructions": doc["totals"]["lmnav"]["instructions"], **ids,
            "measured_by": "robot-app eval sim --generated N --seed-range test --no-drive --write"}
    same = isinstance(old, dict) and all(old.get(k) == v for k, v in ids.items()) and \
        all(old.get(k) == base[k] for k in ("seed_first", "seed_last", "worlds"))
    out = {**(old if same else {}), **base}
    key = "oracle_success_rate" if doc.get("grounding") == "oracle" else "lmnav_success_rate"
    out[key] = doc["totals"]["lmnav"]["success_rate"]
    if key == "lmnav_success_rate":
        out["lmnav_success_min_world"] = doc.get("lmnav_success_min_world")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
