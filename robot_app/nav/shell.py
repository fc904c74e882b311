"""The robot's shell around the navigation policy: sensors in, commands out (asyncio).

Per step: the pose source (:class:`robot_app.nav.gps.GpsNavigator`: the fused pose when the state
estimator publishes one, else GPS + gyro) is sensed, the newest camera frame goes into the VNM's context
queue, the VNM scores the nodes :meth:`NavPolicy.vnm_request` names (ONNX inference in a worker thread, so
the event loop never waits for it), and :meth:`NavPolicy.step` turns that :class:`Observation` into a
:class:`Directive` whose command is held in the app's autonomy slot for the directive's ``hold_s``,
renewed every half ``[robot] cmd_timeout_s`` (the command multiplexer cuts a stale one, so a hung VNM
call still stops the robot). The robot is always stopped when :meth:`WalkShell.run` returns.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from firmware_bridge.readings import WheelFeedback
from robot_app.commands import Source
from robot_app.mapping.map_build import decode_jpeg
from robot_app.nav.policy import Directive, NavPolicy, Observation, Pose, VnmOutput

log = logging.getLogger(__name__)


class WalkShell:
    """Steps one :class:`NavPolicy` on the robot (module docstring).

    ``sensors`` is the app's :class:`robot_app.interfaces.Sensors` (camera frames, wheel feedback from the
    base), ``commands`` the command multiplexer (the autonomy slot is written). ``pose_source`` has
    ``sense() -> bool`` (fresh fix), ``estimator`` (x_m, y_m, yaw_rad, yaw_known, fix_t_mono_s, gyro_t_mono_s),
    ``pose_source`` ("estimator" while the fused pose is used) and ``period_s``; ``vnm`` a
    :class:`models.vnm.VnmModel` (None: GPS drives), ``goals`` its preprocessed node images (K, ...) in walk
    order. ``observe``, when given, replaces the sensors: an async callable ``(policy) -> Observation`` (the
    same-directives test feeds a scripted sequence through it).
    """

    def __init__(self, sensors, commands, pose_source, *, vnm=None, goals=None, sender: str = "navigator",
                 observe=None):
        self.sensors, self.commands = sensors, commands
        self.pose_source, self.vnm, self.goals = pose_source, vnm, goals
        self.sender = sender
        self._observe = observe
        self.directives: list[Directive] = []
        self._ctx, self._ctx_stretch, self._last_frame = None, None, None

    def _command(self, v: float, omega: float) -> None:
        self.commands.submit(Source.AUTONOMY, v, omega, sender=self.sender)

    async def _hold(self, v: float, omega: float, duration_s: float, refresh_s: float) -> None:
        """Hold ``(v, omega)`` for ``duration_s``, renewing the autonomy slot every ``refresh_s`` (half
        ``[robot] cmd_timeout_s``)."""
        end = time.monotonic() + duration_s
        while True:
            self._command(v, omega)
            left = end - time.monotonic()
            if left <= 0.0:
                return
            await asyncio.sleep(min(refresh_s, left))

    def _pose(self, now: float) -> Pose | None:
        est = self.pose_source.estimator
        if not math.isfinite(est.x_m):
            return None
        heading_t = now if self.pose_source.pose_source == "estimator" else est.gyro_t_mono_s
        return Pose(float(est.x_m), float(est.y_m), float(est.yaw_rad), bool(est.yaw_known), float(est.fix_t_mono_s),
                    float(heading_t))

    def _wheel_v(self, wheel_radius_m: float) -> float | None:
        base = self.sensors.base
        fb = base.latest(WheelFeedback, max_age_s=0.5) if base is not None else None
        if fb is None:
            return None
        return wheel_radius_m * (fb.left.velocity_radps + fb.right.velocity_radps) / 2.0

    async def observe(self, policy: NavPolicy) -> Observation:
        """The sensors now, with the VNM run on the nodes the policy asked for."""
        self.pose_source.sense()
        req = policy.vnm_request()
        frame_t, out = None, None
        cam = self.sensors.camera
        if req is not None and self.vnm is not None:
            if req.stretch != self._ctx_stretch:  # a new VNM stretch: a new context queue
                self._ctx, self._ctx_stretch, self._last_frame = self.vnm.new_context(), req.stretch, None
            frame = cam.latest if cam is not None else None
            if frame is not None:
                frame_t = frame.t_mono_s
                fresh = time.monotonic() - frame_t <= policy.o.frame_max_age_s
                if fresh and frame is not self._last_frame:
                    self._ctx.push(await asyncio.to_thread(decode_jpeg, frame.jpeg))
                    self._last_frame = frame
                if fresh and self._ctx.ready:
                    vnm = self.vnm
                    pred = await asyncio.to_thread(vnm.predict, self._ctx.stack(), self.goals[req.lo:req.hi])
                    wp_i = min(policy.o.waypoint_index, vnm.len_traj_pred - 1)
                    wps = pred.waypoints_m(max_v_mps=policy.o.vnm_scale_v_mps, frame_rate_hz=vnm.frame_rate_hz)
                    out = VnmOutput(req.lo, req.hi, pred.dist_steps, wps[:, wp_i])
        now = time.monotonic()
        return Observation(now, self._pose(now), frame_t, out, self._wheel_v(policy.o.wheel_radius_m))

    async def _sense_loop(self) -> None:
        # the pose estimate (gyro integration above all) stays current while a VNM call runs
        while True:
            self.pose_source.sense()
            await asyncio.sleep(self.pose_source.period_s)

    async def run(self, policy: NavPolicy) -> Directive:
        """Step ``policy`` until the walk ends; returns the final directive (its ``outcome`` set). A
        cancelled run stops the robot and re-raises."""
        sensing = asyncio.ensure_future(self._sense_loop()) if self._observe is None else None
        zero_holds = 0
        try:
            while True:
                obs = await (self._observe(policy) if self._observe is not None else self.observe(policy))
                d = policy.step(obs)
                self.directives.append(d)
                if d.outcome is not None:
                    return d
                if d.hold_s <= 0.0:
                    zero_holds += 1
                    if zero_holds > 100:
                        raise RuntimeError("navigation policy: 100 steps in a row without holding a command")
                    await asyncio.sleep(0)
                    continue
                zero_holds = 0
                await self._hold(d.v_mps, d.omega_radps, d.hold_s, policy.o.cmd_refresh_s)
        finally:
            self._command(0.0, 0.0)
            if sensing is not None:
                sensing.cancel()
                await asyncio.gather(sensing, return_exceptions=True)
