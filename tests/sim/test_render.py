"""Rendering: headless TinyRenderer frames at the asked size, deterministic for a seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_app.sim.render import WorldRenderer, encode_jpeg
from robot_app.sim.world import load_world

pytest.importorskip("pybullet")


@pytest.fixture(scope="module")
def campus():
    return load_world("campus")


def test_frames_are_deterministic_for_a_seed(campus):
    pose = (0.0, -85.0, math.pi / 2)
    with (
        WorldRenderer(campus, width=64, height=48, seed=3) as a,
        WorldRenderer(campus, width=64, height=48, seed=3) as b,
    ):
        fa, fb = a.render(*pose, index=5), b.render(*pose, index=5)
        assert fa.shape == (48, 64, 3) and fa.dtype == np.uint8
        assert np.array_equal(fa, fb)
        assert a.render_jpeg(*pose, index=5) == b.render_jpeg(*pose, index=5)
        assert not np.array_equal(fa, a.render(*pose, index=6))  # the sensor noise follows the frame index
    with WorldRenderer(campus, width=64, height=48, seed=4) as c:
        other = c.render(*pose, index=5)
    assert not np.array_equal(fa, other)
    assert np.abs(fa.astype(int) - other.astype(int)).mean() < 5  # same scene, different noise


def test_the_scene_follows_the_pose(campus):
    with WorldRenderer(campus, width=80, height=60, noise_std=0.0) as r:
        # facing west at (0, -40): the red "library" (20 x 16 m at (-20, -40)) fills the middle
        west = r.render(0.0, -40.0, math.pi)
        mid = west[20:30, 30:50].reshape(-1, 3).astype(int)
        assert (mid[:, 0] > mid[:, 1] + 60).mean() > 0.9
        # facing south from the north end of the main path: sky on top, no red in the middle
        south = r.render(0.0, 80.0, -math.pi / 2)
        top = south[:5].reshape(-1, 3).astype(int)
        assert (top[:, 2] > top[:, 0] + 30).all()  # blue sky
        assert not np.array_equal(west, south)


def test_resolution_follows_the_arguments(campus):
    with WorldRenderer(campus, width=33, height=17) as r:
        assert r.render(0.0, -85.0, 0.0).shape == (17, 33, 3)
    with pytest.raises(ValueError, match="image size"):
        WorldRenderer(campus, width=2, height=17)


def test_encode_jpeg_checks_its_input():
    assert encode_jpeg(np.zeros((8, 8, 3), np.uint8))[:2] == b"\xff\xd8"
    with pytest.raises(ValueError, match=r"\(H, W, 3\) uint8"):
        encode_jpeg(np.zeros((8, 8), np.uint8))


def test_the_worlds_look_comes_from_its_render_table(tmp_path, campus):
    import dataclasses

    from robot_app.sim.world import RenderStyle

    pose = (0.0, -85.0, math.pi / 2)
    # a [render] table that spells out the defaults renders the shipped look byte for byte
    text = open(campus.source, encoding="utf-8").read()
    spelled = tmp_path / "campus.toml"
    spelled.write_text(text + "\n[render]\nground_colour = [0.33, 0.5, 0.22]\npath_colour = [0.62, 0.6, 0.55]\n"
                       "light_direction = [0.4, -0.3, 1.0]\nambient = 0.55\ndiffuse = 0.5\n", encoding="utf-8")
    explicit = load_world(spelled)
    assert explicit.render == RenderStyle()
    with WorldRenderer(campus, width=48, height=36, seed=1) as a, WorldRenderer(explicit, width=48, height=36,
                                                                                seed=1) as b:
        assert np.array_equal(a.render(*pose), b.render(*pose))
    dusk = dataclasses.replace(campus, render=RenderStyle(ground_rgb=(0.5, 0.45, 0.3), sky_top_rgb=(0.2, 0.2, 0.4),
                                                          ambient=0.3))
    with WorldRenderer(campus, width=48, height=36, noise_std=0.0) as a, \
            WorldRenderer(dusk, width=48, height=36, noise_std=0.0) as b:
        fa, fb = a.render(*pose).astype(int), b.render(*pose).astype(int)
    assert np.abs(fa[0] - fb[0]).mean() > 20  # the sky's top row
    assert np.abs(fa[-1] - fb[-1]).mean() > 10  # the ground at the bottom
