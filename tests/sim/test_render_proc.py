"""The sim camera's renderer in a child process: same frames as in-process, clear errors, no orphan."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("pybullet")

from robot_app.sim.render import WorldRenderer  # noqa: E402
from robot_app.sim.render_proc import RenderProcess, RenderProcessError  # noqa: E402
from robot_app.sim.world import load_world  # noqa: E402


@pytest.fixture(scope="module")
def world():
    return load_world("campus")


def test_the_child_draws_the_frames_the_renderer_draws_in_process(world):
    kw = dict(width=64, height=48, seed=3, noise_std=2.0)
    with WorldRenderer(world, **kw) as ren:
        want = [ren.render_jpeg(1.0, -2.0, 0.4 * i, index=i, quality=80) for i in range(3)]
    with RenderProcess(world, **kw) as proc:
        assert proc.pid is not None and proc.pid != os.getpid()
        got = [proc.render_jpeg(1.0, -2.0, 0.4 * i, index=i, quality=80) for i in range(3)]
    assert got == want
    assert got[0][:2] == b"\xff\xd8"


def test_a_renderer_that_cannot_be_built_is_one_line_from_the_child(world):
    with pytest.raises(RenderProcessError, match=r"^sim renderer: \w+Error: .*") as info:
        RenderProcess(world, width=64, height=48, no_such_option=1)
    assert "\n" not in str(info.value)


def test_a_child_that_dies_is_reported_not_waited_on(world):
    proc = RenderProcess(world, width=32, height=24)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        with pytest.raises(RenderProcessError, match="exited"):
            proc.render_jpeg(0.0, 0.0, 0.0)
    finally:
        proc.close()
    proc.close()  # twice is harmless


def test_close_ends_the_child(world):
    proc = RenderProcess(world, width=32, height=24)
    proc.render_jpeg(0.0, 0.0, 0.0)
    proc.close()
    assert not proc._proc.is_alive()
    assert proc._proc.exitcode == 0
