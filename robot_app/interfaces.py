"""The narrow interfaces the app hands its components (a leaf module: imports nothing of the project).

Components get what they use, not the whole :class:`robot_app.service.app.App`: the live
:class:`Sensors`, the command multiplexer (:class:`robot_app.commands.CommandMux`, the only place motion
commands go), the model registry (:class:`robot_app.service.models.ModelRegistry`) and the navigation
limits (:class:`robot_app.nav.policy.NavOptions`, built by :func:`robot_app.config.nav_options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Sensors:
    """The robot's live sensor sources. The app owns one, fills it at start and keeps ``pose`` current;
    components only read it.

    ``base``: the base MCU driver (:class:`firmware_bridge.jackal_base.JackalBase`: ``latest(kind,
    max_age_s)``, ``connected``, ``estop_latched``), None without one. ``gps`` / ``imu``: the drivers GPS
    fixes and IMU readings come from (the separate receiver / Microstrain, or the base MCU's topics), None
    when ``[serial] gps_source`` / ``imu_source`` is "none". ``camera``: :class:`robot_app.camera.Camera`
    or the simulated one (``latest``: the newest frame or None), None with ``[camera] source = "none"``.
    ``pose``: :class:`robot_app.state_estimation.Pose` (UTM metres, yaw rad CCW from east) while the state
    estimator has a fresh fused estimate, else None.
    """

    base: Any = None
    gps: Any = None
    imu: Any = None
    camera: Any = None
    pose: Any = None
