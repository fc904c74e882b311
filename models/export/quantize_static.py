"""Static int8 (QDQ) quantisation of the VNM with a calibration set, for ``robot-app models quantize``.

Dynamic quantisation (:mod:`models.export.quantize`) leaves Conv layers fp32, and a CNN's time is in its
Conv layers. Static quantisation (onnxruntime docs, "Quantize ONNX models": static, QDQ format) also
quantises the activations, with ranges fixed beforehand from a calibration set: every supported operator
(Conv, MatMul, Gemm, Add, ...) then runs on int8, weights signed int8 per output channel, activations
unsigned int8 per tensor, MinMax ranges. onnxruntime fuses the QuantizeLinear / DequantizeLinear pairs
into integer kernels when the session's graph optimisation is on (``models.onnx_common.open_session``
opens every model with ``ORT_ENABLE_ALL``, so the product's runtime runs the fused graph unchanged).

Measured on the random-init GNM (docs/models.md, "int8 models for the CPU"): all operators static was
faster than static Conv with dynamic MatMul / Gemm (4.4 vs 7.4 ms for the 9-goal step, fp32 11 ms), so
:func:`quantize_static_file` quantises every operator.

Calibration set: :class:`CalibrationDrive` s, frames in time order at the model's frame rate (4 Hz), from
which :func:`vnm_steps` cuts control steps as the navigator feeds them (the ``context_size + 1`` newest
frames as the observation, 9 goal frames of distinct places: 5 ahead on the same drive, 4 from anywhere).
Drives come from a traversal log the robot recorded (:func:`drive_from_log`, ``--calibration LOG``: real
weights need real frames) or from renders of the simulated campus (the CLI makes them when pybullet is installed).
:func:`split_steps` holds every third step out of the calibration for the parity check.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

log = logging.getLogger(__name__)

STATIC_LABEL = "int8 static QDQ (onnxruntime)"
#: goals per calibration step (the navigator's 9 candidate nodes) and how many come from ahead on the drive
GOALS_PER_STEP, GOALS_AHEAD, GOAL_SPACING = 9, (0, 4, 8, 12, 16), 4
#: at most this many calibration steps in all (spread evenly over the drives), and 1 step every STRIDE frames
MAX_STEPS, STRIDE = 48, 4
#: at most this many 4 Hz frames are read from one traversal log (evenly spaced blocks of BLOCK frames)
MAX_LOG_FRAMES, BLOCK = 480, 24


class CalibrationError(ValueError):
    """Calibration frames that cannot be used (missing log, a log without frames, too short a drive)."""


@dataclass(frozen=True)
class CalibrationDrive:
    """Camera frames of one drive in time order, at the VNM's frame rate.

    Attributes
    ----------
    source : str, where they come from (shown in the report and recorded in the sidecar).
    frames : (N, H, W, 3) uint8 RGB, any size (resized as the runtime resizes).
    """

    source: str
    frames: np.ndarray


def drive_from_log(path: str | os.PathLike, *, frame_rate_hz: float = 4.0,
                   max_frames: int = MAX_LOG_FRAMES) -> CalibrationDrive:
    """The frames of a traversal log (``core.tlog``) resampled to ``frame_rate_hz``.

    Frames nearest to a ``frame_rate_hz`` grid over the log are kept; a long log is cut to ``max_frames``
    of them in evenly spaced blocks of :data:`BLOCK` consecutive frames.

    Raises
    ------
    CalibrationError
        No such folder, not a readable traversal log, or one with fewer than 6 frames; the message names
        the path.
    """
    from PIL import Image

    from core.tlog import LogFormatError, read_log

    path = Path(path)
    if not path.exists():
        raise CalibrationError(f"--calibration {path}: no such traversal log folder")
    try:
        tl = read_log(path)
    except LogFormatError as exc:
        raise CalibrationError(f"--calibration {path}: {exc}") from exc
    ft = tl.frame_t_s
    if len(ft) < 6:
        raise CalibrationError(f"--calibration {path}: the log has {len(ft)} camera frames; calibration needs "
                               "a recorded drive with at least 6 (1.5 s at 4 Hz)")
    grid = np.arange(ft[0], ft[-1] + 1e-9, 1.0 / frame_rate_hz)
    idx = np.unique(np.clip(np.searchsorted(ft, grid - 0.5 / frame_rate_hz), 0, len(ft) - 1))
    if len(idx) > max_frames:
        starts = np.linspace(0, len(idx) - BLOCK, max(1, max_frames // BLOCK)).astype(int)
        idx = idx[np.unique((starts[:, None] + np.arange(BLOCK)[None]).ravel())]
    frames = []
    try:
        for data in tl.frame_jpeg(tl.frame_id[idx]):
            with Image.open(io.BytesIO(data)) as img:
                frames.append(np.asarray(img.convert("RGB")))
    except (LogFormatError, OSError) as exc:
        raise CalibrationError(f"--calibration {path}: cannot read its frames ({exc})") from exc
    if len({f.shape for f in frames}) > 1:
        frames = [np.asarray(Image.fromarray(f).resize(frames[0].shape[1::-1], Image.BICUBIC)) for f in frames]
    return CalibrationDrive(f"traversal log {path} ({len(frames)} frames at {frame_rate_hz:g} Hz)", np.stack(frames))


def vnm_steps(drives: Sequence[CalibrationDrive], sidecar, *, max_steps: int = MAX_STEPS, stride: int = STRIDE,
              seed: int = 0) -> list[dict]:
    """Control steps ``{"obs": (1, 3 (context + 1), H, W), "goal": (9, 3, H, W)}`` float32 cut from ``drives``.

    ``sidecar`` is the VNM's (context size, input size, mean / std); frames are preprocessed as
    :meth:`models.vnm.VnmModel.preprocess` does. At most ``max_steps`` steps, evenly spread.

    Raises
    ------
    CalibrationError
        A drive shorter than ``context_size + 1`` frames.
    """
    from models.vnm import VnmModel

    model = VnmModel(None, sidecar=sidecar)  # preprocessing only
    k = model.context_size
    pre = []
    for d in drives:
        if len(d.frames) < k + 1:
            raise CalibrationError(f"{d.source}: {len(d.frames)} frames, a calibration drive needs at least {k + 1}")
        pre.append(model.preprocess_many(list(d.frames)))
    where = [(di, i) for di, p in enumerate(pre) for i in range(k, len(p), stride)]
    if len(where) > max_steps:
        where = [where[j] for j in np.unique(np.linspace(0, len(where) - 1, max_steps).astype(int))]
    rng = np.random.default_rng(seed)
    pool = [(di, i) for di, p in enumerate(pre) for i in range(len(p))]
    steps = []
    for di, i in where:
        p = pre[di]
        obs = p[i - k:i + 1].reshape(1, -1, model.image_height, model.image_width)
        # goal frames of distinct places, as map nodes are (frames of one drive GOAL_SPACING apart: a repeated or
        # nearly repeated frame makes the closest goal a tie): ahead on the drive, then any
        chosen: list = []
        order = [(di, min(i + a, len(p) - 1)) for a in GOALS_AHEAD] + [pool[j] for j in rng.permutation(len(pool))]
        for spacing in (GOAL_SPACING, 1):  # relaxed only when the drives are too short for 9 spaced goals
            for c in order:
                if len(chosen) < GOALS_PER_STEP and all(c[0] != e[0] or abs(c[1] - e[1]) >= spacing for e in chosen):
                    chosen.append(c)
        steps.append({"obs": np.ascontiguousarray(obs, np.float32),
                      "goal": np.ascontiguousarray(np.stack([pre[a][b] for a, b in chosen]), np.float32)})
    return steps


def split_steps(steps: Sequence[dict], *, every: int = 3) -> tuple[list[dict], list[dict]]:
    """(calibration, held out): every ``every``-th step is held out for the parity check (none under 3 steps)."""
    if len(steps) < 3:
        return list(steps), []
    held = [s for j, s in enumerate(steps) if j % every == every - 1]
    return [s for j, s in enumerate(steps) if j % every != every - 1], held


class _Reader:
    """``onnxruntime.quantization.CalibrationDataReader`` over a list of feeds."""

    def __init__(self, feeds: Sequence[dict]):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):  # pragma: no cover - called only by calibration methods that make several passes
        pass


def quantize_static_file(src: str | os.PathLike, dst: str | os.PathLike, feeds: Sequence[dict], *,
                         per_channel: bool = True) -> int:
    """Static QDQ int8 quantisation of ``src`` into ``dst``, activation ranges from ``feeds`` (MinMax).

    Every operator onnxruntime can quantise is quantised (weights int8, per output channel when
    ``per_channel``; activations uint8). The graph is first run through onnxruntime's quantisation
    pre-processing (shape inference, basic optimisation), as its docs advise for static quantisation.

    Returns the number of int8 weight tensors in ``dst`` (0: nothing was quantised).

    Raises
    ------
    ValueError
        ``feeds`` is empty.
    """
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if not feeds:
        raise ValueError("static quantisation needs at least one calibration feed")
    reader = type("Reader", (_Reader, CalibrationDataReader), {})(feeds)
    dst = Path(dst)
    pre = dst.with_name(dst.name + ".pre.onnx")
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))  # the quantiser logs hints and "is it already quantised" at WARNING
    try:
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        quantize_static(str(pre), str(dst), reader, quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
    finally:
        root.setLevel(level)
        pre.unlink(missing_ok=True)
    m = onnx.load(str(dst), load_external_data=False)
    return sum(1 for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) >= 2)


__all__ = ["STATIC_LABEL", "CalibrationDrive", "CalibrationError", "drive_from_log", "quantize_static_file",
           "split_steps", "vnm_steps"]
