"""Latency of the ONNX models on this machine (``robot-app bench models``); figures in docs/models.md.

Per model: median (and 90th percentile) wall time of one call at batch 1 and batch 64 on the configured
providers. For the VNM also one full control step as the navigator runs it: preprocess the newest
camera frame into the context queue and one ONNX call against ``goals`` candidate node images
(observation branch once, goal branch per goal; the node images are preprocessed once per walk, and a
second figure includes preprocessing them every step); and the same architecture in torch eager
(``GnmStep`` with fresh random weights, ``torch.no_grad``; latency does not depend on the weight values)
when torch is installed, for the ONNX Runtime speed-up.
Timing uses ``time.perf_counter``; each figure follows one untimed warm-up call.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import re
import time
import types
from pathlib import Path
from typing import Callable

import numpy as np

from core.machine import load_average_1m
from models import clip, text_embed, vnm
from models.clip_preprocess import preprocess_images
from models.onnx_common import CPU, choose_providers, open_session
from models.sidecar import ModelError, read_sidecar

log = logging.getLogger(__name__)


def _time_ms(fn: Callable[[], object], repeats: int) -> dict:
    fn()  # warm-up (sessions were already warmed at open)
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": round(float(np.median(t)), 3), "p90_ms": round(float(np.percentile(t, 90)), 3)}


def _frames(n: int, rng, shape=(480, 640)) -> list:
    return [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for _ in range(n)]


def run(models_dir: str | os.PathLike, *, config=None, repeats: int = 20, goals: int = 9, torch_compare: bool = True,
        threads: int | None = None, progress: Callable[[str], None] = lambda m: None) -> dict:
    """Benchmark every model present in ``models_dir``; missing ones are listed under ``skipped``.

    ``threads`` overrides ``[models] intra_op_threads`` (and torch's thread count for the comparison).
    """
    import onnxruntime as ort

    mc = getattr(config, "models", config)
    if threads is not None:  # ModelsConfig is frozen: a copy with the thread count changed
        mc = (dataclasses.replace(mc, intra_op_threads=int(threads)) if mc is not None
              else types.SimpleNamespace(intra_op_threads=int(threads)))
    config = mc
    d = Path(models_dir)
    rng = np.random.default_rng(0)
    res: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                             "onnxruntime": ort.__version__, "loadavg_1m_before": load_average_1m()},
                 "providers": choose_providers(getattr(config, "providers", [CPU])),
                 "intra_op_threads": getattr(config, "intra_op_threads", 0),
                 "allow_spinning": bool(getattr(config, "allow_spinning", False)),
                 "repeats": repeats, "models": {}, "skipped": {}}
    try:
        progress("CLIP")
        c = clip.open_clip_model(d, config=config)
        s = c.image_size
        px1, px64 = (rng.normal(size=(b, 3, s, s)).astype(np.float32) for b in (1, 64))
        frame = _frames(1, rng)
        texts = [f"This is a photo of landmark number {j}" for j in range(64)]
        res["models"]["clip-image"] = {"arch": c.architecture,
                                       "batch1": _time_ms(lambda: c.encode_pixels(px1), repeats),
                                       "batch64": _time_ms(lambda: c.encode_pixels(px64), max(1, repeats // 4)),
                                       "preprocess_one_640x480": _time_ms(
                                           lambda: preprocess_images(frame, size=s, mean=c.mean, std=c.std),
                                           repeats)}
        res["models"]["clip-text"] = {"arch": c.architecture,
                                      "batch1": _time_ms(lambda: c.encode_text(texts[:1]), repeats),
                                      "batch64": _time_ms(lambda: c.encode_text(texts), max(1, repeats // 4))}
    except ModelError as exc:
        res["skipped"]["clip"] = str(exc)
    try:
        progress("text embedding")
        te = text_embed.open_text_embedder(d, config=config, bundled=True)  # as the service opens it
        sents = [f"the object number {j} is on the kitchen counter" for j in range(64)]
        res["models"]["text-embed"] = {"batch1": _time_ms(lambda: te.embed(sents[:1]), repeats),
                                       "batch64": _time_ms(lambda: te.embed(sents), max(1, repeats // 4))}
    except ModelError as exc:
        res["skipped"]["text-embed"] = str(exc)
    try:
        progress("VNM")
        v = vnm.open_vnm(d, config=config)
        res["models"]["vnm"] = _bench_vnm(v, rng, repeats=repeats, goals=goals, torch_compare=torch_compare,
                                          threads=threads)
    except ModelError as exc:
        res["skipped"]["vnm"] = str(exc)
    res["machine"]["loadavg_1m_after"] = load_average_1m()
    return res



#: (intra-op threads, allow_spinning) compared by :func:`compare_threads`: one thread, onnxruntime's own
#: default (one thread per core, spinning), and the product's default (one per core, no spinning).
THREAD_SETTINGS = ((1, False), (0, True), (0, False))


def compare_threads(models_dir: str | os.PathLike, *, config=None, repeats: int = 20, goals: int = 9,
                    progress: Callable[[str], None] = lambda m: None) -> dict:
    """Median latency of the CLIP image tower (batch 1) and one VNM model step per :data:`THREAD_SETTINGS`.

    The settings run interleaved (one call of each in turn), so all see the same load from other
    processes; the 1-minute load average before and after is recorded beside the figures.

    Returns
    -------
    dict
        ``{"loadavg_1m_before", "loadavg_1m_after", "settings": [label, ...], "models": {name: {label:
        {"median_ms", "p90_ms"}}}, "skipped": {name: why}}``; labels read ``threads=N spinning=on|off``
        (N 0 = onnxruntime's choice).
    """
    mc = getattr(config, "models", config)
    d = Path(models_dir)
    rng = np.random.default_rng(0)
    labels = [f"threads={t} spinning={'on' if sp else 'off'}" for t, sp in THREAD_SETTINGS]
    out: dict = {"loadavg_1m_before": load_average_1m(), "settings": labels, "models": {}, "skipped": {}}
    providers = getattr(mc, "providers", [CPU])
    cases = []
    try:
        sc = read_sidecar(d / getattr(mc, "clip_image_file", "clip-image.onnx"), kind="clip-image")
        size = int(sc.params["image_size"])
        px = rng.normal(size=(1, 3, size, size)).astype(np.float32)
        cases.append(("clip-image batch 1", sc.model_path, {sc.inputs[0]["name"]: px}))
    except ModelError as exc:
        out["skipped"]["clip-image"] = str(exc)
    try:
        sc = read_sidecar(d / getattr(mc, "vnm_file", "vnm.onnx"), kind="vnm")
        obs_shape, goal_shape = sc.inputs[0]["shape"], sc.inputs[1]["shape"]
        obs = rng.normal(size=(1, *obs_shape[1:])).astype(np.float32)
        goal = rng.normal(size=(goals, *goal_shape[1:])).astype(np.float32)
        cases.append((f"vnm step ({goals} goals)", sc.model_path,
                      {sc.inputs[0]["name"]: obs, sc.inputs[1]["name"]: goal}))
    except ModelError as exc:
        out["skipped"]["vnm"] = str(exc)
    for name, path, feed in cases:
        progress(f"threads: {name}")
        sessions = [open_session(path, providers=providers, intra_op_threads=t, allow_spinning=sp)
                    for t, sp in THREAD_SETTINGS]
        times: list[list[float]] = [[] for _ in sessions]
        for s in sessions:
            s.run(None, feed)  # warm-up
        for _ in range(repeats):
            for j, s in enumerate(sessions):
                t0 = time.perf_counter()
                s.run(None, feed)
                times[j].append((time.perf_counter() - t0) * 1e3)
        out["models"][name] = {lab: {"median_ms": round(float(np.median(t)), 3),
                                     "p90_ms": round(float(np.percentile(t, 90)), 3)}
                               for lab, t in zip(labels, times)}
    out["loadavg_1m_after"] = load_average_1m()
    return out


def format_threads(res: dict) -> str:
    """Human-readable summary of :func:`compare_threads`'s result."""
    lines = [f"onnxruntime thread settings, interleaved runs, load average (1 min) "
             f"{res['loadavg_1m_before']} before, {res['loadavg_1m_after']} after"]
    for name, r in res["models"].items():
        one = r[res["settings"][0]]["median_ms"]
        cells = ", ".join(f"{lab} {v['median_ms']:.2f} ms ({v['median_ms'] / one:.2f}x)" for lab, v in r.items())
        lines.append(f"  {name}: {cells}")
    for name, why in res["skipped"].items():
        lines.append(f"  {name}: skipped ({_short(why)})")
    return "\n".join(lines)


def _short(why: str) -> str:
    """A skipped model's reason without the provisioning hint: "model file X not found", "X: sha256 ... does
    not match its sidecar (...)"."""
    return re.split(r": export |; ", why, maxsplit=1)[0]


def _time_pair_ms(fa: Callable[[], object], fb: Callable[[], object], repeats: int) -> tuple[dict, dict]:
    """Time two functions alternately (same background load for both)."""
    fa()
    fb()
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fa()
        t1 = time.perf_counter()
        fb()
        t2 = time.perf_counter()
        ta.append((t1 - t0) * 1e3)
        tb.append((t2 - t1) * 1e3)
    summary = [{"median_ms": round(float(np.median(t)), 3), "p90_ms": round(float(np.percentile(t, 90)), 3)}
               for t in (ta, tb)]
    return summary[0], summary[1]


def _bench_vnm(v, rng, *, repeats: int, goals: int, torch_compare: bool, threads: int | None = None) -> dict:
    h, w = v.image_height, v.image_width
    obs = rng.normal(size=(1, v.obs_channels, h, w)).astype(np.float32)
    g1, g64 = (rng.normal(size=(b, 3, h, w)).astype(np.float32) for b in (1, 64))
    out = {"goals_per_step": goals,
           "batch1": _time_ms(lambda: v.predict(obs, g1), repeats),
           "batch64": _time_ms(lambda: v.predict(obs, g64), max(1, repeats // 4))}
    ctx = v.new_context()
    frames = _frames(v.context_size + 2, rng)
    goal_frames = _frames(goals, rng)
    for f in frames:
        ctx.push(f)

    cached_goals = v.preprocess_many(goal_frames)  # map node images: preprocessed once per walk

    def step():
        ctx.push(frames[0])
        return v.predict(ctx.stack(), cached_goals)

    def step_uncached():
        ctx.push(frames[0])
        return v.predict(ctx.stack(), v.preprocess_many(goal_frames))

    gk = rng.normal(size=(goals, 3, h, w)).astype(np.float32)
    out["step_onnx"] = _time_ms(step, repeats)
    out["step_onnx_with_goal_preprocessing"] = _time_ms(step_uncached, repeats)
    out["step_onnx_model_only"] = _time_ms(lambda: v.predict(obs, gk), repeats)
    if torch_compare:
        try:
            import torch

            from models.export.gnm_net import GnmNet, GnmStep
        except ImportError:
            out["step_torch_eager"] = "torch not installed"
            return out
        if threads:
            torch.set_num_threads(threads)
        net = GnmStep(GnmNet(context_size=v.context_size, len_traj_pred=v.len_traj_pred)).eval()
        to, tg = torch.from_numpy(obs), torch.from_numpy(gk)

        def torch_step():
            with torch.no_grad():
                return net(to, tg)

        # interleaved, so both see the same load from other processes
        ort_ms, torch_ms = _time_pair_ms(lambda: v.predict(obs, gk), torch_step, repeats)
        out["step_onnx_model_only_interleaved"] = ort_ms
        out["step_torch_eager_model_only"] = torch_ms
        out["torch_threads"] = torch.get_num_threads()
        out["speedup_onnx_vs_torch"] = round(torch_ms["median_ms"] / ort_ms["median_ms"], 2)
    return out


def format_table(res: dict) -> str:
    """Human-readable summary of :func:`run`'s result."""
    lines = [f"onnxruntime {res['machine']['onnxruntime']} ({', '.join(res['providers'])}, intra-op threads "
             f"{res['intra_op_threads'] or 'auto'}, spinning {'on' if res.get('allow_spinning') else 'off'}) on "
             f"{res['machine']['cores']} cores ({res['machine']['cpu']}), median of {res['repeats']} runs, "
             f"load average (1 min) {res['machine'].get('loadavg_1m_before')} before, "
             f"{res['machine'].get('loadavg_1m_after')} after"]
    for name, r in res["models"].items():
        b1, b64 = r["batch1"]["median_ms"], r["batch64"]["median_ms"]
        lines.append(f"  {name:<11} batch 1: {b1:8.2f} ms   batch 64: {b64:9.2f} ms ({b64 / 64:.2f} ms/item)")
    v = res["models"].get("vnm")
    if v:
        lines.append(f"  vnm control step ({v['goals_per_step']} goals, new frame preprocessed): "
                     f"{v['step_onnx']['median_ms']:.2f} ms "
                     f"(model only {v['step_onnx_model_only']['median_ms']:.2f} ms, "
                     f"re-preprocessing the goals too {v['step_onnx_with_goal_preprocessing']['median_ms']:.2f} ms)")
        if "speedup_onnx_vs_torch" in v:
            lines.append(f"  vnm step, model only, interleaved runs: onnxruntime "
                         f"{v['step_onnx_model_only_interleaved']['median_ms']:.2f} ms, torch eager "
                         f"({v['torch_threads']} threads) {v['step_torch_eager_model_only']['median_ms']:.2f} ms "
                         f"-> onnxruntime {v['speedup_onnx_vs_torch']:.2f}x faster")
    for name, why in res["skipped"].items():
        lines.append(f"  {name}: skipped ({_short(why)})")
    return "\n".join(lines)
