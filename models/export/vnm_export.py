"""Export a GNM-compatible VNM to ``vnm.onnx`` (+ sidecar and reference), from a checkpoint or random init.

Released GNM checkpoints (visualnav-transformer ``gnm.pth``) are ``torch.save`` of a dict whose
``"model"`` entry is the whole pickled module, referencing classes of the training package
(``vint_train.models.gnm.gnm.GNM``, or ``gnm_train...`` for the first release) and of the torchvision
of its day. torch's default ``weights_only=True`` refuses such a file, and unpickling it normally needs
that package installed. :func:`load_gnm_state_dict` instead unpickles with a remapping unpickler:
classes outside a small allow-list (torch tensors/storages/``torch.nn`` modules, ``collections``) are
replaced by inert stand-ins that only keep their attribute dict, from which the parameters and buffers
are collected by the module tree (``_parameters``, ``_buffers``, ``_modules``). The weights are then
copied into :class:`~models.export.gnm_net.GnmNet` with ``strict=True``. A plain state dict (or a dict
with ``"model"`` / ``"state_dict"`` holding one) loads too. Only load checkpoints you trust: torch
rebuild functions still run.

The ONNX graph is one control step (:class:`~models.export.gnm_net.GnmStep`): ``obs`` (1, 18, 64, 85)
and ``goal`` (B, 3, 64, 85) float32 (ImageNet-normalised) -> ``dist`` (B, 1) time steps and
``waypoints`` (B, 5, 4).
"""

from __future__ import annotations

import builtins
import logging
import os
import pickle
import types
from pathlib import Path

import numpy as np

from models.export.common import ExportError, assert_close, assert_varies, clear_sidecars, export_onnx, io_spec, ort_run
from models.sidecar import write_sidecar

log = logging.getLogger(__name__)

IMAGE_W, IMAGE_H = 85, 64  # GNM's image_size in its data config (width, height)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
GNM_DEFAULTS = {"context_size": 5, "len_traj_pred": 5, "frame_rate_hz": 4.0, "dist_min_steps": 0.0,
                "dist_max_steps": 20.0}  # GNM config gnm.yaml: context 5, len_traj_pred 5, distance 0..20
FILES = ("vnm.onnx", "vnm-reference.npz")

_SAFE_BUILTINS = {"set", "frozenset", "dict", "list", "tuple", "slice", "int", "float", "bool", "str", "bytes",
                  "bytearray", "complex", "object", "range"}
_REAL_PREFIXES = ("torch._utils", "torch.nn.", "torch.storage", "torch._tensor", "torch.serialization",
                  "collections", "numpy.core.multiarray", "numpy._core.multiarray", "numpy", "_codecs", "copyreg")


class _Stand_in:  # noqa: N801 - named to read well in error messages
    """Inert replacement for a class of a package that is not installed; keeps its pickled state."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_pickled_state"] = state


class _RemapUnpickler(pickle.Unpickler):
    stubbed: set = set()

    def find_class(self, module, name):
        module = {"__builtin__": "builtins", "copy_reg": "copyreg"}.get(module, module)  # protocol-2 names
        if module == "builtins":
            if name in _SAFE_BUILTINS:
                return getattr(builtins, name)
            raise pickle.UnpicklingError(f"checkpoint refers to builtins.{name}: refused")
        if module == "torch" or module.startswith(_REAL_PREFIXES):
            return super().find_class(module, name)
        _RemapUnpickler.stubbed.add(f"{module}.{name}")
        return type(name, (_Stand_in,), {"__module__": f"stand_in.{module}"})


_remap_pickle = types.ModuleType("remap_pickle")
_remap_pickle.Unpickler = _RemapUnpickler
_remap_pickle.load = lambda f, **kw: _RemapUnpickler(f, **kw).load()
_remap_pickle.__name__ = "remap_pickle"


def _tree_state(obj, prefix: str = "") -> dict:
    d = getattr(obj, "__dict__", {})
    out = {}
    skip = d.get("_non_persistent_buffers_set", set())
    for k, v in d.get("_parameters", {}).items():
        if v is not None:
            out[prefix + k] = v.detach()
    for k, v in d.get("_buffers", {}).items():
        if v is not None and k not in skip:
            out[prefix + k] = v
    for k, m in d.get("_modules", {}).items():
        if m is not None:
            out.update(_tree_state(m, prefix + k + "."))
    return out


def load_gnm_state_dict(path: str | os.PathLike) -> dict:
    """Parameter name -> tensor from a GNM checkpoint (whole pickled module or state dict).

    Raises
    ------
    ExportError
        The file is not a checkpoint, or holds no module / state dict.
    """
    import torch

    _RemapUnpickler.stubbed = set()
    try:
        ckpt = torch.load(str(path), map_location="cpu", weights_only=False, pickle_module=_remap_pickle)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        raise ExportError(f"{path}: cannot read the checkpoint: {exc}") from exc
    if _RemapUnpickler.stubbed:
        log.info("%s: stand-ins for %s", path, ", ".join(sorted(_RemapUnpickler.stubbed)))
    obj = ckpt
    if isinstance(ckpt, dict):
        for key in ("model", "state_dict", "model_state_dict"):
            if key in ckpt:
                obj = ckpt[key]
                break
    if isinstance(obj, dict) and obj and all(torch.is_tensor(v) for v in obj.values()):
        sd = dict(obj)
    else:
        sd = _tree_state(obj)
    if not sd:
        what = list(ckpt)[:8] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ExportError(f"{path}: found no module or state dict (found: {what})")
    if all(k.startswith("module.") for k in sd):  # saved from DataParallel
        sd = {k[len("module."):]: v for k, v in sd.items()}
    return sd


def load_gnm(path: str | os.PathLike, **arch):
    """A :class:`GnmNet` with the checkpoint's weights copied in with ``strict=True``.

    Raises
    ------
    ExportError
        Missing / unexpected keys or shape mismatches (listed), i.e. not a GNM of this configuration.
    """
    from models.export.gnm_net import GnmNet

    net = GnmNet(**arch)
    sd = load_gnm_state_dict(path)
    want = net.state_dict()
    bad = [f"{k}: {tuple(v.shape)} vs {tuple(want[k].shape)}" for k, v in sd.items()
           if k in want and tuple(v.shape) != tuple(want[k].shape)]
    missing = sorted(set(want) - set(sd))
    extra = sorted(set(sd) - set(want))
    if bad or missing or extra:
        raise ExportError(f"{path}: not a GNM with {arch or 'the default configuration'}: "
                          f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} unexpected "
                          f"(e.g. {extra[:3]}), {len(bad)} shape mismatches (e.g. {bad[:3]})")
    net.load_state_dict(sd, strict=True)
    return net.eval()


def recalibrate_batchnorm(net, *, passes: int = 4, batch: int = 8, seed: int = 0) -> None:
    """Reset BatchNorm running statistics and re-estimate them from random inputs (random-init only).

    Fresh running stats (mean 0, var 1) make a random MobileNet's deep activations collapse to a
    near-constant output in eval mode; cumulative statistics from a few train-mode passes fix that.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    c = 3 * (net.context_size + 1)
    net.train()
    with torch.no_grad():
        for _ in range(passes):
            net(torch.randn(batch, c, IMAGE_H, IMAGE_W, generator=g),
                torch.randn(batch, 3, IMAGE_H, IMAGE_W, generator=g))
    for m in bns:
        m.momentum = 0.1
    net.eval()


def export_vnm(out_dir: str | os.PathLike, *, checkpoint: str | None = None, arch: str = "gnm",
               atol: float = 1e-4, seed: int = 0) -> dict:
    """Export a GNM (``checkpoint`` file, or random init when ``None``) to ``out_dir/vnm.onnx``.

    Raises
    ------
    ExportError
        Unknown ``arch``, a checkpoint that is not a GNM, parity above ``atol``, or constant outputs.
    """
    import torch

    from models.export.gnm_net import GnmNet, GnmStep

    if arch != "gnm":
        raise ExportError(f"unknown VNM architecture {arch!r} (supported: gnm)")
    cfg = dict(GNM_DEFAULTS)
    if checkpoint:
        net = load_gnm(checkpoint, context_size=cfg["context_size"], len_traj_pred=cfg["len_traj_pred"])
    else:
        torch.manual_seed(seed)
        net = GnmNet(context_size=cfg["context_size"], len_traj_pred=cfg["len_traj_pred"])
        recalibrate_batchnorm(net, seed=seed)
    net.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_sidecars(out, ("vnm.onnx",))
    c_obs = 3 * (cfg["context_size"] + 1)
    g = torch.Generator().manual_seed(seed + 1)
    obs = torch.randn(1, c_obs, IMAGE_H, IMAGE_W, generator=g)
    goal = torch.randn(9, 3, IMAGE_H, IMAGE_W, generator=g)
    step = GnmStep(net).eval()
    with torch.no_grad():
        dist, wp = step(obs, goal)
        dist_full, wp_full = net(obs.expand(9, -1, -1, -1), goal)
    assert_close("vnm step vs GNM forward", dist.numpy(), dist_full.numpy(), atol=1e-4)
    assert_close("vnm step vs GNM forward (waypoints)", wp.numpy(), wp_full.numpy(), atol=1e-4)
    assert_varies("vnm distance", dist.numpy())
    assert_varies("vnm waypoints", wp.numpy())
    onnx_info = export_onnx(step, (obs, goal[:2]), out / "vnm.onnx", input_names=["obs", "goal"],
                            output_names=["dist", "waypoints"],
                            dynamic_axes={"goal": {0: "goals"}, "dist": {0: "goals"}, "waypoints": {0: "goals"}})
    got = ort_run(out / "vnm.onnx", {"obs": obs.numpy(), "goal": goal.numpy()})
    d_dist = assert_close("vnm dist", got[0], dist.numpy(), atol=atol * max(1.0, float(dist.abs().max())))
    d_wp = assert_close("vnm waypoints", got[1], wp.numpy(), atol=atol * max(1.0, float(wp.abs().max())))
    np.savez_compressed(out / "vnm-reference.npz", obs=obs.numpy(), goal=goal.numpy(), dist=dist.numpy(),
                        waypoints=wp.numpy())
    t = cfg["len_traj_pred"]
    write_sidecar(out / "vnm.onnx", kind="vnm", architecture=arch,
                  weights=str(checkpoint) if checkpoint else "random-init", random_init=checkpoint is None,
                  onnx=onnx_info,
                  inputs=[io_spec("obs", [1, c_obs, IMAGE_H, IMAGE_W], "float32"),
                          io_spec("goal", ["goals", 3, IMAGE_H, IMAGE_W], "float32")],
                  outputs=[io_spec("dist", ["goals", 1], "float32"), io_spec("waypoints", ["goals", t, 4], "float32")],
                  params={**cfg, "image_width": IMAGE_W, "image_height": IMAGE_H, "mean": list(IMAGENET_MEAN),
                          "std": list(IMAGENET_STD), "resize": "pil-bicubic-stretch", "learn_angle": True,
                          "waypoint_units": "normalised; metres = value * max_v / frame_rate_hz",
                          "reference": "vnm-reference.npz", "parity_max_abs": {"dist": d_dist, "waypoints": d_wp}},
                  extra_files=["vnm-reference.npz"])
    return {"arch": arch, "weights": str(checkpoint) if checkpoint else "random-init",
            "parity_max_abs": {"dist": d_dist, "waypoints": d_wp}, "files": [str(out / f) for f in FILES]}
