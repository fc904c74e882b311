"""Import RECON-style HDF5 drives (the Jackal outdoor data used by ViNG and LM-Nav) as traversal logs.

One HDF5 file is one trajectory. Keys read (missing optional ones are skipped, missing required ones
are an error naming the key and file): ``images/rgb_left`` (T,) JPEG bytes (required),
``gps/latlong`` (T, 2) degrees (required), ``jackal/position`` (T, 3) m and ``jackal/yaw`` (T,) rad
(odometry), ``jackal/linear_velocity`` / ``jackal/angular_velocity`` (T,), ``commands/linear_velocity``
/ ``commands/angular_velocity`` (T,), ``collision/any`` (T,) bool. RECON files carry no time stamps:
sample k is taken at ``k / rate_hz`` seconds (``rate_hz`` default 3.0, the RECON data's control rate;
pass the right one for other data). A GPS row of (0, 0) or NaN is recorded as a no-fix sample.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from core.tlog import TraversalLogWriter, read_log

log = logging.getLogger(__name__)

REQUIRED = ("images/rgb_left", "gps/latlong")
DEFAULT_RATE_HZ = 3.0


class ReconFormatError(ValueError):
    """An HDF5 file lacks a required key or has inconsistent lengths."""


def _check_file(path: Path) -> int:
    """Validate one RECON file completely before anything is written; returns its sample count."""
    import h5py

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise ReconFormatError(f"{path}: not an HDF5 file ({exc})") from exc
    with h5:
        for key in REQUIRED:
            if key not in h5:
                raise ReconFormatError(f"{path}: missing key {key!r} (a RECON file has {', '.join(REQUIRED)})")
        n = len(h5["images/rgb_left"])
        shape = h5["gps/latlong"].shape
        if shape != (n, 2):
            raise ReconFormatError(f"{path}: gps/latlong has shape {shape}, expected ({n}, 2)")
        for k in OPTIONAL:
            if k in h5 and len(h5[k]) != n:
                raise ReconFormatError(f"{path}: {k} has {len(h5[k])} samples, images/rgb_left has {n}")
        for i in range(n):
            if bytes(np.asarray(h5["images/rgb_left"][i][:2]).tobytes()) != b"\xff\xd8":
                raise ReconFormatError(f"{path}: images/rgb_left[{i}] is not a JPEG")
    return n


OPTIONAL = ("jackal/position", "jackal/yaw", "jackal/linear_velocity", "jackal/angular_velocity",
            "commands/linear_velocity", "commands/angular_velocity", "collision/any")


def import_recon(files: Sequence[str | Path], out: str | Path, *, rate_hz: float = DEFAULT_RATE_HZ,
                 progress: Callable[[int], None] | None = None) -> dict:
    """Append the trajectories of ``files`` (in order) to the log folder ``out``.

    Every file is checked completely first, so a bad file writes nothing. Trajectories are placed one
    after another in log time, after anything the log already holds, with a 10 s gap between them (a
    gap longer than the map builder's epsilon, so no temporal edge joins two trajectories).

    Returns counts: ``{"files", "frames", "gps_fixes", "gps_no_fix"}``.

    Raises
    ------
    ReconFormatError
        Not HDF5, a missing key, unequal lengths, or a non-JPEG image (names the file and the sample).
    FileNotFoundError
        A file does not exist.
    """
    import h5py

    if not rate_hz > 0:
        raise ValueError(f"rate_hz: expected > 0, got {rate_hz}")
    paths = [Path(p) for p in files]
    for p in paths:
        _check_file(p)
    counts = {"files": 0, "frames": 0, "gps_fixes": 0, "gps_no_fix": 0}
    t0 = 0.0
    if (Path(out) / "log.sqlite").is_file():
        existing = read_log(out).frame_t_s
        if existing.size:
            t0 = float(existing.max()) + 10.0
    with TraversalLogWriter(out, metadata={"source": "recon-import", "frame_rate_hz": rate_hz}) as w:
        for path in paths:
            with h5py.File(path, "r") as h5:
                n = len(h5["images/rgb_left"])
                latlon = np.asarray(h5["gps/latlong"], dtype=np.float64)
                optional = {k: np.asarray(h5[k]) for k in OPTIONAL if k in h5}
                for i in range(n):
                    t = t0 + i / rate_hz
                    w.add_frame(t, bytes(np.asarray(h5["images/rgb_left"][i]).tobytes()))
                    lat, lon = latlon[i]
                    fix = np.isfinite(lat) and np.isfinite(lon) and not (lat == 0 and lon == 0)
                    w.add_gps(t, float(lat) if fix else None, float(lon) if fix else None, quality=1 if fix else 0)
                    counts["gps_fixes" if fix else "gps_no_fix"] += 1
                    if "jackal/position" in optional and "jackal/yaw" in optional:
                        pos = optional["jackal/position"][i]
                        v = float(optional.get("jackal/linear_velocity", np.zeros(n))[i])
                        om = float(optional.get("jackal/angular_velocity", np.zeros(n))[i])
                        w.add_odom(t, float(pos[0]), float(pos[1]), float(optional["jackal/yaw"][i]), v, om)
                    if "commands/linear_velocity" in optional:
                        om = optional.get("commands/angular_velocity", np.zeros(n))[i]
                        w.add_cmd(t, float(optional["commands/linear_velocity"][i]), float(om))
                    if "collision/any" in optional and bool(optional["collision/any"][i]):
                        w.add_event(t, "collision", path.name)
                    if progress:
                        progress(1)
                counts["frames"] += n
                counts["files"] += 1
                t0 += n / rate_hz + 10.0
    log.info("imported %s into %s", counts, out)
    return counts
