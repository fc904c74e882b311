"""Visual navigation model (GNM-compatible) on ONNX Runtime: temporal distance and waypoints to goals.

Contract (docs/design.md, "VNM contract"; GNM, Shah et al. ICRA 2023): frames are resized to 85 x 64
(w x h) with Pillow bicubic, scaled to [0, 1] and ImageNet-normalised (mean (0.485, 0.456, 0.406),
std (0.229, 0.224, 0.225)). The observation is the ``context_size + 1`` newest frames, oldest first,
stacked on channels -> (1, 18, 64, 85); each goal is one frame (3, 64, 85). One call of ``vnm.onnx``
runs the observation branch once and the goal branch once per goal (early fusion: the goal branch sees
the context too). Outputs per goal: temporal distance in time steps at the model's frame rate (4 Hz;
meaningful only inside the trained range, 0-20 for GNM, in the sidecar) and ``len_traj_pred`` = 5
waypoints (x, y, cos, sin): x forward, y left (REP-103, robot frame at the newest frame), cumulative,
in normalised units; metres = x, y * max_v / frame_rate (GNM deployment convention).

Goal (map node) images change only when the walk changes: preprocess them once with
:meth:`VnmModel.preprocess_many` and reuse the array every step. :class:`VnmContext` keeps the
context queue (one per control loop; not shared between threads); the :class:`VnmModel` itself is
thread-safe.
"""

from __future__ import annotations

import collections
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from models.onnx_common import CPU, check_array, check_session_io, open_session, session_options
from models.sidecar import ModelMissing, read_sidecar, warn_sim_only

log = logging.getLogger(__name__)

DEFAULT_FILE = "vnm.onnx"


@dataclass(frozen=True)
class VnmPrediction:
    """VNM outputs for B goals.

    Attributes
    ----------
    dist_steps : (B,) float32, predicted temporal distance to each goal in time steps (1 / frame_rate_hz s).
    waypoints : (B, T, 4) float32, (x, y, cos, sin) per future step; x, y cumulative, normalised units.
    """

    dist_steps: np.ndarray
    waypoints: np.ndarray

    def waypoints_m(self, *, max_v_mps: float, frame_rate_hz: float) -> np.ndarray:
        """(B, T, 2) float32 waypoint positions in metres (robot frame, x forward, y left)."""
        return (self.waypoints[..., :2] * np.float32(max_v_mps / frame_rate_hz)).astype(np.float32)

    def heading_rad(self) -> np.ndarray:
        """(B, T) float32 predicted yaw of each waypoint relative to the current heading, radians."""
        return np.arctan2(self.waypoints[..., 3], self.waypoints[..., 2]).astype(np.float32)


class VnmModel:
    """GNM-style VNM (thread-safe). Use :func:`open_vnm`.

    Attributes
    ----------
    context_size : int, past frames besides the current one (5 for GNM).
    len_traj_pred : int, predicted waypoints (5).
    image_width, image_height : int, model input size in pixels (85, 64).
    frame_rate_hz : float, rate of the frames the model was trained on (4 Hz); the unit of ``dist_steps``.
    dist_range_steps : (float, float), the trained distance range (0, 20 for GNM).
    sim_only : bool, the sidecar's ``params.sim_only``: a stand-in trained on simulated renders
      (``models.export.sim_vnm``), meaningless on real camera images.
    """

    def __init__(self, session, *, sidecar):
        p = sidecar.params
        self._sess = session
        self.context_size = int(p["context_size"])
        self.len_traj_pred = int(p["len_traj_pred"])
        self.image_width = int(p["image_width"])
        self.image_height = int(p["image_height"])
        self.frame_rate_hz = float(p["frame_rate_hz"])
        self.dist_range_steps = (float(p["dist_min_steps"]), float(p["dist_max_steps"]))
        self.mean = np.asarray(p["mean"], dtype=np.float32)
        self.std = np.asarray(p["std"], dtype=np.float32)
        self.random_init = bool(sidecar.random_init)
        self.sim_only = bool(p.get("sim_only", False))
        self.model_id = f"vnm:{sidecar.architecture}:{Path(sidecar.weights).name}:{sidecar.sha256[:12]}"

    @property
    def obs_channels(self) -> int:
        return 3 * (self.context_size + 1)

    def preprocess(self, frame: np.ndarray) -> np.ndarray:
        """One HxWx3 uint8 RGB frame -> (3, image_height, image_width) float32, ImageNet-normalised.

        Raises :class:`ValueError` for anything but an (H, W, 3) uint8 array.
        """
        from PIL import Image

        frame = check_array("frame", frame, ndim=3, dtype=np.uint8)
        if frame.shape[2] != 3 or frame.shape[0] < 1 or frame.shape[1] < 1:
            raise ValueError(f"frame: expected (H, W, 3) RGB with H, W >= 1, got {frame.shape}")
        img = Image.fromarray(frame)
        if img.size != (self.image_width, self.image_height):
            img = img.resize((self.image_width, self.image_height), Image.BICUBIC)
        x = np.asarray(img, dtype=np.float32) / np.float32(255.0)
        return np.ascontiguousarray(((x - self.mean) / self.std).transpose(2, 0, 1))

    def preprocess_many(self, frames: Sequence[np.ndarray]) -> np.ndarray:
        """Frames -> (N, 3, image_height, image_width) float32; errors name the frame's index."""
        out = np.empty((len(frames), 3, self.image_height, self.image_width), dtype=np.float32)
        for j, f in enumerate(frames):
            try:
                out[j] = self.preprocess(f)
            except ValueError as exc:
                raise ValueError(f"frames[{j}]: {exc}") from exc
        return out

    def predict(self, obs: np.ndarray, goals: np.ndarray) -> VnmPrediction:
        """Run one step on preprocessed tensors.

        Parameters
        ----------
        obs : (1, 3 (context_size + 1), H, W) float32, context frames oldest first (:meth:`VnmContext.stack`).
        goals : (B, 3, H, W) float32, B >= 1 candidate goal frames (preprocessed).

        Raises
        ------
        ValueError
            Wrong shape or dtype, NaN/inf, or values outside what normalised images can take.
        """
        h, w = self.image_height, self.image_width
        obs = check_array("obs", obs, shape=(1, self.obs_channels, h, w), dtype=np.float32, lo=-10.0, hi=10.0)
        goals = check_array("goals", goals, shape=(None, 3, h, w), dtype=np.float32, lo=-10.0, hi=10.0)
        if goals.shape[0] == 0:
            return VnmPrediction(np.zeros(0, np.float32), np.zeros((0, self.len_traj_pred, 4), np.float32))
        dist, wp = self._sess.run(None, {"obs": obs, "goal": goals})
        return VnmPrediction(dist_steps=dist[:, 0].astype(np.float32), waypoints=wp.astype(np.float32))

    def predict_frames(self, context_frames: Sequence[np.ndarray], goal_frames: Sequence[np.ndarray]) -> VnmPrediction:
        """Raw uint8 frames in: ``context_size + 1`` context frames (oldest first) and B goal frames."""
        if len(context_frames) != self.context_size + 1:
            raise ValueError(f"context_frames: expected {self.context_size + 1} frames, got {len(context_frames)}")
        ctx = self.preprocess_many(context_frames).reshape(1, self.obs_channels, self.image_height, self.image_width)
        return self.predict(ctx, self.preprocess_many(goal_frames))

    def new_context(self) -> "VnmContext":
        """An empty context queue sized for this model."""
        return VnmContext(self)

    def warm_up(self) -> None:
        """One step against 9 goals at start (first-call allocation happens here, not in the loop)."""
        h, w = self.image_height, self.image_width
        self.predict(np.zeros((1, self.obs_channels, h, w), np.float32), np.zeros((9, 3, h, w), np.float32))


class VnmContext:
    """The context queue of one control loop: the newest ``context_size + 1`` preprocessed frames."""

    def __init__(self, model: VnmModel):
        self._model = model
        self._frames: collections.deque = collections.deque(maxlen=model.context_size + 1)

    def push(self, frame: np.ndarray) -> None:
        """Add the newest camera frame (HxWx3 uint8 RGB); the oldest drops out when full."""
        self._frames.append(self._model.preprocess(frame))

    @property
    def ready(self) -> bool:
        """True once ``context_size + 1`` frames have been pushed."""
        return len(self._frames) == self._frames.maxlen

    def stack(self) -> np.ndarray:
        """(1, 3 (context_size + 1), H, W) float32, oldest frame first.

        Raises
        ------
        ValueError
            Fewer frames than the model needs (``ready`` is False).
        """
        if not self.ready:
            raise ValueError(f"VNM context has {len(self._frames)} of {self._frames.maxlen} frames")
        return np.concatenate(list(self._frames), axis=0)[None]

    def clear(self) -> None:
        self._frames.clear()


def open_vnm(models_dir: str | os.PathLike, *, config=None, warm_up: bool = True) -> VnmModel:
    """Open and verify ``vnm.onnx`` (``[models] vnm_file``) in ``models_dir``.

    Raises
    ------
    ModelMissing
        No VNM installed: the caller falls back to GPS edges and the straight-line controller
        (docs/design.md, "Fallbacks"); the message says how to provision one.
    ModelTampered, ModelInvalid
        sha256 mismatch; unreadable or inconsistent files.
    """
    mc = getattr(config, "models", config)
    path = Path(models_dir) / getattr(mc, "vnm_file", DEFAULT_FILE)
    sc = read_sidecar(path, kind="vnm")
    sess = open_session(path, providers=getattr(mc, "providers", [CPU]),
                        **session_options(mc))
    check_session_io(sess, sc)
    model = VnmModel(sess, sidecar=sc)
    if model.sim_only:
        warn_sim_only(path, "its waypoints and distances")
    if warm_up:
        model.warm_up()
    return model


def check_reference(model: VnmModel, reference_npz: str | os.PathLike) -> dict:
    """Rerun the exporter's reference step against its goals.

    Returns ``dist_max_abs`` and ``waypoints_max_abs`` (max |difference| vs torch), ``waypoints_cosine_min``
    (least cosine of a goal's T x 4 waypoint vector with the reference's), ``closest_goal_same`` (the
    goal with the smallest temporal distance is the reference's) and ``closest_goal_excess_steps`` (how much
    farther the reference puts this model's closest goal than its own closest: 0 when the same): the parity
    of an int8 model (``models.export.quantize``).
    """
    with np.load(reference_npz) as ref:
        pred = model.predict(ref["obs"], ref["goal"])
        a = pred.waypoints.reshape(len(pred.waypoints), -1).astype(np.float64)
        b = ref["waypoints"].reshape(len(a), -1).astype(np.float64)
        cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
        d_ref = ref["dist"][:, 0]
        return {"dist_max_abs": float(np.abs(pred.dist_steps - d_ref).max()),
                "waypoints_max_abs": float(np.abs(pred.waypoints - ref["waypoints"]).max()),
                "waypoints_cosine_min": float(cos.min()),
                "closest_goal_same": bool(np.argmin(pred.dist_steps) == np.argmin(d_ref)),
                "closest_goal_excess_steps": float(d_ref[np.argmin(pred.dist_steps)] - d_ref.min())}


__all__ = ["ModelMissing", "VnmContext", "VnmModel", "VnmPrediction", "check_reference", "open_vnm"]
