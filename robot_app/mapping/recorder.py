"""The recorder job: what the robot saw and did while an operator drives it, into a traversal log.

Frames are subsampled to ``[mapping] frame_rate_hz`` (4 Hz, the VNM's rate) by capture time; every
GPS fix, IMU sample, odometry reading and command is kept. Storage and crash safety are
:class:`core.tlog.TraversalLogWriter`'s (commits at least once a second; a power cut loses at most
the last second). Readings are passed in by the app (drivers and camera), so the recorder never
touches a device.
"""

from __future__ import annotations

import logging
from pathlib import Path

from core.tlog import TraversalLogWriter

log = logging.getLogger(__name__)


class Recorder:
    """Writes one drive to ``folder``.

    Parameters
    ----------
    folder : log folder (created; an existing log is continued).
    frame_rate_hz : frames kept per second of capture time (> 0).
    metadata : extra log metadata (robot name, camera intrinsics, ...).
    """

    def __init__(self, folder: str | Path, *, frame_rate_hz: float = 4.0, metadata: dict | None = None):
        if not frame_rate_hz > 0:
            raise ValueError(f"frame_rate_hz: expected > 0, got {frame_rate_hz}")
        self.period_s = 1.0 / frame_rate_hz
        meta = {"source": "recorder", "frame_rate_hz": frame_rate_hz}
        meta.update(metadata or {})
        self.writer = TraversalLogWriter(folder, metadata=meta)
        self._next_frame_t = None
        self.frames_kept = 0
        self.frames_dropped = 0

    def on_frame(self, t_s: float, jpeg: bytes, *, t_utc_s: float | None = None) -> bool:
        """Offer a camera frame captured at monotonic time ``t_s``; returns whether it was kept."""
        if self._next_frame_t is not None and t_s < self._next_frame_t:
            self.frames_dropped += 1
            return False
        self.writer.add_frame(t_s, jpeg, t_utc_s=t_utc_s)
        # keep the nominal grid so jitter does not drift the rate, but never two frames closer than
        # 0.8 periods (the VNM's context assumes roughly even spacing)
        if self._next_frame_t is None or t_s - self._next_frame_t > self.period_s:
            self._next_frame_t = t_s + self.period_s
        else:
            self._next_frame_t = max(self._next_frame_t + self.period_s, t_s + 0.8 * self.period_s)
        self.frames_kept += 1
        return True

    def on_fix(self, t_s: float, lat_deg: float | None, lon_deg: float | None, *, quality: int,
               hacc_m: float | None = None, t_utc_s: float | None = None) -> None:
        self.writer.add_gps(t_s, lat_deg, lon_deg, quality=quality, hacc_m=hacc_m, t_utc_s=t_utc_s)

    def on_imu(self, t_s: float, accel_mps2, gyro_radps) -> None:
        self.writer.add_imu(t_s, accel_mps2, gyro_radps)

    def on_odom(self, t_s: float, x_m: float, y_m: float, yaw_rad: float, v_mps: float, omega_radps: float) -> None:
        self.writer.add_odom(t_s, x_m, y_m, yaw_rad, v_mps, omega_radps)

    def on_cmd(self, t_s: float, v_mps: float, omega_radps: float) -> None:
        self.writer.add_cmd(t_s, v_mps, omega_radps)

    def on_event(self, t_s: float, kind: str, detail: str = "") -> None:
        self.writer.add_event(t_s, kind, detail)

    def close(self) -> None:
        self.writer.close()
        log.info("recording closed: %d frames kept, %d dropped by the %.1f Hz rate",
                 self.frames_kept, self.frames_dropped, 1.0 / self.period_s)

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
