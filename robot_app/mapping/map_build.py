"""The map-building job: traversal logs -> topological map file (LM-Nav Algorithm 2, App. B).

Reads the logs (:mod:`core.tlog`), selects nodes and edges with :mod:`core.graph_build`, measures
candidate pairs with the VNM (:mod:`models.vnm`) or, without one, with GPS distance at the robot's
nominal speed (LM-Nav's own GPS ablation), embeds node images with CLIP when installed, and writes the
map with :class:`core.mapstore.MapWriter` (a half-built map never appears under the map's name).

Resumable: VNM distances are checkpointed in ``MAP.build-cache.sqlite`` (keyed by log, frame pair
and VNM file hash) as batches finish; an interrupted build started again reuses them; the cache is
deleted when the map is complete.
"""

from __future__ import annotations

import io
import json
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from core import graph_build as gb
from core.mapstore import MapWriter
from core.tlog import TraversalLog, frame_positions, read_log
from robot_app.mapping.image_prep import clip_views

log = logging.getLogger(__name__)


@dataclass
class BuildNodes:
    """Selected nodes of all logs, in log then time order."""

    log_index: np.ndarray        # (M,) int64, which log
    frame_index: np.ndarray      # (M,) int64, index into that log's frame arrays
    t_s: np.ndarray              # (M,) float64 log time
    lat_deg: np.ndarray
    lon_deg: np.ndarray
    xy_m: np.ndarray             # (M, 2) UTM easting/northing in one zone (the first log's)
    heading_rad: np.ndarray      # (M,) yaw CCW from east from the smoothed GPS track (gb.track_headings), NaN unknown
    gap_before: np.ndarray       # (M,) bool: recording gap > epsilon since the previous node of the log


@dataclass
class BuildReport:
    nodes: int = 0
    edges: dict = field(default_factory=dict)
    candidate_pairs: int = 0
    vnm_evaluations: int = 0
    vnm_cached: int = 0
    rejected_wormholes: int = 0
    rejected_far: int = 0
    gps_floored: int = 0  # VNM edges whose weight the GPS floor raised
    removed_redundant: int = 0
    components: int = 0
    distance_source: str = ""
    clip_model: str | None = None
    phase_s: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# how node headings are made (core.graph_build.track_headings); maps without it have headings from
# consecutive fixes, too noisy for the VNM navigator's GPS stretches (robot_app.jobs.mission ignores them)
HEADINGS_METHOD = "gps-track-3"


def _utm_xy(lat: np.ndarray, lon: np.ndarray, zone: tuple[int, str] | None):
    import utm

    if zone is None:
        _, _, z, letter = utm.from_latlon(float(lat[0]), float(lon[0]))
        zone = (z, letter)
    e, n, _, _ = utm.from_latlon(lat, lon, force_zone_number=zone[0], force_zone_letter=zone[1])
    return np.stack([np.asarray(e, float), np.asarray(n, float)], axis=1), zone


def _odometer_at(tl: TraversalLog) -> np.ndarray | None:
    """Distance driven (m) up to each frame from the log's wheel odometry, or None without it.

    Used for node spacing because GPS noise lengthens a track measured from fixes (2 m of noise can
    triple the node count, and the VNM work with it).
    """
    o = tl.odom
    if o["t_s"].size < 2 or tl.frame_t_s.size == 0:
        return None
    step = np.hypot(np.diff(o["x_m"]), np.diff(o["y_m"]))
    if not np.all(np.isfinite(step)):
        return None
    cum = np.concatenate([[0.0], np.cumsum(step)])
    return np.interp(tl.frame_t_s, o["t_s"], cum)


def select_build_nodes(logs: Sequence[TraversalLog], *, min_travel_m: float, min_dt_s: float,
                       epsilon_s: float) -> BuildNodes:
    """Nodes of every log (frames with a GPS position, subsampled by travel)."""
    parts = []
    zone = None
    for li, tl in enumerate(logs):
        lat, lon, valid = frame_positions(tl)
        if not valid.any():
            log.warning("%s: no frame has a GPS fix; the log adds no node", tl.folder)
            continue
        xy = np.full((lat.size, 2), np.nan)
        xy_valid, zone = _utm_xy(lat[valid], lon[valid], zone)
        xy[valid] = xy_valid
        idx = gb.select_nodes(tl.frame_t_s, xy, min_travel_m=min_travel_m, min_dt_s=min_dt_s,
                              odometer_m=_odometer_at(tl))
        ft = tl.frame_t_s
        frame_gaps = np.concatenate([[0.0], np.diff(ft)]) > epsilon_s
        gap_count = np.cumsum(frame_gaps)
        gap_before = np.zeros(idx.size, dtype=bool)
        gap_before[1:] = gap_count[idx[1:]] != gap_count[idx[:-1]]
        # GPS fixes missing between two nodes also break the temporal chain
        invalid_count = np.cumsum(~valid)
        gap_before[1:] |= invalid_count[idx[1:]] != invalid_count[idx[:-1]]
        heading = gb.track_headings(xy[idx], gap_before)
        parts.append((np.full(idx.size, li), idx, ft[idx], lat[idx], lon[idx], xy[idx], heading, gap_before))
    if not parts:
        raise ValueError("no log has frames with GPS fixes: nothing to build a map from")
    cat = [np.concatenate([p[j] for p in parts]) for j in range(8)]
    return BuildNodes(cat[0].astype(np.int64), cat[1].astype(np.int64), *cat[2:5], cat[5].reshape(-1, 2), *cat[6:])


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> (H, W, 3) uint8 RGB."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


class DistanceCache:
    """Checkpoint of measured pair distances (``MAP.build-cache.sqlite``)."""

    def __init__(self, path: Path, model_id: str):
        self.path = path
        self._conn = sqlite3.connect(path)
        with self._conn:
            self._conn.execute("CREATE TABLE IF NOT EXISTS d(key TEXT PRIMARY KEY, steps REAL NOT NULL)")
            self._conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'model'").fetchone()
            if row is not None and row[0] != model_id:
                log.info("build cache %s was made with another model: discarded", path)
                self._conn.execute("DELETE FROM d")
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('model', ?)", (model_id,))

    def get(self, keys: list[str]) -> dict[str, float]:
        out = {}
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            q = f"SELECT key, steps FROM d WHERE key IN ({', '.join('?' * len(part))})"
            out.update(self._conn.execute(q, part).fetchall())
        return out

    def put(self, items: dict[str, float]) -> None:
        with self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO d VALUES (?, ?)", list(items.items()))

    def close(self, *, delete: bool) -> None:
        self._conn.close()
        if delete:
            self.path.unlink(missing_ok=True)


def vnm_pair_distances(vnm, logs, nodes: BuildNodes, pairs: np.ndarray, cache: DistanceCache, *,
                       batch: int, progress: Callable[[int], None]) -> tuple[np.ndarray, int]:
    """D(i -> j) in VNM time steps for each pair (i, j): observation context at node i (its frame and
    the ``context_size`` frames before it at the VNM's frame rate), goal = node j's frame.

    Returns (P,) float64 and the number of VNM goal evaluations run (cache hits excluded).
    """
    keys = [
        f"{nodes.log_index[i]}:{nodes.frame_index[i]}>{nodes.log_index[j]}:{nodes.frame_index[j]}" for i, j in pairs
    ]
    known = cache.get(keys)
    out = np.array([known.get(k, np.nan) for k in keys], dtype=np.float64)
    todo = np.flatnonzero(np.isnan(out))
    progress(len(keys) - todo.size)
    runs = 0
    by_obs: dict[int, list[int]] = {}
    for p in todo:
        by_obs.setdefault(int(pairs[p, 0]), []).append(int(p))
    frame_cache: dict[tuple[int, int], np.ndarray] = {}

    def frame(li: int, fi: int) -> np.ndarray:
        key = (li, fi)
        if key not in frame_cache:
            tl = logs[li]
            frame_cache[key] = vnm.preprocess(decode_jpeg(tl.frame_jpeg([tl.frame_id[fi]])[0]))
            if len(frame_cache) > 4096:
                frame_cache.pop(next(iter(frame_cache)))
        return frame_cache[key]

    for i, plist in by_obs.items():
        li, fi = int(nodes.log_index[i]), int(nodes.frame_index[i])
        ft = logs[li].frame_t_s
        want = ft[fi] - np.arange(vnm.context_size, -1, -1) / vnm.frame_rate_hz
        ctx_idx = np.clip(np.searchsorted(ft, want - 1e-6), 0, fi)
        obs = np.concatenate([frame(li, int(c)) for c in ctx_idx], axis=0)[None]
        for s in range(0, len(plist), batch):
            chunk = plist[s:s + batch]
            goals = np.stack([frame(int(nodes.log_index[pairs[p, 1]]), int(nodes.frame_index[pairs[p, 1]]))
                              for p in chunk])
            d = vnm.predict(obs, goals).dist_steps.astype(np.float64)
            out[chunk] = d
            runs += len(chunk)
            cache.put({keys[p]: float(x) for p, x in zip(chunk, d)})
            progress(len(chunk))
    return out, runs


def _progress_bar(total: int, desc: str, enabled: bool, unit: str = "pair"):
    """A tqdm bar on stderr (no monitor thread: nothing outlives the job)."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False, dynamic_ncols=True)


def _open_optional(factory_path: str, models_dir: Path, config, what: str):
    """Open a model with ``module:function``; None (with a logged reason) when it is not installed."""
    import importlib

    module, func = factory_path.split(":")
    try:
        from models.sidecar import ModelMissing

        return getattr(importlib.import_module(module), func)(models_dir, config=config)
    except ModelMissing as exc:
        log.warning("%s not installed (%s): using the fallback", what, exc)
        return None


def build_map(
    log_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    config,
    models_dir: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = False,
    use_vnm: bool = True,
    use_clip: bool = True,
) -> BuildReport:
    """Build a map file from traversal logs. Returns the build report.

    Raises
    ------
    core.tlog.LogFormatError
        A log folder is not a readable log.
    ValueError
        No log has frames with GPS fixes.
    FileExistsError
        ``out`` exists and ``overwrite`` is False.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    mc = config.mapping
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give the map file's name (e.g. {out}/map.sqlite)")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {out.parent} does not exist")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: map exists (use --overwrite to replace it)")
    models_dir = Path(models_dir or config.paths.models_dir)
    report = BuildReport()
    t0 = time.perf_counter()
    logs = [read_log(d) for d in log_dirs]
    nodes = select_build_nodes(logs, min_travel_m=mc.min_travel_m, min_dt_s=mc.min_dt_s, epsilon_s=mc.epsilon_s)
    m = nodes.t_s.size
    report.nodes = m
    vnm = _open_optional("models.vnm:open_vnm", models_dir, config, "VNM") if use_vnm else None
    frame_rate = vnm.frame_rate_hz if vnm is not None else mc.frame_rate_hz
    ts, td, tw = gb.temporal_edges(nodes.t_s, nodes.log_index, nodes.gap_before, frame_rate_hz=frame_rate)
    temporal = set(zip(ts.tolist(), td.tolist()))
    report.phase_s["nodes"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    pairs = gb.candidate_pairs(nodes.xy_m, k=mc.candidate_k, radius_m=mc.candidate_radius_m, exclude=temporal)
    report.candidate_pairs = int(len(pairs))
    gps_d = np.linalg.norm(nodes.xy_m[pairs[:, 0]] - nodes.xy_m[pairs[:, 1]], axis=1) if len(pairs) else np.zeros(0)
    report.phase_s["pairs"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    if vnm is not None:
        tau = mc.tau_steps if mc.tau_steps > 0 else 0.75 * vnm.dist_range_steps[1]
        cache = DistanceCache(out.with_name(out.name + ".build-cache.sqlite"), vnm.model_id)
        with _progress_bar(len(pairs), "VNM distances", progress) as bar:
            dist, runs = vnm_pair_distances(vnm, logs, nodes, pairs, cache, batch=mc.vnm_batch, progress=bar.update)
        report.vnm_evaluations, report.vnm_cached = runs, int(len(pairs) - runs)
        source, report.distance_source = "vnm", f"vnm ({vnm.model_id})"
    else:
        cache = None
        m_per_step = mc.nominal_speed_mps / frame_rate
        dist = gps_d / m_per_step
        tau = mc.gps_link_m / m_per_step
        source, report.distance_source = "gps", f"gps fallback ({mc.nominal_speed_mps} m/s nominal speed)"
    decision = gb.decide_pairs(dist, gps_d, tau_steps=tau, eta_m=mc.eta_m)
    report.rejected_wormholes, report.rejected_far = decision.wormholes, decision.too_far
    report.phase_s["distances"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    src = np.concatenate([ts, pairs[decision.keep, 0]])
    dst = np.concatenate([td, pairs[decision.keep, 1]])
    vw = np.maximum(dist[decision.keep], 0.0)
    if source == "vnm" and mc.gps_floor:
        floored = gb.gps_floor(vw, gps_d[decision.keep], m_per_step=mc.nominal_speed_mps / frame_rate,
                               tolerance_m=mc.gps_floor_tolerance_m)
        report.gps_floored = int(np.count_nonzero(floored > vw))
        vw = floored
    w = np.concatenate([tw, vw])
    kind = np.array(["temporal"] * len(ts) + [source] * int(decision.keep.sum()))
    keep = gb.reduce_edges(m, src, dst, w, tolerance=mc.reduction_tolerance)
    report.removed_redundant = int((~keep).sum())
    src, dst, w, kind = src[keep], dst[keep], w[keep], kind[keep]
    report.edges = {k: int((kind == k).sum()) for k in ("temporal", "vnm", "gps")}
    g = csr_matrix((np.ones(len(src)), (src, dst)), shape=(m, m))
    report.components = int(connected_components(g, directed=False)[0])
    report.phase_s["reduction"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    clip = _open_optional("models.clip:open_clip_model", models_dir, config, "CLIP") if use_clip else None
    report.clip_model = getattr(clip, "model_id", None) if clip is not None else None
    meta = {"build": {"logs": [str(Path(d)) for d in log_dirs], "epsilon_s": mc.epsilon_s,
                      "min_travel_m": mc.min_travel_m, "min_dt_s": mc.min_dt_s, "tau_steps": tau, "eta_m": mc.eta_m,
                      "candidate_k": mc.candidate_k, "candidate_radius_m": mc.candidate_radius_m,
                      "reduction_tolerance": mc.reduction_tolerance, "frame_rate_hz": frame_rate,
                      "gps_floor": mc.gps_floor, "gps_floor_tolerance_m": mc.gps_floor_tolerance_m,
                      "nominal_speed_mps": mc.nominal_speed_mps,
                      "node_headings": HEADINGS_METHOD,
                      "distance_source": report.distance_source,
                      "models": {"vnm": getattr(vnm, "model_id", None), "clip": report.clip_model}}}
    with MapWriter.create(out, metadata=meta, overwrite=overwrite) as writer:
        writer.add_nodes(timestamp_s=nodes.t_s, lat_deg=nodes.lat_deg, lon_deg=nodes.lon_deg,
                         heading_rad=nodes.heading_rad)
        _write_images(writer, logs, nodes, clip, progress=progress,
                      batch=max(mc.clip_batch, 256 if clip is None else 1), camera=config.camera)
        for k in ("temporal", "vnm", "gps"):
            sel = kind == k
            if sel.any():
                writer.add_edges(src[sel], dst[sel], w[sel], source=k)
        writer.set_metadata({"build_report": report.as_dict()})
    report.phase_s["write"] = time.perf_counter() - t4
    if cache is not None:
        cache.close(delete=True)
    log.info("built %s: %s", out, json.dumps(report.as_dict()))
    return report


def _write_images(writer, logs, nodes: BuildNodes, clip, *, progress: bool, batch: int, camera=None) -> None:
    """Copy each node's frame into the map (one transaction per batch), with CLIP embeddings if installed.

    Without rectification and with one crop, CLIP embeds the raw frame (its own preprocessing takes the
    centre square) and the embedding sits on the raw image. Otherwise the CLIP views of
    :func:`robot_app.mapping.image_prep.clip_views` (crops of the rectified frame) are stored as extra images
    of the node (``camera = "front/clip-crop-K"``), each with its embedding; the raw frame is kept as is.
    """
    plain = camera is None or (not camera.fisheye_k and camera.clip_crops == 1)
    n = nodes.t_s.size
    with _progress_bar(n, "node images", progress, unit="node") as bar:
        for li, tl in enumerate(logs):
            mine = np.flatnonzero(nodes.log_index == li)
            for s in range(0, mine.size, batch):
                idx = mine[s:s + batch]
                jpegs = tl.frame_jpeg(tl.frame_id[nodes.frame_index[idx]])
                if clip is None or plain:
                    emb = {clip.model_id: clip.encode_images([decode_jpeg(j) for j in jpegs])} if clip else None
                    writer.add_images(idx.tolist(), jpegs, embeddings=emb)
                else:
                    writer.add_images(idx.tolist(), jpegs)
                    views = [clip_views(decode_jpeg(j), camera) for j in jpegs]
                    for k in range(camera.clip_crops):
                        crops = [v[k] for v in views]
                        writer.add_images(idx.tolist(), [encode_jpeg(c) for c in crops], camera=f"front/clip-crop-{k}",
                                          embeddings={clip.model_id: clip.encode_images(crops)})
                bar.update(idx.size)


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    """(H, W, 3) uint8 RGB -> JPEG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
