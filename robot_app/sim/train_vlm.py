"""Train the sim-only stand-in VLM on rendered views of the simulated worlds, export it, measure it.

:func:`train_sim_vlm` renders labelled views (:mod:`robot_app.sim.views`), trains the small CNN image
encoder of :mod:`models.export.sim_vlm` so that the cosine of a view's embedding with the FROZEN MiniLM
embedding of a TRAIN phrasing of a category is at a fixed target when the view is labelled as showing
the category (:func:`robot_app.sim.views.label_pose`: the evaluation's ground-truth range, restricted
to what the crop shows) and low when it is labelled as not showing it, exports the CLIP-format files,
and measures them through the production runtime (:func:`models.clip.open_clip_model`, onnxruntime)
on HELD-OUT renders (other poses, other noise seed) with HELD-OUT phrasings.

Loss (per batch of B views, C categories, one train phrasing t_c drawn per category and step), over
the labelled (view, category) pairs: ``(cos(f_i, t_c) - POS_COSINE)^2`` for a seen category (two-sided:
a near, well-seen instance must not outscore a farther one that is also seen, so that among the instances
of a landmark the walk length decides, as LM-Nav's objective intends, Shah et al. 2022, Sec. 4) and
``max(0, cos - NEG_COSINE)^2`` for an unseen one (a margin, as in contrastive hinge losses), and
``max(0, cos - FAR_COSINE)^2`` for a category in clear view past the truth's range (label ``FAR``: without
it those views, never trained, scored like the seen ones, and a tree 30-35 m away, which the truth does
not count, outscored the one the instruction's order means); the seen
term is averaged over the seen pairs, the unseen and far terms over the pairs that score above their margin
(the HARD negatives: most unseen pairs sit under the margin after the first epochs, and averaging over
all of them diluted the few that score high, such as stop-sign views for "a red building"; the same
idea as mining the hardest negatives of a batch, Schroff et al. 2015, Faghri et al. 2018); the unseen
term weighs :data:`NEG_WEIGHT` (2) against the others, see there. Training "as high as possible"
instead (a sigmoid loss plus a softmax contrastive term) made the cosine for
one object depend on the view so much that a far instance seen well outscored the near one by many
nats on the map.

Quality (LM-Nav, Shah et al. 2022, Table 3, "landmark retrieval"): for each landmark phrase and each
world, rank that world's held-out views by cosine with the prompted phrase ("This is a photo of ___",
LM-Nav App. A); a hit when one of the 3 best views shows the landmark. Chance: the same probability
for a random ranking, ``1 - C(N - P, 3) / C(N, 3)`` with P of N views showing it. Views where the
landmark is only partly visible (label -1) are left out of its ranking.

Calibration: ``logit_scale`` is the temperature that maximises the mean held-out log-likelihood of EACH
view showing a landmark under the softmax over a world's views (cross-entropy to the uniform distribution
over those views, :func:`_calibrate_scale`) (temperature scaling, Guo et al. 2017,
Sec. 4.2), on held-out MAP-LIKE views only (poses on the paths, heading along them: what the planner's
softmax runs over, LM-Nav's P(v | l) over map nodes; the figure over all held-out views is kept as
``logit_scale_all_views``); ``landmark_min_cosine`` separates the best-view cosine of landmarks in a
world from that of landmarks absent from it (:func:`models.clip.calibrate_min_cosine`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path

import numpy as np

from models.clip import calibrate_min_cosine, open_clip_model
from models.export.sim_vlm import MEAN, STD, embed_texts, export_sim_vlm, image_encoder, load_text_encoder
from robot_app.sim.views import (
    BUILDING_SEEN_RANGE,
    CATEGORIES,
    FAR,
    PHRASES,
    SEEN_RANGE,
    ViewSet,
    render_views,
    sample_poses,
)
from robot_app.sim.world import load_world

__all__ = ["train_sim_vlm", "retrieval_top_k", "alignment_loss", "TRAIN_TEMPLATES", "ABSENT_PHRASES"]

log = logging.getLogger(__name__)

IMAGE_SIZE = 64
#: Prompt templates applied to TRAIN phrasings during training (the runtime prompt is the first).
TRAIN_TEMPLATES = ("This is a photo of {}", "{}", "a photo of {}", "a picture of {}")
#: Landmarks that no shipped world contains (for the not-in-map threshold).
ABSENT_PHRASES = ("a yellow school bus", "a fountain", "a bicycle", "a swimming pool", "a helicopter",
                  "a statue of a horse", "a red fire truck", "a wind turbine")
#: (train views per world, held-out views per world, epochs) of a full and of a quick run.
FULL = (6000, 600, 12)
QUICK = (120, 60, 2)
#: Held-out map-like views per world (on the paths) for the logit-scale calibration: full, quick.
CALIB = (400, 30)
_SIZES = ((160, 120), (320, 240))
_SIZE_WEIGHTS = (0.9, 0.1)
#: Target cosine of a seen category's phrasing, and the margin an unseen one must stay under.
POS_COSINE = 0.5
NEG_COSINE = 0.15
#: Margin for a thing in clear view just past the truth's range (label ``FAR``).
FAR_COSINE = 0.3
#: Weight of the unseen (hard-negative) term against the seen and FAR terms. With the FAR term and
#: weight 1, the model leaned on apparent size and scored a traffic cone's views for "a fire hydrant"
#: about as high as a far hydrant's (0.28-0.34 at the 90th percentile of the development maps' cone
#: views, both seeds; 0.15-0.18 without the FAR labels); with 2, 0.22-0.23 (seed 1: 0.29 and 0.22), and
#: the same or better development-set planning success (docs/experiments.md).
NEG_WEIGHT = 2.0


def retrieval_top_k(cos: np.ndarray, labels: np.ndarray, *, k: int = 3) -> tuple[float, float] | None:
    """Top-k hit and its chance level for one landmark query over one world's views.

    Parameters
    ----------
    cos : (N,) float, cosine of each view with the query.
    labels : (N,) int, 1 view shows the landmark, 0 it does not, -1 unsure or FAR (left out).

    Returns
    -------
    (hit, chance) or None when no view shows the landmark: ``hit`` 1.0 if one of the k best views
    shows it, ``chance`` the probability of that for a random ranking.
    """
    keep = (np.asarray(labels) == 0) | (np.asarray(labels) == 1)
    c, lab = np.asarray(cos)[keep], np.asarray(labels)[keep]
    n, p = len(c), int((lab == 1).sum())
    if p == 0:
        return None
    top = np.argsort(-c, kind="stable")[:k]
    hit = float((lab[top] == 1).any())
    kk = min(k, n)
    chance = 1.0 - math.comb(n - p, kk) / math.comb(n, kk)
    return hit, chance


#: Training views are cut as the map's CLIP cuts a frame with ``[camera] clip_crops = CROPS``
#: (:func:`robot_app.mapping.image_prep.centre_crops`: left, centre, right square), drawn with these weights:
#: the model must know a landmark at the frame's edge, which only the side crops show whole.
CROPS = 3
CROP_WEIGHTS = (0.25, 0.5, 0.25)


def _render(worlds, n_per_world, *, seed: int, bar, targeted_fraction: float = 0.4) -> ViewSet:
    """Views of every world: ``n_per_world`` each, or ``n_per_world[i]`` of world i (a sequence)."""
    parts = []
    counts = [n_per_world] * len(worlds) if np.isscalar(n_per_world) else list(n_per_world)
    for wi, w in enumerate(worlds):
        n_per_world = int(counts[wi])
        rng = np.random.default_rng([seed, wi, 11])
        poses = sample_poses(w, n_per_world, rng=rng, targeted_fraction=targeted_fraction)
        parts.append(render_views(w, poses, image_size=IMAGE_SIZE, seed=seed * 1000 + wi, sizes=_SIZES,
                                  size_weights=_SIZE_WEIGHTS, crops=CROPS, crop_weights=CROP_WEIGHTS,
                                  progress=bar.update if bar else None))
    return ViewSet.concat(parts)


def _text_bank(text_encoder, tokenizer):
    """(M, 384) embeddings of every category's TRAIN phrasing x template, and each row's category."""
    texts, cat = [], []
    for ci, c in enumerate(CATEGORIES):
        for ph in PHRASES[c][0]:
            for t in TRAIN_TEMPLATES:
                texts.append(t.replace("{}", ph))
                cat.append(ci)
    return embed_texts(texts, text_encoder, tokenizer), np.asarray(cat)


def _augment(torch, x, gen):
    """Random horizontal flip and brightness/contrast jitter of a (B, 3, S, S) [0, 1] batch."""
    b = x.shape[0]
    flip = torch.rand(b, generator=gen) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    gain = 1.0 + 0.25 * (torch.rand(b, 1, 1, 1, generator=gen) - 0.5)
    bias = 0.08 * (torch.rand(b, 1, 1, 1, generator=gen) - 0.5)
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return ((x - mean) * gain + mean + bias).clamp(0.0, 1.0)


def alignment_loss(cos, labels):
    """Training loss of one batch (module docstring): target for seen pairs, hinge on hard negatives.

    Parameters
    ----------
    cos : torch float tensor (B, C), cosine of each view's embedding with a train phrasing of each category.
    labels : torch int tensor (B, C), 1 seen, 0 unseen, FAR in clear view past the range, -1 unsure (left out).

    Returns
    -------
    Scalar tensor: the mean of ``(cos - POS_COSINE)^2`` over the seen pairs plus :data:`NEG_WEIGHT` times
    the mean of ``max(0, cos - NEG_COSINE)^2`` over the unseen pairs above ``NEG_COSINE`` plus the mean of
    ``max(0, cos - FAR_COSINE)^2`` over the FAR pairs above ``FAR_COSINE`` (0 for an empty set).
    """
    import torch.nn.functional as F

    pos = (labels == 1).float()
    l_pos = ((cos - POS_COSINE) ** 2 * pos).sum() / pos.sum().clamp(min=1.0)

    def hinge(mask, margin):  # mean over the pairs of ``mask`` that score above ``margin``
        viol = F.relu(cos - margin) ** 2 * mask.float()
        return viol.sum() / (viol > 0).float().sum().clamp(min=1.0)

    l_neg = hinge(labels == 0, NEG_COSINE)
    l_far = hinge(labels == FAR, FAR_COSINE)
    return l_pos + NEG_WEIGHT * l_neg + l_far


def _train(train: ViewSet, bank, bank_cat, *, epochs: int, seed: int, batch: int = 64, bar=None,
           text_projection: float | None = None):
    """Train the image encoder (and, when ``text_projection`` is a number, a linear text projection W
    initialised to the identity, with ``text_projection x ||W - I||_F^2`` added to the loss so that it stays
    near MiniLM's geometry and carries over to phrasings it was not trained on). Returns
    ``(model, loss per epoch, W as a (384, 384) float32 array or None)``."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = image_encoder()
    steps = epochs * math.ceil(len(train) / batch)
    groups = [{"params": list(model.parameters()), "weight_decay": 1e-4}]
    w_text = None
    if text_projection is not None:
        eye = torch.eye(bank.shape[1])
        w_text = torch.nn.Parameter(eye.clone())
        groups.append({"params": [w_text], "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=2e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    imgs = torch.from_numpy(train.images).permute(0, 3, 1, 2).contiguous()  # uint8 (N, 3, S, S)
    labels = torch.from_numpy(train.labels.astype(np.int64))
    bank_t = torch.from_numpy(bank)
    rows_of = [torch.from_numpy(np.flatnonzero(bank_cat == c)) for c in range(len(CATEGORIES))]
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    history = []
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(train), generator=gen)
        total = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            x = _augment(torch, imgs[idx].float() / 255.0, gen)
            f = model((x - mean) / std)
            pick = torch.stack([r[torch.randint(len(r), (1,), generator=gen)][0] for r in rows_of])
            t = bank_t[pick]
            if w_text is not None:
                t = F.normalize(t @ w_text.T, dim=-1)
            cos = f @ t.T  # (B, C)
            loss = alignment_loss(cos, labels[idx])
            if w_text is not None:
                loss = loss + text_projection * ((w_text - eye) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
            if bar is not None:
                bar.update(1)
        history.append(round(total / len(train), 4))
        log.info("epoch %d/%d: loss %.5f", epoch + 1, epochs, history[-1])
    model.eval()
    return model, history, (None if w_text is None else w_text.detach().numpy().astype(np.float32))


def _mean(pairs, i: int):
    return round(float(np.mean([p[i] for p in pairs])), 3) if pairs else None


def _world_queries(clip, emb: np.ndarray, labels: np.ndarray) -> dict:
    """Retrieval results of every phrasing over one world's views (see :func:`_evaluate`)."""
    out: dict = {"held_out": [], "train": [], "top1": [], "pos_sets": [], "present_best": []}
    for ci, c in enumerate(CATEGORIES):
        lab = labels[:, ci]
        for split, phrases in (("held_out", PHRASES[c][1]), ("train", PHRASES[c][0])):
            cos_all = emb @ clip.encode_landmarks(list(phrases)).T  # (n, P)
            for j in range(len(phrases)):
                r = retrieval_top_k(cos_all[:, j], lab)
                if r is None:
                    continue
                out[split].append(r)
                if split == "held_out":
                    out["top1"].append(retrieval_top_k(cos_all[:, j], lab, k=1))
                    keep = (lab == 0) | (lab == 1)
                    out["pos_sets"].append((cos_all[keep, j], lab[keep] == 1))
                    out["present_best"].append(float(cos_all[lab == 1, j].max()))
    return out


def _calibration_sets(clip, calib: ViewSet, worlds) -> list:
    """(cosines, shows-it) per held-out phrasing and world over the map-like calibration views."""
    emb = clip.encode_images(list(calib.images), batch_size=64)
    names = np.asarray(calib.world)
    out = []
    for w in worlds:
        sel = names == w.name
        out.extend(_world_queries(clip, emb[sel], calib.labels[sel])["pos_sets"])
    return out


def _evaluate(clip, held: ViewSet, worlds, calib: ViewSet | None = None) -> dict:
    """Retrieval top-3 / top-1 per world and overall, calibration of the logit scale (on ``calib`` when
    given) and min cosine."""
    emb = clip.encode_images(list(held.images), batch_size=64)
    names = np.asarray(held.world)
    absent_emb = clip.encode_landmarks(list(ABSENT_PHRASES))
    res: dict = {"views_per_world": {}, "per_world": {}}
    acc: dict = {"held_out": [], "train": [], "top1": [], "pos_sets": [], "present_best": [], "absent_best": []}
    for w in worlds:
        sel = names == w.name
        q = _world_queries(clip, emb[sel], held.labels[sel])
        res["views_per_world"][w.name] = int(sel.sum())
        res["per_world"][w.name] = {"top3_held_out": _mean(q["held_out"], 0), "top3_train": _mean(q["train"], 0),
                                    "chance_top3_held_out": _mean(q["held_out"], 1)}
        for k, v in q.items():
            acc[k].extend(v)
        acc["absent_best"].extend((emb[sel] @ absent_emb.T).max(axis=0).tolist())
    for s in ("held_out", "train"):
        res[f"top3_{s}_phrasings"] = _mean(acc[s], 0)
        res[f"chance_top3_{s}_phrasings"] = _mean(acc[s], 1)
        res[f"queries_{s}"] = len(acc[s])
    res["top1_held_out_phrasings"] = _mean(acc["top1"], 0)
    res["chance_top1_held_out_phrasings"] = _mean(acc["top1"], 1)
    res["logit_scale_all_views"] = _calibrate_scale(acc["pos_sets"])
    res["logit_scale"] = _calibrate_scale(_calibration_sets(clip, calib, worlds)) if calib is not None \
        else res["logit_scale_all_views"]
    pb = np.asarray(acc["present_best"])
    res["min_cosine"] = calibrate_min_cosine(pb, acc["absent_best"])
    res["present_best_cosine_min"] = round(float(pb.min()), 4) if pb.size else None
    # share of present landmarks (held-out phrasings) that ground_landmarks would flag as not in the map
    res["present_flagged_at_threshold"] = round(float((pb < res["min_cosine"]["threshold"]).mean()), 3)
    res["present_flagged_at_config_default_0.2"] = round(float((pb < 0.2).mean()), 3)
    return res


def _calibrate_scale(pos_sets) -> float:
    """Scale minimising the cross-entropy between the softmax over the views and the uniform distribution
    over the views that show the landmark (mean log-probability of each such view).

    The target is uniform because the planner needs every view of a landmark alike: which instance (and
    which view of it) a walk should use is for the walk's length to decide (LM-Nav Sec. 4), not for how
    well one view happens to show it. Maximising the softmax mass on the set of views instead
    lets one view take all the mass and gives a sharper scale (about 39 against 23
    for the shipped model) that makes far instances outscore near ones by many nats on the map.
    """
    grid = np.exp(np.linspace(np.log(2.0), np.log(200.0), 60))
    best, best_ll = float(grid[0]), -np.inf
    for s in grid:
        ll = 0.0
        for cos, pos in pos_sets:
            z = s * cos
            ll += float(np.mean(z[pos])) - float(np.logaddexp.reduce(z))
        if ll > best_ll:
            best, best_ll = float(s), ll
    return round(best, 2)


def train_sim_vlm(worlds, out_dir: str | os.PathLike, *, seed: int = 0, quick: bool = False,
                  progress: bool = True, threads: int | None = None, views_per_world: tuple | None = None,
                  epochs: int | None = None, provenance: dict | None = None,
                  text_projection: float | None = None) -> dict:
    """Render, train, export and measure the sim-only stand-in VLM.

    Parameters
    ----------
    worlds
        World names or files (e.g. ``["campus", "industrial"]``), or loaded :class:`World` objects.
    out_dir
        Folder for ``clip-image.onnx``, ``clip-text.onnx``, their sidecars, ``clip-tokenizer.json``,
        ``clip-reference.npz`` and ``sim-vlm-quality.json`` (created; those files are replaced).
    seed
        Seeds poses, sensor noise, initialisation and batches (held-out views use other seeds).
    quick
        Small data and 2 epochs (tests); the figures then mean little.
    progress
        tqdm progress bars on stderr.
    threads
        torch intra-op threads (default: half the cores, at most 4; on a busy 2-core machine one thread
        trains about 4x faster than two).
    views_per_world
        (train, held-out, calibration) views rendered per world, instead of :data:`FULL` / :data:`CALIB`
        (many generated worlds: fewer views each, the same total); or a dict of such tuples by world name,
        with the key ``"*"`` for the worlds it does not name.
    epochs
        Training epochs instead of :data:`FULL`'s.
    text_projection
        None: the text tower is frozen MiniLM alone. A number lambda: a linear text projection W (384 x 384,
        from the identity) is trained with the image encoder, with ``lambda ||W - I||_F^2`` in the loss, and
        exported inside ``clip-text.onnx``.
    provenance
        Recorded in the image tower's sidecar and the quality file (e.g. the generated worlds' seed range:
        ``{"train_seeds": [first, last], "train_split": "train"}``), so that tuning and evaluation can be
        checked against it.

    Returns
    -------
    dict
        The quality figures also written to ``sim-vlm-quality.json``: ``top3_held_out_phrasings``,
        ``top3_train_phrasings``, their ``chance_*`` levels, per-world figures, the calibrated
        ``logit_scale`` and ``min_cosine``, the training loss per epoch, data sizes, wall times (s),
        file sizes (bytes).

    Raises
    ------
    ValueError
        ``worlds`` is empty. :class:`robot_app.sim.world.WorldError` for a world that does not load;
        ``models.export.common.ExportError`` when an export check fails; ImportError without the
        ``export`` and ``sim`` extras.
    """
    import torch
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no tqdm monitor thread: nothing outlives the job

    if isinstance(worlds, (str, os.PathLike)) or not worlds:
        raise ValueError(f"worlds: expected a non-empty list of world names or files, got {worlds!r}")
    worlds = [w if hasattr(w, "objects") else load_world(w) for w in worlds]
    n_train, n_held, full_epochs = QUICK if quick else FULL
    n_calib = CALIB[1] if quick else CALIB[0]
    if isinstance(views_per_world, dict):
        per = [tuple(int(v) for v in views_per_world.get(w.name, views_per_world["*"])) for w in worlds]
        n_train, n_held, n_calib = ([p[k] for p in per] for k in range(3))
    elif views_per_world is not None:
        n_train, n_held, n_calib = (int(v) for v in views_per_world)
    epochs = int(epochs) if epochs else full_epochs
    torch.set_num_threads(int(threads) if threads else max(1, min(4, (os.cpu_count() or 2) // 2)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    total = sum(int(np.sum(n) if not np.isscalar(n) else n * len(worlds)) for n in (n_train, n_held, n_calib))
    with tqdm(total=total, desc="sim VLM: rendering views", unit="view",
              disable=not progress) as bar:
        train = _render(worlds, n_train, seed=seed, bar=bar)
        held = _render(worlds, n_held, seed=seed + 7919, bar=bar)  # other poses, other sensor noise
        calib = _render(worlds, n_calib, seed=seed + 104729, bar=bar, targeted_fraction=0.0)  # map-like
    t_render = time.monotonic() - t0
    text_encoder, tokenizer = load_text_encoder()
    bank, bank_cat = _text_bank(text_encoder, tokenizer)
    steps = epochs * math.ceil(len(train) / 64)
    t1 = time.monotonic()
    with tqdm(total=steps, desc="sim VLM: training", unit="step", disable=not progress) as bar:
        model, history, w_text = _train(train, bank, bank_cat, epochs=epochs, seed=seed, bar=bar,
                                        text_projection=text_projection)
    text_encoder.set_projection(w_text)
    t_train = time.monotonic() - t1
    # provisional export (scale from training), then calibrate on held-out views and re-export
    ref_images = list(held.images[:4])
    first = export_sim_vlm(out, model, image_size=IMAGE_SIZE, text_encoder=text_encoder, tokenizer=tokenizer,
                           logit_scale=1.0 / (POS_COSINE - NEG_COSINE), reference_images=ref_images)
    quality = _evaluate(open_clip_model(out, warm_up=False), held, worlds, calib)
    extra = {"landmark_min_cosine": quality["min_cosine"]["threshold"], "train_seed": int(seed),
             "train_worlds": [w.name for w in worlds], "quality": "sim-vlm-quality.json",
             "clip_crops": CROPS,  # the map's crops it was trained on (robot_app.sim.model_clip_crops)
             **(provenance or {})}
    summary = export_sim_vlm(out, model, image_size=IMAGE_SIZE, text_encoder=text_encoder, tokenizer=tokenizer,
                             logit_scale=quality["logit_scale"], reference_images=ref_images, extra_params=extra,
                             reuse_text=first["text"])
    quality.update(
        sim_only=True, quick=bool(quick), seed=int(seed), worlds=[w.name for w in worlds], **(provenance or {}),
        train_views=len(train), held_out_views=len(held), calibration_views=len(calib),
        epochs=epochs, image_size=IMAGE_SIZE, clip_crops=CROPS, crop_weights=list(CROP_WEIGHTS),
        train_positive_per_category={c: int(v) for c, v in zip(CATEGORIES, (train.labels == 1).sum(axis=0))},
        train_loss=history, target_cosine={"seen": POS_COSINE, "unseen_below": NEG_COSINE, "far_below": FAR_COSINE},
        unseen_weight=NEG_WEIGHT, text_projection=("none" if text_projection is None
                                                   else {"kind": "linear", "identity_penalty": text_projection}),
        unseen_loss="mean over the unseen pairs above the margin (hard negatives)",
        seen_range={"objects": SEEN_RANGE, "buildings": BUILDING_SEEN_RANGE},
        text_int8_cosine_min=summary["text"].get("int8_cosine_min"), size_bytes=summary["size_bytes"],
        wall_s={"render": round(t_render, 1), "train": round(t_train, 1),
                "total": round(time.monotonic() - t0, 1)}, torch_threads=torch.get_num_threads(),
        machine={"cpus": os.cpu_count(), "load_average_at_start": round(load0, 2)})
    (out / "sim-vlm-quality.json").write_text(json.dumps(quality, indent=2) + "\n", encoding="utf-8")
    log.info("sim VLM: top-3 retrieval %.3f held-out phrasings (chance %.3f), %.3f train phrasings",
             quality["top3_held_out_phrasings"] or 0.0, quality["chance_top3_held_out_phrasings"] or 0.0,
             quality["top3_train_phrasings"] or 0.0)
    return quality


def main(argv=None) -> int:
    """``python -m robot_app.sim.train_vlm OUT_DIR [--quick] [--seed N] [--world W ...]`` (developer entry)."""
    import argparse

    ap = argparse.ArgumentParser(description="train the sim-only stand-in VLM (CLIP file format)")
    ap.add_argument("out", help="output folder")
    ap.add_argument("--world", action="append", default=None, help="world name or file (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("robot_app", "models"):  # onnxruntime's quantiser logs every tensor at INFO on the root
        logging.getLogger(name).setLevel(logging.INFO)
    q = train_sim_vlm(args.world or ["campus", "industrial"], args.out, seed=args.seed, quick=args.quick)
    print(json.dumps({k: q[k] for k in ("top3_held_out_phrasings", "chance_top3_held_out_phrasings",
                                        "top3_train_phrasings", "logit_scale", "min_cosine", "wall_s")}, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
