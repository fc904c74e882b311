"""Development drives for the VNM navigator: seeded forward walks on true geometry, driven with the sim VNM."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import robot_app
from robot_app.sim.vnm_devdrive import dev_walks, drive_dev_walks

SHIPPED = Path(robot_app.__file__).resolve().parent / "data" / "models" / "sim"


def _cross(step_m: float = 1.0):
    """Two drives crossing at the origin: west -> east along y = 0, then south -> north along x = 0."""
    s = np.arange(-60.0, 60.0 + 1e-9, step_m)
    east = np.stack([s, np.zeros_like(s)], 1)
    north = np.stack([np.full_like(s, 0.3), s], 1)  # 0.3 m off the crossing, as a second drive would be
    xy = np.concatenate([east, north])
    yaw = np.concatenate([np.zeros(len(s)), np.full(len(s), math.pi / 2)])
    return xy, yaw


def test_dev_walks_are_seeded_forward_and_within_the_length_range():
    xy, yaw = _cross()
    walks = dev_walks(xy, yaw, n=12, seed=3)
    assert walks == dev_walks(xy, yaw, n=12, seed=3) and walks != dev_walks(xy, yaw, n=12, seed=4)
    assert len(walks) == 12
    turned = 0
    for w in walks:
        steps = np.diff(xy[w], axis=0)
        length = np.hypot(*steps.T).sum()
        assert 40.0 - 1e-6 <= length <= 150.0 + 1e-6
        head = np.arctan2(steps[:, 1], steps[:, 0])
        assert np.all(np.cos(head - yaw[w[:-1]]) > math.cos(math.radians(72.5)))  # never against a node image
        turned += int(abs(yaw[w[0]] - yaw[w[-1]]) > 1.0)
    assert turned > 0  # some walks turn from the east drive onto the north one at the crossing


def test_dev_walks_refuses_bad_input():
    xy, yaw = _cross()
    with pytest.raises(ValueError, match="must agree"):
        dev_walks(xy, yaw[:-1])
    with pytest.raises(ValueError, match="min_m < max_m"):
        dev_walks(xy, yaw, min_m=50.0, max_m=40.0)


def test_drive_dev_walks_sums_a_short_walk():
    pytest.importorskip("pybullet")
    from models.vnm import open_vnm
    from robot_app.sim.vnm_devdrive import sim_options
    from robot_app.sim.vnm_follow import route_nodes
    from robot_app.sim.world import load_world

    world = load_world("campus")
    images, poses = route_nodes(world, np.array([[0.0, -85.0], [0.0, -70.0]]), spacing_m=1.0, seed=11)
    walk = list(range(len(images)))
    out = drive_dev_walks(world, [walk], poses[:, :2], poses[:, 2], lambda v: images[v], open_vnm(SHIPPED),
                          options=sim_options().replace(goal_confirm_steps=4))
    assert out["walks"] == 1 and abs(out["km"] - 0.015) < 0.002
    assert out["reached"] == 1.0 and out["rows"][0]["final_error_m"] < 3.0
    assert set(out["kinds"]) == {"collision", "off_path", "lost", "stuck"} and out["per_100m"] >= 0.0
