"""Following a planned walk with the visual navigation model (GNM / ViNT deployment loop, DESIGN.md).

At the VNM's frame rate (4 Hz for GNM): the newest camera frame goes into the context queue; the VNM
scores the walk's node images within ``window`` walk indices of the last localisation (GNM's radius,
4) in one call (the observation branch once, one goal-branch pass per node); the node with the
smallest predicted temporal distance is the localisation; when that distance is below
``close_steps`` the next node becomes the subgoal. The subgoal's waypoint ``waypoint_index`` (GNM
deploys waypoint 2 of 5), scaled to metres by ``max_v / frame_rate``, goes through the PD rule
(:func:`core.control.waypoint_to_velocity`) to (v, omega) within the limits, which the control loop
forwards at 50 Hz. ONNX inference runs in a worker thread, so the event loop never waits for it.
The goal is reached when the localisation is the walk's last node (GNM deployment: closest node ==
goal node; ``goal_close=True`` also asks for a distance below ``close_steps``).
Lost (every distance above ``lost_steps`` for ``max_lost_steps`` steps), a missing camera frame, or
the goal reached end the run; the robot is always stopped when :meth:`VnmNavigator.follow` returns.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time

import numpy as np

from core.control import waypoint_to_velocity
from robot_app.navigator import RunReport

log = logging.getLogger(__name__)


def _rgb(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as im:
        return np.asarray(im.convert("RGB"))


class VnmNavigator:
    """Drives ``app.command`` along a walk whose node images come from the map."""

    def __init__(self, app, vnm, *, window: int = 4, close_steps: float = 3.0, lost_steps: float | None = None,
                 waypoint_index: int = 2, max_v_mps: float | None = None, max_lost_steps: int = 12,
                 timeout_s: float = 600.0, goal_close: bool = False):
        self.app = app
        self.goal_close = goal_close
        self.vnm = vnm
        self.window = window
        self.close_steps = close_steps
        self.lost_steps = lost_steps if lost_steps is not None else vnm.dist_range_steps[1]
        self.waypoint_index = min(waypoint_index, vnm.len_traj_pred - 1)
        self.max_v_mps = min(max_v_mps or app.config.models.vnm_max_v_mps, app.config.robot.max_v_mps)
        self.max_lost_steps = max_lost_steps
        self.timeout_s = timeout_s

    def _command(self, v: float, omega: float) -> None:
        from robot_app.service.app import Command

        self.app.command = Command(v, omega, time.monotonic(), "vnm-navigator")

    async def follow(self, node_jpegs: list[bytes]) -> RunReport:
        """Follow the walk given by its node images (walk order). Never raises for field conditions."""
        vnm, cam = self.vnm, self.app.camera
        goals = await asyncio.to_thread(lambda: vnm.preprocess_many([_rgb(j) for j in node_jpegs]))
        ctx = vnm.new_context()
        period = 1.0 / vnm.frame_rate_hz
        idx, lost, last_frame = 0, 0, None
        t0 = time.monotonic()
        self.trace = trace = []  # kept on the navigator so a cancelled run still has it
        outcome, best_d = "cancelled", float("inf")
        try:
            while True:
                now = time.monotonic()
                if now - t0 > self.timeout_s:
                    outcome = "stuck"
                    break
                frame = cam.latest if cam is not None else None
                if frame is None or now - frame.t_mono_s > 1.0:
                    self._command(0.0, 0.0)
                    if now - t0 > 5.0:
                        outcome = "camera-lost"
                        break
                    await asyncio.sleep(period)
                    continue
                if frame is not last_frame:
                    ctx.push(await asyncio.to_thread(_rgb, frame.jpeg))
                    last_frame = frame
                if not ctx.ready:
                    await asyncio.sleep(period)
                    continue
                lo, hi = max(0, idx - self.window), min(len(node_jpegs), idx + self.window + 1)
                pred = await asyncio.to_thread(vnm.predict, ctx.stack(), goals[lo:hi])
                d = pred.dist_steps
                j = int(np.argmin(d))
                best_d = float(d[j])
                if best_d > self.lost_steps:
                    lost += 1
                    self._command(0.0, 0.0)
                    if lost >= self.max_lost_steps:
                        outcome = "lost"
                        break
                    await asyncio.sleep(period)
                    continue
                lost = 0
                idx = lo + j
                if idx == len(node_jpegs) - 1 and (best_d < self.close_steps or not self.goal_close):
                    outcome = "reached"
                    break
                # the next node as subgoal once close, if the window scored it (else next step's window will)
                sub = min(idx + 1, hi - 1) if best_d < self.close_steps else idx
                wp = pred.waypoints_m(max_v_mps=self.max_v_mps, frame_rate_hz=vnm.frame_rate_hz)[sub - lo,
                                                                                                  self.waypoint_index]
                v, omega = waypoint_to_velocity(float(wp[0]), float(wp[1]), dt_s=period, max_v_mps=self.max_v_mps,
                                                max_omega_radps=self.app.config.robot.max_omega_radps)
                self._command(v, omega)
                trace.append((now - t0, idx, sub, best_d, v, omega))
                await asyncio.sleep(period)
        finally:
            self._command(0.0, 0.0)
        log.info("VNM walk %s after %.1f s at walk index %d", outcome, time.monotonic() - t0, idx)
        return RunReport(outcome, idx, best_d, time.monotonic() - t0, trace)
