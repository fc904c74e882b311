"""``robot-app run``: the one onboard process systemd starts at boot.

Components (each supervised, restarted with backoff, the robot stopped while one is down):

- ``base``: the Jackal MCU driver (``firmware_bridge``; it reconnects by itself and sends tx-stop /
  MODE_NONE when closed); ``gps`` / ``imu`` drivers when configured on their own ports;
- ``control``: the drive loop at ``[robot] control_rate_hz``: reads only the command multiplexer
  (:class:`robot_app.commands.CommandMux`: STOP over teleop over autonomy, each slot stale after
  ``[robot] cmd_timeout_s``) and forwards the winning command to the base; with no live slot, or a
  safety fault, the base is cut to zero on that tick (``halt``, not ramped); its heartbeat gates the
  systemd watchdog;
- ``status``: once a second, device and model state to systemd (``STATUS=``) and the log.

After any start the robot is idle: nothing resumes a route on its own. SIGTERM / SIGINT stop the robot
(zero velocity, then MODE_NONE as the base driver closes) and exit 0 within 5 s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import signal
import time

import utm

from firmware_bridge.factory import drivers_from_config
from firmware_bridge.readings import BaseStatus, GpsFix
from robot_app.commands import Command, CommandMux, Source
from robot_app.interfaces import Sensors
from robot_app.jobs.mission import MissionExecutive
from robot_app.jobs.task_jobs import TaskJobs
from robot_app.mapping.recording import RecordingService
from robot_app.sensing.camera import Camera
from robot_app.sensing.safety import SafetyMonitor
from robot_app.sensing.state_estimation import EstimatorComponent
from robot_app.service.models import ModelRegistry, check_model_policy
from robot_app.service.sdnotify import Notifier, watchdog_interval_s
from robot_app.service.supervisor import Supervisor
from robot_app.service.teleop import TeleopComponent
from robot_app.service.warmup import WarmUp, default_steps, search_kernels_status, use_search_kernels
from robot_app.ui.server import UiServer, build_app

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 4.0
#: safety faults an operator holding the deadman may still drive through (to get the robot back onto
#: the map or to the charger); tilt, stall, motor faults and the hardware e-stop stop everything
TELEOP_THROUGH = frozenset({"geofence", "battery"})


class DriverComponent:
    """Runs one ``firmware_bridge`` driver for the supervisor (start, stay up, close on cancel)."""

    def __init__(self, name: str, driver):
        self.name = name
        self.driver = driver

    async def run(self) -> None:
        await self.driver.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.driver.close()


class ControlLoop:
    """Fixed-rate drive loop: the multiplexer's winning command to the base, an unramped zero otherwise."""

    name = "control"

    def __init__(self, app: "App"):
        self.app = app
        self.heartbeat_mono_s = -math.inf
        self.halts = 0  # ticks on which the base was cut to zero (no live command or a fault)

    def tick(self, now: float) -> Command | None:
        """One control period: safety check, then the command the base gets (None: cut to zero)."""
        cmd = self.app.commands.select(now)
        base = self.app.base
        fault = self.app.safety.check(base, now=now, gps=self.app.gps, imu=self.app.imu)
        if (fault and fault.kind) != (self.app.fault and self.app.fault.kind):
            self.app.on_fault(fault)
        elif fault is not None:
            self.app.fault = fault  # same kind, fresh figures for the screen
        if fault is not None and not (cmd is not None and cmd.source == "teleop" and fault.kind in TELEOP_THROUGH):
            cmd = None
        if cmd is not None and cmd.source == "stop":
            cmd = None  # STOP: the base's e-stop latch holds zero as well
        if base is not None and base.connected and not base.estop_latched:
            if cmd is None:
                base.halt()
                self.halts += 1
            else:
                base.set_velocity(cmd.v_mps, cmd.omega_radps)
        return cmd

    async def run(self) -> None:
        period = 1.0 / self.app.config.robot.control_rate_hz
        next_t = time.monotonic()
        while True:
            now = time.monotonic()
            self.tick(now)
            self.heartbeat_mono_s = now
            next_t += period
            delay = next_t - time.monotonic()
            if delay < -period:  # fell behind (e.g. a debugger): do not try to catch up
                next_t = time.monotonic()
                delay = 0.0
            await asyncio.sleep(max(delay, 0.0))


class StatusReporter:
    """Device, model and component state to systemd and the log; watchdog pings while control runs."""

    name = "status"

    def __init__(self, app: "App"):
        self.app = app

    def text(self) -> str:
        base = self.app.base
        link = "MCU link up" if base is not None and base.connected else "MCU link DOWN"
        if base is not None and base.estop_latched:
            link += ", e-stop latched"
        models = self.app.models
        missing = [k for k, v in models.items() if v != "installed"]
        return f"{link}; models missing: {', '.join(missing) or 'none'}; {self.app.supervisor.summary()}"

    async def run(self) -> None:
        wd = watchdog_interval_s()
        last_status = 0.0
        while True:
            now = time.monotonic()
            if now - last_status >= 1.0:
                self.app.notifier.status(self.text())
                last_status = now
            if wd is not None and now - self.app.control.heartbeat_mono_s < 1.0:
                self.app.notifier.watchdog()
            await asyncio.sleep(min(wd or 1.0, 1.0))


def _open_camera(config, drivers):
    """The camera ``[camera] source`` names: None for "none", the simulated one for "sim" (the ``sim``
    extra: pybullet renders it, imported only then), the ``ros2`` backend's camera topic for "ros2", else
    a V4L2 / GStreamer device."""
    if config.camera.source == "none":
        return None
    if config.camera.source == "ros2":
        from robot_app.sensing.ros2_camera import Ros2CameraComponent

        return Ros2CameraComponent(drivers["ros2_camera"])
    if config.camera.source == "sim":
        from robot_app.sim.camera import SimCamera  # optional extra (pybullet)

        return SimCamera(config.camera, sim=config.sim)
    return Camera(config.camera)


class App:
    """The onboard process. ``await App(config).run()`` returns the exit status."""

    def __init__(self, config):
        check_model_policy(config)
        self.config = config
        self.notifier = Notifier()
        #: the models: inventory at start, runtimes opened on first use (robot_app.service.models)
        self.registry = ModelRegistry(config)
        self.models = self.registry.inventory
        robot = config.robot
        #: the only place motion commands go (STOP over teleop over autonomy); the control loop reads it
        self.commands = CommandMux({Source.AUTONOMY: robot.cmd_timeout_s, Source.TELEOP: robot.cmd_timeout_s})
        self.drivers = drivers_from_config(config.serial, config.robot, config.ros2,
                                           camera=config.camera.source == "ros2")
        base = self.drivers.get("base")
        serial = config.serial
        # ros2 backend: GPS and IMU come from their own topics' drivers only (none when the topic is unset)
        fallback = base if config.robot.backend == "serial" else None
        #: what the components read: drivers, camera, the fused pose (robot_app.interfaces.Sensors)
        self.sensors = Sensors(
            base=base,
            gps=None if serial.gps_source == "none" else (self.drivers.get("gps") or fallback),
            imu=None if serial.imu_source == "none" else (self.drivers.get("imu") or fallback),
            camera=_open_camera(config, self.drivers))
        self.control = ControlLoop(self)
        self.supervisor = Supervisor(on_down=self._on_component_down)
        self.safety = SafetyMonitor(config.safety)
        self.fault = None
        self.mission = MissionExecutive(config, self.sensors, self.commands, self.registry, safety=self.safety,
                                        fault=lambda: self.fault)
        self.recording = RecordingService(config, self.sensors, self.commands, self.mission)
        self.tasks = TaskJobs(config, self.sensors, self.registry, self.mission)
        self.mission.on_stop.append(self.tasks.stop)  # STOP ends a running task job too
        #: the touchscreen API's session token: [ui] token, else a new random one per start (robot_app.ui.server)
        self.ui_token = config.ui.token or secrets.token_urlsafe(32)
        self.ui = None
        if config.ui.enabled:
            build_app(self)  # refuse unsafe [ui] settings at start, not in the component's restart loop
            self.ui = UiServer(self)
        self._stop = asyncio.Event()
        #: the walk-search kernels: compiled for this CPU ([paths] kernels_dir) or numba's JIT (core.search)
        self.search_kernels = use_search_kernels(config)
        #: the planning stack, loaded in a worker thread right after READY (robot_app.service.warmup)
        self.warmup = WarmUp(default_steps(config))

    @property
    def command(self) -> Command:
        """What drives the robot now (read-only; sources write :attr:`commands`)."""
        return self.commands.current

    @property
    def base(self):
        """The base MCU driver (``sensors.base``), None without one."""
        return self.sensors.base

    @property
    def gps(self):
        """The driver GPS fixes come from (``sensors.gps``): the separate receiver (``[serial] gps_source =
        "serial"``) or the base MCU (its ``navsat/nmea_sentence`` topic); None with ``gps_source = "none"``."""
        return self.sensors.gps

    @property
    def imu(self):
        """The driver IMU readings come from (``sensors.imu``): the Microstrain or the base MCU."""
        return self.sensors.imu

    @property
    def camera(self):
        """The camera (``sensors.camera``), None with ``[camera] source = "none"``."""
        return self.sensors.camera

    @property
    def pose(self):
        """The state estimator's fused pose (``sensors.pose``), None while it has no fresh estimate."""
        return self.sensors.pose

    def on_fault(self, fault) -> None:
        """A safety fault appeared (or cleared): a running route ends; commands are zero meanwhile."""
        self.fault = fault
        if fault is None:
            log.info("safety: clear")
            return
        log.warning("safety: %s", fault.message)
        self.mission.abort(f"safety: {fault.message}")

    def status_dict(self) -> dict:
        """Everything the status screen shows, JSON-ready."""
        base = self.base
        cmd = self.command
        out = {"mcu_link": bool(base is not None and base.connected),
               "estop_latched": bool(base is not None and base.estop_latched),
               "models": self.models, "components": {n: s.state for n, s in self.supervisor.states.items()},
               "mission": self.mission.status(), "recording": self.recording.status(),
               "task": self.tasks.status(), "warm_up": self.warmup.status(),
               "search_kernels": search_kernels_status(),
               "safety": None if self.fault is None else {"kind": self.fault.kind, "message": self.fault.message},
               "camera": None if self.camera is None else {
                   "frames": self.camera.frames_read,
                   "age_s": None if self.camera.latest is None else time.monotonic() - self.camera.latest.t_mono_s},
               "command": {"v_mps": cmd.v_mps, "omega_radps": cmd.omega_radps, "source": cmd.source,
                           "sender": cmd.sender}}
        pose = self.pose  # state estimation (UTM metres, yaw rad CCW from east)
        out["pose"] = None if pose is None else {"x_m": pose.x_m, "y_m": pose.y_m, "yaw_rad": pose.yaw_rad,
                                                 "v_mps": pose.v_mps, "utm_zone": list(pose.utm_zone),
                                                 "yaw_known": pose.yaw_known}
        st = base.latest(BaseStatus, max_age_s=5.0) if base is not None else None
        out["battery_v"] = st.battery_v if st is not None and math.isfinite(st.battery_v) else None
        out["hardware_estop"] = bool(st.estop_stopped) if st is not None else None
        gps = self.gps
        fix = gps.latest(GpsFix, max_age_s=self.config.serial.gps_max_age_s) if gps is not None else None
        if fix is not None and self.mission.map_zone is not None:  # for the map screen
            z, band = self.mission.map_zone
            e, n, _, _ = utm.from_latlon(fix.latitude_deg, fix.longitude_deg, force_zone_number=z,
                                         force_zone_letter=band)
            out["robot_utm_m"] = [float(e), float(n)]
        out["gps"] = None if fix is None else {"lat_deg": fix.latitude_deg, "lon_deg": fix.longitude_deg,
                                                "quality": fix.quality, "hdop": fix.hdop}
        return out

    async def _on_component_down(self, name: str, exc: BaseException) -> None:
        """A component failed: every command slot is emptied (the robot stops unless a source renews its
        slot, e.g. a navigator that is still running) and the supervisor restarts the component."""
        self.commands.clear()
        log.error("component %s down (%s): robot stopped", name, exc)

    def request_stop(self, reason: str = "stop requested") -> None:
        log.info("shutting down: %s", reason)
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        for name, state in self.models.items():
            fact = state == "installed" or state.startswith("bundled")  # a fallback is worth a warning
            (log.info if fact else log.warning)("model %s: %s", name, state)
        for name, drv in self.drivers.items():
            self.supervisor.start(DriverComponent(name, drv))
        self.supervisor.start(self.control)
        if self.config.estimation.enabled:
            self.supervisor.start(EstimatorComponent(self.config, self.drivers, self.sensors))
        if self.config.teleop.device:
            self.supervisor.start(TeleopComponent(self.config, self.commands, self.mission))
        if self.camera is not None:
            self.supervisor.start(self.camera)
        if self.ui is not None:
            self.supervisor.start(self.ui)
        reporter = StatusReporter(self)
        self.supervisor.start(reporter)
        # READY as soon as the process is up, even with a device missing: the UI shows the fault
        self.notifier.ready(reporter.text())
        log.info("robot-app running; robot idle")
        warm = asyncio.create_task(self.warmup.run(), name="warm-up")
        try:
            await self._stop.wait()
        finally:
            warm.cancel()
            await self._shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return 0

    async def _shutdown(self) -> None:
        self.notifier.stopping()
        await self.tasks.close()
        await self.mission.close()
        await self.recording.close()  # finish the current log and map writes
        await asyncio.to_thread(self.registry.close)
        self.commands.clear()
        if self.base is not None and self.base.connected:
            try:
                self.base.halt()  # zero now, not ramped (a latched e-stop already sends zero)
            except Exception:  # noqa: BLE001 - a failing port must not skip the rest of the shutdown
                log.exception("could not send the stop frame at shutdown")
        await self.supervisor.stop(timeout_s=SHUTDOWN_TIMEOUT_S)
        self.notifier.close()
        log.info("robot-app stopped")


async def announce_ui(app: App, *, with_token: bool) -> None:
    """Print the touchscreen's address once the UI listens: with the session token for a desk (``sim
    run``: no kiosk launcher passes it), else with where the kiosk reads the token (``robot-app run``: its
    output goes to the journal, which others may read)."""
    if app.ui is None:
        print("touchscreen: off ([ui] enabled = false)", flush=True)
        return
    while app.ui.port is None:
        await asyncio.sleep(0.1)
    cfg = app.config.ui
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
    url = f"http://{host}:{app.ui.port}/"
    if with_token:
        print(f"touchscreen: {url}#token={app.ui_token}", flush=True)
    elif cfg.auth == "pin":
        print(f"touchscreen: {url} (the operator types [ui] pin)", flush=True)
    else:
        where = f"in {cfg.secret_file}" if cfg.secret_file else "[ui] token"
        print(f"touchscreen: {url} (session token {where}; the kiosk passes it as #token=)", flush=True)


def run_app(config) -> int:
    """Entry point of ``robot-app run`` (blocking); prints the touchscreen's address once it listens."""

    async def main() -> int:
        app = App(config)
        announce = asyncio.ensure_future(announce_ui(app, with_token=False))
        try:
            return await app.run()
        finally:
            announce.cancel()

    return asyncio.run(main())
