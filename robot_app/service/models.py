"""The model registry: which model files are installed and usable, the policy on SIM-ONLY stand-ins, and
the one place the runtimes are opened (lazily, on first use, each at most once per process).

The runtimes (ONNX Runtime for CLIP and the VNM; llama.cpp, the ``llm`` extra, for the LLM) are loaded
when a model is first asked for: a process that never plans never pays for them. A model that is missing
or fails to load selects its fallback (docs/design.md, "Fallbacks"), and the inventory says so.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from models.clip import open_clip_model
from models.llm import LlmError
from models.sidecar import ModelError, read_sidecar
from models.vnm import open_vnm
from robot_app.route.landmark_parsing import open_configured_llm

log = logging.getLogger(__name__)


#: what each model's absence selects (docs/design.md, "Fallbacks")
MODEL_FALLBACK = {"clip": "planning from an instruction refused; planning to a chosen node works",
                  "vnm": "GPS edges and GPS straight-line controller",
                  "text-embed": "LASP uses lexical similarity",
                  "llm": "rule-based landmark parser; LASP offline diagnoser"}


def model_inventory(config) -> dict[str, str]:
    """Which model files are installed and usable, and which fallback each missing or unusable one selects
    (docs/design.md, "Fallbacks"); a damaged file (sha256 unlike its sidecar's, a GGUF without its magic) counts
    as unusable."""
    d = Path(config.paths.models_dir)
    m = config.models
    files = {"clip": [m.clip_image_file, m.clip_text_file], "vnm": [m.vnm_file], "text-embed": [m.text_embed_file],
             "llm": [config.llm.model_file]}
    fallback = MODEL_FALLBACK
    out = {}
    for name, names in files.items():
        missing = [f for f in names if not (d / f).is_file()]
        if missing and name == "text-embed" and _bundled_text_embed() is not None:
            out[name] = "bundled (the package's int8 all-MiniLM-L6-v2)"
            continue
        if missing:
            out[name] = f"missing ({', '.join(missing)}): {fallback[name]}"
            continue
        problem = next((p for p in (_model_file_problem(d / f) for f in names) if p), None)
        out[name] = "installed" if problem is None else f"unusable ({problem}): {fallback[name]}"
    return out


def _bundled_text_embed() -> Path | None:
    """The package's copy of the sentence embedding when it is there and its sidecar reads (else None)."""
    from models.text_embed import BUNDLED_DIR, DEFAULT_FILE

    path = BUNDLED_DIR / DEFAULT_FILE
    return path if _model_file_problem(path) is None and path.is_file() else None


class ModelPolicyError(RuntimeError):
    """The installed models must not run with this configuration (SIM-ONLY stand-ins on a real camera)."""


def sim_only_models(config) -> list[str]:
    """File names of the installed CLIP and VNM files whose sidecar says ``sim_only`` (the stand-ins of
    ``robot-app models train-sim``); files that are missing or unreadable are left to :func:`model_inventory`."""
    d = Path(config.paths.models_dir)
    m = config.models
    out = []
    for name in (m.clip_image_file, m.clip_text_file, m.vnm_file):
        if not (d / name).is_file():
            continue
        try:  # params only: model_inventory already hashes every installed file at start
            sc = read_sidecar(d / name, verify=False)
        except ModelError:
            continue
        if sc.params.get("sim_only", False):
            out.append(name)
    return out


def check_model_policy(config) -> None:
    """Refuse SIM-ONLY stand-in models with a real camera (anything but ``[camera] source = "none"`` or
    ``"sim"``): their groundings and waypoints mean nothing on real images, and the VNM would drive.

    Raises
    ------
    ModelPolicyError
        One line naming the files, the folder and the two ways out.
    """
    if config.camera.source in ("none", "sim"):
        return
    sim = sim_only_models(config)
    if sim:
        raise ModelPolicyError(
            f"[paths] models_dir {config.paths.models_dir} holds SIM-ONLY stand-in models ({', '.join(sim)}) and "
            f"[camera] source = {config.camera.source!r} is a real camera: install real models there "
            f"(robot-app models export-*) or set [camera] source = \"sim\"")


def _model_file_problem(path: Path) -> str | None:
    """Why an installed model file cannot be used, or None: an ONNX file must match its sidecar (sha256,
    ``models.sidecar.read_sidecar``, as the runtimes check when they open it), a GGUF file must start with
    the GGUF magic (llama.cpp's file format)."""
    if path.suffix == ".onnx":
        try:
            read_sidecar(path)
        except ModelError as exc:
            return str(exc)
    elif path.suffix == ".gguf":
        try:
            with open(path, "rb") as fh:
                magic = fh.read(4)
        except OSError as exc:
            return f"{path}: unreadable: {exc}"
        if magic != b"GGUF":
            return f"{path}: not a GGUF file (no GGUF magic)"
    return None


class ModelRegistry:
    """The process's models. ``inventory`` (name -> "installed" or what is missing or wrong and the fallback
    it selects) is filled at construction; :meth:`llm`, :meth:`clip` and :meth:`vnm` open a runtime on
    first use and return it, or None when it is not installed or cannot be opened (the inventory then says
    "failed to load" and the fallback). Thread-safe: planning asks from worker threads.
    """

    def __init__(self, config):
        self.config = config
        self.inventory = model_inventory(config)
        self._lock = threading.Lock()
        self._open: dict[str, object] = {}
        self._failed: set[str] = set()

    def _get(self, name: str, opener, fallback_note: str, errors=(ModelError,)):
        if name in self._open or name in self._failed or self.inventory.get(name) != "installed":
            return self._open.get(name)
        with self._lock:
            if name not in self._open and name not in self._failed:
                try:
                    self._open[name] = opener()
                except errors as exc:
                    self._failed.add(name)
                    self.inventory[name] = f"failed to load ({exc}): {MODEL_FALLBACK[name]}"
                    log.warning("%s not usable (%s)%s", name.upper(), exc, fallback_note)
        return self._open.get(name)

    def llm(self):
        """The one LLM of the process (:class:`models.llm.LlmProcess`, llama.cpp in its worker process), or
        None (the rule-based landmark parser and the offline diagnoser take over)."""
        return self._get("llm", lambda: open_configured_llm(self.config), ": rule-based landmark parser",
                         errors=(LlmError, ModelError))

    def clip(self):
        """The CLIP runtime (:class:`models.clip.ClipModel`), or None (planning from an instruction refused)."""
        return self._get("clip", lambda: open_clip_model(self.config.paths.models_dir, config=self.config), "")

    def vnm(self):
        """The VNM runtime (:class:`models.vnm.VnmModel`), or None (GPS navigation)."""
        return self._get("vnm", lambda: open_vnm(self.config.paths.models_dir, config=self.config),
                         ": GPS navigation")

    def close(self) -> None:
        """Close the LLM's worker process (the ONNX sessions need no closing)."""
        llm = self._open.pop("llm", None)
        if llm is not None:
            llm.close()
