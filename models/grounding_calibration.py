"""The calibrated "not in the map" rule of a CLIP model pair: ``grounding-calibration.json`` in the models folder.

``robot-app models calibrate-grounding --write`` measures, on maps with known present and absent
landmarks, the threshold of the presence score (:mod:`core.presence`) and records it next to the model
files it was measured for::

    {
      "format": "robot-app-grounding-calibration", "format_version": 1,
      "statistic": "best - median_weight * median (core.presence)",
      "median_weight": 0.5, "threshold": 0.256,
      "clip_image_sha256": "<hex>", "clip_text_sha256": "<hex>",   # the sidecars' sha256 of the two towers
      "material": "...", "worlds": [...], "seed": 0,             # what it was measured on (free form)
      "figures": {...}, "calibrated_by": "robot-app models calibrate-grounding", "calibrated_utc": "..."
    }

:func:`read_presence_rule` returns the rule only for the model files it was made for: a file whose
recorded sha256 differs from the installed towers' (another export, an int8 tower) is ignored with a
warning, as ``planner-tuning.json`` is (:func:`robot_app.sim.tuned_planner`); the caller then falls back
to ``[models] landmark_min_cosine`` on the raw best cosine. Nothing here imports onnxruntime.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from core.presence import PresenceRule

log = logging.getLogger(__name__)

__all__ = ["CALIBRATION_FILE", "CALIBRATION_FORMAT", "read_presence_rule", "write_calibration", "tower_digests",
           "fallback_rule"]

#: File name of the calibration in a models folder.
CALIBRATION_FILE = "grounding-calibration.json"
CALIBRATION_FORMAT = "robot-app-grounding-calibration"

#: Cache of (path, mtime_ns, size, digests) -> rule or None, so that a stale file warns once, not at every plan.
_cache: dict = {}


def tower_digests(models_dir: str | os.PathLike, *, image_file: str = "clip-image.onnx",
                  text_file: str = "clip-text.onnx") -> dict:
    """``{"clip_image_sha256": str | None, "clip_text_sha256": str | None}``: the sha256 that the two
    towers' sidecars record (None where a sidecar is missing or unreadable)."""
    d = Path(models_dir)
    out = {}
    for key, name in (("clip_image_sha256", image_file), ("clip_text_sha256", text_file)):
        try:
            out[key] = str(json.loads((d / (name + ".json")).read_text(encoding="utf-8"))["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            out[key] = None
    return out


def fallback_rule(min_cosine: float) -> PresenceRule:
    """The uncalibrated rule: the raw best cosine against ``[models] landmark_min_cosine``.

    Raises
    ------
    ValueError
        ``min_cosine`` is not a finite number.
    """
    return PresenceRule(threshold=float(min_cosine), median_weight=0.0,
                        source="[models] landmark_min_cosine (not calibrated)", calibrated=False)


def read_presence_rule(models_dir: str | os.PathLike, *, image_file: str = "clip-image.onnx",
                       text_file: str = "clip-text.onnx") -> PresenceRule | None:
    """The calibrated rule in ``models_dir/`` :data:`CALIBRATION_FILE` for the installed CLIP towers, or None:
    no file, an unreadable one or one with a bad value (a warning says what), or one made for other model
    files (the recorded sha256 of either tower differs from its sidecar's; a warning says to re-run
    ``robot-app models calibrate-grounding --write``)."""
    d = Path(models_dir)
    f = d / CALIBRATION_FILE
    try:
        st = f.stat()
    except OSError:
        return None
    digests = tower_digests(d, image_file=image_file, text_file=text_file)
    key = (str(f.resolve()), st.st_mtime_ns, st.st_size, tuple(sorted(digests.items())))
    if key not in _cache:
        _cache.clear()  # one models folder in use at a time: keep the cache at one entry
        _cache[key] = _read(f, digests)
    return _cache[key]


def _read(f: Path, digests: dict) -> PresenceRule | None:
    fallback = "using [models] landmark_min_cosine on the raw best cosine"
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"not a {CALIBRATION_FORMAT} file")
        t, w = doc["threshold"], doc["median_weight"]
        if isinstance(t, bool) or isinstance(w, bool) or not isinstance(t, (int, float)) \
                or not isinstance(w, (int, float)) or not math.isfinite(t):
            raise ValueError(f"threshold {t!r} and median_weight {w!r} must be finite numbers")
        rule = PresenceRule(threshold=float(t), median_weight=float(w),
                            source=f"{f.name} (calibrated)", calibrated=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s: unreadable (%s); %s", f, exc, fallback)
        return None
    for key, tower in (("clip_image_sha256", "image"), ("clip_text_sha256", "text")):
        if doc.get(key) is None or doc.get(key) != digests[key]:
            log.warning("%s: calibrated for another CLIP %s tower than the one installed (sha256 %s, installed %s); "
                        "%s (re-run robot-app models calibrate-grounding --write)", f, tower,
                        str(doc.get(key))[:12], str(digests[key])[:12], fallback)
            return None
    return rule


def write_calibration(models_dir: str | os.PathLike, doc: dict, *, image_file: str = "clip-image.onnx",
                      text_file: str = "clip-text.onnx") -> Path:
    """Write ``doc`` (``threshold``, ``median_weight`` and what it was measured on) as
    ``models_dir/`` :data:`CALIBRATION_FILE`, adding the format and the towers' sha256; atomically (a
    temporary file, then a rename). Returns the file's path.

    Raises
    ------
    ValueError
        ``doc`` lacks a finite ``threshold`` or a ``median_weight`` in [0, 1], or a tower's sidecar is
        missing (nothing to tie the calibration to).
    OSError
        The folder is not writable.
    """
    PresenceRule(threshold=doc.get("threshold"), median_weight=doc.get("median_weight"))  # raises ValueError
    d = Path(models_dir)
    digests = tower_digests(d, image_file=image_file, text_file=text_file)
    missing = [k for k, v in digests.items() if v is None]
    if missing:
        raise ValueError(f"{d}: no readable sidecar for {', '.join(missing)}: cannot tie a calibration to the model")
    out = {"format": CALIBRATION_FORMAT, "format_version": 1, **doc, **digests}
    path = d / CALIBRATION_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
