"""Export an open_clip model to ``clip-image.onnx`` + ``clip-text.onnx`` with sidecars, tokenizer, reference.

Each encoder is exported on its own (the robot embeds map images once and landmark texts per
instruction) with its output L2-normalised inside the graph and a dynamic batch axis. The tokenizer is
rebuilt from open_clip's own BPE vocabulary as a ``tokenizers`` JSON (``clip-tokenizer.json``) so the
robot tokenizes without torch. ``clip-reference.npz`` keeps a few inputs (raw images, texts) with
open_clip's preprocessed tensors, token ids and torch embeddings: ``robot-app models info --verify``
reruns them on the robot.

Architectures: any open_clip built-in name (``ViT-B-32``, ...) with ``--pretrained none`` (random
init, tests only), an open_clip pretrained tag (``openai``: only if its weights are already in the
local cache, the robot's workstation has no internet) or a checkpoint file path; and ``clip-tiny``, a
few-MB ViT for the test suite.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
import uuid
from pathlib import Path

import numpy as np

from models.clip_preprocess import build_tokenizer_json
from models.export.common import ExportError, assert_close, assert_varies, clear_sidecars, export_onnx, io_spec, ort_run
from models.sidecar import write_sidecar

log = logging.getLogger(__name__)

TINY_ARCH = "clip-tiny"
# A ViT small enough for CI (~7 MB of weights, most of it the 49408-token embedding table).
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 224, "layers": 2, "width": 64, "patch_size": 32, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
REFERENCE_TEXTS = ["This is a photo of a stop sign", "This is a photo of a glass building",
                   "a white car", "it’s a café &amp; bar"]
FILES = ("clip-image.onnx", "clip-text.onnx", "clip-tokenizer.json", "clip-reference.npz")


def _register_tiny() -> None:
    import open_clip

    if TINY_ARCH in open_clip.list_models():
        return
    # open_clip reads the file when it is added and keeps the config: the folder can go at once
    with tempfile.TemporaryDirectory(prefix="clip-config-") as tmp:
        folder = Path(tmp)
        (folder / f"{TINY_ARCH}.json").write_text(json.dumps(TINY_CONFIG))
        open_clip.add_model_config(folder)


def _use_length_agnostic_attention(model) -> bool:
    """Swap the text transformer's ``nn.MultiheadAttention`` modules for the same maths written with
    shape-agnostic reshapes (same weights: packed q/k/v projection, scaled dot-product attention with the
    additive mask, output projection). torch's TorchScript exporter bakes the sequence length of
    ``nn.MultiheadAttention``'s internal reshapes into the graph, which would pin the text input to 77
    tokens. Returns False (nothing swapped) for attention layouts this does not cover."""
    import torch
    import torch.nn.functional as F

    class Attention(torch.nn.Module):
        def __init__(self, mha):
            super().__init__()
            self.mha = mha

        def forward(self, q, k, v, need_weights=False, attn_mask=None):
            m = self.mha
            h, e = m.num_heads, m.embed_dim
            qkv = F.linear(q, m.in_proj_weight, m.in_proj_bias)
            qh, kh, vh = (t.reshape(t.shape[0], -1, h, e // h).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
            o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=attn_mask)
            return m.out_proj(o.transpose(1, 2).reshape(q.shape[0], -1, e)), None

    blocks = list(getattr(getattr(model, "transformer", None), "resblocks", []))
    ok = bool(blocks) and all(
        isinstance(getattr(b, "attn", None), torch.nn.MultiheadAttention) and b.attn.batch_first
        and b.attn._qkv_same_embed_dim and b.attn.bias_k is None and not b.attn.add_zero_attn
        and not hasattr(b, "ln_1_kv") for b in blocks)
    if ok:
        for b in blocks:
            b.attn = Attention(b.attn)
    return ok


def _reference_images(seed: int = 0) -> list[np.ndarray]:
    """Deterministic test images of several shapes (gradients plus noise), HxWx3 uint8."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in ((240, 320), (224, 224), (300, 200), (97, 411)):
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], axis=-1)
        noise = rng.integers(-40, 41, size=(h, w, 3))
        out.append(np.clip(base + noise, 0, 255).astype(np.uint8))
    return out


def _create(arch: str, pretrained: str):
    import open_clip

    if arch == TINY_ARCH:
        _register_tiny()
    if arch not in open_clip.list_models():
        raise ExportError(f"unknown open_clip architecture {arch!r} (e.g. ViT-B-32, or {TINY_ARCH} for tests)")
    tag = None if pretrained == "none" else pretrained
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=tag)
    except Exception as exc:  # open_clip raises RuntimeError / OSError / HF hub errors when offline
        raise ExportError(f"cannot load weights {pretrained!r} for {arch}: {exc} (no internet here: put the "
                          f"checkpoint file on disk and pass its path as --pretrained)") from exc
    model.eval()
    return model, preprocess, open_clip.get_tokenizer(arch)


def export_clip(out_dir: str | os.PathLike, *, arch: str = "ViT-B-32", pretrained: str = "none",
                atol: float = 1e-4, seed: int = 0) -> dict:
    """Export CLIP ``arch`` with weights ``pretrained`` into ``out_dir``; returns a summary dict.

    Raises
    ------
    ExportError
        Unknown architecture, weights not available offline, ONNX/torch parity above ``atol``, or
        outputs that do not vary across inputs.
    """
    import open_clip
    import torch
    import torch.nn.functional as F
    from open_clip.tokenizer import SimpleTokenizer
    from PIL import Image

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clear_sidecars(out, ("clip-image.onnx", "clip-text.onnx"))
    torch.manual_seed(seed)  # random-init exports are reproducible
    model, preprocess, tokenizer = _create(arch, pretrained)
    if not isinstance(tokenizer, SimpleTokenizer):
        raise ExportError(f"{arch} uses a Hugging Face tokenizer; only open_clip's BPE tokenizer is supported")
    if not isinstance(model, open_clip.CLIP) or getattr(model, "text_pool_type", "argmax") != "argmax":
        raise ExportError(f"{arch}: only open_clip CLIP models with argmax (end-of-text) text pooling are supported")

    class ImageEncoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return F.normalize(self.m.encode_image(pixel_values), dim=-1)

    class TextEncoder(torch.nn.Module):
        """open_clip ``CLIP.encode_text`` (+ L2 normalisation) for ids of any length L <= context length.

        The end-of-text position is found by an argmax over the ids cast to float32 (exact below 2**24):
        onnxruntime 1.16 has no int64 ArgMax. The positional embedding and the causal mask are sliced to
        L: the transformer is causal and pools at the end-of-text token, so the robot may cut the ids
        after the batch's last end-of-text token (a 12-token prompt costs about a quarter of 77 tokens).
        """

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            m = self.m
            n = input_ids.shape[1]
            x = m.token_embedding(input_ids) + m.positional_embedding[:n]
            x = m.ln_final(m.transformer(x, attn_mask=m.attn_mask[:n, :n]))
            x = x[torch.arange(x.shape[0]), input_ids.to(torch.float32).argmax(dim=-1)]
            x = m.text_projection(x) if isinstance(m.text_projection, torch.nn.Linear) else x @ m.text_projection
            return F.normalize(x, dim=-1)

    images = _reference_images()
    pixels = torch.stack([preprocess(Image.fromarray(im)) for im in images])
    ids = tokenizer(REFERENCE_TEXTS)
    with torch.no_grad():
        img_ref = ImageEncoder(model)(pixels).numpy()
        txt_ref = F.normalize(model.encode_text(ids), dim=-1).numpy()  # open_clip's own text path
        assert_close("text encoder wrapper vs open_clip encode_text", TextEncoder(model)(ids).numpy(), txt_ref,
                     atol=atol)
        logit_scale = float(model.logit_scale.exp())
    assert_varies("clip image encoder", img_ref)
    assert_varies("clip text encoder", txt_ref)
    size = int(pixels.shape[-1])
    embed_dim = int(img_ref.shape[1])
    ctx = int(ids.shape[1])

    onnx_img = export_onnx(ImageEncoder(model), (pixels[:2],), out / "clip-image.onnx",
                           input_names=["pixel_values"], output_names=["image_embeds"],
                           dynamic_axes={"pixel_values": {0: "batch"}, "image_embeds": {0: "batch"}})
    text_model = copy.deepcopy(model)
    trim = _use_length_agnostic_attention(text_model)
    if trim:
        with torch.no_grad():
            short = int((ids == tokenizer.eot_token_id).nonzero()[:, 1].max()) + 1
            assert_close("text encoder at the trimmed length vs open_clip encode_text",
                         TextEncoder(text_model)(ids[:, :short]).numpy(), txt_ref, atol=atol)
    onnx_txt = export_onnx(TextEncoder(text_model), (ids[:2],), out / "clip-text.onnx",
                           input_names=["input_ids"], output_names=["text_embeds"],
                           dynamic_axes={"input_ids": {0: "batch", 1: "tokens"} if trim else {0: "batch"},
                                         "text_embeds": {0: "batch"}})
    d_img = assert_close("clip image encoder", ort_run(out / "clip-image.onnx", {"pixel_values": pixels.numpy()})[0],
                         img_ref, atol=atol)
    d_txt = assert_close("clip text encoder", ort_run(out / "clip-text.onnx", {"input_ids": ids.numpy()})[0],
                         txt_ref, atol=atol)

    merges = sorted(tokenizer.bpe_ranks, key=tokenizer.bpe_ranks.get)
    build_tokenizer_json(tokenizer.encoder, merges, ["<start_of_text>", "<end_of_text>"], out / "clip-tokenizer.json")
    ref = {f"image_{j}": im for j, im in enumerate(images)}
    ref.update(n_images=np.int64(len(images)), pixel_values=pixels.numpy(), image_embeds=img_ref,
               texts=np.array(REFERENCE_TEXTS), input_ids=ids.numpy(), text_embeds=txt_ref)
    np.savez_compressed(out / "clip-reference.npz", **ref)

    mean = [float(v) for v in open_clip.OPENAI_DATASET_MEAN]
    std = [float(v) for v in open_clip.OPENAI_DATASET_STD]
    norm = getattr(preprocess, "transforms", [])[-1]
    if hasattr(norm, "mean"):
        mean, std = [float(v) for v in norm.mean], [float(v) for v in norm.std]
    pair = uuid.uuid4().hex
    weights = "random-init" if pretrained == "none" else pretrained
    common = dict(architecture=arch, weights=weights, random_init=pretrained == "none")
    write_sidecar(out / "clip-image.onnx", kind="clip-image", **common, onnx=onnx_img,
                  inputs=[io_spec("pixel_values", ["batch", 3, size, size], "float32")],
                  outputs=[io_spec("image_embeds", ["batch", embed_dim], "float32")],
                  params={"image_size": size, "mean": mean, "std": std, "interpolation": "bicubic",
                          "resize_mode": "shortest", "embed_dim": embed_dim, "logit_scale": logit_scale,
                          "pair_id": pair, "reference": "clip-reference.npz", "parity_max_abs": d_img},
                  extra_files=["clip-reference.npz"])
    write_sidecar(
        out / "clip-text.onnx",
        kind="clip-text",
        **common,
        onnx=onnx_txt,
        inputs=[io_spec("input_ids", ["batch", "tokens" if trim else ctx], "int64")],
        outputs=[io_spec("text_embeds", ["batch", embed_dim], "float32")],
        params={
            "tokenizer": "clip-tokenizer.json",
            "tokenizer_kind": "open_clip-bpe",
            "text_clean": "lower",
            "context_length": ctx,
            "trim_after_eot": trim,
            "sot_id": int(tokenizer.sot_token_id),
            "eot_id": int(tokenizer.eot_token_id),
            "embed_dim": embed_dim,
            "logit_scale": logit_scale,
            "pair_id": pair,
            "reference": "clip-reference.npz",
            "parity_max_abs": d_txt,
        },
        extra_files=["clip-tokenizer.json", "clip-reference.npz"],
    )
    return {"arch": arch, "weights": weights, "embed_dim": embed_dim, "image_size": size,
            "logit_scale": logit_scale, "parity_max_abs": {"image": d_img, "text": d_txt},
            "files": [str(out / f) for f in FILES]}
