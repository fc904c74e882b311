"""Differential-drive kinematics and command limits of the Jackal (jackal_control, REP-103 body frame).

Constants live in ``[robot]`` of the config (wheel radius 0.098 m, effective separation 0.563 m =
track 0.37559 m x wheel_separation_multiplier 1.5; limits 2.0 m/s, 20 m/s^2, 4.0 rad/s, 25 rad/s^2).
"""

from __future__ import annotations

import math

__all__ = ["twist_to_wheels", "wheels_to_twist", "VelocityLimiter"]


def twist_to_wheels(v_mps: float, omega_radps: float, *, wheel_radius_m: float,
                    wheel_separation_m: float) -> tuple[float, float]:
    """Differential drive inverse kinematics -> (left, right) wheel rad/s.

    ``omega_left = (v - omega * ws / 2) / r``, ``omega_right = (v + omega * ws / 2) / r``
    (jackal_control diff_drive_controller; ws is the effective separation; docs/protocols.md, "Kinematics and limits").
    """
    half = omega_radps * wheel_separation_m / 2.0
    return (v_mps - half) / wheel_radius_m, (v_mps + half) / wheel_radius_m


def wheels_to_twist(left_radps: float, right_radps: float, *, wheel_radius_m: float,
                    wheel_separation_m: float) -> tuple[float, float]:
    """Forward kinematics: (left, right) wheel rad/s -> (v m/s, omega rad/s)."""
    v = wheel_radius_m * (left_radps + right_radps) / 2.0
    return v, wheel_radius_m * (right_radps - left_radps) / wheel_separation_m


class VelocityLimiter:
    """Clip (v, omega) to speed limits, then limit the change per step to the acceleration limits
    (as diff_drive_controller's speed limiter does: velocity, then acceleration).

    Parameters
    ----------
    max_v_mps, max_omega_radps : float
        Speed limits (symmetric).
    max_accel_mps2, max_alpha_radps2 : float
        Acceleration limits (symmetric).
    """

    def __init__(self, *, max_v_mps: float, max_omega_radps: float, max_accel_mps2: float,
                 max_alpha_radps2: float) -> None:
        self.max_v, self.max_w = max_v_mps, max_omega_radps
        self.max_a, self.max_alpha = max_accel_mps2, max_alpha_radps2
        self.v = self.w = 0.0

    @staticmethod
    def _clip(x: float, lim: float) -> float:
        return max(-lim, min(lim, x))

    def step(self, v_mps: float, omega_radps: float, dt_s: float) -> tuple[float, float]:
        """Limited (v, omega) to send now, ``dt_s`` seconds after the previous step.

        Raises
        ------
        ValueError
            If a command is NaN or infinite.
        """
        if not (math.isfinite(v_mps) and math.isfinite(omega_radps)):
            raise ValueError(f"velocity command must be finite, got v={v_mps}, omega={omega_radps}")
        v = self._clip(v_mps, self.max_v)
        w = self._clip(omega_radps, self.max_w)
        dt = max(dt_s, 0.0)
        self.v += self._clip(v - self.v, self.max_a * dt)
        self.w += self._clip(w - self.w, self.max_alpha * dt)
        return self.v, self.w

    def reset(self) -> None:
        """Forget the last output (after an e-stop the robot is known to be stopped)."""
        self.v = self.w = 0.0
