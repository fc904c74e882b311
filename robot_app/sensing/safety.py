"""Safety envelope: conditions under which the robot must not drive on its own (``[safety]``).

Checked by the control loop every tick from the drivers' latest readings:

- battery below ``battery_floor_v`` (BaseStatus.battery_v);
- tilt above ``max_tilt_deg`` for ``tilt_s``: angle between the measured specific force and the body z
  axis, from the IMU accelerometer (REP-103 body frame: z up, so a level robot at rest reads
  (0, 0, +g)); only quasi-static samples count (|a| within 10 % of g), since accelerating and turning
  tip the measured vector without tipping the robot;
- wheel driver fault, or total drive current above ``max_drive_current_a`` (a stalled wheel) for
  longer than ``stall_s``;
- outside the geofence: farther than ``geofence_margin_m`` from every node of the route map;
- the MCU's hardware e-stop loop open.

A fault stops autonomy (the active route ends, commands are zero while it lasts) and is shown on every
screen; it is never cleared by itself into motion: the operator starts a new route. Geofence and
battery faults still let the operator drive on the gamepad (to bring the robot back onto the map or to
its charger); the others stop all motion.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from firmware_bridge.readings import BaseStatus, GpsFix, ImuReading, WheelFeedback


@dataclass(frozen=True)
class Fault:
    kind: str      # battery, tilt, stall, driver-fault, geofence, hardware-estop
    message: str


class SafetyMonitor:
    def __init__(self, cfg):
        self.cfg = cfg
        self._over_current_since: float | None = None
        self._tilt_since: float | None = None
        self._fence_xy: np.ndarray | None = None
        self._fence_zone = None

    def set_geofence(self, lat_deg, lon_deg) -> None:
        """Fence = the route map's nodes (their positions); None/empty disables it."""
        import utm

        lat = np.asarray(lat_deg, dtype=np.float64)
        lon = np.asarray(lon_deg, dtype=np.float64)
        if lat.size == 0:
            self._fence_xy = None
            return
        _, _, z, letter = utm.from_latlon(float(lat[0]), float(lon[0]))
        e, n, _, _ = utm.from_latlon(lat, lon, force_zone_number=z, force_zone_letter=letter)
        self._fence_xy, self._fence_zone = np.stack([e, n], axis=1), (z, letter)

    def check(self, base, *, now: float | None = None, gps=None, imu=None) -> Fault | None:
        """The first fault found in the latest readings, or None. ``gps`` / ``imu`` are the drivers those
        readings come from (default: the base)."""
        now = time.monotonic() if now is None else now
        c = self.cfg
        if base is None:
            return None
        st = base.latest(BaseStatus, max_age_s=5.0)
        if st is not None:
            if st.estop_stopped:
                return Fault("hardware-estop", "the hardware e-stop is engaged")
            if st.battery_v < c.battery_floor_v:
                return Fault("battery", f"battery {st.battery_v:.1f} V is below the floor {c.battery_floor_v:.1f} V")
            if st.drive_current_a > c.max_drive_current_a:
                self._over_current_since = self._over_current_since or now
                if now - self._over_current_since >= c.stall_s:
                    return Fault("stall", f"drive current {st.drive_current_a:.1f} A above "
                                          f"{c.max_drive_current_a:.1f} A for {c.stall_s:.1f} s (stalled wheel?)")
            else:
                self._over_current_since = None
        fb = base.latest(WheelFeedback, max_age_s=1.0)
        if fb is not None and (fb.left.fault or fb.right.fault):
            return Fault("driver-fault", "a wheel motor driver reports a fault")
        imu = (imu or base).latest(ImuReading, max_age_s=1.0)
        if imu is not None and imu.linear_acceleration_mps2 is not None:
            ax, ay, az = imu.linear_acceleration_mps2
            norm = math.sqrt(ax * ax + ay * ay + az * az)
            if abs(norm - 9.80665) < 0.98:  # quasi-static: the vector is gravity
                tilt = math.degrees(math.acos(max(-1.0, min(1.0, az / norm))))
                if tilt > c.max_tilt_deg:
                    self._tilt_since = self._tilt_since if self._tilt_since is not None else now
                    if now - self._tilt_since >= c.tilt_s:
                        return Fault("tilt", f"tilt {tilt:.0f} deg above {c.max_tilt_deg:.0f} deg")
                else:
                    self._tilt_since = None
        if self._fence_xy is not None:
            fix = (gps or base).latest(GpsFix, max_age_s=5.0)
            if fix is not None:
                import utm

                e, n, _, _ = utm.from_latlon(fix.latitude_deg, fix.longitude_deg,
                                             force_zone_number=self._fence_zone[0],
                                             force_zone_letter=self._fence_zone[1])
                d = float(np.min(np.hypot(self._fence_xy[:, 0] - e, self._fence_xy[:, 1] - n)))
                if d > c.geofence_margin_m:
                    return Fault("geofence", f"{d:.0f} m from the map (geofence margin {c.geofence_margin_m:.0f} m)")
        return None
