"""ONNX Runtime sessions for the robot's models: provider choice, threads, warm-up, input checks.

Sessions are built by :func:`open_session` from a model file whose sidecar has been verified
(:mod:`models.sidecar`). The execution providers come from config (``[models] providers``), in order of
preference; providers this onnxruntime build lacks are skipped with a log line, and the CPU provider is
always the last resort. On a Jetson, NVIDIA's ``onnxruntime-gpu`` wheel (from the Jetson AI Lab / JetPack
index, not PyPI) replaces the ``onnxruntime`` dependency and offers ``CUDAExecutionProvider`` and
``TensorrtExecutionProvider``.

``InferenceSession.run`` may be called from several threads at once (onnxruntime documents ``Run`` as
thread-safe), so a model object can be shared by the asyncio process's worker threads.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from models.sidecar import ModelInvalid

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
KNOWN_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", CPU)

# onnxruntime 1.16 (the oldest the robot supports) reads ONNX IR <= 9; the exporters pin opset 17.
MAX_IR_VERSION = 9
OPSET = 17


def choose_providers(requested: Sequence[str], available: Sequence[str] | None = None) -> list[str]:
    """The requested providers that this onnxruntime build has, in the requested order, CPU last.

    Parameters
    ----------
    requested
        Provider names in order of preference (config ``[models] providers``).
    available
        What the build offers (default: ``onnxruntime.get_available_providers()``).

    Raises
    ------
    ValueError
        A requested name is not one of :data:`KNOWN_PROVIDERS`.
    """
    if available is None:
        import onnxruntime as ort

        available = ort.get_available_providers()
    chosen = []
    for name in requested:
        if name not in KNOWN_PROVIDERS:
            raise ValueError(f"unknown onnxruntime provider {name!r} (known: {', '.join(KNOWN_PROVIDERS)})")
        if name in available:
            if name not in chosen:
                chosen.append(name)
        else:
            log.info("onnxruntime provider %s is not in this build; skipped", name)
    if CPU not in chosen:
        chosen.append(CPU)
    return chosen


def thread_options(models_config) -> dict:
    """``open_session``'s thread keywords from a ``[models]`` section (``None`` or a partial one: defaults)."""
    return {"intra_op_threads": int(getattr(models_config, "intra_op_threads", 0)),
            "allow_spinning": bool(getattr(models_config, "allow_spinning", False))}


def session_options(models_config) -> dict:
    """All of ``open_session``'s keywords from a ``[models]`` section: :func:`thread_options` and TensorRT's."""
    return {**thread_options(models_config),
            "tensorrt_fp16": bool(getattr(models_config, "tensorrt_fp16", True)),
            "tensorrt_cache_dir": str(getattr(models_config, "tensorrt_cache_dir", ""))}


def provider_list(chosen: Sequence[str], *, tensorrt_fp16: bool = True, tensorrt_cache_dir: str = "") -> list:
    """``InferenceSession``'s ``providers`` argument: names, TensorRT as (name, options).

    TensorRT options (onnxruntime docs, "TensorRT Execution Provider", Configurations): ``trt_fp16_enable``
    builds fp16 engines; ``trt_engine_cache_enable`` / ``trt_engine_cache_path`` keep built engines on disk
    so that only the first session after a model or TensorRT change pays the build (minutes on a Jetson).
    """
    out: list = []
    for name in chosen:
        if name != "TensorrtExecutionProvider":
            out.append(name)
            continue
        opts: dict = {"trt_fp16_enable": bool(tensorrt_fp16)}
        if tensorrt_cache_dir:
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(tensorrt_cache_dir))
        out.append((name, opts))
    return out


def open_session(model_path: str | os.PathLike, *, providers: Sequence[str] = (CPU,),
                 intra_op_threads: int = 0, allow_spinning: bool = False, tensorrt_fp16: bool = True,
                 tensorrt_cache_dir: str = ""):
    """Create an ``onnxruntime.InferenceSession`` for ``model_path``.

    Parameters
    ----------
    model_path
        ONNX file (already verified against its sidecar).
    providers
        Preferred execution providers, see :func:`choose_providers`.
    intra_op_threads
        Threads of one operator; 0 lets onnxruntime pick (one per physical core).
    allow_spinning
        Whether idle intra-op threads busy-wait for the next operator (onnxruntime's session config
        ``session.intra_op.allow_spinning``; onnxruntime's own default is on). Off by default here: on a
        2-core machine with other load, spinning threads made 2 threads 1.4-2.0x slower than 1, and with
        spinning off they were never slower (``robot-app bench models --compare-threads``).
    tensorrt_fp16, tensorrt_cache_dir
        TensorRT provider options, used only when it is among the chosen providers (:func:`provider_list`);
        a cache folder that cannot be created is skipped with a warning (engines are then rebuilt per boot).

    Raises
    ------
    ModelInvalid
        onnxruntime cannot load the file (corrupt, or an IR/opset newer than this build reads).
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if intra_op_threads:
        opts.intra_op_num_threads = int(intra_op_threads)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    opts.log_severity_level = 3
    chosen = choose_providers(providers)
    if tensorrt_cache_dir and "TensorrtExecutionProvider" in chosen:
        try:
            os.makedirs(tensorrt_cache_dir, exist_ok=True)
        except OSError as exc:
            log.warning("TensorRT engine cache %s unusable (%s): engines are rebuilt at every start",
                        tensorrt_cache_dir, exc)
            tensorrt_cache_dir = ""
    try:
        sess = ort.InferenceSession(str(model_path), sess_options=opts,
                                    providers=provider_list(chosen, tensorrt_fp16=tensorrt_fp16,
                                                            tensorrt_cache_dir=tensorrt_cache_dir))
    except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
        raise ModelInvalid(f"{model_path}: onnxruntime {ort.__version__} cannot load it: {exc}") from exc
    log.info("opened %s with %s", Path(model_path).name, sess.get_providers())
    return sess


def check_session_io(sess, sidecar) -> None:
    """Refuse a session whose input/output names differ from what its sidecar declares.

    Raises
    ------
    ModelInvalid
        Names differ (the ONNX file and the sidecar do not belong together).
    """
    got_in = [i.name for i in sess.get_inputs()]
    got_out = [o.name for o in sess.get_outputs()]
    want_in = [i["name"] for i in sidecar.inputs]
    want_out = [o["name"] for o in sidecar.outputs]
    if got_in != want_in or got_out != want_out:
        raise ModelInvalid(f"{sidecar.model_path}: graph inputs {got_in} / outputs {got_out} differ from "
                           f"its sidecar ({want_in} / {want_out})")


def check_array(name: str, arr, *, ndim: int | None = None, shape: Sequence[int | None] | None = None,
                dtype=None, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """Validate one model input and return it as a C-contiguous array.

    ``shape`` entries of ``None`` match any size. Raises :class:`ValueError` naming ``name``, the
    expected and the actual shape / dtype / range; NaN or infinity in a float array is refused.
    """
    arr = np.asarray(arr)
    if dtype is not None and arr.dtype != np.dtype(dtype):
        raise ValueError(f"{name}: expected dtype {np.dtype(dtype)}, got {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {arr.shape}")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or infinity")
    if arr.size and lo is not None and arr.min() < lo:
        raise ValueError(f"{name}: value {arr.min()} below the allowed minimum {lo}")
    if arr.size and hi is not None and arr.max() > hi:
        raise ValueError(f"{name}: value {arr.max()} above the allowed maximum {hi}")
    return np.ascontiguousarray(arr)


def l2_normalise(x: np.ndarray, *, axis: int = -1, eps: float = 1e-12) -> np.ndarray:
    """``x / max(||x||_2, eps)`` along ``axis``, as float32 (the normalisation open_clip applies)."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=axis, keepdims=True)
    return (x / np.maximum(n, eps)).astype(np.float32, copy=False)


def int8_kernels_exact(cpuinfo: str | os.PathLike = "/proc/cpuinfo", machine: str | None = None,
                       features: dict | None = None) -> bool:
    """Whether onnxruntime's signed-weight (u8s8) int8 kernels accumulate exactly on this CPU.

    On x86-64 without VNNI, MLAS computes u8s8 products with ``vpmaddubsw``, whose int16 pair sums
    saturate (onnxruntime's quantization guide, "when and why do I need to try U8U8"), so a signed-weight
    int8 file gives slightly different embeddings there (cosine 0.989 instead of 1.0 with the sim text
    tower's reference). AVX512-VNNI / AVX-VNNI (``vpdpbusd``) and aarch64's dot-product kernels (the
    robot's Jetson) accumulate in int32 exactly; unsigned weights (u8u8) are exact everywhere.

    Parameters
    ----------
    cpuinfo : Linux's CPU description, read for the ``avx_vnni`` flag (numpy's CPU features lack it).
    machine : ``platform.machine()`` (None: this machine's).
    features : numpy's run-time CPU features (CPUID; None: numpy's own), read for ``AVX512VNNI``.

    Returns True where the CPU has VNNI, on any non-x86 machine, and where neither source can be read.
    """
    import platform

    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "i386", "i686"):
        return True
    if features is None:
        try:
            from numpy._core._multiarray_umath import __cpu_features__ as features
        except ImportError:  # numpy < 2
            try:
                from numpy.core._multiarray_umath import __cpu_features__ as features
            except ImportError:
                features = {}
    if features.get("AVX512VNNI"):
        return True
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return not features  # nothing known: the strict bound
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    if "avx_vnni" in flags:
        return True
    return not features and not flags
