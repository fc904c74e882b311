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
import secrets
import logging
import math
import signal
import time
from pathlib import Path

from robot_app.commands import Command, CommandMux, Source
from robot_app.service.sdnotify import Notifier, watchdog_interval_s
from robot_app.service.supervisor import Supervisor

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 4.0
#: safety faults an operator holding the deadman may still drive through (to get the robot back onto
#: the map or to the charger); tilt, stall, motor faults and the hardware e-stop stop everything
TELEOP_THROUGH = frozenset({"geofence", "battery"})


#: what each model's absence selects (DESIGN.md "fallbacks")
MODEL_FALLBACK = {"clip": "planning from an instruction refused; planning to a chosen node works",
                  "vnm": "GPS edges and GPS straight-line controller",
                  "text-embed": "LASP uses lexical similarity",
                  "llm": "rule-based landmark parser; LASP offline diagnoser"}


def model_inventory(config) -> dict[str, str]:
    """Which model files are installed and usable, and which fallback each missing or unusable one selects
    (DESIGN.md); a damaged file (sha256 unlike its sidecar's, a GGUF without its magic) counts as unusable."""
    d = Path(config.paths.models_dir)
    m = config.models
    files = {"clip": [m.clip_image_file, m.clip_text_file], "vnm": [m.vnm_file], "text-embed": [m.text_embed_file],
             "llm": [config.llm.model_file]}
    fallback = MODEL_FALLBACK
    out = {}
    for name, names in files.items():
        missing = [f for f in names if not (d / f).is_file()]
        if missing:
            out[name] = f"missing ({', '.join(missing)}): {fallback[name]}"
            continue
        problem = next((p for p in (_model_file_problem(d / f) for f in names) if p), None)
        out[name] = "installed" if problem is None else f"unusable ({problem}): {fallback[name]}"
    return out


class ModelPolicyError(RuntimeError):
    """The installed models must not run with this configuration (SIM-ONLY stand-ins on a real camera)."""


def sim_only_models(config) -> list[str]:
    """File names of the installed CLIP and VNM files whose sidecar says ``sim_only`` (the stand-ins of
    ``robot-app models train-sim``); files that are missing or unreadable are left to :func:`model_inventory`."""
    from models.sidecar import ModelError, read_sidecar

    d = Path(config.paths.models_dir)
    m = config.models
    out = []
    for name in (m.clip_image_file, m.clip_text_file, m.vnm_file):
        if not (d / name).is_file():
            continue
        try:  # params only: model_inventory already hashes every installed file at start
            sc = read_sidecar(d / name, verify=False)
        except ModelError:
            continue
        if sc.params.get("sim_only", False):
            out.append(name)
    return out


def check_model_policy(config) -> None:
    """Refuse SIM-ONLY stand-in models with a real camera (anything but ``[camera] source = "none"`` or
    ``"sim"``): their groundings and waypoints mean nothing on real images, and the VNM would drive.

    Raises
    ------
    ModelPolicyError
        One line naming the files, the folder and the two ways out.
    """
    if config.camera.source in ("none", "sim"):
        return
    sim = sim_only_models(config)
    if sim:
        raise ModelPolicyError(
            f"[paths] models_dir {config.paths.models_dir} holds SIM-ONLY stand-in models ({', '.join(sim)}) and "
            f"[camera] source = {config.camera.source!r} is a real camera: install real models there "
            f"(robot-app models export-*) or set [camera] source = \"sim\"")


def _model_file_problem(path: Path) -> str | None:
    """Why an installed model file cannot be used, or None: an ONNX file must match its sidecar (sha256,
    ``models.sidecar.read_sidecar``, as the runtimes check when they open it), a GGUF file must start with
    the GGUF magic (llama.cpp's file format)."""
    from models.sidecar import ModelError, read_sidecar

    if path.suffix == ".onnx":
        try:
            read_sidecar(path)
        except ModelError as exc:
            return str(exc)
    elif path.suffix == ".gguf":
        try:
            with open(path, "rb") as fh:
                magic = fh.read(4)
        except OSError as exc:
            return f"{path}: unreadable: {exc}"
        if magic != b"GGUF":
            return f"{path}: not a GGUF file (no GGUF magic)"
    return None


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


class App:
    """The onboard process. ``await App(config).run()`` returns the exit status."""

    def __init__(self, config):
        from firmware_bridge.factory import drivers_from_config

        check_model_policy(config)
        self.config = config
        self.notifier = Notifier()
        self.models = model_inventory(config)
        robot = config.robot
        #: the only place motion commands go (STOP over teleop over autonomy); the control loop reads it
        self.commands = CommandMux({Source.AUTONOMY: robot.cmd_timeout_s, Source.TELEOP: robot.cmd_timeout_s})
        self.pose = None  # robot_app.state_estimation.Pose while the estimator has a fresh GPS fix
        self.drivers = drivers_from_config(config.serial, config.robot)
        self.base = self.drivers.get("base")
        self.control = ControlLoop(self)
        self.supervisor = Supervisor(on_down=self._on_component_down)
        from robot_app.mission import MissionExecutive

        self.mission = MissionExecutive(self)
        from robot_app.recording import RecordingService
        from robot_app.safety import SafetyMonitor

        self.safety = SafetyMonitor(config.safety)
        self.fault = None

        self.recording = RecordingService(self)
        from robot_app.task_jobs import TaskJobs

        self.tasks = TaskJobs(self)
        self.camera = None
        if config.camera.source == "sim":  # rendered from the simulated world's robot pose (extra sim)
            from robot_app.sim.camera import SimCamera

            self.camera = SimCamera(config.camera, sim=config.sim)
        elif config.camera.source != "none":
            from robot_app.camera import Camera

            self.camera = Camera(config.camera)
        #: the touchscreen API's session token: [ui] token, else a new random one per start (robot_app.ui.server)
        self.ui_token = config.ui.token or secrets.token_urlsafe(32)
        self.ui = None
        if config.ui.enabled:
            from robot_app.ui.server import UiServer, build_app

            build_app(self)  # refuse unsafe [ui] settings at start, not in the component's restart loop
            self.ui = UiServer(self)
        import threading

        self._llm = None
        self._llm_failed = False
        self._vnm = None
        self._vnm_failed = False
        self._clip = None
        self._clip_failed = False
        self._llm_lock = threading.Lock()
        self._stop = asyncio.Event()

    @property
    def command(self) -> Command:
        """What drives the robot now (read-only; sources write :attr:`commands`)."""
        return self.commands.current

    @property
    def gps(self):
        """The driver GPS fixes come from: the separate receiver (``[serial] gps_source = "serial"``) or the
        base MCU (its ``navsat/nmea_sentence`` topic); None with ``gps_source = "none"``."""
        if self.config.serial.gps_source == "none":
            return None
        return self.drivers.get("gps") or self.base

    @property
    def imu(self):
        """The driver IMU readings come from: the Microstrain (``imu_source = "mip"``) or the base MCU."""
        if self.config.serial.imu_source == "none":
            return None
        return self.drivers.get("imu") or self.base

    def on_fault(self, fault) -> None:
        """A safety fault appeared (or cleared): a running route ends; commands are zero meanwhile."""
        self.fault = fault
        if fault is None:
            log.info("safety: clear")
            return
        log.warning("safety: %s", fault.message)
        self.mission.abort(f"safety: {fault.message}")

    def shared_llm(self):
        """The one LLM of the process (llama.cpp in its worker process), opened on first use; None when
        no model is installed or it cannot be opened (the rule-based parser then takes over)."""
        if self._llm is None and not self._llm_failed and self.models.get("llm") == "installed":
            with self._llm_lock:
                if self._llm is None and not self._llm_failed:
                    from models.llm import LlmError
                    from robot_app.landmark_parsing import open_configured_llm

                    try:
                        self._llm = open_configured_llm(self.config)
                    except LlmError as exc:
                        self._llm_failed = True
                        log.warning("LLM not usable (%s): rule-based landmark parser", exc)
        return self._llm

    def clip_model(self):
        """The CLIP runtime, opened on first use; None when not installed or unusable."""
        if self._clip is None and not self._clip_failed and self.models.get("clip") == "installed":
            from models.clip import open_clip_model
            from models.sidecar import ModelError

            try:
                self._clip = open_clip_model(self.config.paths.models_dir, config=self.config)
            except ModelError as exc:
                self._clip_failed = True
                self.models["clip"] = f"failed to load ({exc}): {MODEL_FALLBACK['clip']}"
                log.warning("CLIP not usable (%s)", exc)
        return self._clip

    def vnm_model(self):
        """The VNM runtime, opened on first use; None when not installed or unusable (GPS mode)."""
        if self._vnm is None and not self._vnm_failed and self.models.get("vnm") == "installed":
            from models.sidecar import ModelError
            from models.vnm import open_vnm

            try:
                self._vnm = open_vnm(self.config.paths.models_dir, config=self.config)
            except ModelError as exc:
                self._vnm_failed = True
                self.models["vnm"] = f"failed to load ({exc}): {MODEL_FALLBACK['vnm']}"
                log.warning("VNM not usable (%s): GPS navigation", exc)
        return self._vnm

    def status_dict(self) -> dict:
        """Everything the status screen shows, JSON-ready."""
        from firmware_bridge.readings import BaseStatus, GpsFix

        base = self.base
        cmd = self.command
        out = {"mcu_link": bool(base is not None and base.connected),
               "estop_latched": bool(base is not None and base.estop_latched),
               "models": self.models, "components": {n: s.state for n, s in self.supervisor.states.items()},
               "mission": self.mission.status(), "recording": self.recording.status(),
               "task": self.tasks.status(),
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
        out["battery_v"] = st.battery_v if st is not None else None
        out["hardware_estop"] = bool(st.estop_stopped) if st is not None else None
        gps = self.gps
        fix = gps.latest(GpsFix, max_age_s=self.config.serial.gps_max_age_s) if gps is not None else None
        if fix is not None and self.mission.map_zone is not None:  # for the map screen
            import utm

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
            (log.info if state == "installed" else log.warning)("model %s: %s", name, state)
        for name, drv in self.drivers.items():
            self.supervisor.start(DriverComponent(name, drv))
        self.supervisor.start(self.control)
        if self.config.estimation.enabled:
            from robot_app.state_estimation import EstimatorComponent

            self.supervisor.start(EstimatorComponent(self))
        if self.config.teleop.device:
            from robot_app.teleop import TeleopComponent

            self.supervisor.start(TeleopComponent(self))
        if self.camera is not None:
            self.supervisor.start(self.camera)
        if self.ui is not None:
            self.supervisor.start(self.ui)
        reporter = StatusReporter(self)
        self.supervisor.start(reporter)
        # READY as soon as the process is up, even with a device missing: the UI shows the fault
        self.notifier.ready(reporter.text())
        log.info("robot-app running; robot idle")
        try:
            await self._stop.wait()
        finally:
            await self._shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return 0

    async def _shutdown(self) -> None:
        self.notifier.stopping()
        await self.tasks.close()
        await self.mission.close()
        await self.recording.close()  # finish the current log and map writes
        if self._llm is not None:
            await asyncio.to_thread(self._llm.close)
        self.commands.clear()
        if self.base is not None and self.base.connected:
            try:
                self.base.halt()  # zero now, not ramped (a latched e-stop already sends zero)
            except Exception:  # noqa: BLE001 - a failing port must not skip the rest of the shutdown
                log.exception("could not send the stop frame at shutdown")
        await self.supervisor.stop(timeout_s=SHUTDOWN_TIMEOUT_S)
        self.notifier.close()
        log.info("robot-app stopped")


def run_app(config) -> int:
    """Entry point of ``robot-app run`` (blocking)."""
    return asyncio.run(App(config).run())
