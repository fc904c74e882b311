"""JSON sidecars of model files: what a model is, how to feed it, and the sha256 that proves it is intact.

Every model file in the models directory (``clip-image.onnx``, ``vnm.onnx``, ``llm.gguf``, ...) has a
sidecar next to it named ``<file>.json`` (``clip-image.onnx.json``). The exporter writes it; the robot
reads it before opening the model and refuses a file whose sha256 differs (a truncated copy or a file
swapped by hand). Sidecar format, version 1 (all keys written by :func:`write_sidecar`)::

    {
      "format": "robot-app-model-sidecar", "format_version": 1,
      "kind": "clip-image",              # clip-image | clip-text | vnm | text-embed | llm | ...
      "file": "clip-image.onnx", "sha256": "<hex>", "size_bytes": 123,
      "architecture": "ViT-B-32",        # free text naming the network
      "weights": "openai",               # where the weights came from; "random-init" = tests only
      "random_init": false,
      "inputs":  [{"name": "pixel_values", "shape": ["batch", 3, 224, 224], "dtype": "float32"}],
      "outputs": [{"name": "image_embeds", "shape": ["batch", 512], "dtype": "float32"}],
      "onnx": {"opset": 17, "ir_version": 8},
      "params": {...},                   # kind-specific: image size, mean/std, logit scale, ...
      "extra_files": {"clip-tokenizer.json": "<sha256>", ...},
      "exported_by": "robot-app 0.1.0", "exported_utc": "2026-01-01T00:00:00Z"
    }

Nothing here imports onnxruntime or torch; the LLM loader uses the same functions for ``llm.gguf``.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)

SIDECAR_FORMAT = "robot-app-model-sidecar"
SIDECAR_VERSION = 1

PROVISION_HINT = (
    "export it on a workstation with `robot-app models export-clip|export-vnm|export-text-embed "
    "--out DIR` (extra `export`) and copy the model file together with its .json sidecar "
    "(and any extra files the sidecar lists) into the models directory ([paths] models_dir)"
)
#: The same for a GGUF language model (llama.cpp), which is not exported but downloaded on a workstation.
GGUF_PROVISION_HINT = (
    "on a workstation, write its sidecar with `robot-app models llm-sidecar MODEL.gguf` and copy the "
    "GGUF file together with its .json sidecar into the models directory ([paths] models_dir)"
)


def provision_hint(model_path: str | os.PathLike) -> str:
    """How to provision ``model_path``: :data:`GGUF_PROVISION_HINT` for a ``.gguf`` file, else
    :data:`PROVISION_HINT`."""
    return GGUF_PROVISION_HINT if Path(model_path).suffix.lower() == ".gguf" else PROVISION_HINT


class ModelError(Exception):
    """Base of the model-loading errors; the message names the file."""


class ModelMissing(ModelError, FileNotFoundError):
    """A model file or its sidecar is absent; the message says how to provision it."""


class ModelTampered(ModelError):
    """A model file (or a file its sidecar lists) does not match the sha256 its sidecar records."""


class ModelInvalid(ModelError, ValueError):
    """A sidecar is unreadable, of another kind or version, or describes a model the code cannot run."""


@dataclass(frozen=True)
class Sidecar:
    """A parsed, verified sidecar (see the module docstring for the meaning of each field)."""

    path: Path
    kind: str
    file: str
    sha256: str
    architecture: str
    weights: str
    random_init: bool
    inputs: list
    outputs: list
    params: dict = field(default_factory=dict)
    extra_files: dict = field(default_factory=dict)
    onnx: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)

    @property
    def model_path(self) -> Path:
        """Absolute path of the model file the sidecar describes."""
        return self.path.parent / self.file

    def extra_path(self, name: str) -> Path:
        """Path of an extra file listed in the sidecar (e.g. the tokenizer JSON)."""
        if name not in self.extra_files:
            raise ModelInvalid(f"{self.path}: lists no extra file {name!r}")
        return self.path.parent / name


_SIM_ONLY_WARNED: set = set()


def warn_sim_only(path: str | os.PathLike, meaning: str) -> None:
    """Log once per file and process that ``path`` is a SIM-ONLY stand-in model (``meaning``: what its
    outputs mean nothing for); later opens of the same file log it at DEBUG."""
    key = str(Path(path).resolve())
    first = key not in _SIM_ONLY_WARNED
    _SIM_ONLY_WARNED.add(key)
    (log.warning if first else log.debug)("%s is a SIM-ONLY stand-in model (trained on simulated renders): "
                                          "%s mean nothing on real camera images", path, meaning)


def precision(sc: Sidecar) -> str:
    """``"int8"`` when the sidecar's ``params.quantization`` says the weights are int8 (written by
    ``robot-app models quantize`` and by the sim exporter's text tower), else ``"fp32"``."""
    q = sc.params.get("quantization", "none")
    return "int8" if isinstance(q, str) and q.startswith("int8") else "fp32"


def _package_version() -> str:
    try:
        return importlib.metadata.version("robot-app")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def sidecar_path(model_path: str | os.PathLike) -> Path:
    """``<model file>.json``: where the sidecar of ``model_path`` lives."""
    p = Path(model_path)
    return p.with_name(p.name + ".json")


def sha256_file(path: str | os.PathLike, *, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (a ViT-B-32 encoder hashes in about a second)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_bytes), b""):
            h.update(chunk)
    return h.hexdigest()


def write_sidecar(model_path: str | os.PathLike, *, kind: str, architecture: str, weights: str,
                  random_init: bool, inputs: list, outputs: list, params: Mapping[str, Any] | None = None,
                  extra_files: list[str] | None = None, onnx: Mapping[str, Any] | None = None) -> Path:
    """Hash ``model_path`` (and each of ``extra_files``, names relative to its folder) and write its sidecar.

    Returns
    -------
    Path
        The sidecar's path (``<model file>.json``).
    """
    model_path = Path(model_path)
    folder = model_path.parent
    doc = {
        "format": SIDECAR_FORMAT,
        "format_version": SIDECAR_VERSION,
        "kind": kind,
        "file": model_path.name,
        "sha256": sha256_file(model_path),
        "size_bytes": model_path.stat().st_size,
        "architecture": architecture,
        "weights": weights,
        "random_init": bool(random_init),
        "inputs": list(inputs),
        "outputs": list(outputs),
        "onnx": dict(onnx or {}),
        "params": dict(params or {}),
        "extra_files": {name: sha256_file(folder / name) for name in (extra_files or [])},
        "exported_by": f"robot-app {_package_version()}",
        "exported_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    out = sidecar_path(model_path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    log.info("wrote %s", out)
    return out


def read_sidecar(model_path: str | os.PathLike, *, kind: str | None = None, verify: bool = True) -> Sidecar:
    """Read the sidecar of ``model_path`` and (by default) check the sha256 of the model and its extras.

    Parameters
    ----------
    model_path
        The model file (``.../clip-image.onnx``); its sidecar is ``<model file>.json``.
    kind
        Expected ``kind``; another kind is refused.
    verify
        Hash the model file and the extra files and compare with the sidecar.

    Raises
    ------
    ModelMissing
        The model file, its sidecar, or an extra file it lists is absent (message says how to provision).
    ModelInvalid
        The sidecar is not valid JSON, of another format/version/kind, or lacks a key.
    ModelTampered
        A sha256 differs from the sidecar's.
    """
    model_path = Path(model_path)
    sc_path = sidecar_path(model_path)
    hint = provision_hint(model_path)
    if not model_path.is_file():
        raise ModelMissing(f"model file {model_path} not found: {hint}")
    if not sc_path.is_file():
        raise ModelMissing(f"sidecar {sc_path} of model {model_path.name} not found: {hint}")
    try:
        doc = json.loads(sc_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelInvalid(f"{sc_path}: unreadable sidecar: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
        raise ModelInvalid(f"{sc_path}: not a {SIDECAR_FORMAT} file")
    if doc.get("format_version") != SIDECAR_VERSION:
        raise ModelInvalid(f"{sc_path}: sidecar format_version {doc.get('format_version')!r} is not "
                           f"{SIDECAR_VERSION}; re-export the model with this robot-app version")
    try:
        sc = Sidecar(path=sc_path, kind=doc["kind"], file=doc["file"], sha256=doc["sha256"],
                     architecture=doc["architecture"], weights=doc["weights"],
                     random_init=bool(doc["random_init"]), inputs=doc["inputs"], outputs=doc["outputs"],
                     params=doc.get("params", {}), extra_files=doc.get("extra_files", {}),
                     onnx=doc.get("onnx", {}), raw=doc)
    except KeyError as exc:
        raise ModelInvalid(f"{sc_path}: missing key {exc.args[0]!r}") from exc
    if kind is not None and sc.kind != kind:
        raise ModelInvalid(f"{sc_path}: describes a {sc.kind!r} model, expected {kind!r}")
    if sc.file != model_path.name:
        raise ModelInvalid(f"{sc_path}: describes file {sc.file!r}, not {model_path.name!r}")
    if verify:
        _verify_hashes(sc)
    if sc.random_init:
        log.warning("%s has RANDOM weights (exported for tests): its outputs mean nothing", model_path)
    return sc


#: Files whose sha256 was found equal to their sidecar's, keyed by (path, size, mtime_ns, sha256): the
#: boot-time model inventory and the runtime that opens the model then hash a large file only once.
#: A file rewritten since (other size or mtime) is hashed again.
_VERIFIED: set = set()
_VERIFIED_LOCK = threading.Lock()


def _matches(path: Path, digest: str) -> bool:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, digest)
    with _VERIFIED_LOCK:
        if key in _VERIFIED:
            return True
    ok = sha256_file(path) == digest
    if ok:
        with _VERIFIED_LOCK:
            _VERIFIED.add(key)
    return ok


def _verify_hashes(sc: Sidecar) -> None:
    hint = provision_hint(sc.model_path)
    if not _matches(sc.model_path, sc.sha256):
        got = sha256_file(sc.model_path)
        raise ModelTampered(f"{sc.model_path}: sha256 {got[:16]}... does not match its sidecar "
                            f"({sc.sha256[:16]}...): the file is damaged or was replaced; {hint}")
    for name, digest in sc.extra_files.items():
        p = sc.path.parent / name
        if not p.is_file():
            raise ModelMissing(f"{p} (listed in {sc.path.name}) not found: {hint}")
        if not _matches(p, digest):
            raise ModelTampered(f"{p}: sha256 does not match {sc.path.name}; {hint}")
