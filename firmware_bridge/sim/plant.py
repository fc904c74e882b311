"""The plant interface of the simulators: wheel commands in, true pose and motion out.

A simulator calls :meth:`Plant.step` at its own rate with the wheel speeds the MCU was commanded and
reads :meth:`Plant.state` to fill Feedback, IMU and GPS. :class:`KinematicPlant` is the trivial
differential-drive model the tests use; a simulated world (robot_app, extra ``sim``) implements the
same two methods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from firmware_bridge.kinematics import twist_to_wheels, wheels_to_twist

__all__ = ["PlantState", "Plant", "KinematicPlant", "wheels_to_twist", "twist_to_wheels"]


@dataclass(frozen=True)
class PlantState:
    """True state in a local ENU frame: position (m), yaw (rad, CCW from east), body velocities
    (m/s forward, rad/s CCW), wheel speeds (rad/s) and travel (rad), body acceleration (m/s^2,
    x forward, y left) for the IMU."""

    t_s: float
    x_m: float
    y_m: float
    yaw_rad: float
    v_mps: float
    omega_radps: float
    wheel_radps: tuple
    wheel_travel_rad: tuple
    accel_mps2: tuple = (0.0, 0.0)


class Plant(Protocol):
    """What a simulator needs from the physics."""

    def step(self, left_radps: float, right_radps: float, dt_s: float) -> None:
        """Advance by ``dt_s`` seconds with the commanded wheel speeds (rad/s)."""

    def state(self) -> PlantState:
        """The true state after the last step."""


class KinematicPlant:
    """Differential drive with first-order wheel response (time constant ``tau_s``; 0 = instant).

    Parameters
    ----------
    wheel_radius_m, wheel_separation_m : float
        Jackal defaults 0.098 m and 0.563 m (effective, jackal_control).
    tau_s : float
        Wheel speed time constant, s.
    """

    def __init__(self, *, wheel_radius_m: float = 0.098, wheel_separation_m: float = 0.563,
                 tau_s: float = 0.05) -> None:
        self.r, self.ws, self.tau = wheel_radius_m, wheel_separation_m, tau_s
        self._t = 0.0
        self._x = self._y = self._yaw = 0.0
        self._wheels = [0.0, 0.0]
        self._travel = [0.0, 0.0]
        self._v = self._w = 0.0
        self._acc = (0.0, 0.0)

    def step(self, left_radps: float, right_radps: float, dt_s: float) -> None:
        if dt_s <= 0:
            return
        k = 1.0 if self.tau <= 0 else 1.0 - math.exp(-dt_s / self.tau)
        for i, cmd in enumerate((left_radps, right_radps)):
            self._wheels[i] += k * (cmd - self._wheels[i])
            self._travel[i] += self._wheels[i] * dt_s
        v, w = wheels_to_twist(*self._wheels, wheel_radius_m=self.r, wheel_separation_m=self.ws)
        self._acc = ((v - self._v) / dt_s, v * w)  # tangential, centripetal
        mid = self._yaw + w * dt_s / 2.0
        self._x += v * math.cos(mid) * dt_s
        self._y += v * math.sin(mid) * dt_s
        self._yaw = math.atan2(math.sin(self._yaw + w * dt_s), math.cos(self._yaw + w * dt_s))
        self._v, self._w, self._t = v, w, self._t + dt_s

    def state(self) -> PlantState:
        return PlantState(self._t, self._x, self._y, self._yaw, self._v, self._w, tuple(self._wheels),
                          tuple(self._travel), self._acc)
