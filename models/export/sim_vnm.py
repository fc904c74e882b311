"""The sim-only stand-in VNM: a small CNN with GNM's I/O contract, and its export to ``vnm.onnx``.

Workstation side (torch). The network is trained by :func:`robot_app.sim.train_vnm.train_sim_vnm` on
drives in the simulated world; it is NOT a general visual navigation model and its sidecar says so
(``params.sim_only = true``, architecture ``sim-vnm-cnn``).

Contract (docs/design.md, "VNM contract", as :mod:`models.export.vnm_export` writes it for GNM): ``obs``
(1, 3 (context + 1), 64, 85) and ``goal`` (B, 3, 64, 85) float32, ImageNet-normalised, frames oldest
first -> ``dist`` (B, 1) temporal distance in time steps at 4 Hz and ``waypoints`` (B, len_traj_pred, 4):
cumulative (x, y) in normalised units (metres = value * max_v / frame_rate) and (cos, sin) of the
heading, robot frame of the newest frame (REP-103: x forward, y left).

Architecture (GNM's observation / goal split, Shah et al. ICRA 2023 Sec. IV-B, scaled down for a CPU):

- observation branch (once per step): the ``context + 1`` frames on channels (18) -> 4 stride-2 3x3
  conv + BN + ReLU stages (16, 24, 32, 48 channels) -> average pool to 2 x 3 cells (keeps the
  left/right layout) -> Linear 128; and the newest frame alone through the frame encoder
  (3 stride-2 stages, 24, 32, 48 channels -> a 48 x 8 x 11 feature map);
- goal branch (once per goal): the goal frame through the same frame encoder, then fusion of the two
  feature maps (concatenated with their product, 144 channels) by a stride-2 and a stride-1 3x3 stage
  (64, 64) -> pool 2 x 3 -> Linear 128. Fusing mid-level features rather than pixels (GNM's early
  fusion) tolerates the sideways offsets between the robot's drive and the drive a map node came from;
- heads: ``dist`` from the goal encoding alone (Linear 64 + ReLU -> 1), so the distance compares
  places and does not depend on how the robot moved before (standing still while the context fills,
  another speed); waypoints from the concatenated observation and goal encodings (Linear 128 + ReLU ->
  ``len_traj_pred`` x 4): (x, y) steps accumulated into waypoints (cumulative sum) and (cos, sin)
  normalised to unit length, as GNM's action head does.

About 0.3 M parameters (1.2 MB of float32 ONNX); one step against 9 goals costs a few ms on one CPU
core.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from models.export.common import ExportError, assert_close, assert_varies, clear_sidecars, export_onnx, io_spec, ort_run
from models.export.vnm_export import IMAGE_H, IMAGE_W, IMAGENET_MEAN, IMAGENET_STD
from models.sidecar import write_sidecar

log = logging.getLogger(__name__)

ARCHITECTURE = "sim-vnm-cnn"
FILES = ("vnm.onnx", "vnm-reference.npz")
POOL_HW = (2, 3)


def _convs(c_in: int, widths: tuple, stride: int = 2) -> list:
    from torch import nn

    layers = []
    for c in widths:
        layers += [
            nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
        ]
        c_in = c
    return layers


def build_sim_vnm(*, context_size: int = 5, len_traj_pred: int = 5, obs_widths: tuple = (16, 24, 32, 48),
                  frame_widths: tuple = (24, 32, 48), fusion_widths: tuple = (64, 64), encoding: int = 128):
    """A fresh :class:`SimVnmNet` (torch ``nn.Module``); see the module docstring for the layers.

    ``forward(obs (B, 3 (C+1), 64, 85), goal (B, 3, 64, 85)) -> (dist (B, 1), waypoints (B, T, 4))``.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    cells = POOL_HW[0] * POOL_HW[1]

    class SimVnmNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.context_size, self.len_traj_pred = context_size, len_traj_pred
            self.obs_encoder = nn.Sequential(*_convs(3 * (context_size + 1), obs_widths),
                                             nn.AdaptiveAvgPool2d(POOL_HW), nn.Flatten())
            self.obs_fc = nn.Sequential(nn.Linear(obs_widths[-1] * cells, encoding), nn.ReLU())
            self.frame_encoder = nn.Sequential(*_convs(3, frame_widths))
            c = frame_widths[-1]
            self.fusion = nn.Sequential(
                *_convs(3 * c, fusion_widths[:1]),
                *_convs(fusion_widths[0], fusion_widths[1:], 1),
                nn.AdaptiveAvgPool2d(POOL_HW),
                nn.Flatten(),
            )
            self.goal_fc = nn.Sequential(nn.Linear(fusion_widths[-1] * cells, encoding), nn.ReLU())
            self.head = nn.Sequential(nn.Linear(2 * encoding, encoding), nn.ReLU())
            self.dist_out = nn.Sequential(nn.Linear(encoding, encoding // 2), nn.ReLU(), nn.Linear(encoding // 2, 1))
            self.action_out = nn.Linear(encoding, len_traj_pred * 4)

        def encode_obs(self, obs):
            """Observation encoding (B, encoding) and the newest frame's feature map."""
            return self.obs_fc(self.obs_encoder(obs)), self.frame_encoder(obs[:, -3:])

        def heads(self, obs_enc, current_map, goal):
            g = self.frame_encoder(goal)
            fused = self.fusion(torch.cat([current_map, g, current_map * g], dim=1))
            g_enc = self.goal_fc(fused)
            z = self.head(torch.cat([obs_enc, g_enc], dim=1))
            a = self.action_out(z).reshape(z.shape[0], self.len_traj_pred, 4)
            xy = torch.cumsum(a[:, :, :2], dim=1)
            return self.dist_out(g_enc), torch.cat([xy, F.normalize(a[:, :, 2:], dim=-1)], dim=-1)

        def forward(self, obs, goal):
            enc, cur = self.encode_obs(obs)
            return self.heads(enc, cur, goal)

    return SimVnmNet()


def step_module(net):
    """One control step as :class:`models.export.gnm_net.GnmStep` does it: ONE ``obs`` (1, 3 (C+1), H, W)
    against B goals; the observation branch runs once. Equal to ``net(obs.expand(B, ...), goal)``."""
    from torch import nn

    class SimVnmStep(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, obs, goal):
            b = goal.shape[0]
            enc, cur = self.net.encode_obs(obs)
            return self.net.heads(enc.expand(b, -1), cur.expand(b, -1, -1, -1), goal)

    return SimVnmStep().eval()


def export_sim_vnm(net, out_dir: str | os.PathLike, *, obs: np.ndarray, goals: np.ndarray, params: dict,
                   weights: str, atol: float = 1e-4) -> dict:
    """Write ``out_dir/vnm.onnx``, its sidecar and ``vnm-reference.npz`` (one step on ``obs``/``goals``).

    Parameters
    ----------
    net : SimVnmNet
        Trained network (put in eval mode here).
    obs : (1, 3 (C+1), 64, 85) float32 and goals : (B >= 2, 3, 64, 85) float32
        Preprocessed inputs of the reference step (real rendered frames, so the reference means something).
    params : dict
        Sidecar ``params`` besides the image geometry and normalisation: ``context_size``,
        ``len_traj_pred``, ``frame_rate_hz``, ``dist_min_steps``, ``dist_max_steps`` (what
        :func:`models.vnm.open_vnm` reads), plus free-form training facts.
    weights : str
        Where the weights came from (sidecar ``weights``).

    Returns
    -------
    dict with ``files`` and ``parity_max_abs``.

    Raises
    ------
    ExportError
        Missing params, constant outputs, or ONNX Runtime differing from torch by more than ``atol``.
    """
    import torch

    need = ("context_size", "len_traj_pred", "frame_rate_hz", "dist_min_steps", "dist_max_steps")
    missing = [k for k in need if k not in params]
    if missing:
        raise ExportError(f"export_sim_vnm: params lack {missing}")
    c_obs = 3 * (int(params["context_size"]) + 1)
    if obs.shape != (1, c_obs, IMAGE_H, IMAGE_W) or goals.ndim != 4 or goals.shape[1:] != (3, IMAGE_H, IMAGE_W) \
            or goals.shape[0] < 2:
        raise ExportError(f"export_sim_vnm: reference obs {obs.shape} / goals {goals.shape} do not fit the contract")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_sidecars(out, ("vnm.onnx",))
    net.eval()
    step = step_module(net)
    o, g = (
        torch.from_numpy(np.ascontiguousarray(obs, np.float32)),
        torch.from_numpy(np.ascontiguousarray(goals, np.float32)),
    )
    with torch.no_grad():
        dist, wp = step(o, g)
        dist_full, wp_full = net(o.expand(g.shape[0], -1, -1, -1), g)
    assert_close("sim vnm step vs forward", dist.numpy(), dist_full.numpy(), atol=1e-4)
    assert_close("sim vnm step vs forward (waypoints)", wp.numpy(), wp_full.numpy(), atol=1e-4)
    assert_varies("sim vnm distance", dist.numpy())
    onnx_info = export_onnx(step, (o, g[:2]), out / "vnm.onnx", input_names=["obs", "goal"],
                            output_names=["dist", "waypoints"],
                            dynamic_axes={"goal": {0: "goals"}, "dist": {0: "goals"}, "waypoints": {0: "goals"}})
    got = ort_run(out / "vnm.onnx", {"obs": o.numpy(), "goal": g.numpy()})
    d_dist = assert_close("sim vnm dist", got[0], dist.numpy(), atol=atol * max(1.0, float(dist.abs().max())))
    d_wp = assert_close("sim vnm waypoints", got[1], wp.numpy(), atol=atol * max(1.0, float(wp.abs().max())))
    np.savez_compressed(out / "vnm-reference.npz", obs=o.numpy(), goal=g.numpy(), dist=dist.numpy(),
                        waypoints=wp.numpy())
    t = int(params["len_traj_pred"])
    write_sidecar(out / "vnm.onnx", kind="vnm", architecture=ARCHITECTURE, weights=weights, random_init=False,
                  onnx=onnx_info,
                  inputs=[io_spec("obs", [1, c_obs, IMAGE_H, IMAGE_W], "float32"),
                          io_spec("goal", ["goals", 3, IMAGE_H, IMAGE_W], "float32")],
                  outputs=[io_spec("dist", ["goals", 1], "float32"), io_spec("waypoints", ["goals", t, 4], "float32")],
                  params={**params, "image_width": IMAGE_W, "image_height": IMAGE_H, "mean": list(IMAGENET_MEAN),
                          "std": list(IMAGENET_STD), "resize": "pil-bicubic-stretch", "learn_angle": True,
                          "waypoint_units": "normalised; metres = value * max_v / frame_rate_hz",
                          "sim_only": True, "reference": "vnm-reference.npz",
                          "parity_max_abs": {"dist": d_dist, "waypoints": d_wp}},
                  extra_files=["vnm-reference.npz"])
    return {"files": [str(out / f) for f in FILES], "parity_max_abs": {"dist": d_dist, "waypoints": d_wp}}
