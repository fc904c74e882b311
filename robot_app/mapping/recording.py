"""Record-a-map from the running app: a recording session and the map-build job.

While recording, camera frames (subsampled to the VNM's rate by :class:`robot_app.mapping.recorder.Recorder`),
GPS fixes, IMU samples and the commanded velocity go into ``[paths] logs_dir/NAME``. Building runs
:func:`robot_app.mapping.map_build.build_map` in a worker thread and writes ``[paths] maps_dir/NAME.sqlite``;
the map named ``current`` is the one route jobs use by default. Names are plain words
(``[A-Za-z0-9_-]``, at most 64): the operator never gives a path.

A full disk never ruins a drive: a recording does not start with less than ``[mapping] record_reserve_mb``
free on the logs' file system and stops by itself, cleanly, when the free space falls below it (checked
every second) or when a write fails (:class:`core.tlog.LogWriteError`). The log then holds every committed
sample and verifies and builds; the status (and the screen) says in words why the recording stopped until
the next one starts.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from pathlib import Path

from core.tlog import LogWriteError, count_rows
from firmware_bridge.driver import queue_get
from firmware_bridge.kinematics import wheels_to_twist
from firmware_bridge.readings import GpsFix, GpsNoFix, ImuReading, WheelFeedback
from robot_app.errors import RequestError
from robot_app.mapping.map_build import build_map
from robot_app.mapping.recorder import Recorder

log = logging.getLogger(__name__)

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class RecordingError(RequestError):
    """A recording or build request that cannot be carried out; ``bad_input`` as in
    :class:`robot_app.errors.RequestError`."""


def free_mb(folder: Path) -> float:
    """Free space (MB, 1e6 bytes) for an unprivileged writer on the file system that holds ``folder`` (or its
    nearest existing parent)."""
    p = Path(folder)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free / 1e6


def check_name(name) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise RecordingError(f"name {name!r}: use 1 to 64 letters, digits, '-' or '_'", bad_input=True)
    return name


class RecordingService:
    """Record-a-map (module docstring).

    ``config`` gives ``[paths]``, ``[mapping]``, ``[camera]`` and ``[robot]``; ``sensors``
    (:class:`robot_app.interfaces.Sensors`) the camera and the drivers whose readings are logged;
    ``commands`` (the command multiplexer) the commanded velocity; ``mission`` (or None) the route job, so
    that the map a route is driving on is not rebuilt under it.
    """

    def __init__(self, config, sensors, commands, mission=None):
        self.config, self.sensors, self.commands, self.mission = config, sensors, commands, mission
        self.recorder = None
        self.name: str | None = None
        self.last_saved: dict | None = None  # {"log", "frames"} of the drive saved last
        self.build_state = "idle"       # idle, building, done, failed
        self.build_report: dict | None = None
        self.build_message = ""
        self._task: asyncio.Task | None = None
        self._build_task: asyncio.Task | None = None
        self.stopped_reason: str | None = None  # why the last recording stopped by itself (shown until the next)

    @property
    def logs_dir(self) -> Path:
        return Path(self.config.paths.logs_dir)

    @property
    def maps_dir(self) -> Path:
        return Path(self.config.paths.maps_dir)

    async def start(self, name: str) -> None:
        check_name(name)
        if self.recorder is not None:
            raise RecordingError(f"already recording {self.name!r}: stop it first")
        if self.sensors.camera is None:
            raise RecordingError("no camera ([camera] source is 'none'): a drive without images cannot make a map")
        if name == "runs":
            raise RecordingError("'runs' is where route runs are recorded: choose another name", bad_input=True)
        folder = self.logs_dir / name
        if folder.exists():
            raise RecordingError(f"a drive named {name!r} exists already: choose another name")
        reserve = self.config.mapping.record_reserve_mb
        try:
            free = free_mb(self.logs_dir)
        except OSError as exc:
            raise RecordingError(f"cannot record into {folder}: {exc.strerror or exc}") from exc
        if free < reserve:
            raise RecordingError(f"the disk is almost full: {free:.0f} MB free for drives, {reserve:.0f} MB must "
                                 f"stay free ([mapping] record_reserve_mb): delete old drives first")
        try:
            self.recorder = Recorder(folder, frame_rate_hz=self.config.mapping.frame_rate_hz,
                                     metadata={"camera": self.config.camera.source})
        except Exception as exc:  # noqa: BLE001 - e.g. read-only disk: tell the operator
            raise RecordingError(f"cannot record into {folder}: {exc}") from exc
        self.name = name
        self.stopped_reason = None
        self.last_saved = None
        if self.sensors.camera is not None:
            self.sensors.camera.subscribe(self._on_frame)
        self._task = asyncio.ensure_future(self._pump())
        log.info("recording into %s", folder)

    def _on_frame(self, frame) -> None:
        if self.recorder is not None:
            try:
                self.recorder.on_frame(frame.t_mono_s, frame.jpeg)
            except LogWriteError as exc:
                self._stop_on_fault(exc)

    def _stop_on_fault(self, exc: Exception) -> None:
        """End the recording now because the log cannot take more (a failed write, or too little free space):
        the committed samples stay in a log that verifies; the reason stays in :meth:`status`."""
        rec, name = self.recorder, self.name
        if rec is None:
            return
        self.recorder, self.name = None, None  # the pump sees it and returns
        if self.sensors.camera is not None:
            self.sensors.camera.unsubscribe(self._on_frame)
        try:
            rec.close()  # commits what is pending when the log still takes writes
        except LogWriteError as close_exc:
            exc = exc if isinstance(exc, LogWriteError) else close_exc
        except Exception:  # noqa: BLE001 - the drive is over either way; say so on the screen
            log.exception("closing the drive log %s", name)
        folder = self.logs_dir / name
        try:
            frames = count_rows(folder, "frames")
        except Exception:  # noqa: BLE001 - the count is for the message only
            frames = None
        full = isinstance(exc, LogWriteError) and exc.disk_full
        why = "the disk is full" if full else str(exc)
        self.stopped_reason = (f"recording {name!r} stopped: {why}; "
                               f"{'its' if frames is None else frames} committed frames are saved and the drive "
                               f"can be used")
        self.last_saved = {"log": name, "frames": frames, "stopped": self.stopped_reason}
        log.error("%s", self.stopped_reason)

    async def _pump(self) -> None:
        """Sensor readings, wheel odometry and commands into the log (GPS and IMU from their configured
        drivers; odometry integrated from the MCU's wheel feedback, odom frame, REP-103)."""
        import math

        merged: asyncio.Queue = asyncio.Queue(maxsize=1024)
        sources = [
            (self.sensors.gps, (GpsFix, GpsNoFix)),
            (self.sensors.imu, (ImuReading,)),
            (self.sensors.base, (WheelFeedback,)),
        ]
        forwarders = []
        for drv, kinds in sources:
            if drv is None:
                continue
            q = drv.subscribe(kinds=kinds)

            async def forward(q=q):
                while True:
                    item = await q.get()
                    if merged.full():
                        merged.get_nowait()
                    merged.put_nowait(item)
            forwarders.append(asyncio.ensure_future(forward()))
        robot = self.config.robot
        x = y = yaw = 0.0
        last_odom_t = None
        last_cmd = 0.0
        last_space = time.monotonic()
        reserve = self.config.mapping.record_reserve_mb
        try:
            while True:
                try:
                    r = await queue_get(merged, 0.1)
                except asyncio.TimeoutError:
                    r = None
                rec = self.recorder
                if rec is None:
                    return
                if time.monotonic() - last_space >= 1.0:
                    last_space = time.monotonic()
                    try:
                        free = free_mb(self.logs_dir)
                    except OSError:
                        free = float("inf")  # cannot tell: the writes themselves will say
                    if free < reserve:
                        self._stop_on_fault(OSError(f"the disk is almost full ({free:.0f} MB free, {reserve:.0f} MB "
                                                    f"must stay free: [mapping] record_reserve_mb)"))
                        return
                try:
                    if isinstance(r, GpsFix):
                        cov = r.covariance_enu_m2
                        var = cov[0] + cov[1] if cov else math.nan
                        hacc = math.sqrt(var) if math.isfinite(var) and var >= 0 else None
                        rec.on_fix(r.t_mono_s, r.latitude_deg, r.longitude_deg, quality=r.quality, hacc_m=hacc)
                    elif isinstance(r, GpsNoFix):
                        rec.on_fix(r.t_mono_s, None, None, quality=0)
                    elif isinstance(r, ImuReading) and r.angular_velocity_radps and r.linear_acceleration_mps2:
                        rec.on_imu(r.t_mono_s, r.linear_acceleration_mps2, r.angular_velocity_radps)
                    elif isinstance(r, WheelFeedback):
                        v, w = wheels_to_twist(r.left.velocity_radps, r.right.velocity_radps,
                                               wheel_radius_m=robot.wheel_radius_m,
                                               wheel_separation_m=robot.wheel_separation_m)
                        if last_odom_t is not None:
                            dt = max(0.0, min(r.t_mono_s - last_odom_t, 0.5))
                            x += v * math.cos(yaw) * dt
                            y += v * math.sin(yaw) * dt
                            yaw = (yaw + w * dt + math.pi) % (2 * math.pi) - math.pi
                        last_odom_t = r.t_mono_s
                        rec.on_odom(r.t_mono_s, x, y, yaw, v, w)
                    now = time.monotonic()
                    if now - last_cmd >= 0.1:
                        cmd = self.commands.current
                        rec.on_cmd(now, cmd.v_mps, cmd.omega_radps)
                        last_cmd = now
                except LogWriteError as exc:
                    self._stop_on_fault(exc)
                    return
        finally:
            for f in forwarders:
                f.cancel()
            await asyncio.gather(*forwarders, return_exceptions=True)

    async def stop(self) -> dict:
        if self.recorder is None:
            raise RecordingError(f"not recording: {self.stopped_reason}" if self.stopped_reason else "not recording")
        if self.sensors.camera is not None:
            self.sensors.camera.unsubscribe(self._on_frame)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        rec, self.recorder = self.recorder, None
        try:
            rec.close()
        except LogWriteError as exc:  # the last commit failed: the earlier ones stand
            self.recorder = rec
            self._stop_on_fault(exc)
            return dict(self.last_saved)
        out = {"log": self.name, "frames": rec.frames_kept}
        self.name = None
        self.last_saved = out  # stays on the screen until the next recording starts
        return out

    async def build(self, logs: list, name: str = "current") -> None:
        check_name(name)
        if not isinstance(logs, list) or not logs:
            raise RecordingError("give the names of one or more recorded drives", bad_input=True)
        folders = [self.logs_dir / check_name(n) for n in logs]
        missing = [f.name for f in folders if not (f / "log.sqlite").is_file()]
        if missing:
            raise RecordingError(f"no recorded drive named {', '.join(missing)}", bad_input=True)
        if self.build_state == "building":
            raise RecordingError("a map is being built already")
        mission = self.mission
        if (
            mission is not None
            and mission.state == "running"
            and (self.maps_dir / f"{name}.sqlite") == mission.map_path()
        ):
            raise RecordingError(f"a route is driving on map {name!r}: stop it before rebuilding the map")
        self.build_state, self.build_message, self.build_report = "building", f"building map {name!r}", None
        self._build_task = asyncio.ensure_future(self._build(folders, name))

    async def _build(self, folders, name: str) -> None:
        out = self.maps_dir / f"{name}.sqlite"
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            rep = await asyncio.to_thread(build_map, folders, out, config=self.config, overwrite=True)
            self.build_report = rep.as_dict()
            self.build_state = "done"
            self.build_message = f"map {name!r}: {rep.nodes} nodes, {rep.components} component(s)"
        except Exception as exc:  # noqa: BLE001 - shown to the operator
            log.exception("map build failed")
            self.build_state, self.build_message = "failed", f"map build failed: {exc}"

    async def close(self) -> None:
        if self.recorder is not None:
            await self.stop()
        if self._build_task is not None and not self._build_task.done():
            await asyncio.gather(self._build_task, return_exceptions=True)  # finish the map write

    def status(self) -> dict:
        return {"recording": self.name, "frames": self.recorder.frames_kept if self.recorder else None,
                "last_saved": self.last_saved, "stopped": self.stopped_reason,
                "build": {"state": self.build_state, "message": self.build_message, "report": self.build_report}}
