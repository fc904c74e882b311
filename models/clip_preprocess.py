"""Torch-free CLIP input preparation equal to open_clip's: image transform and BPE tokenizer.

Images (open_clip ``image_transform``, inference, ``resize_mode="shortest"``): Pillow bicubic resize of
the short side to the model's image size (long side ``int(size * long / short)``, as torchvision's
``Resize(int)`` computes it; Pillow always anti-aliases), centre crop with torchvision's rounding
(``int(round((h - size) / 2))``), scale to [0, 1], subtract the mean and divide by the std per channel
(OpenAI CLIP: mean (0.48145466, 0.4578275, 0.40821073), std (0.26862954, 0.26130258, 0.27577711)).

Text (open_clip ``SimpleTokenizer``, ``clean="lower"``): ``ftfy.fix_text``, HTML-unescape twice,
collapse whitespace, lower-case; then the byte-level BPE with end-of-word suffix ``</w>`` runs in the
``tokenizers`` library from a ``tokenizer.json`` the exporter builds from open_clip's own vocabulary
and merges; then ``[<start_of_text>] + ids + [<end_of_text>]``, truncated to the context length with
the last id forced to ``<end_of_text>``, zero-padded. The ids are equal to open_clip's (tested).
"""

from __future__ import annotations

import html
import os
import re
from typing import Sequence

import numpy as np

from models.onnx_common import check_array


def _resized_size(w: int, h: int, size: int) -> tuple[int, int]:
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    return (new_short, new_long) if w <= h else (new_long, new_short)


def preprocess_image(image: np.ndarray, *, size: int, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """One HxWx3 uint8 RGB image -> (3, size, size) float32, normalised as the CLIP model expects.

    Raises
    ------
    ValueError
        Not an (H, W, 3) uint8 array, or an empty image.
    """
    from PIL import Image

    image = check_array("image", image, ndim=3, dtype=np.uint8)
    h, w, c = image.shape
    if c != 3 or h < 1 or w < 1:
        raise ValueError(f"image: expected (H, W, 3) RGB with H, W >= 1, got {image.shape}")
    pil = Image.fromarray(image)
    new_w, new_h = _resized_size(w, h, size)  # short side == size, so no padding is ever needed
    if (new_w, new_h) != (w, h):
        pil = pil.resize((new_w, new_h), Image.BICUBIC)
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    pil = pil.crop((left, top, left + size, top + size))
    x = np.asarray(pil, dtype=np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def preprocess_images(images, *, size: int, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """A list of HxWx3 uint8 RGB images -> (M, 3, size, size) float32 (see :func:`preprocess_image`)."""
    if isinstance(images, np.ndarray) and images.ndim == 3:
        raise ValueError("images: expected a list of (H, W, 3) arrays (or an (M, H, W, 3) array), got one image")
    out = np.empty((len(images), 3, size, size), dtype=np.float32)
    for j, img in enumerate(images):
        try:
            out[j] = preprocess_image(img, size=size, mean=mean, std=std)
        except ValueError as exc:
            raise ValueError(f"images[{j}]: {exc}") from exc
    return out


_WS = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """open_clip's ``clean="lower"`` text cleaning (ftfy, HTML unescape twice, whitespace, lower case)."""
    import ftfy

    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WS.sub(" ", text).strip().lower()


class ClipTokenizer:
    """open_clip-equal CLIP BPE tokenizer on the ``tokenizers`` library (no torch).

    Parameters
    ----------
    tokenizer_json
        The ``tokenizers`` JSON the exporter wrote (``clip-tokenizer.json``).
    context_length
        Token ids per text (77 for every released CLIP).
    sot_id, eot_id
        Ids of ``<start_of_text>`` and ``<end_of_text>`` (49406, 49407 in open_clip's vocabulary).
    """

    def __init__(self, tokenizer_json: str | os.PathLike, *, context_length: int, sot_id: int, eot_id: int):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self.context_length = int(context_length)
        self.sot_id = int(sot_id)
        self.eot_id = int(eot_id)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> (K, context_length) int64 token ids, as ``open_clip.tokenize`` returns them.

        Raises
        ------
        ValueError
            ``texts`` is a bare string or holds a non-string.
        """
        if isinstance(texts, str):
            raise ValueError("texts: expected a list of strings, got one string")
        for j, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"texts[{j}]: expected a string, got {type(t).__name__}")
        encs = self._tok.encode_batch([clean_text(t) for t in texts], add_special_tokens=False)
        out = np.zeros((len(texts), self.context_length), dtype=np.int64)
        for j, enc in enumerate(encs):
            ids = [self.sot_id, *enc.ids, self.eot_id]
            if len(ids) > self.context_length:
                ids = ids[: self.context_length]
                ids[-1] = self.eot_id
            out[j, : len(ids)] = ids
        return out


def build_tokenizer_json(vocab: dict, merges: Sequence[tuple[str, str]], special_tokens: Sequence[str],
                         out_path: str | os.PathLike) -> None:
    """Write a ``tokenizers`` JSON reproducing open_clip's BPE (workstation side, used by the exporter).

    Parameters
    ----------
    vocab
        Token string -> id (open_clip ``SimpleTokenizer.encoder``).
    merges
        BPE merges in rank order (``SimpleTokenizer.bpe_ranks`` sorted by rank).
    special_tokens
        ``<start_of_text>``, ``<end_of_text>``: matched whole in the input, as open_clip's pattern does.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    bpe = models.BPE(vocab=dict(vocab), merges=[tuple(m) for m in merges], end_of_word_suffix="</w>",
                     continuing_subword_prefix="", fuse_unk=False)
    tok = Tokenizer(bpe)
    # open_clip finds tokens with re.findall of this pattern and drops everything between matches.
    pattern = r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(special_tokens))
    tok.save(str(out_path))
