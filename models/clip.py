"""CLIP on ONNX Runtime: image and text encoders, prompts, and landmark grounding against a map.

Files in the models directory (written by ``robot-app models export-clip``): ``clip-image.onnx``
(``pixel_values`` (B, 3, S, S) float32 -> ``image_embeds`` (B, D) float32, L2-normalised) and
``clip-text.onnx`` (``input_ids`` (B, 77) int64 -> ``text_embeds`` (B, D) float32, L2-normalised),
each with its sidecar; the text sidecar lists ``clip-tokenizer.json``. The image sidecar's ``params``
carry ``image_size``, ``mean``, ``std``, ``embed_dim``, ``logit_scale``.

The text sidecar's ``tokenizer_kind`` selects the tokenizer: ``open_clip-bpe`` (the default, CLIP's
BPE, 77 ids) or ``wordpiece`` (``pad_id``, ``max_tokens``; a batch is padded to its longest text): the
sim-only stand-in VLM (``models.export.sim_vlm``) uses the latter, and its sidecars say
``sim_only: true`` (logged as a warning when opened; ``robot-app models info`` shows SIM-ONLY).

Landmark prompts follow LM-Nav App. A ("This is a photo of ___"); an optional prompt ensemble averages
the normalised text embeddings of several templates and re-normalises (CLIP paper, Radford et al. 2021,
Sec. 3.1.4). :func:`ground_landmarks` turns map image embeddings into the planner's G(v, i) with
``core.grounding`` and adds the operator-facing confidence: raw cosine of the best node, whether the
landmark counts as found in the map at all (the softmax over nodes always picks *some* node;
:mod:`core.presence`: the model's calibrated rule, else the raw cosine against an absolute threshold),
and the top nodes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from core.grounding import log_likelihoods, node_similarity
from core.presence import PresenceRule
from models.clip_preprocess import ClipTokenizer, WordPieceTokenizer, preprocess_images
from models.grounding_calibration import fallback_rule
from models.onnx_common import CPU, check_array, check_session_io, l2_normalise, open_session, session_options
from models.sidecar import ModelInvalid, ModelMissing, read_sidecar, warn_sim_only

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "This is a photo of {}"  # LM-Nav App. A


class ClipModel:
    """CLIP image and text encoders on ONNX Runtime (thread-safe; see :func:`open_clip_model`).

    Attributes
    ----------
    embed_dim : int
        D, the joint embedding size (512 for ViT-B-32).
    image_size : int
        S, side of the square model input in pixels.
    logit_scale : float
        exp(t) of the trained model (100 for OpenAI CLIP): multiplies cosines into logits.
    model_id : str
        Identifies the image encoder (architecture, weights, sha256 prefix): the name under which
        a map stores this model's image embeddings. An int8 tower written by ``robot-app models
        quantize`` carries its fp32 source's sha256 here (``params.int8.source_sha256``): it passed
        parity with it, and the maps built with either serve both.
    sim_only : bool
        Trained in the simulated world only (stand-in model): meaningless on real camera images.
    suggested_min_cosine : float or None
        The ``[models] landmark_min_cosine`` the exporter calibrated for this model (sidecar param
        ``landmark_min_cosine``), if it recorded one.
    """

    def __init__(self, image_session, text_session, tokenizer: ClipTokenizer, *, image_sidecar, text_sidecar,
                 prompt: str = DEFAULT_PROMPT, prompt_ensemble: Sequence[str] = ()):
        p = image_sidecar.params
        self._img = image_session
        self._txt = text_session
        self._tok = tokenizer
        self.image_size = int(p["image_size"])
        self.mean = tuple(float(v) for v in p["mean"])
        self.std = tuple(float(v) for v in p["std"])
        self.embed_dim = int(p["embed_dim"])
        self.logit_scale = float(p["logit_scale"])
        self.architecture = image_sidecar.architecture
        self.random_init = bool(image_sidecar.random_init)
        self.sim_only = bool(p.get("sim_only", False))
        mc = p.get("landmark_min_cosine")
        self.suggested_min_cosine = None if mc is None else float(mc)
        weights = Path(image_sidecar.weights).name  # a checkpoint path: its file name
        # An int8 tower from `robot-app models quantize` passed parity with its fp32 source (cosine >= 0.99,
        # same retrieval): it embeds into the same space, so a map's embeddings of either count for both.
        source = (p.get("int8") or {}).get("source_sha256") or image_sidecar.sha256
        self.model_id = f"clip:{image_sidecar.architecture}:{weights}:{source[:12]}"
        if int(text_sidecar.params["embed_dim"]) != self.embed_dim:
            raise ModelInvalid(f"{text_sidecar.path}: embed_dim {text_sidecar.params['embed_dim']} differs from "
                               f"the image encoder's {self.embed_dim}")
        if text_sidecar.params.get("pair_id") != p.get("pair_id"):
            raise ModelInvalid(f"{text_sidecar.path} and {image_sidecar.path} come from different exports")
        self.trim_after_eot = bool(text_sidecar.params.get("trim_after_eot", False))
        self.prompts = [prompt, *prompt_ensemble]
        for t in self.prompts:
            if "{}" not in t:
                raise ValueError(f"CLIP prompt {t!r} has no {{}} where the landmark goes")

    @property
    def name(self) -> str:
        """Same as :attr:`model_id` (the map's embedding model name)."""
        return self.model_id

    def prompt(self, landmark: str) -> str:
        """The landmark in the main prompt template ("This is a photo of <landmark>")."""
        return self.prompts[0].replace("{}", landmark.strip())

    def encode_images(self, images, *, batch_size: int = 32) -> np.ndarray:
        """HxWx3 uint8 RGB images -> (M, D) float32 L2-normalised embeddings.

        Images are batched ``batch_size`` at a time. Raises :class:`ValueError` naming the bad image.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
        out = np.empty((len(images), self.embed_dim), dtype=np.float32)
        for start in range(0, len(images), batch_size):
            chunk = images[start:start + batch_size]
            try:
                x = preprocess_images(chunk, size=self.image_size, mean=self.mean, std=self.std)
            except ValueError as exc:
                raise ValueError(f"encode_images (batch from {start}): {exc}") from exc
            out[start:start + len(chunk)] = self.encode_pixels(x)
        return out

    def encode_pixels(self, pixel_values: np.ndarray) -> np.ndarray:
        """Preprocessed (B, 3, S, S) float32 -> (B, D) float32 L2-normalised."""
        x = check_array("pixel_values", pixel_values, shape=(None, 3, self.image_size, self.image_size),
                        dtype=np.float32, lo=-10.0, hi=10.0)
        if x.shape[0] == 0:
            return np.zeros((0, self.embed_dim), dtype=np.float32)
        (emb,) = self._img.run(None, {"pixel_values": x})
        return l2_normalise(emb)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Texts (used as given, no prompt) -> (K, D) float32 L2-normalised."""
        ids = self._tok(texts)
        if ids.shape[0] == 0:
            return np.zeros((0, self.embed_dim), dtype=np.float32)
        if self.trim_after_eot:  # causal text transformer: ids after the last end-of-text change nothing
            ids = np.ascontiguousarray(ids[:, : int(np.nonzero(ids == self._tok.eot_id)[1].max()) + 1])
        (emb,) = self._txt.run(None, {"input_ids": ids})
        return l2_normalise(emb)

    def encode_landmarks(self, landmarks: Sequence[str]) -> np.ndarray:
        """Landmark phrases -> (K, D) float32: prompt template(s) applied, ensemble averaged, normalised."""
        if isinstance(landmarks, str):
            raise ValueError("landmarks: expected a list of strings, got one string")
        k = len(landmarks)
        if k == 0:
            return np.zeros((0, self.embed_dim), dtype=np.float32)
        texts = [t.replace("{}", lm.strip()) for t in self.prompts for lm in landmarks]
        emb = self.encode_text(texts).reshape(len(self.prompts), k, self.embed_dim)
        return l2_normalise(emb.mean(axis=0))

    def warm_up(self) -> None:
        """Run both encoders once (first-call allocation and kernel selection happen at start)."""
        self.encode_pixels(np.zeros((1, 3, self.image_size, self.image_size), dtype=np.float32))
        self.encode_text(["warm up"])


def open_clip_model(models_dir: str | os.PathLike, *, config=None, warm_up: bool = True) -> ClipModel:
    """Open and verify ``clip-image.onnx`` and ``clip-text.onnx`` from ``models_dir``.

    Parameters
    ----------
    models_dir
        Folder with the model files and sidecars.
    config
        ``robot_app.config.Config`` or its ``models`` section (``ModelsConfig``): file names, providers,
        threads, prompt and ensemble. ``None``: defaults, CPU provider.

    Raises
    ------
    ModelMissing
        A file or sidecar is absent (message says how to provision it). Planning from an instruction
        is refused without CLIP (docs/design.md, "Fallbacks").
    ModelTampered, ModelInvalid
        sha256 mismatch; unreadable / inconsistent files.
    """
    mc = getattr(config, "models", config)
    d = Path(models_dir)
    image_file = getattr(mc, "clip_image_file", "clip-image.onnx")
    text_file = getattr(mc, "clip_text_file", "clip-text.onnx")
    providers = getattr(mc, "providers", [CPU])
    img_sc = read_sidecar(d / image_file, kind="clip-image")
    txt_sc = read_sidecar(d / text_file, kind="clip-text")
    img = open_session(img_sc.model_path, providers=providers, **session_options(mc))
    txt = open_session(txt_sc.model_path, providers=providers, **session_options(mc))
    check_session_io(img, img_sc)
    check_session_io(txt, txt_sc)
    tok = _open_tokenizer(txt_sc)
    model = ClipModel(img, txt, tok, image_sidecar=img_sc, text_sidecar=txt_sc,
                      prompt=getattr(mc, "clip_prompt", DEFAULT_PROMPT),
                      prompt_ensemble=getattr(mc, "clip_prompt_ensemble", ()))
    if model.sim_only:
        warn_sim_only(img_sc.model_path, "its groundings")
    if warm_up:
        model.warm_up()
    return model


def _open_tokenizer(txt_sc):
    """The text tokenizer the CLIP text sidecar names (``tokenizer_kind``: open_clip-bpe or wordpiece).

    Raises
    ------
    ModelInvalid
        Unknown ``tokenizer_kind``, a missing tokenizer parameter, or an unreadable tokenizer file.
    """
    tp = txt_sc.params
    kind = tp.get("tokenizer_kind", "open_clip-bpe")
    try:
        path = txt_sc.extra_path(tp["tokenizer"])
        if kind == "open_clip-bpe":
            return ClipTokenizer(path, context_length=tp["context_length"], sot_id=tp["sot_id"], eot_id=tp["eot_id"])
        if kind == "wordpiece":
            return WordPieceTokenizer(path, pad_id=tp["pad_id"], max_tokens=tp["max_tokens"])
    except KeyError as exc:
        raise ModelInvalid(f"{txt_sc.path}: params lack {exc.args[0]!r} (needed by tokenizer_kind {kind!r})") from exc
    except ValueError as exc:
        raise ModelInvalid(f"{txt_sc.path}: {exc}") from exc
    raise ModelInvalid(f"{txt_sc.path}: unknown tokenizer_kind {kind!r} (known: open_clip-bpe, wordpiece)")


def check_reference(model: ClipModel, reference_npz: str | os.PathLike) -> dict:
    """Rerun the exporter's reference inputs (``clip-reference.npz``) through the robot's runtime.

    Returns
    -------
    dict
        ``pixel_max_abs`` (this preprocessing vs open_clip's), ``ids_equal`` (tokenizer vs open_clip's),
        ``image_max_abs`` / ``text_max_abs`` (ONNX Runtime here vs torch on the workstation) and
        ``image_cosine_min`` / ``text_cosine_min`` (the least cosine of an embedding with the reference's:
        the parity bound of an int8 tower, see ``models.export.quantize``).
    """
    with np.load(reference_npz) as ref:
        images = [ref[f"image_{j}"] for j in range(int(ref["n_images"]))]
        pixels = preprocess_images(images, size=model.image_size, mean=model.mean, std=model.std)
        ids = model._tok([str(t) for t in ref["texts"]])
        img = model.encode_pixels(ref["pixel_values"])
        txt = model.encode_text([str(t) for t in ref["texts"]])
        return {
            "pixel_max_abs": float(np.abs(pixels - ref["pixel_values"]).max()),
            "ids_equal": bool(np.array_equal(ids, ref["input_ids"])),
            "image_max_abs": float(np.abs(img - ref["image_embeds"]).max()),
            "text_max_abs": float(np.abs(txt - ref["text_embeds"]).max()),
            "image_cosine_min": float((img * l2_normalise(ref["image_embeds"])).sum(1).min()),
            "text_cosine_min": float((txt * l2_normalise(ref["text_embeds"])).sum(1).min()),
        }


@dataclass(frozen=True)
class Grounding:
    """Landmarks grounded in a map's images.

    Attributes
    ----------
    landmarks : list of str, the K landmark phrases.
    log_likelihood : (N, K) float64, G(v, i) for the walk search (``core.grounding``); -inf for nodes
        without an image.
    cosine : (N, K) float64, raw cosine of each node (max over its images) with each landmark.
    best_node : (K,) int64, node with the highest cosine per landmark.
    best_cosine : (K,) float64, that cosine.
    not_in_map : (K,) bool, ``~found``: the landmark is probably not in the map and the operator should
        confirm or rephrase.
    top_nodes : (K, top_k) int64, nodes by decreasing cosine (-1 pads when the map has fewer nodes
        with images), for the operator to confirm from their images.
    top_cosine : (K, top_k) float64, their cosines (-inf pads).
    found : (K,) bool, ``presence_score >= presence_rule.threshold`` (:mod:`core.presence`).
    presence_score : (K,) float64, ``best_cosine - w * median_cosine`` (``w`` = the rule's
        ``median_weight``; -inf where no node has an image).
    median_cosine : (K,) float64, the median node cosine of each landmark over the nodes with an image.
    presence_rule : :class:`core.presence.PresenceRule`, the rule that judged ``found``.
    """

    landmarks: list
    log_likelihood: np.ndarray
    cosine: np.ndarray
    best_node: np.ndarray
    best_cosine: np.ndarray
    not_in_map: np.ndarray
    top_nodes: np.ndarray
    top_cosine: np.ndarray
    found: np.ndarray
    presence_score: np.ndarray
    median_cosine: np.ndarray
    presence_rule: PresenceRule


def ground_landmarks(clip_model: ClipModel, landmarks: Sequence[str], image_emb, image_node, *, n_nodes: int,
                     logit_scale: float | None = None, normalise: str = "nodes", min_cosine: float = 0.2,
                     top_k: int = 3, max_cosine: float = 1.0, presence: PresenceRule | None = None) -> Grounding:
    """Ground landmark phrases in a map: CLIP text embeddings vs. the map's node image embeddings.

    Parameters
    ----------
    clip_model
        The opened :class:`ClipModel`; its ``model_id`` must be the model the map's embeddings came from.
    landmarks
        K landmark phrases (the prompt template is applied here).
    image_emb, image_node
        (M, D) float16/float32 image embeddings and the (M,) int64 node index of each, as
        ``core.mapstore.TopoMap.embeddings(clip_model.model_id)`` returns them.
    n_nodes
        N, nodes in the map.
    logit_scale
        Multiplies cosines before the softmax; ``None`` = the model's own (sidecar). LM-Nav Sec. 4.
    normalise
        ``"nodes"`` (LM-Nav's P(i|t)) or ``"landmarks"``, see ``core.grounding.log_likelihoods``.
    min_cosine
        Without ``presence``: absolute best cosine below which a landmark is flagged ``not_in_map`` (config
        ``[models] landmark_min_cosine``, the uncalibrated fallback).
    top_k
        Candidate nodes returned per landmark.
    max_cosine
        Cosines above it count a tenth as much in the log-likelihoods (``core.grounding.CAP_SLOPE``;
        config ``[planner] max_cosine``); 1 = off. The best nodes, cosines and ``not_in_map`` use the
        raw cosines.
    presence
        The model's calibrated "found in the map" rule (:func:`models.grounding_calibration.read_presence_rule`);
        None: the raw best cosine against ``min_cosine``.

    Raises
    ------
    ValueError
        Bad shapes or values (from ``core.grounding``), or ``top_k < 1``.
    """
    if top_k < 1:
        raise ValueError(f"top_k: expected >= 1, got {top_k}")
    text_emb = clip_model.encode_landmarks(list(landmarks))
    cos = node_similarity(image_emb, image_node, text_emb, n_nodes=n_nodes)
    scale = clip_model.logit_scale if logit_scale is None else float(logit_scale)
    loglik = log_likelihoods(cos, logit_scale=scale, normalise=normalise, max_cosine=max_cosine)
    k = len(landmarks)
    order = np.argsort(-cos, axis=0, kind="stable")[:top_k].T  # (K, <=top_k)
    top_nodes = np.full((k, top_k), -1, dtype=np.int64)
    top_cos = np.full((k, top_k), -np.inf)
    for i in range(k):
        sel = order[i][np.isfinite(cos[order[i], i])]
        top_nodes[i, : len(sel)] = sel
        top_cos[i, : len(sel)] = cos[sel, i]
    best_node = top_nodes[:, 0].copy()
    best_cos = top_cos[:, 0].copy()
    if presence is None:
        presence = fallback_rule(min_cosine)
    found, score, _, median = presence.judge(cos)
    for i in np.flatnonzero(~found):
        log.warning("landmark %r: presence score %.3f (best cosine %.3f at node %d, median %.3f) is below %.3f "
                    "(%s): probably not in the map", landmarks[i], score[i], best_cos[i], best_node[i], median[i],
                    presence.threshold, presence.source)
    return Grounding(landmarks=list(landmarks), log_likelihood=loglik, cosine=cos, best_node=best_node,
                     best_cosine=best_cos, not_in_map=~found, top_nodes=top_nodes, top_cosine=top_cos,
                     found=found, presence_score=score, median_cosine=median, presence_rule=presence)


def calibrate_min_cosine(present_best, absent_best) -> dict:
    """Absolute cosine threshold that best separates landmarks in a map from landmarks not in it.

    Parameters
    ----------
    present_best : (P,) float, best node cosine (``Grounding.best_cosine``) of landmarks known to be
        in the map.
    absent_best : (A,) float, the same for landmarks known not to be in it.

    Returns
    -------
    dict
        ``threshold`` (for ``[models] landmark_min_cosine``): the midpoint of the gap that maximises
        balanced accuracy (mean of the fraction of present landmarks at or above it and the fraction
        of absent ones below it), ``balanced_accuracy``, and the ``present`` / ``absent`` ranges.

    Raises
    ------
    ValueError
        Either list is empty or holds a non-finite value.
    """
    p = np.asarray(present_best, dtype=np.float64).ravel()
    a = np.asarray(absent_best, dtype=np.float64).ravel()
    if p.size == 0 or a.size == 0:
        raise ValueError("calibration needs at least one present and one absent landmark")
    if not (np.isfinite(p).all() and np.isfinite(a).all()):
        raise ValueError("calibration cosines must be finite (a landmark matched no node image)")
    values = np.unique(np.concatenate([p, a]))
    cands = np.concatenate([[values[0] - 1e-3], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-3]])
    score = np.array([((p >= t).mean() + (a < t).mean()) / 2 for t in cands])
    best = np.flatnonzero(score == score.max())
    t = float(cands[best[len(best) // 2]])  # middle of the best plateau
    return {"threshold": round(t, 4), "balanced_accuracy": float(score.max()),
            "present": [float(p.min()), float(p.max())], "absent": [float(a.min()), float(a.max())]}


__all__ = ["ClipModel", "Grounding", "ModelMissing", "calibrate_min_cosine", "ground_landmarks", "open_clip_model"]
