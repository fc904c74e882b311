"""The world plant: Jackal kinematics inside a world, with collisions and GPS effects.

:class:`WorldPlant` implements the bridge simulators' plant interface
(:class:`firmware_bridge.sim.plant.Plant`: ``step(left_radps, right_radps, dt_s)``, ``state()``) on top of
:class:`~firmware_bridge.sim.plant.KinematicPlant` (differential drive, first-order wheels). After each
step the robot's footprint (a disc of ``robot_radius_m``; Jackal: 508 x 430 mm -> half-diagonal 0.33 m,
Clearpath Jackal datasheet) is tested against the world's buildings (oriented rectangles) and objects
(discs of the catalogue's footprint radius times the object's ``scale``; drive-over objects have 0). A
step that would end in contact is undone: the robot stays at its last free pose, the wheels stop, the
IMU sees the bump as a deceleration, and a :class:`Collision` is recorded (``collisions``,
``last_collision``). Motion away from the obstacle is allowed again on the next step.

:class:`GpsView` is what the separate NMEA receiver sees: the true position plus a first-order
Gauss-Markov bias and white noise (typical of a consumer L1 receiver: ~1-2 m), and the world's
GPS dropout zones switch the receivers to no-fix sentences (:meth:`WorldPlant.attach`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import numpy as np

from firmware_bridge.sim.plant import KinematicPlant, PlantState
from robot_app.sim.world import World, object_footprint_m

__all__ = ["Collision", "WorldPlant", "GpsView", "obstacle_at"]

log = logging.getLogger(__name__)

JACKAL_RADIUS_M = 0.33  # half-diagonal of the 508 x 430 mm footprint (Clearpath Jackal datasheet)


@dataclass(frozen=True)
class Collision:
    """The robot touched ``name`` (``category``) at sim time ``t_s`` while at (x_m, y_m) ENU."""

    t_s: float
    name: str
    category: str
    x_m: float
    y_m: float


def _rect_distance(x: float, y: float, cx: float, cy: float, yaw: float, sx: float, sy: float) -> float:
    c, s = math.cos(yaw), math.sin(yaw)
    dx, dy = x - cx, y - cy
    u, v = abs(c * dx + s * dy) - sx / 2, abs(-s * dx + c * dy) - sy / 2
    return math.hypot(max(u, 0.0), max(v, 0.0)) if (u > 0 or v > 0) else max(u, v)


def obstacle_at(world: World, x_m: float, y_m: float, radius_m: float) -> tuple | None:
    """(name, category) of the first obstacle a disc of ``radius_m`` at (x, y) m touches, else None."""
    for b in world.buildings:
        if _rect_distance(x_m, y_m, b.center[0], b.center[1], b.yaw_rad, b.size_m[0], b.size_m[1]) < radius_m:
            return b.name, b.category
    for o in world.objects:
        r = object_footprint_m(o)
        if r > 0 and math.hypot(x_m - o.at[0], y_m - o.at[1]) < r + radius_m:
            return o.name, o.category
    return None


class WorldPlant(KinematicPlant):
    """Differential-drive Jackal in a world; see the module docstring.

    Parameters
    ----------
    world : World
        The loaded world (obstacles, GPS dropout zones, start pose).
    start : tuple, optional
        (x_m, y_m, yaw_rad) at t = 0; default the world's ``start``.
    robot_radius_m : float
        Collision radius of the robot, m.
    wheel_radius_m, wheel_separation_m, tau_s : float
        As :class:`~firmware_bridge.sim.plant.KinematicPlant`.

    Raises
    ------
    ValueError
        If the start pose is in contact with an obstacle.
    """

    def __init__(self, world: World, *, start: tuple | None = None, robot_radius_m: float = JACKAL_RADIUS_M,
                 wheel_radius_m: float = 0.098, wheel_separation_m: float = 0.563, tau_s: float = 0.05) -> None:
        super().__init__(wheel_radius_m=wheel_radius_m, wheel_separation_m=wheel_separation_m, tau_s=tau_s)
        self.world, self.robot_radius_m = world, float(robot_radius_m)
        x, y, yaw = world.start if start is None else start
        hit = obstacle_at(world, x, y, self.robot_radius_m)
        if hit is not None:
            raise ValueError(f"world {world.name!r}: start ({x:.2f}, {y:.2f}) m touches {hit[0]!r} ({hit[1]})")
        self._x, self._y, self._yaw = float(x), float(y), float(yaw)
        self.collisions: list[Collision] = []
        self.in_dropout = world.in_gps_dropout(self._x, self._y)
        self._receivers: list = []

    @property
    def last_collision(self) -> Collision | None:
        """The most recent collision, or None."""
        return self.collisions[-1] if self.collisions else None

    def teleport(self, x_m: float, y_m: float, yaw_rad: float) -> None:
        """Put the robot at a pose (stopped). Raises ValueError if that pose touches an obstacle."""
        hit = obstacle_at(self.world, x_m, y_m, self.robot_radius_m)
        if hit is not None:
            raise ValueError(f"pose ({x_m:.2f}, {y_m:.2f}) m touches {hit[0]!r} ({hit[1]})")
        self._x, self._y, self._yaw = float(x_m), float(y_m), float(yaw_rad)
        self._wheels, self._v, self._w, self._acc = [0.0, 0.0], 0.0, 0.0, (0.0, 0.0)

    def step(self, left_radps: float, right_radps: float, dt_s: float) -> None:
        """Advance ``dt_s`` s with the commanded wheel speeds (rad/s); a step into an obstacle is undone."""
        before = (self._x, self._y, self._yaw)
        v_before = self._v
        super().step(left_radps, right_radps, dt_s)
        hit = obstacle_at(self.world, self._x, self._y, self.robot_radius_m)
        if hit is not None:
            self._x, self._y, self._yaw = before
            self._wheels, self._v, self._w = [0.0, 0.0], 0.0, 0.0
            self._acc = (-v_before / dt_s if dt_s > 0 else 0.0, 0.0)
            if not self.collisions or self.collisions[-1].t_s < self._t - 0.5:  # one record per contact
                log.warning("collision with %s (%s) at (%.2f, %.2f) m", hit[0], hit[1], self._x, self._y)
                self.collisions.append(Collision(self._t, hit[0], hit[1], self._x, self._y))
            else:
                self.collisions[-1] = replace(self.collisions[-1], t_s=self._t)
        dz = self.world.in_gps_dropout(self._x, self._y)
        if dz != self.in_dropout:
            self.in_dropout = dz
            self._apply_dropout()

    # -- wiring to the bridge simulators ----------------------------------------------------------
    def attach(self, sims, *, gps_noise_m: float = 1.0, seed: int = 0) -> None:
        """Wire the world into a running-or-not :class:`firmware_bridge.sim.devices.SimulatedDevices`.

        The separate GPS receiver (if any, following a plant) then reports :class:`GpsView` positions
        (noise ``gps_noise_m``); both it and the MCU's NMEA pass-through send no-fix sentences while the
        robot is in a dropout zone. The MCU's own NMEA carries the true position (no noise).
        """
        self._receivers = [(sims.mcu, "gps_dropout")]
        gps = getattr(sims, "gps", None)
        if gps is not None and gps.plant is not None:
            gps.plant = GpsView(self, noise_m=gps_noise_m, seed=seed)
            self._receivers.append((gps, "dropout"))
        self._apply_dropout()

    def _apply_dropout(self) -> None:
        for sim, attr in self._receivers:
            setattr(sim, attr, self.in_dropout)


class GpsView:
    """A plant-like view of a plant whose position carries GPS error (metres, ENU).

    Error = first-order Gauss-Markov bias (std ``noise_m`` / 2 per axis, correlation time ``tau_s``)
    + white noise (std ``noise_m`` / 2 per axis), so the horizontal RMS error is ``noise_m``; updated at
    each :meth:`state` call from the plant's clock. A model of consumer GNSS error (Gauss-Markov position bias:
    e.g. Groves,
    "Principles of GNSS, Inertial, and Multisensor Integrated Navigation Systems", 2nd ed., Sec. 9.4).
    """

    def __init__(self, plant, *, noise_m: float = 1.0, tau_s: float = 60.0, seed: int = 0) -> None:
        if noise_m < 0 or tau_s <= 0:
            raise ValueError(f"GpsView: noise_m {noise_m} must be >= 0 and tau_s {tau_s} > 0")
        self.plant, self.noise_m, self.tau_s = plant, float(noise_m), float(tau_s)
        self._rng = np.random.default_rng(seed)
        self._sigma = self.noise_m / math.sqrt(2.0)
        self._bias = self._rng.normal(0.0, self._sigma / math.sqrt(2.0), 2) if noise_m > 0 else np.zeros(2)
        self._t = None

    def step(self, left_radps: float, right_radps: float, dt_s: float) -> None:
        """Not used: the owner of the plant steps it."""

    def error_m(self) -> np.ndarray:
        """Advance the error model to the plant's time; the current (east, north) error, m."""
        t = self.plant.state().t_s
        if self.noise_m > 0:
            dt = 0.0 if self._t is None else max(0.0, t - self._t)
            a = math.exp(-dt / self.tau_s)
            sb = self._sigma / math.sqrt(2.0)
            self._bias = a * self._bias + self._rng.normal(0.0, sb * math.sqrt(1 - a * a), 2)
            self._t = t
            return self._bias + self._rng.normal(0.0, self._sigma / math.sqrt(2.0), 2)
        return np.zeros(2)

    def state(self) -> PlantState:
        st = self.plant.state()
        e = self.error_m()
        return replace(st, x_m=st.x_m + float(e[0]), y_m=st.y_m + float(e[1]))
