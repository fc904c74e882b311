"""The ``sim`` camera backend: first-person frames rendered from the world plant's true pose.

:class:`SimCamera` has the interface of :class:`robot_app.sensing.camera.Camera` (``name``, ``run``,
``subscribe``, ``unsubscribe``, ``latest``, ``frames_read``) and publishes the same
:class:`robot_app.sensing.camera.Frame` objects, so the app cannot tell it from a real camera. It renders at
``[camera] fps`` in real time (a worker thread; frames dropped, never queued), at ``[camera]
width`` x ``height``, from the pose of the plant that moves the simulated robot. The renderer itself runs
in a child process (:class:`robot_app.sim.render_proc.RenderProcess`): pybullet keeps the interpreter lock
while it draws, and in this process it would stall the control loop.

That plant is found in a small process-wide registry: whoever creates the world plant for the device
simulators (:func:`world_plant_from_config`, ``robot-app sim devices --world``, or a test) registers it
with :func:`set_active_plant`; the camera looks it up when it starts. The camera and the simulators must
therefore run in the same process.
"""

from __future__ import annotations

import logging
import threading
import time

from robot_app.config import SimConfig
from robot_app.sensing.camera import CameraError, FramePublisher
from robot_app.sim.plant import WorldPlant
from robot_app.sim.world import load_world

__all__ = ["SimCamera", "set_active_plant", "active_plant", "world_plant_from_config"]

log = logging.getLogger(__name__)

_registry_lock = threading.Lock()
_active: list = []  # at most one WorldPlant: the one the device simulators step


def set_active_plant(plant) -> None:
    """Register ``plant`` (a :class:`~robot_app.sim.plant.WorldPlant`, or None to clear) for sim cameras."""
    with _registry_lock:
        _active.clear()
        if plant is not None:
            _active.append(plant)


def active_plant():
    """The registered world plant, or None."""
    with _registry_lock:
        return _active[0] if _active else None


def world_plant_from_config(config):
    """A :class:`~robot_app.sim.plant.WorldPlant` for ``[sim] world`` with the ``[robot]`` kinematics,
    registered as the active plant (the factory behind ``robot-app sim devices --world``).

    Raises
    ------
    robot_app.sim.world.WorldError
        If the world does not load.
    """
    plant = WorldPlant(load_world(config.sim.world), robot_radius_m=config.sim.robot_radius_m,
                       wheel_radius_m=config.robot.wheel_radius_m,
                       wheel_separation_m=config.robot.wheel_separation_m)
    set_active_plant(plant)
    return plant


class SimCamera(FramePublisher):
    """Supervised component (``name = "camera"``) rendering :class:`Frame` objects from a world plant.

    Parameters
    ----------
    cfg : robot_app.config.CameraConfig
        Resolution, rate and JPEG quality.
    sim : robot_app.config.SimConfig, optional
        Field of view, camera height, noise and seed (defaults if None).
    plant : WorldPlant, optional
        The plant to follow; default: the registered active plant at :meth:`run`.
    """

    name = "camera"

    def __init__(self, cfg, *, sim=None, plant=None) -> None:
        super().__init__()
        self.cfg, self.sim = cfg, sim or SimConfig()
        self.plant = plant

    async def run(self) -> None:
        """Render at ``cfg.fps`` until cancelled.

        Raises
        ------
        CameraError
            If no world plant is given or registered, or pybullet is missing.
        """
        plant = self.plant or active_plant()
        if plant is None:
            raise CameraError('[camera] source "sim": no simulated world runs in this process '
                              "(start the device simulators with a world in the same process)")
        def worker(stop: threading.Event, publish) -> None:
            try:
                from robot_app.sim.render_proc import RenderProcess

                ren = RenderProcess(plant.world, width=self.cfg.width, height=self.cfg.height,
                                    hfov_deg=self.sim.hfov_deg, camera_height_m=self.sim.camera_height_m,
                                    seed=self.sim.seed, noise_std=self.sim.image_noise)
            except Exception as exc:  # noqa: BLE001
                raise CameraError(f'[camera] source "sim": {exc}') from exc
            period = 1.0 / self.cfg.fps
            t_next = time.monotonic()
            try:
                while not stop.is_set():
                    st = plant.state()
                    t = time.monotonic()
                    publish(ren.render_jpeg(st.x_m, st.y_m, st.yaw_rad, index=self.frames_read,
                                            quality=self.cfg.jpeg_quality), t)
                    t_next = max(t_next + period, time.monotonic())
                    stop.wait(max(0.0, t_next - time.monotonic()))
            finally:
                ren.close()

        await self._run_worker(worker, "sim-camera")
