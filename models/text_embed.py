"""Sentence embeddings on ONNX Runtime (all-MiniLM-L6-v2): semantic similarity for LASP.

``text-embed.onnx`` (from ``robot-app models export-text-embed``) maps token ids to a (B, 384)
float32 L2-normalised sentence embedding (mean pooling over real tokens, as sentence-transformers'
all-MiniLM-L6-v2 pipeline; Reimers & Gurevych 2019, Sec. 3). The WordPiece tokenizer runs in the
``tokenizers`` library from the exported ``text-embed-tokenizer.json``; texts longer than the model's
256 tokens are truncated (as sentence-transformers does). Cosine similarity of two texts is the dot
product of their embeddings.

The package ships an 8-bit copy (:data:`BUNDLED_DIR`: all-MiniLM-L6-v2, Apache-2.0, 23 MB, cosine >= 0.99
with fp32; ``NOTICE.md`` there says where it comes from), so the default install ranks by meaning:
``open_text_embedder(..., bundled=True)`` opens it when the models directory has no file of its own.
Without either, :func:`open_text_embedder` raises :class:`ModelMissing`; LASP then falls back to lexical
similarity and says so (docs/design.md, "Fallbacks").
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from models.clip_preprocess import check_texts
from models.onnx_common import CPU, check_session_io, l2_normalise, open_session, session_options
from models.sidecar import ModelMissing, read_sidecar

log = logging.getLogger(__name__)

DEFAULT_FILE = "text-embed.onnx"
#: the copy shipped in the package (int8 all-MiniLM-L6-v2, its sidecar, tokenizer, reference and licences)
BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "text_embed"


def text_embed_path(models_dir: str | os.PathLike, *, config=None, bundled: bool = False) -> Path:
    """The ``text-embed.onnx`` that :func:`open_text_embedder` opens: the models directory's own, else (with
    ``bundled``) the package's copy when that is present; the models directory's path when neither is."""
    mc = getattr(config, "models", config)
    name = getattr(mc, "text_embed_file", DEFAULT_FILE)
    own = Path(models_dir) / name
    if own.is_file() or own.with_name(own.name + ".json").is_file() or not bundled:
        return own
    shipped = BUNDLED_DIR / DEFAULT_FILE
    return shipped if shipped.is_file() else own


class TextEmbedder:
    """Sentence encoder (thread-safe). Use :func:`open_text_embedder`.

    Attributes
    ----------
    dim : int
        D, embedding size (384 for all-MiniLM-L6-v2).
    max_tokens : int
        Longest token sequence the model sees; longer texts are truncated.
    """

    def __init__(self, session, tokenizer, *, sidecar, batch_size: int = 64):
        self._sess = session
        self._tok = tokenizer
        self.dim = int(sidecar.params["embed_dim"])
        self.max_tokens = int(sidecar.params["max_tokens"])
        self.model_id = f"text-embed:{sidecar.architecture}:{sidecar.sha256[:12]}"
        self.path = sidecar.model_path
        self.bundled = sidecar.model_path.parent == BUNDLED_DIR
        self.batch_size = int(batch_size)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> (N, D) float32, L2-normalised rows.

        Raises
        ------
        ValueError
            ``texts`` is a bare string or holds a non-string.
        """
        check_texts(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start:start + self.batch_size])
            encs = self._tok.encode_batch(chunk)
            feeds = {
                "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64),
            }
            (emb,) = self._sess.run(None, feeds)
            out[start:start + len(chunk)] = l2_normalise(emb)
        return out

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """(len(a), len(b)) float32 cosine similarities in [-1, 1]."""
        return self.embed(a) @ self.embed(b).T

    def warm_up(self) -> None:
        """One inference at start so the first real call does not pay for allocation."""
        self.embed(["warm up"])


def open_text_embedder(models_dir: str | os.PathLike, *, config=None, warm_up: bool = True,
                       bundled: bool = False) -> TextEmbedder:
    """Open and verify ``text-embed.onnx`` (file name from ``[models] text_embed_file``) in ``models_dir``.

    Parameters
    ----------
    models_dir
        Folder with the model, its sidecar and tokenizer.
    config
        ``Config`` or ``ModelsConfig`` (providers, threads, file name); ``None``: defaults, CPU.
    bundled
        Open the package's copy (:data:`BUNDLED_DIR`) when ``models_dir`` has no model of its own; a file
        of its own that is damaged is still refused (never silently replaced).

    Raises
    ------
    ModelMissing
        ``text-embed.onnx`` (or its sidecar / tokenizer) is absent; the message says how to provision it.
    ModelTampered, ModelInvalid
        sha256 mismatch; unreadable or inconsistent files.
    """
    from tokenizers import Tokenizer

    mc = getattr(config, "models", config)
    path = text_embed_path(models_dir, config=mc, bundled=bundled)
    sc = read_sidecar(path, kind="text-embed")
    sess = open_session(path, providers=getattr(mc, "providers", [CPU]),
                        **session_options(mc))
    check_session_io(sess, sc)
    tok = Tokenizer.from_file(str(sc.extra_path(sc.params["tokenizer"])))
    tok.no_padding()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest text of the batch
    tok.enable_truncation(max_length=int(sc.params["max_tokens"]))
    model = TextEmbedder(sess, tok, sidecar=sc)
    if warm_up:
        model.warm_up()
    return model


def check_reference(model: TextEmbedder, reference_npz: str | os.PathLike) -> dict:
    """Rerun the exporter's reference texts; returns ``ids_equal``, ``max_abs`` and ``cosine_min`` (the least
    cosine of a row with its reference row) vs sentence-transformers."""
    with np.load(reference_npz) as ref:
        texts = [str(t) for t in ref["texts"]]
        encs = model._tok.encode_batch(texts)
        ids = np.array([e.ids for e in encs], dtype=np.int64)
        emb, want = model.embed(texts).astype(np.float64), ref["embeddings"].astype(np.float64)
        cos = (emb * want).sum(1) / np.maximum(np.linalg.norm(emb, axis=1) * np.linalg.norm(want, axis=1), 1e-12)
        return {"ids_equal": bool(np.array_equal(ids, ref["input_ids"])),
                "max_abs": float(np.abs(emb - want).max()), "cosine_min": round(float(cos.min()), 5)}


__all__ = ["BUNDLED_DIR", "ModelMissing", "TextEmbedder", "check_reference", "open_text_embedder",
           "text_embed_path"]
