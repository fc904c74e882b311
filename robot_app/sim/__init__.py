"""The simulated Jackal world (extra ``sim``): world files, rendering, the world plant, the sim camera.

- :mod:`robot_app.sim.world`: the world file format, the landmark catalogue, loading and validation.
- :mod:`robot_app.sim.render`: first-person frames with pybullet's CPU TinyRenderer (headless).
- :mod:`robot_app.sim.plant`: :class:`WorldPlant`, the bridge simulators' plant with collisions and GPS
  effects (noise, dropout zones).
- :mod:`robot_app.sim.camera`: :class:`SimCamera`, the app's ``[camera] source = "sim"`` backend.
- :mod:`robot_app.sim.explore`: :func:`record_exploration`, a scripted drive on the simulation clock
  written as a traversal log.
- :mod:`robot_app.sim.views`, :mod:`robot_app.sim.train_vlm`: labelled views and the training of the
  sim-only stand-in VLM; :func:`shipped_models_dir` is where the trained sim models ship.

Names are imported lazily so ``import robot_app.sim`` does not load pybullet.
"""

from __future__ import annotations

import importlib
from pathlib import Path

_EXPORTS = {
    "World": "world", "WorldError": "world", "load_world": "world", "shipped_worlds": "world",
    "WorldRenderer": "render", "WorldPlant": "plant", "GpsView": "plant", "Collision": "plant",
    "SimCamera": "camera", "set_active_plant": "camera", "active_plant": "camera",
    "record_exploration": "explore", "ExplorationReport": "explore",
    "world_plant_from_config": "camera",
    "train_sim_vlm": "train_vlm",
}

__all__ = sorted([*_EXPORTS, "shipped_models_dir", "tuned_alpha", "tuned_planner", "TUNING_FILE",
                  "model_clip_crops", "SIM_VNM_NAV", "sim_nav_config"])

#: ``[vnm_nav]`` settings for the SIM-ONLY stand-in VNM, as ``eval sim`` and ``robot-app demo`` drive with
#: them. ``lost_steps`` 1000: no step is "lost" by its distance, the arg-min always localises, as in GNM's
#: deployment loop (visualnav-transformer navigate.py has no such threshold); the off-walk guard and the
#: judge's off-path limit stop a robot that lost the walk (the sim VNM rejects places it cannot reach, and
#: at a turn every node of the window is such a place for a few steps: stopping there left it standing
#: until it counted as lost). ``gps_at_turns_deg`` 50: GPS drives from 6 m before to 3 m after a turn
#: sharper than that (this VNM loses walks at junctions). Both chosen on the development drives
#: (robot_app.sim.vnm_devdrive, docs/experiments.md "Sim VNM"); 0 / off in the config, for real models.
SIM_VNM_NAV = {"lost_steps": 1000.0, "gps_at_turns_deg": 50.0, "max_off_walk_m": 4.0, "gps_approach_m": 3.0}
#: ``[models] vnm_max_v_mps`` of the sim VNM: its waypoints were trained at 1 m/s (robot_app.sim.train_vnm)
SIM_VNM_MAX_V_MPS = 1.0

#: File in a models folder that records the planner's alpha (and cosine cap) chosen for those models by
#: ``robot-app eval sim-tune --write`` (:mod:`robot_app.sim.eval_tune`).
TUNING_FILE = "planner-tuning.json"


def shipped_models_dir() -> Path:
    """The folder of the SIM-ONLY stand-in models shipped with the package (``robot_app/data/models/sim``).

    Point ``[paths] models_dir`` at it to run the app in the simulated world; the files are trained on
    renders of the shipped worlds and mean nothing on real camera images.
    """
    return Path(__file__).resolve().parents[1] / "data" / "models" / "sim"


def _model_digest(models_dir: Path, sidecar: str) -> str | None:
    import json

    try:
        return str(json.loads((models_dir / sidecar).read_text(encoding="utf-8"))["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_clip_crops(models_dir) -> int | None:
    """``[camera] clip_crops`` for a map embedded with the sim VLM in ``models_dir``: the number of square
    crops per frame its training views were cut as (``params.clip_crops`` of ``clip-image.onnx.json``,
    written by ``robot-app models train-sim``), or None where the sidecar records none (a real CLIP
    export, an older sim VLM) or cannot be read (the model loader reports that). ``robot-app eval sim``,
    ``eval sim-tune`` and ``demo`` build their maps with it; with None, ``eval`` keeps ``[camera]
    clip_crops`` and ``demo`` takes the centre crop.

    Raises
    ------
    ValueError
        The sidecar records a ``clip_crops`` that is not an integer in 1-8 (a map built with another
        number of crops than the model was trained on would plan worse, with no error).
    """
    import json

    path = Path(models_dir) / "clip-image.onnx.json"
    try:
        params = json.loads(path.read_text(encoding="utf-8"))["params"]
        if "clip_crops" not in params:
            return None
        n = params["clip_crops"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 8):
        raise ValueError(f"{path}: params.clip_crops: expected an integer 1-8 (the crops per frame the model "
                         f"was trained on), got {n!r}")
    return n


def tuned_planner(models_dir) -> dict | None:
    """The planner settings that ``robot-app eval sim-tune --write`` chose for the models in ``models_dir``
    (:data:`TUNING_FILE`): ``{"alpha": float, "max_cosine": float}`` (alpha per VNM time step; the
    grounding's cosine cap, 1 = off, also for a file that records no cap), or None when
    there is none, it is unreadable, a value is out of range, or it was chosen for other model files
    (the CLIP image encoder's or the VNM's sha256 differ; a warning says which).
    """
    import json
    import logging
    import math

    d = Path(models_dir)
    f = d / TUNING_FILE
    if not f.is_file():
        return None
    log = logging.getLogger(__name__)
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
        if isinstance(doc.get("alpha"), bool) or isinstance(doc.get("max_cosine"), bool):
            raise ValueError("alpha and max_cosine must be numbers, not true/false")
        alpha = float(doc["alpha"])
        cap = float(doc.get("max_cosine", 1.0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("%s: unreadable (%s); using [planner] alpha and max_cosine", f, exc)
        return None
    if not (math.isfinite(alpha) and alpha > 0):
        log.warning("%s: alpha %r is not a finite number > 0; using [planner] alpha and max_cosine", f,
                    doc.get("alpha"))
        return None
    if not (math.isfinite(cap) and -1.0 < cap <= 1.0):
        log.warning("%s: max_cosine %r is not in (-1, 1]; using [planner] alpha and max_cosine", f,
                    doc.get("max_cosine"))
        return None
    for key, sidecar in (("clip_image_sha256", "clip-image.onnx.json"), ("vnm_sha256", "vnm.onnx.json")):
        if doc.get(key) != _model_digest(d, sidecar):
            log.warning("%s: chosen for another %s than the one installed; using [planner] alpha and "
                        "max_cosine (re-run robot-app eval sim-tune --write)", f, sidecar.split(".")[0])
            return None
    return {"alpha": alpha, "max_cosine": cap}


def tuned_alpha(models_dir) -> float | None:
    """The alpha of :func:`tuned_planner` (None where that is None)."""
    t = tuned_planner(models_dir)
    return None if t is None else t["alpha"]


def sim_nav_config(config):
    """``config`` with the sim VNM's navigation settings (:data:`SIM_VNM_NAV`, :data:`SIM_VNM_MAX_V_MPS`)."""
    import dataclasses

    return dataclasses.replace(config, vnm_nav=dataclasses.replace(config.vnm_nav, **SIM_VNM_NAV),
                               models=dataclasses.replace(config.models, vnm_max_v_mps=SIM_VNM_MAX_V_MPS))


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"robot_app.sim.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'robot_app.sim' has no attribute {name!r}")
