"""Landmark grounding math: CLIP embeddings -> per-node log-likelihoods G(v, i) for the walk search.

Source: LM-Nav (Shah et al., CoRL 2022) Sec. 4.2-4.4 and App. A. CLIP scores a node's image against
the landmark prompt "This is a photo of <landmark>" by cosine similarity of L2-normalised embeddings,
multiplied by CLIP's logit scale (100 for the released models). The paper's P(i_k | t) is a softmax
over the map's nodes for each landmark, which is the default here (``normalise="nodes"``). The
alternative, ``normalise="landmarks"``, is CLIP's usual zero-shot classification direction (softmax
over the landmarks for each node, P(t | i)); it makes a node that matches nothing well still sum to 1
over the landmarks, so it favours distinctive nodes differently.

Choice documented: a node with several images (several cameras or merged frames) takes the MAX
cosine over its images, as the released LM-Nav code does. A node without any image for the model gets
``-inf`` (the search never places a landmark there). Only the logit scale against ``alpha`` matters
for which walk wins: the per-landmark softmax normaliser is a constant per landmark.

Optional saturation (``max_cosine``, config ``[planner] max_cosine``; 1 = off, the paper's objective):
above it a cosine counts only :data:`CAP_SLOPE` (a tenth) as much before the softmax. LM-Nav's objective
lets the walk length choose among the places that show a landmark; with a grounding model whose score
of a clear view still varies by view (distance, angle), a view a few hundredths better elsewhere
outweighs many metres of walk, and the walk goes to another instance of the landmark than the one the
instruction's order means. Above the
cap every clear view scores nearly alike, as a perfect detector's would. The small slope left above it
breaks the ties among the views the walk passes anyway: with a flat cap the search took the first view
over it, which is the farthest, at the edge of the landmark's range (the industrial demo put "a glass
building" one node before the ground truth's 30 m); with the slope it takes the clearest. (On the
development sets the slope changes nothing: 66 % either way.) It is a measured choice, not the
paper's: it needs a model whose cosines for things it does not show stay clearly below the cap (chosen
per model pair on development data, ``robot-app eval sim-tune``).
"""

from __future__ import annotations

import math

import numpy as np

#: Weight of a cosine above ``max_cosine`` relative to one below it (see the module docstring).
CAP_SLOPE = 0.1


def _check_embeddings(name: str, emb, dim: int | None = None) -> np.ndarray:
    emb = np.asarray(emb)
    if emb.ndim != 2:
        raise ValueError(f"{name}: expected shape (M, D), got {emb.shape}")
    if dim is not None and emb.shape[1] != dim:
        raise ValueError(f"{name}: embedding size {emb.shape[1]} does not match {dim}")
    if not np.issubdtype(emb.dtype, np.floating):
        raise ValueError(f"{name}: expected a float dtype, got {emb.dtype}")
    emb = emb.astype(np.float64)
    if not np.all(np.isfinite(emb)):
        raise ValueError(f"{name}: contains NaN or inf")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    if emb.shape[0] and np.any(norms == 0):
        raise ValueError(f"{name}: contains an all-zero embedding")
    return emb / np.where(norms == 0, 1.0, norms)


def node_similarity(image_emb, image_node, text_emb, *, n_nodes: int) -> np.ndarray:
    """Cosine similarity of each node (max over its images) with each landmark text.

    Parameters
    ----------
    image_emb : (M, D) float array, image embeddings (re-normalised here; float16 from the map is fine).
    image_node : (M,) int array, node index in [0, n_nodes) of each image.
    text_emb : (K, D) float array, landmark text embeddings.
    n_nodes : int, N.

    Returns
    -------
    (N, K) float64 cosine similarity in [-1, 1]; ``-inf`` for nodes without any image.

    Raises
    ------
    ValueError
        Naming the argument: wrong shapes, mismatched D, NaN/inf, zero vectors, node index out of range.
    """
    img = _check_embeddings("image_emb", image_emb)
    txt = _check_embeddings("text_emb", text_emb, dim=img.shape[1] if img.shape[0] else None)
    nodes = np.asarray(image_node)
    if nodes.shape != (img.shape[0],) or (nodes.size and not np.issubdtype(nodes.dtype, np.integer)):
        raise ValueError(f"image_node: expected shape ({img.shape[0]},) of integers, got {nodes.shape} {nodes.dtype}")
    if n_nodes < 1:
        raise ValueError(f"n_nodes: expected >= 1, got {n_nodes}")
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n_nodes):
        raise ValueError(f"image_node: node index out of range [0, {n_nodes})")
    sim = np.full((n_nodes, txt.shape[0]), -np.inf)
    if img.shape[0] and txt.shape[0]:
        np.maximum.at(sim, nodes.astype(np.int64), img @ txt.T)
    return sim


def log_likelihoods(similarity, *, logit_scale: float, normalise: str = "nodes",
                    max_cosine: float = 1.0) -> np.ndarray:
    """G(v, i) from cosine similarities: log-softmax of ``logit_scale * s``, with ``s`` the similarity,
    or ``max_cosine + CAP_SLOPE * (similarity - max_cosine)`` above ``max_cosine``.

    Parameters
    ----------
    similarity : (N, K) float, cosine similarity; ``-inf`` where a node has no image.
    logit_scale : float > 0, CLIP's learned temperature exp(t) (100 for OpenAI CLIP); from the
        model sidecar.
    normalise : "nodes" (softmax over nodes per landmark, LM-Nav's P(i|t)) or "landmarks".
    max_cosine : float in (-1, 1], above it a cosine counts only :data:`CAP_SLOPE` as much (module
        docstring); 1 = off.

    Returns
    -------
    (N, K) float64 log-likelihoods (<= 0), ``-inf`` where the similarity was ``-inf``.

    Raises
    ------
    ValueError
        On a bad shape, NaN, a non-positive logit scale, an unknown ``normalise`` or ``max_cosine``
        outside (-1, 1].
    """
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2:
        raise ValueError(f"similarity: expected shape (N, K), got {sim.shape}")
    if np.isnan(sim).any():
        raise ValueError("similarity: contains NaN")
    if not np.isfinite(logit_scale) or logit_scale <= 0:
        raise ValueError(f"logit_scale: expected a finite value > 0, got {logit_scale}")
    if normalise not in ("nodes", "landmarks"):
        raise ValueError(f"normalise: expected 'nodes' or 'landmarks', got {normalise!r}")
    try:
        max_cosine = float(max_cosine)
    except (TypeError, ValueError):
        raise ValueError(f"max_cosine: expected a number in (-1, 1], got {max_cosine!r}") from None
    if not (math.isfinite(max_cosine) and -1.0 < max_cosine <= 1.0):
        raise ValueError(f"max_cosine: expected a value in (-1, 1], got {max_cosine}")
    axis = 0 if normalise == "nodes" else 1
    if max_cosine < 1.0:  # -inf (no image) stays -inf
        sim = np.minimum(sim, max_cosine) + CAP_SLOPE * np.maximum(sim - max_cosine, 0.0)
    logits = logit_scale * sim
    top = np.max(logits, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        lse = np.log(np.sum(np.exp(logits - top), axis=axis, keepdims=True)) + top
    return logits - lse


def landmark_log_likelihoods(image_emb, image_node, text_emb, *, n_nodes: int, logit_scale: float,
                             normalise: str = "nodes", max_cosine: float = 1.0) -> np.ndarray:
    """(N, K) float64 G(v, i) from image and text embeddings: :func:`node_similarity` then
    :func:`log_likelihoods`. See those for parameters and errors."""
    sim = node_similarity(image_emb, image_node, text_emb, n_nodes=n_nodes)
    return log_likelihoods(sim, logit_scale=logit_scale, normalise=normalise, max_cosine=max_cosine)
