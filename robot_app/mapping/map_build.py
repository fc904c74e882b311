"""The map-building job: traversal logs -> topological map file (LM-Nav Algorithm 2, App. B).

Reads the logs (:mod:`core.tlog`), selects nodes and edges with :mod:`core.graph_build`, measures
candidate pairs with the VNM (:mod:`models.vnm`) or, without one, with GPS distance at the robot's
nominal speed (LM-Nav's own GPS ablation), embeds node images with CLIP when installed, and writes the
map with :class:`core.mapstore.MapWriter` (a half-built map never appears under the map's name).

Engines: the heavy stages (reading logs, node selection, VNM pairs, node images) run on an engine:
:class:`LocalEngine` in this process (the default, what the robot runs) or
:class:`robot_app.mapping.map_build_ray.RayEngine` on a Ray cluster (workstation side, the ``fleet`` extra).
Both run the same functions (:func:`robot_app.mapping.build_nodes.select_log_nodes`, :func:`measure_pairs`,
:func:`image_rows`) and give the same map; candidate pairs, edge decisions, the reduction and the write are
always done by :func:`build_map` itself.

Resumable: VNM distances are checkpointed in ``MAP.build-cache.sqlite`` (keyed by log, frame pair
and VNM file hash) as batches finish; an interrupted build started again reuses them; the cache is
deleted when the map is complete. Both engines use the same checkpoint, so a build interrupted on one
resumes on the other.
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
from core.tlog import TraversalLog, read_log
from robot_app.mapping.build_nodes import BuildNodes, select_build_nodes
from robot_app.mapping.image_prep import clip_views

log = logging.getLogger(__name__)


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
    dead_reckoned_nodes: int = 0  # nodes placed through a GPS dropout from wheel odometry (core.gps_gaps)
    distance_source: str = ""
    clip_model: str | None = None
    #: what the build did without a model, one line each (no VNM: GPS edges; no CLIP: no image embeddings)
    fallbacks: list = field(default_factory=list)
    phase_s: dict = field(default_factory=dict)
    engine: dict = field(default_factory=lambda: {"name": "local"})  # engine summary (workers, time)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# how node headings are made (core.graph_build.track_headings); maps without it have headings from
# consecutive fixes, too noisy for the VNM navigator's GPS stretches (robot_app.jobs.mission ignores them)
HEADINGS_METHOD = "gps-track-3"


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> (H, W, 3) uint8 RGB."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


class DistanceCache:
    """Checkpoint of measured pair distances (``MAP.build-cache.sqlite``).

    Write-ahead log with ``synchronous=NORMAL`` (SQLite's "WAL mode" page): a commit is an append without
    an fsync, so the one commit per VNM batch costs little; a power cut may lose the last commits, never
    corrupt the file, and a lost tail is measured again by the next build.
    """

    def __init__(self, path: Path, model_id: str):
        self.path = path
        self._conn = sqlite3.connect(path)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
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
        self._conn.close()  # the last connection checkpoints the WAL and removes its -wal / -shm files
        if delete:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)


def pair_keys(nodes: BuildNodes, pairs: np.ndarray) -> list[str]:
    """Checkpoint keys of pairs (i, j): ``"log:frame>log:frame"`` (stable across node selections)."""
    return [
        f"{nodes.log_index[i]}:{nodes.frame_index[i]}>{nodes.log_index[j]}:{nodes.frame_index[j]}" for i, j in pairs
    ]


def obs_groups(pairs: np.ndarray) -> dict[int, list[int]]:
    """Rows of ``pairs`` (P, 2) grouped by their observation node ``pairs[:, 0]``, in first-seen order."""
    by_obs: dict[int, list[int]] = {}
    for p, i in enumerate(pairs[:, 0].tolist()):
        by_obs.setdefault(int(i), []).append(p)
    return by_obs


def measure_pairs(vnm, logs, nodes: BuildNodes, pairs: np.ndarray, *, batch: int,
                  frame_cache: dict | None = None,
                  on_batch: Callable[[list[int], np.ndarray], None] | None = None) -> np.ndarray:
    """Run the VNM on every pair (i, j) of ``pairs`` (P, 2) int64: obs context at node i, goal node j.

    Goals are batched ``batch`` at a time per observation node (the same batches whatever else is in
    ``pairs``, so any split of the pairs at observation-node boundaries gives the same numbers).
    ``frame_cache`` (log, frame) -> preprocessed frame is kept between calls (bounded to 4096 frames);
    ``on_batch(rows, d)`` is called after each batch with the rows of ``pairs`` and their distances.

    Returns (P,) float64 D in VNM time steps.
    """
    out = np.full(len(pairs), np.nan, dtype=np.float64)
    frame_cache = {} if frame_cache is None else frame_cache

    def frame(li: int, fi: int) -> np.ndarray:
        key = (li, fi)
        if key not in frame_cache:
            tl = logs[li]
            frame_cache[key] = vnm.preprocess(decode_jpeg(tl.frame_jpeg([tl.frame_id[fi]])[0]))
            if len(frame_cache) > 4096:
                frame_cache.pop(next(iter(frame_cache)))
        return frame_cache[key]

    for i, plist in obs_groups(pairs).items():
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
            if on_batch is not None:
                on_batch(chunk, d)
    return out


def cached_distances(nodes: BuildNodes, pairs: np.ndarray, cache: DistanceCache) -> tuple[list[str], np.ndarray]:
    """Checkpoint keys of ``pairs`` and their (P,) float64 distances from ``cache``, NaN where not measured yet."""
    keys = pair_keys(nodes, pairs)
    known = cache.get(keys)
    return keys, np.array([known.get(k, np.nan) for k in keys], dtype=np.float64)


def vnm_pair_distances(vnm, logs, nodes: BuildNodes, pairs: np.ndarray, cache: DistanceCache, *,
                       batch: int, progress: Callable[[int], None]) -> tuple[np.ndarray, int]:
    """D(i -> j) in VNM time steps for each pair (i, j): observation context at node i (its frame and
    the ``context_size`` frames before it at the VNM's frame rate), goal = node j's frame.

    Returns (P,) float64 and the number of VNM goal evaluations run (cache hits excluded).
    """
    keys, out = cached_distances(nodes, pairs, cache)
    todo = np.flatnonzero(np.isnan(out))
    progress(len(keys) - todo.size)

    def done(rows: list[int], d: np.ndarray) -> None:
        cache.put({keys[todo[r]]: float(x) for r, x in zip(rows, d)})
        progress(len(rows))

    out[todo] = measure_pairs(vnm, logs, nodes, pairs[todo], batch=batch, on_batch=done)
    return out, int(todo.size)


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


#: what a map built without each model lacks (the build's summary and ``BuildReport.fallbacks``)
FALLBACKS = {
    "vnm": "no VNM: edges from GPS distance at {speed} m/s ([mapping] nominal_speed_mps; LM-Nav's GPS ablation)",
    "clip": "no CLIP: no image embeddings, landmarks cannot be grounded in this map",
}


def missing_models(models_dir: str | Path, config, *, use_vnm: bool = True, use_clip: bool = True) -> dict[str, str]:
    """The models a build would use that are not installed in ``models_dir``: ``{"vnm"|"clip": file names}``
    (empty when both are there). Only the files and their sidecars are looked at (no hashing, no session):
    a model that is there but broken still fails when the build opens it."""
    from models.sidecar import ModelMissing, read_sidecar

    mc = config.models
    wanted = {}
    if use_vnm:
        wanted["vnm"] = [(mc.vnm_file, "vnm")]
    if use_clip:
        wanted["clip"] = [(mc.clip_image_file, "clip-image"), (mc.clip_text_file, "clip-text")]
    out = {}
    for what, files in wanted.items():
        absent = []
        for name, kind in files:
            try:
                read_sidecar(Path(models_dir) / name, kind=kind, verify=False)
            except ModelMissing:
                absent.append(name)
            except Exception:  # noqa: BLE001 - there but unreadable: the build's open names the problem
                pass
        if absent:
            out[what] = ", ".join(absent)
    return out


class LocalEngine:
    """Runs every stage of the build in this process (the default engine; the one the robot runs).

    The engine interface of :func:`build_map` (``robot_app.mapping.map_build_ray.RayEngine`` is the other):
    ``start``, ``read_logs``, ``select_nodes``, ``distances``, ``write_images``, ``summary``, ``close``.
    """

    name = "local"

    def start(self, *, config, models_dir: Path) -> None:
        """Nothing to start in-process."""

    def read_logs(self, log_dirs: Sequence[str | Path]) -> list[TraversalLog]:
        """Read every log (raises :class:`core.tlog.LogFormatError`)."""
        return [read_log(d) for d in log_dirs]

    def select_nodes(self, logs: Sequence[TraversalLog], mc) -> BuildNodes:
        """:func:`select_build_nodes` with the ``[mapping]`` thresholds."""
        return select_build_nodes(logs, min_travel_m=mc.min_travel_m, min_dt_s=mc.min_dt_s, epsilon_s=mc.epsilon_s,
                                  bridge_gap_s=mc.gps_gap_bridge_s)

    def distances(self, vnm, logs, nodes: BuildNodes, pairs: np.ndarray, cache: DistanceCache, *, batch: int,
                  progress: Callable[[int], None]) -> tuple[np.ndarray, int]:
        """:func:`vnm_pair_distances`."""
        return vnm_pair_distances(vnm, logs, nodes, pairs, cache, batch=batch, progress=progress)

    def write_images(self, writer, logs, nodes: BuildNodes, clip, *, progress: bool, batch: int, camera=None) -> None:
        """:func:`write_node_images`."""
        write_node_images(writer, logs, nodes, clip, progress=progress, batch=batch, camera=camera)

    def summary(self) -> dict:
        return {"name": self.name}

    def close(self) -> None:
        """Nothing to stop."""


def check_out_path(out: str | Path, *, overwrite: bool) -> Path:
    """The map file to write, checked before any work.

    Raises
    ------
    ValueError
        ``out`` is a folder, or its folder does not exist.
    FileExistsError
        ``out`` exists and ``overwrite`` is False.
    """
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give the map file's name (e.g. {out}/map.sqlite)")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {out.parent} does not exist")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: map exists (use --overwrite to replace it)")
    return out


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
    engine=None,
    require_models: bool = False,
) -> BuildReport:
    """Build a map file from traversal logs. Returns the build report.

    ``models_dir`` (default ``[paths] models_dir``) holds the VNM and CLIP. Without a VNM (or with
    ``use_vnm=False``) edges come from GPS distance; without CLIP the map has images but no embeddings;
    each fallback is a line of ``BuildReport.fallbacks``. ``require_models=True`` refuses to fall back
    (checked before any work).

    ``engine`` runs the heavy stages (log reading, node selection, VNM pairs, node images): None or
    :class:`LocalEngine` in this process, ``robot_app.mapping.map_build_ray.RayEngine`` on a Ray cluster;
    both give the same map (candidate pairs, edge decisions, reduction and the write are done here).
    The engine is started here and closed when the build ends.

    Raises
    ------
    core.tlog.LogFormatError
        A log folder is not a readable log.
    ValueError
        No log has frames with GPS fixes; ``out`` is a folder or in a missing folder.
    FileExistsError
        ``out`` exists and ``overwrite`` is False.
    models.sidecar.ModelMissing
        ``require_models`` and a model the build would use is not installed (one line naming the
        models and the folder).
    """
    out = check_out_path(out, overwrite=overwrite)
    models_dir = Path(models_dir or config.paths.models_dir)
    if require_models:
        missing = missing_models(models_dir, config, use_vnm=use_vnm, use_clip=use_clip)
        if missing:
            from models.sidecar import ModelMissing

            raise ModelMissing(", ".join(f"no {k.upper()} ({v})" for k, v in missing.items()) + f" in {models_dir}")
    engine = engine if engine is not None else LocalEngine()
    engine.start(config=config, models_dir=models_dir)
    try:
        report = _build(engine, log_dirs, out, config=config, models_dir=models_dir, overwrite=overwrite,
                        progress=progress, use_vnm=use_vnm, use_clip=use_clip)
    finally:
        engine.close()
    log.info("built %s: %s", out, json.dumps(report.as_dict()))
    return report


def _build(engine, log_dirs, out: Path, *, config, models_dir: Path, overwrite: bool, progress: bool,
           use_vnm: bool, use_clip: bool) -> BuildReport:
    mc = config.mapping
    report = BuildReport()
    t0 = time.perf_counter()
    logs = engine.read_logs(log_dirs)
    nodes = engine.select_nodes(logs, mc)
    m = nodes.t_s.size
    report.nodes = m
    report.dead_reckoned_nodes = int(nodes.dead_reckoned.sum())
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
            dist, runs = engine.distances(vnm, logs, nodes, pairs, cache, batch=mc.vnm_batch, progress=bar.update)
        report.vnm_evaluations, report.vnm_cached = runs, int(len(pairs) - runs)
        source, report.distance_source = "vnm", f"vnm ({vnm.model_id})"
    else:
        cache = None
        m_per_step = mc.nominal_speed_mps / frame_rate
        dist = gps_d / m_per_step
        tau = mc.gps_link_m / m_per_step
        source, report.distance_source = "gps", f"gps fallback ({mc.nominal_speed_mps} m/s nominal speed)"
        if use_vnm:
            report.fallbacks.append(FALLBACKS["vnm"].format(speed=mc.nominal_speed_mps))
    decision = gb.decide_pairs(dist, gps_d, tau_steps=tau, eta_m=mc.eta_m)
    report.rejected_wormholes, report.rejected_far = decision.wormholes, decision.too_far
    report.phase_s["distances"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    src, dst, w, kind = _assemble_edges(m, (ts, td, tw), pairs, dist, gps_d, decision, source=source, mc=mc,
                                        frame_rate=frame_rate, report=report)
    report.phase_s["reduction"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    clip = _open_optional("models.clip:open_clip_model", models_dir, config, "CLIP") if use_clip else None
    report.clip_model = getattr(clip, "model_id", None) if clip is not None else None
    if clip is None and use_clip:
        report.fallbacks.append(FALLBACKS["clip"])
    meta = _build_metadata(log_dirs, mc, tau=tau, frame_rate=frame_rate, report=report, vnm=vnm)
    with MapWriter.create(out, metadata=meta, overwrite=overwrite) as writer:
        writer.add_nodes(timestamp_s=nodes.t_s, lat_deg=nodes.lat_deg, lon_deg=nodes.lon_deg,
                         heading_rad=nodes.heading_rad)
        engine.write_images(writer, logs, nodes, clip, progress=progress,
                            batch=max(mc.clip_batch, 256 if clip is None else 1), camera=config.camera)
        for k in ("temporal", "vnm", "gps"):
            sel = kind == k
            if sel.any():
                writer.add_edges(src[sel], dst[sel], w[sel], source=k)
        report.engine = engine.summary()
        writer.set_metadata({"build_report": report.as_dict()})
    report.phase_s["write"] = time.perf_counter() - t4
    if cache is not None:
        cache.close(delete=True)
    return report


def _assemble_edges(m: int, temporal, pairs, dist, gps_d, decision, *, source: str, mc, frame_rate: float,
                    report: BuildReport):
    """Temporal + kept pair edges, GPS floor, redundant-edge removal; fills the report's edge counts.

    Returns src, dst (E,) int64, w (E,) float64 D in time steps and kind (E,) str.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    ts, td, tw = temporal
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
    return src, dst, w, kind


def _build_metadata(log_dirs, mc, *, tau: float, frame_rate: float, report: BuildReport, vnm) -> dict:
    return {"build": {"logs": [str(Path(d)) for d in log_dirs], "epsilon_s": mc.epsilon_s,
                      "gps_gap_bridge_s": mc.gps_gap_bridge_s,
                      "min_travel_m": mc.min_travel_m, "min_dt_s": mc.min_dt_s, "tau_steps": tau, "eta_m": mc.eta_m,
                      "candidate_k": mc.candidate_k, "candidate_radius_m": mc.candidate_radius_m,
                      "reduction_tolerance": mc.reduction_tolerance, "frame_rate_hz": frame_rate,
                      "gps_floor": mc.gps_floor, "gps_floor_tolerance_m": mc.gps_floor_tolerance_m,
                      "nominal_speed_mps": mc.nominal_speed_mps,
                      "node_headings": HEADINGS_METHOD,
                      "distance_source": report.distance_source,
                      "models": {"vnm": getattr(vnm, "model_id", None), "clip": report.clip_model}}}


def plain_clip(camera) -> bool:
    """True when CLIP embeds the raw frame (no rectification, one crop): see :func:`write_node_images`."""
    return camera is None or (not camera.fisheye_k and camera.clip_crops == 1)


def image_rows(idx: list[int], jpegs: list[bytes], clip, camera) -> list[tuple]:
    """What :meth:`MapWriter.add_images` gets for one batch of nodes: ``[(node ids, jpegs, camera, embeddings)]``.

    ``camera`` None is the raw frame (``"front"``); ``embeddings`` None or {model id: (B, D) float32}.
    """
    if clip is None or plain_clip(camera):
        emb = {clip.model_id: clip.encode_images([decode_jpeg(j) for j in jpegs])} if clip else None
        return [(idx, jpegs, None, emb)]
    rows: list[tuple] = [(idx, jpegs, None, None)]
    views = [clip_views(decode_jpeg(j), camera) for j in jpegs]
    for k in range(camera.clip_crops):
        crops = [v[k] for v in views]
        rows.append((idx, [encode_jpeg(c) for c in crops], f"front/clip-crop-{k}",
                     {clip.model_id: clip.encode_images(crops)}))
    return rows


def write_image_rows(writer, rows: list[tuple]) -> None:
    """Write the rows of :func:`image_rows` in order."""
    for idx, jpegs, cam, emb in rows:
        if cam is None:
            writer.add_images(idx, jpegs, embeddings=emb)
        else:
            writer.add_images(idx, jpegs, camera=cam, embeddings=emb)


def node_batches(nodes: BuildNodes, batch: int):
    """(log index, (B,) int64 node ids) batches of at most ``batch`` nodes, log by log, in node order."""
    for li in np.unique(nodes.log_index).tolist():
        mine = np.flatnonzero(nodes.log_index == li)
        for s in range(0, mine.size, batch):
            yield int(li), mine[s:s + batch]


def write_node_images(writer, logs, nodes: BuildNodes, clip, *, progress: bool, batch: int, camera=None) -> None:
    """Copy each node's frame into the map (one transaction per batch), with CLIP embeddings if installed.

    Without rectification and with one crop, CLIP embeds the raw frame (its own preprocessing takes the
    centre square) and the embedding sits on the raw image. Otherwise the CLIP views of
    :func:`robot_app.mapping.image_prep.clip_views` (crops of the rectified frame) are stored as extra images
    of the node (``camera = "front/clip-crop-K"``), each with its embedding; the raw frame is kept as is.
    """
    with _progress_bar(nodes.t_s.size, "node images", progress, unit="node") as bar:
        for li, idx in node_batches(nodes, batch):
            tl = logs[li]
            jpegs = tl.frame_jpeg(tl.frame_id[nodes.frame_index[idx]])
            write_image_rows(writer, image_rows(idx.tolist(), jpegs, clip, camera))
            bar.update(idx.size)


_write_images = write_node_images  # the name before the engines (kept for callers of the private name)


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    """(H, W, 3) uint8 RGB -> JPEG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
