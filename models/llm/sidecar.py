"""The JSON sidecar of ``llm.gguf`` (format: :mod:`models.sidecar`, kind ``"llm"``).

A GGUF file carries its own metadata; the sidecar adds what the robot checks before loading: the
sha256 (a truncated copy or a hand-swapped file is refused) and where the weights came from. It is
written once on a workstation (``robot-app models llm-sidecar FILE.gguf``) and copied with the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.sidecar import read_sidecar, write_sidecar

KIND = "llm"


def gguf_summary(path: str | Path) -> dict[str, Any]:
    """Architecture, name, context length, vocabulary size and chat-template presence of a GGUF file.

    Raises
    ------
    ValueError
        If the file is not a readable GGUF file.
    ImportError
        If the ``gguf`` package (extra ``llm``) is not installed.
    """
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError, IndexError) as exc:
        raise ValueError(f"{path}: not a readable GGUF file: {exc}") from exc

    def value(key: str) -> Any:
        field = reader.fields.get(key)
        if field is None:
            return None
        if hasattr(field, "contents"):
            return field.contents()
        return field.parts[field.data[0]].tolist()  # pragma: no cover - gguf < 0.11

    arch = value("general.architecture") or "unknown"
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return {
        "architecture": arch,
        "name": value("general.name") or "",
        "context_length": value(f"{arch}.context_length"),
        "n_vocab": len(tokens.data) if tokens is not None else None,
        "has_chat_template": reader.fields.get("tokenizer.chat_template") is not None,
        "n_tensors": len(reader.tensors),
    }


def write_llm_sidecar(model_path: str | Path, *, weights: str | None = None,
                      random_init: bool = False) -> Path:
    """Write ``<model>.json`` for a GGUF model.

    Parameters
    ----------
    model_path : str or Path
        The GGUF file (normally ``llm.gguf`` in the models directory).
    weights : str, optional
        Where the weights came from (default: the GGUF's ``general.name``).
    random_init : bool
        True for the generated test model.

    Returns
    -------
    Path
        The sidecar path.

    Raises
    ------
    ValueError
        If the file is not GGUF.
    FileNotFoundError
        If it does not exist.
    """
    model_path = Path(model_path)
    if not model_path.is_file():
        raise FileNotFoundError(f"{model_path}: no such model file")
    info = gguf_summary(model_path)
    return write_sidecar(model_path, kind=KIND, architecture=info["architecture"],
                         weights=weights or info["name"] or "unknown", random_init=random_init,
                         inputs=[{"name": "prompt", "dtype": "text"}],
                         outputs=[{"name": "completion", "dtype": "text"}], params=info)


def verify_llm_sidecar(model_path: str | Path) -> Any:
    """Read and check the sidecar of a GGUF model (sha256 included); returns the :class:`Sidecar`.

    Raises
    ------
    models.sidecar.ModelError
        ``ModelMissing`` (no model or sidecar), ``ModelTampered`` (sha256 differs) or ``ModelInvalid``.
    """
    return read_sidecar(model_path, kind=KIND, verify=True)
