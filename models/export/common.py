"""Helpers shared by the exporters: legacy-exporter call with a pinned opset, IR check, sanity checks."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import numpy as np

from models.onnx_common import MAX_IR_VERSION, OPSET
from models.sidecar import sidecar_path

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """An export failed a check (parity with torch, constant output, unsupported IR)."""


def export_onnx(module, args: tuple, out_path: str | os.PathLike, *, input_names: list[str],
                output_names: list[str], dynamic_axes: dict) -> dict:
    """Export ``module`` with torch's TorchScript-based exporter at opset :data:`OPSET`.

    The dynamo exporter writes IR 10, which onnxruntime 1.16 (the oldest the robot supports) refuses,
    so the TorchScript exporter (``dynamo=False``) is used. Returns ``{"opset", "ir_version"}``.

    Raises
    ------
    ExportError
        The written file's IR version is newer than :data:`MAX_IR_VERSION`.
    """
    import onnx
    import torch

    out_path = Path(out_path)
    module.eval()
    # nn.MultiheadAttention's inference fast path (a fused op) has no ONNX symbolic: trace the plain path.
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer chatter about Python bools / indexing; parity is checked
            torch.onnx.export(module, args, str(out_path), dynamo=False, opset_version=OPSET,
                              input_names=input_names, output_names=output_names, dynamic_axes=dynamic_axes,
                              do_constant_folding=True)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    m = onnx.load(str(out_path), load_external_data=False)
    onnx.checker.check_model(m)
    if m.ir_version > MAX_IR_VERSION:
        raise ExportError(f"{out_path}: IR version {m.ir_version} > {MAX_IR_VERSION} (onnxruntime 1.16 on the robot)")
    bad = unsupported_on_oldest_runtime(m)
    if bad:
        raise ExportError(f"{out_path}: onnxruntime 1.16 has no kernel for {', '.join(bad)}")
    log.info("exported %s (opset %d, IR %d, %.1f MB)", out_path.name, OPSET, m.ir_version,
             out_path.stat().st_size / 1e6)
    return {"opset": OPSET, "ir_version": int(m.ir_version)}


# (op, input element type) pairs the onnxruntime 1.16 CPU provider has no kernel for (found by loading
# exports in onnxruntime 1.16.3: "Could not find an implementation for ArgMax(13)" on int64 ids).
_NO_KERNEL_ON_OLDEST = {("ArgMax", "INT64"), ("ArgMin", "INT64")}


def unsupported_on_oldest_runtime(model) -> list[str]:
    """Nodes of an ONNX model whose (op, input dtype) the oldest supported onnxruntime (1.16) cannot run."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    bad = []
    for node in inferred.graph.node:
        if node.input and node.input[0] in types:
            key = (node.op_type, onnx.TensorProto.DataType.Name(types[node.input[0]]))
            if key in _NO_KERNEL_ON_OLDEST:
                bad.append(f"{node.op_type}({key[1].lower()}) at {node.name or node.output[0]}")
    return bad


def assert_varies(name: str, out: np.ndarray, *, min_std: float = 1e-6) -> None:
    """Refuse a network whose outputs do not change across inputs (batch on axis 0).

    A random-init network with broken normalisation statistics can output a constant, and a parity
    test would then pass on nothing.
    """
    out = np.asarray(out, dtype=np.float64).reshape(out.shape[0], -1)
    if out.shape[0] < 2 or float(out.std(axis=0).max()) < min_std:
        raise ExportError(f"{name}: outputs do not vary across {out.shape[0]} different inputs")


def assert_close(name: str, got: np.ndarray, want: np.ndarray, *, atol: float) -> float:
    """Max absolute difference of ONNX Runtime vs torch; :class:`ExportError` above ``atol``."""
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)))) if got.size else 0.0
    if not diff <= atol:
        raise ExportError(f"{name}: onnxruntime differs from torch by {diff:.3g} (> {atol:g})")
    log.info("%s: onnxruntime vs torch max |diff| = %.3g", name, diff)
    return diff


def ort_run(path: str | os.PathLike, feeds: dict) -> list:
    """Run an exported file once on the CPU provider."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def clear_sidecars(out_dir: str | os.PathLike, files) -> None:
    """Remove the sidecars of ``files`` in ``out_dir`` before re-exporting over them.

    A failed export then leaves model files without a sidecar (refused as missing) rather than a new
    file next to an old sidecar (refused as tampered, a misleading message).
    """
    for name in files:
        sidecar_path(Path(out_dir) / name).unlink(missing_ok=True)


def io_spec(name: str, shape: list, dtype: str) -> dict:
    """One entry of a sidecar's ``inputs``/``outputs`` list."""
    return {"name": name, "shape": list(shape), "dtype": dtype}
