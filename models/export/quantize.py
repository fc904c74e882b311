"""int8 models for the robot's CPU (``robot-app models quantize IN OUT``): the CLIP towers, the VNM and the
sentence embedding of the LASP diagnoser (``text-embed``).

Method: onnxruntime's dynamic quantisation (``onnxruntime.quantization.quantize_dynamic``; onnxruntime
docs, "Quantize ONNX models": dynamic vs static). The weights of MatMul and Gemm nodes become signed
int8 per output channel; activations are quantised to uint8 per tensor at run time, so no calibration
set is needed. Conv nodes stay fp32 (dynamic quantisation leaves them; the speed of a CNN is in its
Conv layers, so a CNN gains little here: that is what the speed check below finds out).

Each model file is quantised on its own and the int8 file is kept only when all of these hold; otherwise
the output folder gets the fp32 file and the report says which check failed:

1. something was quantised (at least one int8 weight in the graph);
2. parity with fp32 on the exporter's reference inputs (the sidecar's ``reference`` npz): CLIP and the
   sentence embedding, the cosine of every int8 embedding with its fp32 embedding >= ``min_cosine`` (0.99);
   VNM, the cosine of every goal's waypoint vector (T x 4) >= ``min_cosine``, every temporal distance within
   :data:`VNM_DIST_TOL` of the trained range, and the same closest goal (smallest temporal distance) up to a
   tie within that bound: int8's closest goal is fp32's, or one that fp32 puts at most that bound farther
   than its own closest (goals closer together than the distance bound are a tie the bound cannot tell
   apart; a random-init GNM's 9 goals lie within 0.01 steps of each other);
3. it pays: median latency with one intra-op thread, fp32 and int8 run interleaved (same background
   load), CLIP and the sentence embedding at batch 1 and the VNM as one control step against the
   reference's goals, int8 at least ``min_speedup`` (1.1) times faster;
4. CLIP, for the pair that passed 1-3: the same retrieval as the fp32 pair on each labelled set
   (:class:`RetrievalSet`: the reference images and texts, and any the caller adds, e.g. simulated
   renders): for every phrase, the same top-1 image and the same set of top-3 images. If not, both towers
   go back to fp32.

The VNM is first quantised statically (``vnm_method="auto"``, the default; :mod:`models.export.quantize_static`:
QDQ, Conv layers too, activation ranges from a calibration set) and held to the same checks, parity also on
the calibration steps held out of the calibration; only when that fails does it try the dynamic method above.

A kept int8 file gets a sidecar like its fp32 one (same kind, inputs, outputs, params, extra files) with
``params.quantization = "int8 dynamic (onnxruntime)"`` (or ``"int8 static QDQ (onnxruntime)"``, with the
calibration sources and counts in ``params.int8.calibration``) and ``params.int8`` (the fp32 file's sha256, the
settings, the parity and speed figures); ``robot-app models info`` shows ``int8`` and ``--verify`` checks it
against the fp32 reference with the cosine bound. The output folder is a complete models directory: all
other files are copied unchanged. It is written as ``OUT.partial`` and renamed at the end, so a power cut
never leaves a half-written ``OUT``. An int8 CLIP image tower keeps its fp32 source's ``model_id``
(``models.clip.ClipModel``): the maps built with the fp32 pair serve the int8 pair without a rebuild.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from core.machine import load_average_1m
from models.export.quantize_static import STATIC_LABEL, CalibrationDrive, quantize_static_file, split_steps, vnm_steps
from models.onnx_common import CPU, open_session
from models.sidecar import ModelError, ModelMissing, Sidecar, precision, read_sidecar, sidecar_path, write_sidecar

log = logging.getLogger(__name__)

#: kind -> ([models] attribute naming the file, default file name)
QUANTIZABLE = {"clip-image": ("clip_image_file", "clip-image.onnx"),
               "clip-text": ("clip_text_file", "clip-text.onnx"),
               "vnm": ("vnm_file", "vnm.onnx"),
               "text-embed": ("text_embed_file", "text-embed.onnx")}
QUANT_OPS = ("MatMul", "Gemm")
#: (ops, weight type) per kind where they differ from (QUANT_OPS, int8): the sentence embedding's
#: token-embedding table (a Gather, 30522 x 384, half of the file) too, which takes all-MiniLM-L6-v2 from
#: 90 to 23 MB; with unsigned weights, because signed ones miss the 0.99 cosine there (0.989 vs 0.992 on the
#: reference texts, onnxruntime 1.32).
KIND_OPS = {"text-embed": (("MatMul", "Gemm", "Gather"), "uint8")}
INT8_LABEL = "int8 dynamic (onnxruntime)"  # the same words as the sim exporter's int8 text tower
#: VNM parity: largest |int8 - fp32| temporal distance, as a fraction of the trained range (2 % = 0.4 steps
#: of GNM's 0-20).
VNM_DIST_TOL = 0.02
#: Parity: least cosine of an int8 embedding (or waypoint vector) with its fp32 one.
DEFAULT_MIN_COSINE = 0.99
REPORT_FILE = "quantize-report.json"
#: How the VNM is quantised: "auto" (static QDQ, dynamic if static fails a check), "static", "dynamic".
VNM_METHODS = ("auto", "static", "dynamic")


class QuantizeError(RuntimeError):
    """The folders cannot be used (input missing, output not empty, output inside the input)."""


@dataclass(frozen=True)
class RetrievalSet:
    """Images and phrases for the retrieval check (text -> image, as landmark grounding retrieves).

    Attributes
    ----------
    name : str, shown in the report.
    images : sequence of M (H, W, 3) uint8 RGB images.
    phrases : sequence of K str, each embedded with the model's prompt ("This is a photo of ___").
    positives : (M, K) bool or None, which image shows which phrase (for precision@1/@3 in the report).
    """

    name: str
    images: Sequence[np.ndarray]
    phrases: Sequence[str]
    positives: np.ndarray | None = None


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def quantize_file(src: str | os.PathLike, dst: str | os.PathLike, ops: Sequence[str] = QUANT_OPS,
                  weight_type: str = "int8") -> int:
    """Dynamic 8-bit quantisation of ``src`` into ``dst``: the weights of ``ops`` nodes, per channel,
    ``weight_type`` "int8" (signed) or "uint8".

    Returns the number of 8-bit weight tensors in ``dst`` (0: nothing was quantised).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    # quantize_dynamic logs (root logger) a hint to run its shape-inference pre-processing, meant for static
    # quantisation; the exported graphs already carry their shapes.
    hint = _DropMessage("pre-processing before quantization")
    root.addFilter(hint)
    try:
        wt = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[weight_type]
        quantize_dynamic(str(src), str(dst), weight_type=wt, per_channel=True,
                         op_types_to_quantize=list(ops))
    finally:
        root.removeFilter(hint)
    m = onnx.load(str(dst), load_external_data=False)
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    return sum(1 for t in m.graph.initializer if t.data_type in eight_bit and len(t.dims) >= 2)


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    b = np.asarray(b, np.float64).reshape(len(b), -1)
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def _interleaved_ms(fns: Sequence[Callable[[], object]], repeats: int) -> list[float]:
    """Median wall time of each function, called in turn ``repeats`` times after one warm-up call each."""
    for f in fns:
        f()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for j, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[j].append((time.perf_counter() - t0) * 1e3)
    return [round(float(np.median(t)), 3) for t in times]


def _reference_feeds(sc: Sidecar) -> tuple[dict, dict]:
    """(full reference feed, batch-1 / one-step feed) of a model, from its sidecar's reference npz."""
    ref_name = sc.params.get("reference") or {"clip-image": "clip-reference.npz", "clip-text": "clip-reference.npz",
                                              "vnm": "vnm-reference.npz",
                                              "text-embed": "text-embed-reference.npz"}[sc.kind]
    path = sc.path.parent / ref_name
    if not path.is_file():
        raise ModelMissing(f"{path}: the reference inputs of {sc.file} are missing (the exporter writes them)")
    names = [i["name"] for i in sc.inputs]
    with np.load(path) as ref:
        if sc.kind == "clip-image":
            full = {names[0]: ref["pixel_values"]}
            return full, {names[0]: ref["pixel_values"][:1]}
        if sc.kind == "clip-text":
            full = {names[0]: ref["input_ids"]}
            return full, {names[0]: ref["input_ids"][:1]}
        if sc.kind == "text-embed":
            full = {n: ref[n] for n in names}
            return full, {n: ref[n][:1] for n in names}
        full = {names[0]: ref["obs"], names[1]: ref["goal"]}
        return full, full


def _parity(kind: str, fp: list, q: list, min_cosine: float, dist_range: float,
            dist_tol: float = VNM_DIST_TOL) -> tuple[dict, str | None]:
    """Parity figures of int8 vs fp32 outputs and the failed check (None: parity holds)."""
    if kind != "vnm":
        cos = _cosine_rows(q[0], fp[0])
        res = {"cosine_min": round(float(cos.min()), 5), "cosine_mean": round(float(cos.mean()), 5)}
        why = None if cos.min() >= min_cosine else f"embedding cosine {cos.min():.4f} < {min_cosine}"
        return res, why
    dist_fp, dist_q = fp[0][:, 0], q[0][:, 0]
    cos = _cosine_rows(q[1], fp[1])
    dmax = float(np.abs(dist_q - dist_fp).max())
    gap = float(np.diff(np.sort(dist_fp)[:2])[0]) if len(dist_fp) > 1 else float("inf")
    # int8's closest goal, as fp32 rates it: how much farther than fp32's own closest (0 when the same goal)
    excess = float(dist_fp[np.argmin(dist_q)] - dist_fp.min())
    res = {"waypoints_cosine_min": round(float(cos.min()), 5), "dist_max_abs": round(dmax, 4),
           "closest_goal_same": bool(np.argmin(dist_q) == np.argmin(dist_fp)),
           "closest_goal_gap_fp32": round(gap, 4),  # fp32's 2nd-closest minus closest: a near tie flips easily
           "closest_goal_excess_steps": round(excess, 4)}
    if cos.min() < min_cosine:
        return res, f"waypoint cosine {cos.min():.4f} < {min_cosine}"
    if excess > dist_tol * dist_range:
        return res, (f"the closest goal differs from fp32's, which fp32 puts {excess:.3f} steps farther than "
                     f"its own closest (> {dist_tol * dist_range:.3f})")
    if dmax > dist_tol * dist_range:
        return res, f"temporal distance differs by {dmax:.3f} steps > {dist_tol * dist_range:.3f}"
    return res, None


def retrieval_agreement(fp_model, q_model, rs: RetrievalSet) -> dict:
    """Text -> image retrieval of two CLIP models (``models.clip.ClipModel``) on one labelled set.

    Returns ``{"set", "images", "phrases", "top1_same", "top3_same", "differs": [phrase, ...]}`` plus, when
    ``rs.positives`` is given, ``precision_at_1`` / ``precision_at_3`` of each model over the phrases that
    have at least one positive image.
    """
    if len(rs.images) < 3 or not rs.phrases:
        raise ValueError(f"retrieval set {rs.name!r}: needs at least 3 images and 1 phrase")
    tops = []
    for m in (fp_model, q_model):
        emb = m.encode_images(list(rs.images))
        txt = m.encode_text([m.prompt(p) for p in rs.phrases])
        order = np.argsort(-(txt @ emb.T), axis=1, kind="stable")[:, :3]
        tops.append(order)
    (f, q) = tops
    top1 = f[:, 0] == q[:, 0]
    top3 = np.array([set(a) == set(b) for a, b in zip(f, q)])
    res = {"set": rs.name, "images": len(rs.images), "phrases": len(rs.phrases),
           "top1_same": int(top1.sum()), "top3_same": int(top3.sum()),
           "differs": [p for p, a, b in zip(rs.phrases, top1, top3) if not (a and b)]}
    if rs.positives is not None:
        pos = np.asarray(rs.positives, bool)
        if pos.shape != (len(rs.images), len(rs.phrases)):
            raise ValueError(f"retrieval set {rs.name!r}: positives shape {pos.shape} is not "
                             f"({len(rs.images)}, {len(rs.phrases)})")
        has = pos.any(axis=0)
        for label, order in (("fp32", f), ("int8", q)):
            p1 = [pos[order[k, 0], k] for k in range(len(rs.phrases)) if has[k]]
            p3 = [pos[order[k], k].mean() for k in range(len(rs.phrases)) if has[k]]
            res[f"precision_at_1_{label}"] = round(float(np.mean(p1)), 4) if p1 else None
            res[f"precision_at_3_{label}"] = round(float(np.mean(p3)), 4) if p3 else None
    return res


def reference_retrieval_set(models_dir: str | os.PathLike, text_sidecar: Sidecar) -> RetrievalSet | None:
    """The exporter's reference images and texts as a retrieval set (None when there are under 3 images)."""
    path = Path(models_dir) / text_sidecar.params.get("reference", "clip-reference.npz")
    with np.load(path) as ref:
        images = [ref[f"image_{j}"] for j in range(int(ref["n_images"]))]
        texts = [str(t) for t in ref["texts"]]
    return RetrievalSet("exporter reference", images, texts) if len(images) >= 3 else None


def check_folders(in_dir: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Raise :class:`QuantizeError` when ``in_dir`` is no folder or ``out_dir`` is not a new or empty folder
    outside it (callers check this before slow preparation, e.g. rendering calibration drives)."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    if not in_dir.is_dir():
        raise QuantizeError(f"{in_dir}: no such models directory")
    if out_dir.resolve() == in_dir.resolve() or in_dir.resolve() in out_dir.resolve().parents:
        raise QuantizeError(f"{out_dir}: the output must be a new folder outside the input {in_dir}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise QuantizeError(f"{out_dir}: exists and is not an empty folder; give a new one")


def _prepare_out(in_dir: Path, out_dir: Path) -> Path:
    check_folders(in_dir, out_dir)
    staging = out_dir.with_name(out_dir.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)  # left by an interrupted run
    shutil.copytree(in_dir, staging)
    return staging


def _restore(in_dir: Path, staging: Path, name: str) -> None:
    for f in (name, sidecar_path(Path(name)).name):
        shutil.copy2(in_dir / f, staging / f)


def _write_int8_sidecar(dst: Path, sc: Sidecar, details: dict, label: str = INT8_LABEL) -> None:
    write_sidecar(dst, kind=sc.kind, architecture=sc.architecture, weights=sc.weights, random_init=sc.random_init,
                  inputs=sc.inputs, outputs=sc.outputs, onnx=sc.onnx,
                  params={**sc.params, "quantization": label, "int8": details},
                  extra_files=list(sc.extra_files))


def quantize_models(in_dir: str | os.PathLike, out_dir: str | os.PathLike, *, config=None,
                    kinds: Sequence[str] = tuple(QUANTIZABLE), retrieval: Sequence[RetrievalSet] = (),
                    min_cosine: float = DEFAULT_MIN_COSINE, min_speedup: float = 1.1, repeats: int = 30,
                    vnm_method: str = "auto", calibration: Sequence[CalibrationDrive] = (),
                    dist_tol: float = VNM_DIST_TOL, progress: Callable[[str], None] = lambda m: None) -> dict:
    """Write ``out_dir``: ``in_dir`` with int8 CLIP towers / VNM where the checks in the module docstring pass.

    Parameters
    ----------
    in_dir, out_dir
        A models directory (fp32 exports with sidecars and reference npz files) and a new folder.
    config
        ``Config`` or its ``[models]`` section (file names); None: default names.
    kinds
        Which of :data:`QUANTIZABLE` to try.
    retrieval
        Labelled sets for check 4, besides the exporter's reference images and texts.
    min_cosine, min_speedup, repeats
        Parity bound, required speed-up, timed calls per latency figure.
    vnm_method
        One of :data:`VNM_METHODS`.
    dist_tol
        VNM parity: largest temporal-distance difference as a fraction of the trained range (default
        :data:`VNM_DIST_TOL`); recorded in the sidecar, so ``models info --verify`` holds the file to it.
    calibration
        Drives for the VNM's static quantisation (:mod:`models.export.quantize_static`): two thirds of their
        steps calibrate, the rest are held out for parity. None: the exporter's reference step calibrates
        (and parity on it is then not held out; the report says so).

    Returns
    -------
    dict
        ``{"in", "out", "onnxruntime", "loadavg_1m", "models": {kind: {"file", "result": "int8" | "fp32" |
        "missing", "method", "reason", "parity", "fp32_ms", "int8_ms", "speedup", "fp32_mb", "int8_mb"}}
        (the VNM also ``"calibration"``, ``"parity_held_out"`` and, when static was tried first, ``"static"``
        with its figures), "retrieval":
        [...]}``, also written to ``OUT/quantize-report.json``.

    Raises
    ------
    QuantizeError
        Bad folders, or ``in_dir`` holds none of the ``kinds``' files. ``ModelError`` subclasses: an input
        model fails its sidecar check.
    ValueError
        An unknown kind or VNM method, ``min_cosine`` outside (0, 1], ``dist_tol`` outside (0, 1] or
        ``min_speedup`` / ``repeats`` below 0 / 1.
    """
    bad = [k for k in kinds if k not in QUANTIZABLE]
    if bad:
        raise ValueError(f"unknown model kind(s) {', '.join(bad)} (quantizable: {', '.join(QUANTIZABLE)})")
    if not (0 < min_cosine <= 1) or min_speedup < 0 or repeats < 1:
        raise ValueError("min_cosine must be in (0, 1], min_speedup >= 0 and repeats >= 1")
    if not (0 < dist_tol <= 1):
        raise ValueError("dist_tol must be in (0, 1]")
    if vnm_method not in VNM_METHODS:
        raise ValueError(f"unknown VNM method {vnm_method!r} (one of {', '.join(VNM_METHODS)})")
    mc = getattr(config, "models", config)
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    files = [getattr(mc, QUANTIZABLE[k][0], QUANTIZABLE[k][1]) for k in kinds]
    if in_dir.is_dir() and not any((in_dir / f).is_file() for f in files):
        raise QuantizeError(f"{in_dir}: holds none of the models asked for ({', '.join(files)})")
    staging = _prepare_out(in_dir, out_dir)
    try:
        report = _quantize_into(staging, in_dir, out_dir, mc, kinds, retrieval, min_cosine=min_cosine,
                                min_speedup=min_speedup, repeats=repeats, vnm_method=vnm_method,
                                calibration=calibration, dist_tol=dist_tol, progress=progress)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # a failed run leaves no half folder
        raise
    if out_dir.exists():
        out_dir.rmdir()  # empty (checked above)
    os.replace(staging, out_dir)
    return report


def _quantize_into(staging: Path, in_dir: Path, out_dir: Path, mc, kinds, retrieval, *, min_cosine: float,
                   min_speedup: float, repeats: int, vnm_method: str, calibration, dist_tol: float,
                   progress) -> dict:
    import onnxruntime as ort

    report: dict = {"in": str(in_dir), "out": str(out_dir), "onnxruntime": ort.__version__,
                    "loadavg_1m": load_average_1m(), "min_cosine": min_cosine, "min_speedup": min_speedup,
                    "dist_tol": dist_tol, "vnm_method": vnm_method,
                    "models": {}, "retrieval": []}
    for kind in kinds:
        attr, default = QUANTIZABLE[kind]
        name = getattr(mc, attr, default)
        row: dict = {"file": name}
        report["models"][kind] = row
        try:
            sc = read_sidecar(in_dir / name, kind=kind)
        except ModelMissing as exc:
            row.update(result="missing", reason=str(exc))
            continue
        row["fp32_mb"] = round(sc.model_path.stat().st_size / 1e6, 2)
        if precision(sc) == "int8":
            row.update(result="int8", reason="already int8 in the input (copied)")
            continue
        static_why = None
        if kind == "vnm" and vnm_method != "dynamic":
            result, static_why = _static_vnm(sc, staging / name, row, calibration, min_cosine=min_cosine,
                                             dist_tol=dist_tol, min_speedup=min_speedup, repeats=repeats,
                                             progress=progress)
            if result == "int8" or vnm_method == "static":
                row.update(result=result, reason=static_why if result == "int8" else f"static QDQ: {static_why}")
                if result != "int8":
                    _restore(in_dir, staging, name)
                continue
            row["static"] = {k: row.pop(k) for k in ("method", "parity", "parity_held_out", "fp32_ms", "int8_ms",
                                                     "speedup", "int8_mb") if k in row}
        progress(f"{name}: quantising")
        row["method"] = "dynamic"
        ops, wtype = KIND_OPS.get(kind, (QUANT_OPS, "int8"))
        n_int8 = quantize_file(sc.model_path, staging / name, ops, wtype)
        row["int8_mb"] = round((staging / name).stat().st_size / 1e6, 2)  # kept in the report if reverted
        row["result"], row["reason"] = _check_one(sc, staging / name, n_int8, row, min_cosine=min_cosine,
                                                  dist_tol=dist_tol, min_speedup=min_speedup, repeats=repeats,
                                                  progress=progress)
        if static_why is not None:
            row["reason"] += f" (static QDQ failed first: {static_why})"
        if row["result"] == "int8":
            _write_int8_sidecar(staging / name, sc, {"source_sha256": sc.sha256, "ops": list(ops),
                                                     "weight_type": wtype, "activation_type": "uint8",
                                                     "per_channel": True, "onnxruntime": ort.__version__,
                                                     "min_cosine": min_cosine, **_dist_tol(sc, dist_tol),
                                                     "parity": row["parity"],
                                                     "speedup_1_thread": row["speedup"]})
        else:
            _restore(in_dir, staging, name)
    _check_clip_pair(in_dir, staging, mc, report, retrieval, progress)
    (staging / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _dist_range(sc: Sidecar) -> float:
    return float(sc.params.get("dist_max_steps", 20.0)) - float(sc.params.get("dist_min_steps", 0.0))


def _dist_tol(sc: Sidecar, dist_tol: float = VNM_DIST_TOL) -> dict:
    """The VNM's temporal-distance bound for ``models info --verify`` ({} for the CLIP towers)."""
    return {"dist_tol_steps": round(dist_tol * _dist_range(sc), 4)} if sc.kind == "vnm" else {}


def _check_one(sc: Sidecar, q_path: Path, n_int8: int, row: dict, *, min_cosine: float, min_speedup: float,
               repeats: int, progress, dist_tol: float = VNM_DIST_TOL, held: Sequence[dict] = (),
               time_always: bool = False) -> tuple[str, str]:
    """Checks 1-3 of the module docstring for one file; fills ``row``, returns (result, reason).

    ``held``: more feeds (VNM steps held out of a static calibration) that must hold parity too;
    ``time_always``: time fp32 and int8 even when parity fails (the figures go to the report).
    """
    if n_int8 == 0:
        return "fp32", f"no {'/'.join(KIND_OPS.get(sc.kind, (QUANT_OPS,))[0])} weight to quantise"
    full, one = _reference_feeds(sc)
    # the product's session options (graph optimisation ORT_ENABLE_ALL, no spinning), one thread
    fp = open_session(sc.model_path, providers=(CPU,), intra_op_threads=1)
    q = open_session(q_path, providers=(CPU,), intra_op_threads=1)
    row["parity"], why = _parity(sc.kind, fp.run(None, full), q.run(None, full), min_cosine, _dist_range(sc),
                                 dist_tol)
    if held:  # figured even when the reference fails, for the report
        row["parity_held_out"], why_held = _held_out_parity(sc, fp, q, held, min_cosine, dist_tol)
    if time_always or (why is None and not (held and why_held is not None)):
        progress(f"{sc.file}: timing fp32 and int8 ({repeats} calls each, 1 thread)")
        row["fp32_ms"], row["int8_ms"] = _interleaved_ms([lambda: fp.run(None, one), lambda: q.run(None, one)],
                                                         repeats)
        row["speedup"] = round(row["fp32_ms"] / max(row["int8_ms"], 1e-6), 2)
    if why is not None:
        return "fp32", f"parity: {why}"
    if held and why_held is not None:
        return "fp32", f"parity on the held-out calibration steps: {why_held}"
    if row["speedup"] < min_speedup:
        return "fp32", (f"does not pay: int8 {row['int8_ms']} ms vs fp32 {row['fp32_ms']} ms "
                        f"({row['speedup']}x < {min_speedup}x)")
    return "int8", f"parity holds, {row['speedup']}x faster with 1 thread"


def _held_out_parity(sc: Sidecar, fp, q, held: Sequence[dict], min_cosine: float,
                     dist_tol: float) -> tuple[dict, str | None]:
    """Parity of ``q`` with ``fp`` on every held-out VNM step: worst figures and the first failure."""
    rows, first = [], None
    for j, feed in enumerate(held):
        r, why = _parity(sc.kind, fp.run(None, feed), q.run(None, feed), min_cosine, _dist_range(sc), dist_tol)
        rows.append(r)
        if why is not None and first is None:
            first = f"step {j + 1} of {len(held)}: {why}"
    res = {"steps": len(rows), "waypoints_cosine_min": min(r["waypoints_cosine_min"] for r in rows),
           "dist_max_abs": max(r["dist_max_abs"] for r in rows),
           "closest_goal_same_steps": sum(r["closest_goal_same"] for r in rows),
           "closest_goal_excess_steps_max": max(r["closest_goal_excess_steps"] for r in rows),
           "closest_goal_gap_fp32_min": min(r["closest_goal_gap_fp32"] for r in rows)}
    return res, first


def _static_vnm(sc: Sidecar, dst: Path, row: dict, calibration: Sequence[CalibrationDrive], *, min_cosine: float,
                dist_tol: float, min_speedup: float, repeats: int, progress) -> tuple[str, str]:
    """Static QDQ quantisation of the VNM into ``dst`` and checks 1-3 (parity also on the held-out steps).

    Writes the int8 sidecar when kept; fills ``row`` (``method``, ``calibration``, figures); returns
    (result, reason).
    """
    import onnxruntime as ort

    steps = vnm_steps(calibration, sc) if calibration else []
    cal, held = split_steps(steps)
    on_reference = not cal
    if on_reference:
        cal = [_reference_feeds(sc)[0]]
    info = {"sources": [d.source for d in calibration] or [f"exporter reference step ({sc.params.get('reference')})"],
            "steps": len(cal), "held_out_steps": len(held), "goals_per_step": int(cal[0]["goal"].shape[0]),
            "reference_in_calibration": on_reference, "ranges": "MinMax"}
    if calibration and not held:
        info["warning"] = (f"only {len(cal)} calibration step(s) from the drives given: none held out, parity is "
                           "checked on the exporter's reference step alone; give longer drives")
    row.update(method="static QDQ", calibration=info)
    progress(f"{sc.file}: static QDQ quantisation, calibrating on {len(cal)} steps "
             f"({len(held)} held out for parity)")
    n_int8 = quantize_static_file(sc.model_path, dst, cal)
    row["int8_mb"] = round(dst.stat().st_size / 1e6, 2)
    result, reason = _check_one(sc, dst, n_int8, row, min_cosine=min_cosine, min_speedup=min_speedup,
                                repeats=repeats, progress=progress, dist_tol=dist_tol, held=held, time_always=True)
    if result == "int8":
        reason = f"static QDQ: {reason}"
        _write_int8_sidecar(dst, sc, {"source_sha256": sc.sha256, "method": "static QDQ", "ops": "all quantisable",
                                      "weight_type": "int8", "activation_type": "uint8", "per_channel": True,
                                      "calibration": info, "onnxruntime": ort.__version__, "min_cosine": min_cosine,
                                      **_dist_tol(sc, dist_tol), "parity": row["parity"],
                                      "parity_held_out": row.get("parity_held_out"),
                                      "speedup_1_thread": row["speedup"]}, label=STATIC_LABEL)
    return result, reason


def _check_clip_pair(in_dir: Path, staging: Path, mc, report: dict, retrieval: Sequence[RetrievalSet],
                     progress) -> None:
    """Check 4: the CLIP pair in ``staging`` retrieves as the fp32 pair does; else both towers go back."""
    from models.clip import open_clip_model

    rows = report["models"]
    changed = [k for k in ("clip-image", "clip-text") if rows.get(k, {}).get("result") == "int8"
               and "already" not in rows[k]["reason"]]
    if not changed:
        return
    progress("CLIP: retrieval check of the int8 pair against fp32")
    try:
        fp = open_clip_model(in_dir, config=mc, warm_up=False)
        q = open_clip_model(staging, config=mc, warm_up=False)
    except ModelError as exc:  # the other tower is missing: no pair to check, nothing to keep
        why = f"the CLIP pair cannot be opened: {exc}"
        sets = []
    else:
        txt_sc = read_sidecar(in_dir / getattr(mc, "clip_text_file", "clip-text.onnx"), kind="clip-text")
        ref = reference_retrieval_set(in_dir, txt_sc)
        sets = [retrieval_agreement(fp, q, rs) for rs in ([ref] if ref else []) + list(retrieval)]
        report["retrieval"] = sets
        bad = [s for s in sets if s["differs"]]
        why = None if not bad else ("retrieval differs from fp32 on " + "; ".join(
            f"{s['set']}: {', '.join(repr(p) for p in s['differs'][:5])}" for s in bad))
    if why is None:
        return
    for k in changed:
        _restore(in_dir, staging, rows[k]["file"])
        rows[k].update(result="fp32", reason=why)


__all__ = ["QUANTIZABLE", "VNM_METHODS", "CalibrationDrive", "QuantizeError", "RetrievalSet", "quantize_file",
           "quantize_models",
           "reference_retrieval_set", "retrieval_agreement"]
