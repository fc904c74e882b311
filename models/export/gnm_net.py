"""A GNM-compatible visual navigation network in plain torch (workstation side).

Architecture of GNM (Shah et al., "GNM: A General Navigation Model to Drive Any Robot", ICRA 2023,
Sec. IV-B; public definition ``train/vint_train/models/gnm/gnm.py`` in visualnav-transformer):

- observation branch: the ``context + 1`` newest frames stacked on channels (18 for context 5) ->
  MobileNetV2 features (Sandler et al. 2018, Table 2; first conv widened to 18 channels) -> global
  average pool -> 1280 -> Linear 1024 + ReLU;
- goal branch (early fusion): the same frames plus the goal frame (21 channels) -> MobileNetV2
  features -> pool -> 1280 -> Linear 1024 + ReLU -> Linear 1024 + ReLU;
- head: concat 2048 -> Linear 256 + ReLU -> Linear 32 + ReLU -> ``dist`` (1) and ``action``
  (len_traj_pred x 4): x/y deltas accumulated into waypoints (cumsum over time) and (cos, sin)
  normalised to unit length.

Parameter names equal GNM's (``obs_mobilenet.0.0.weight``, ``compress_goal.2.bias``, ...), so a
released checkpoint loads with ``strict=True``. :func:`expected_gnm_state_shapes` derives the
name -> shape list from the published layer table independently of this module, and the tests
check both against each other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.mobilenetv2 import InvertedResidual
from torchvision.ops.misc import Conv2dNormActivation

# MobileNetV2 Table 2: expansion t, output channels c, repeats n, first stride s.
MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
FIRST_CHANNELS = 32
LAST_CHANNELS = 1280


def mobilenet_v2_features(in_channels: int) -> nn.Sequential:
    """MobileNetV2 feature extractor (width 1.0) whose first conv takes ``in_channels`` (3 per frame)."""
    layers: list[nn.Module] = [Conv2dNormActivation(in_channels, FIRST_CHANNELS, stride=2,
                                                    norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU6)]
    c_in = FIRST_CHANNELS
    for t, c, n, s in MOBILENET_V2_SETTING:
        for i in range(n):
            layers.append(InvertedResidual(c_in, c, s if i == 0 else 1, expand_ratio=t, norm_layer=nn.BatchNorm2d))
            c_in = c
    layers.append(Conv2dNormActivation(c_in, LAST_CHANNELS, kernel_size=1, norm_layer=nn.BatchNorm2d,
                                       activation_layer=nn.ReLU6))
    features = nn.Sequential(*layers)
    for m in features.modules():  # MobileNetV2's initialisation (as in torchvision and GNM)
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return features


def _pool(x: torch.Tensor) -> torch.Tensor:
    return torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)


class GnmNet(nn.Module):
    """GNM network; ``forward(obs (B, 3(C+1), H, W), goal (B, 3, H, W)) -> (dist (B, 1), action (B, T, 4))``."""

    def __init__(self, *, context_size: int = 5, len_traj_pred: int = 5, obs_encoding_size: int = 1024,
                 goal_encoding_size: int = 1024):
        super().__init__()
        self.context_size = context_size
        self.len_traj_pred = len_traj_pred
        self.obs_mobilenet = mobilenet_v2_features(3 * (context_size + 1))
        self.compress_observation = nn.Sequential(nn.Linear(LAST_CHANNELS, obs_encoding_size), nn.ReLU())
        self.goal_mobilenet = mobilenet_v2_features(3 * (context_size + 2))
        self.compress_goal = nn.Sequential(nn.Linear(LAST_CHANNELS, 1024), nn.ReLU(),
                                           nn.Linear(1024, goal_encoding_size), nn.ReLU())
        self.linear_layers = nn.Sequential(nn.Linear(obs_encoding_size + goal_encoding_size, 256), nn.ReLU(),
                                           nn.Linear(256, 32), nn.ReLU())
        self.dist_predictor = nn.Sequential(nn.Linear(32, 1))
        self.action_predictor = nn.Sequential(nn.Linear(32, len_traj_pred * 4))

    def encode_obs(self, obs: torch.Tensor) -> torch.Tensor:
        return self.compress_observation(_pool(self.obs_mobilenet(obs)))

    def heads(self, obs_enc: torch.Tensor, obs: torch.Tensor, goal: torch.Tensor):
        goal_enc = self.compress_goal(_pool(self.goal_mobilenet(torch.cat([obs, goal], dim=1))))
        z = self.linear_layers(torch.cat([obs_enc, goal_enc], dim=1))
        dist = self.dist_predictor(z)
        a = self.action_predictor(z).reshape(z.shape[0], self.len_traj_pred, 4)
        xy = torch.cumsum(a[:, :, :2], dim=1)
        angle = F.normalize(a[:, :, 2:], dim=-1)
        return dist, torch.cat([xy, angle], dim=-1)

    def forward(self, obs: torch.Tensor, goal: torch.Tensor):
        return self.heads(self.encode_obs(obs), obs, goal)


class GnmStep(nn.Module):
    """One control step: ONE observation stack against B candidate goals.

    ``forward(obs (1, 3(C+1), H, W), goal (B, 3, H, W)) -> dist (B, 1), waypoints (B, T, 4)``. The
    observation branch runs once; the goal branch (early fusion, it sees the context too) runs once per
    goal. Equal to ``GnmNet.forward(obs.expand(B, ...), goal)``.
    """

    def __init__(self, net: GnmNet):
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor, goal: torch.Tensor):
        b = goal.shape[0]
        obs_enc = self.net.encode_obs(obs).expand(b, -1)
        return self.net.heads(obs_enc, obs.expand(b, -1, -1, -1), goal)


def expected_gnm_state_shapes(*, context_size: int = 5, len_traj_pred: int = 5, obs_encoding_size: int = 1024,
                              goal_encoding_size: int = 1024) -> dict[str, tuple]:
    """Parameter/buffer name -> shape of the published GNM, derived from its layer table.

    Naming follows torchvision's blocks as GNM uses them: ``Conv2dNormActivation`` = (0 conv, 1 BN);
    ``InvertedResidual.conv`` = [expand ConvBNReLU6 (if t != 1)], depthwise ConvBNReLU6, 1x1 project
    conv, BN. Written independently of :class:`GnmNet` so a test can hold one against the other.
    """
    shapes: dict[str, tuple] = {}

    def bn(prefix: str, c: int) -> None:
        for k in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{prefix}.{k}"] = (c,)
        shapes[f"{prefix}.num_batches_tracked"] = ()

    def mobilenet(prefix: str, in_ch: int) -> None:
        shapes[f"{prefix}.0.0.weight"] = (FIRST_CHANNELS, in_ch, 3, 3)
        bn(f"{prefix}.0.1", FIRST_CHANNELS)
        idx, c_in = 1, FIRST_CHANNELS
        for t, c, n, _s in MOBILENET_V2_SETTING:
            for _ in range(n):
                hidden = c_in * t
                p, j = f"{prefix}.{idx}.conv", 0
                if t != 1:
                    shapes[f"{p}.0.0.weight"] = (hidden, c_in, 1, 1)
                    bn(f"{p}.0.1", hidden)
                    j = 1
                shapes[f"{p}.{j}.0.weight"] = (hidden, 1, 3, 3)
                bn(f"{p}.{j}.1", hidden)
                shapes[f"{p}.{j + 1}.weight"] = (c, hidden, 1, 1)
                bn(f"{p}.{j + 2}", c)
                idx, c_in = idx + 1, c
        shapes[f"{prefix}.{idx}.0.weight"] = (LAST_CHANNELS, c_in, 1, 1)
        bn(f"{prefix}.{idx}.1", LAST_CHANNELS)

    def linear(prefix: str, n_in: int, n_out: int) -> None:
        shapes[f"{prefix}.weight"] = (n_out, n_in)
        shapes[f"{prefix}.bias"] = (n_out,)

    mobilenet("obs_mobilenet", 3 * (context_size + 1))
    linear("compress_observation.0", LAST_CHANNELS, obs_encoding_size)
    mobilenet("goal_mobilenet", 3 * (context_size + 2))
    linear("compress_goal.0", LAST_CHANNELS, 1024)
    linear("compress_goal.2", 1024, goal_encoding_size)
    linear("linear_layers.0", obs_encoding_size + goal_encoding_size, 256)
    linear("linear_layers.2", 256, 32)
    linear("dist_predictor.0", 32, 1)
    linear("action_predictor.0", 32, len_traj_pred * 4)
    return shapes
