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

A text sidecar may instead name a BERT WordPiece tokenizer (``tokenizer_kind: "wordpiece"``, the
sim-only stand-in VLM whose text encoder is all-MiniLM-L6-v2): see :class:`WordPieceTokenizer`.
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


def check_texts(texts) -> None:
    """Raise :class:`ValueError` unless ``texts`` is a sequence of strings (naming the bad item)."""
    if isinstance(texts, str):
        raise ValueError("texts: expected a list of strings, got one string")
    for j, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{j}]: expected a string, got {type(t).__name__}")


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
        check_texts(texts)
        encs = self._tok.encode_batch([clean_text(t) for t in texts], add_special_tokens=False)
        out = np.zeros((len(texts), self.context_length), dtype=np.int64)
        for j, enc in enumerate(encs):
            ids = [self.sot_id, *enc.ids, self.eot_id]
            if len(ids) > self.context_length:
                ids = ids[: self.context_length]
                ids[-1] = self.eot_id
            out[j, : len(ids)] = ids
        return out


class WordPieceTokenizer:
    """BERT-style WordPiece tokenizer (e.g. MiniLM's ``tokenizer.json``) on the ``tokenizers`` library.

    Used when a text sidecar says ``tokenizer_kind: "wordpiece"`` (the sim-only stand-in VLM, whose text
    encoder is the frozen all-MiniLM-L6-v2). The ``tokenizer.json`` carries its own normaliser (lower
    case, accents stripped) and post-processor (``[CLS] ... [SEP]``); a batch is padded with ``pad_id``
    to its longest text and truncated to ``max_tokens``. The text encoder derives its attention mask
    from ``ids != pad_id``.

    Parameters
    ----------
    tokenizer_json
        The ``tokenizers`` JSON listed by the text sidecar.
    pad_id
        Id of the padding token (0, ``[PAD]``, in BERT's uncased vocabulary).
    max_tokens
        Longest id sequence per text, ``[CLS]`` and ``[SEP]`` included.

    Raises
    ------
    ValueError
        The file cannot be read as a tokenizer, ``pad_id`` is not in its vocabulary, or ``max_tokens < 3``.
    """

    def __init__(self, tokenizer_json: str | os.PathLike, *, pad_id: int, max_tokens: int):
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(tokenizer_json))
        except Exception as exc:  # tokenizers raises its own Exception type on a bad file
            raise ValueError(f"{tokenizer_json}: not a tokenizers JSON file: {exc}") from exc
        pad_token = tok.id_to_token(int(pad_id))
        if pad_token is None:
            raise ValueError(f"{tokenizer_json}: pad_id {pad_id} is not in the vocabulary")
        if int(max_tokens) < 3:
            raise ValueError(f"max_tokens: expected >= 3, got {max_tokens}")
        tok.no_padding()
        tok.enable_padding(pad_id=int(pad_id), pad_token=pad_token)
        tok.enable_truncation(max_length=int(max_tokens))
        self._tok = tok
        self.pad_id = int(pad_id)
        self.max_tokens = int(max_tokens)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> (K, L) int64 token ids, L = the longest text's length (<= ``max_tokens``).

        Raises
        ------
        ValueError
            ``texts`` is a bare string or holds a non-string.
        """
        check_texts(texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.int64)
        encs = self._tok.encode_batch(list(texts))
        return np.array([e.ids for e in encs], dtype=np.int64)


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
