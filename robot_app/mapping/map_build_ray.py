"""The Ray engine of the map build (``robot-app map build --engine ray``): the same map, on a cluster.

Workstation / cluster side only: the ``fleet`` extra (``pip install 'robot-app[fleet]'``) provides Ray and
this module imports it only when an engine starts, so the robot never needs it. Stages
(:func:`robot_app.mapping.map_build.build_map` runs them in order and keeps everything else on the driver):

- logs: one task per log reads and verifies it (:func:`core.tlog.read_log`; frame JPEGs stay in the log);
- nodes: one task per log selects its nodes (:func:`robot_app.mapping.build_nodes.select_log_nodes`) in the
  UTM zone of the first fix, the one the local build uses;
- VNM distances: pairs the checkpoint does not have yet, cut at observation-node boundaries into chunks,
  measured by actors that each hold one ONNX Runtime session (:func:`robot_app.mapping.map_build.measure_pairs`,
  the local build's own loop, so each pair sees the same goal batches); the driver writes each chunk to the
  checkpoint (``MAP.build-cache.sqlite``, shared with the local engine) as it arrives;
- node images: actors read their nodes' JPEGs from the logs and embed them with CLIP
  (:func:`robot_app.mapping.map_build.image_rows`); the driver writes the batches in node order, a bounded
  number in flight, so the driver never holds all images.

Models go to the workers from the driver's models folder (model file, sidecar and extra files through Ray's
object store); each worker writes them to a private folder and opens them with the usual loaders, which check
every sha256 against the sidecar there. Logs are read by the workers at the path the driver resolves: on a
cluster they must be on storage every node mounts at the same path.

Faults: tasks are retried (``max_retries``) and actors restarted with their calls retried (``max_restarts``,
``max_task_retries``) when a worker process dies; results are deterministic, so a retried chunk gives the
same numbers. The test hook :data:`KILL_ONCE_ENV` makes one VNM worker exit mid-build.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from core.tlog import TraversalLog, read_log
from robot_app.mapping.build_nodes import BuildNodes, first_fix_zone, nodes_from_parts, select_log_nodes
from robot_app.mapping.map_build import (
    _progress_bar,
    cached_distances,
    image_rows,
    measure_pairs,
    node_batches,
    obs_groups,
    write_image_rows,
    write_node_images,
)

log = logging.getLogger(__name__)

#: Test hook: a path; the first VNM worker to reach its second chunk creates the file and exits the process
#: (``os._exit``), once per path, so a test sees Ray restart the actor and retry the chunk.
KILL_ONCE_ENV = "ROBOT_APP_RAY_KILL_ONCE"
#: Retries of a task / restarts of an actor after its worker process died.
RETRIES = 3


def _ray():
    import ray  # the fleet extra; only here

    return ray


def _get(refs):
    """``ray.get`` that re-raises a task's own exception (e.g. LogFormatError) rather than Ray's wrapper."""
    ray = _ray()
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def model_bundle(models_dir: Path, files: Sequence[str]) -> dict[str, bytes]:
    """The bytes of model files, their ``.json`` sidecars and the extra files the sidecars list.

    Raises
    ------
    models.sidecar.ModelMissing, models.sidecar.ModelInvalid
        A file or sidecar is absent or unreadable (the driver opened the models first, so this is rare).
    """
    from models.sidecar import read_sidecar, sidecar_path

    out: dict[str, bytes] = {}
    for name in files:
        path = Path(models_dir) / name
        sc = read_sidecar(path, verify=False)
        for p in (path, sidecar_path(path), *(sc.path.parent / e for e in sc.extra_files)):
            out[p.name] = p.read_bytes()
    return out


def open_bundle(bundle: dict[str, bytes], opener: Callable[[Path], object]):
    """Write ``bundle`` to a private folder, open it with ``opener(folder)`` (which checks the sha256s),
    and remove the folder (ONNX Runtime holds the model in memory)."""
    folder = Path(tempfile.mkdtemp(prefix="robot-app-models-"))
    try:
        for name, data in bundle.items():
            (folder / name).write_bytes(data)
        return opener(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _one_thread(config):
    """``[models] intra_op_threads`` = 1 when it is 0 (onnxruntime's choice): one actor per CPU."""
    mc = config.models
    if getattr(mc, "intra_op_threads", 0):
        return config
    return dataclasses.replace(config, models=dataclasses.replace(mc, intra_op_threads=1))


class VnmWorker:
    """Ray actor body: one VNM session; measures chunks of pairs with :func:`measure_pairs`."""

    def __init__(self, bundle: dict, config, logs: list, nodes: BuildNodes, batch: int, kill_once: str = ""):
        from models.vnm import open_vnm

        self._vnm = open_bundle(bundle, lambda d: open_vnm(d, config=config))
        self._logs, self._nodes, self._batch = logs, nodes, batch
        self._frames: dict = {}
        self._kill_once, self._calls = kill_once, 0

    def measure(self, chunk: int, pairs: np.ndarray) -> tuple[int, np.ndarray, float]:
        """(chunk id, (P,) float64 D in time steps, busy seconds) of the pairs (P, 2) int64."""
        self._calls += 1
        if self._kill_once and self._calls >= 2:
            try:
                os.close(os.open(self._kill_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                log.warning("test hook %s: this VNM worker exits now", KILL_ONCE_ENV)
                os._exit(1)
            except FileExistsError:
                pass
        t = time.perf_counter()
        d = measure_pairs(self._vnm, self._logs, self._nodes, pairs, batch=self._batch, frame_cache=self._frames)
        return chunk, d, time.perf_counter() - t


class ClipWorker:
    """Ray actor body: one CLIP session; reads a batch of node frames from its log and embeds them."""

    def __init__(self, bundle: dict, config, logs: list, camera):
        from models.clip import open_clip_model

        self._clip = open_bundle(bundle, lambda d: open_clip_model(d, config=config))
        self._logs, self._camera = logs, camera

    def rows(self, li: int, idx: np.ndarray, frame_ids: np.ndarray) -> tuple[list, float]:
        """(:func:`image_rows` of nodes ``idx`` (B,) int64 whose frames are rows ``frame_ids`` (B,) of log ``li``,
        busy seconds)."""
        t = time.perf_counter()
        jpegs = self._logs[li].frame_jpeg(frame_ids)
        return image_rows(idx.tolist(), jpegs, self._clip, self._camera), time.perf_counter() - t


def pair_chunks(pairs: np.ndarray, *, max_pairs: int) -> list[np.ndarray]:
    """Rows of ``pairs`` (P, 2) cut into chunks of about ``max_pairs`` rows, never splitting an observation
    node's pairs (so :func:`measure_pairs` batches them as one call would). Returns index arrays."""
    order: list[int] = []
    cuts: list[int] = []
    for plist in obs_groups(pairs).values():
        if order and len(order) - (cuts[-1] if cuts else 0) + len(plist) > max_pairs:
            cuts.append(len(order))
        order.extend(plist)
    arr = np.asarray(order, dtype=np.int64)
    return [c for c in np.split(arr, cuts) if c.size]


class RayEngine:
    """Runs the build's heavy stages on Ray (module docstring); the interface of
    :class:`robot_app.mapping.map_build.LocalEngine`.

    Parameters
    ----------
    address : str or None
        A running cluster (``ray://host:10001`` or ``host:6379``, or ``"auto"``); None starts a local Ray
        runtime with ``workers`` CPUs, stopped again when the build ends. A runtime already started in this
        process (``ray.init``) is used as it is.
    workers : int or None
        Actors per model stage (one CPU each); None: the CPUs of the cluster.
    chunk_pairs : int
        About how many pairs one VNM call measures (a unit of retry and of checkpointing).
    object_store_mb : int or None
        Object store of a local runtime in MiB (None: Ray's default).
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, workers: int | None = None, chunk_pairs: int = 512,
                 object_store_mb: int | None = None):
        if workers is not None and workers < 1:
            raise ValueError(f"workers: expected >= 1, got {workers}")
        self.address, self.workers, self.chunk_pairs = address, workers, int(chunk_pairs)
        self.object_store_mb = object_store_mb
        self._owns = False
        self._pinned: list = []
        self._config = self._models_dir = None
        self._busy: dict[str, float] = collections.defaultdict(float)
        self._calls: dict[str, int] = collections.defaultdict(int)

    def start(self, *, config, models_dir: Path) -> None:
        """Connect to (or start) Ray; raises ``ConnectionError`` from Ray when ``address`` is unreachable."""
        ray = _ray()
        if not ray.is_initialized():
            kw: dict = {"include_dashboard": False, "log_to_driver": False}
            if self.address:
                ray.init(address=self.address, **kw)
            else:
                store = None if self.object_store_mb is None else int(self.object_store_mb) << 20
                ray.init(num_cpus=self.workers or os.cpu_count(), object_store_memory=store, **kw)
            self._owns = True
        if self.workers is None:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._config, self._models_dir = _one_thread(config), Path(models_dir)

    def close(self) -> None:
        """Stop the local runtime this engine started (a cluster or a runtime started elsewhere stays)."""
        if self._owns:
            _ray().shutdown()
            self._owns = False

    def summary(self) -> dict:
        """Engine name, workers and, per stage, the worker seconds spent and the calls made."""
        return {"name": self.name, "workers": self.workers, "address": self.address or "local",
                "worker_busy_s": dict(self._busy), "calls": dict(self._calls)}

    def read_logs(self, log_dirs: Sequence[str | Path]) -> list[TraversalLog]:
        """One task per log (raises :class:`core.tlog.LogFormatError` as the local build does)."""
        task = _ray().remote(max_retries=RETRIES)(read_log)
        refs = [task.remote(str(Path(d).resolve())) for d in log_dirs]
        self._calls["logs"] += len(refs)
        return _get(refs)

    def select_nodes(self, logs: Sequence[TraversalLog], mc) -> BuildNodes:
        """One task per log, all in the zone of the first fix (raises ValueError: no log has a fix)."""
        zone = first_fix_zone(logs)
        task = _ray().remote(max_retries=RETRIES)(select_log_nodes)
        refs = [task.remote(tl, li, zone=zone, min_travel_m=mc.min_travel_m, min_dt_s=mc.min_dt_s,
                            epsilon_s=mc.epsilon_s, bridge_gap_s=mc.gps_gap_bridge_s) for li, tl in enumerate(logs)]
        self._calls["nodes"] += len(refs)
        return nodes_from_parts([part for part, _ in _get(refs)])

    def _actors(self, cls, *args) -> list:
        ray = _ray()
        remote = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)(cls)
        # the constructor arguments stay referenced for the stage: a restarted actor is built from them again
        self._pinned = [ray.put(a) for a in args]
        return [remote.remote(*self._pinned) for _ in range(self.workers)]

    def _stop(self, actors: list) -> None:
        for a in actors:
            _ray().kill(a)
        self._pinned = []

    def distances(self, vnm, logs, nodes: BuildNodes, pairs: np.ndarray, cache, *, batch: int,
                  progress: Callable[[int], None]) -> tuple[np.ndarray, int]:
        """:func:`robot_app.mapping.map_build.vnm_pair_distances` on VNM actors: (P,) float64, evaluations run."""
        from ray.util import ActorPool

        keys, out = cached_distances(nodes, pairs, cache)
        todo = np.flatnonzero(np.isnan(out))
        progress(len(keys) - todo.size)
        if todo.size == 0:
            return out, 0
        chunks = pair_chunks(pairs[todo], max_pairs=self.chunk_pairs)
        bundle = model_bundle(self._models_dir, [self._config.models.vnm_file])
        actors = self._actors(VnmWorker, bundle, self._config, list(logs), nodes, batch,
                              os.environ.get(KILL_ONCE_ENV, ""))
        try:
            pool = ActorPool(actors)
            work = ((c, pairs[todo[rows]]) for c, rows in enumerate(chunks))
            for c, d, busy in pool.map_unordered(lambda a, v: a.measure.remote(*v), work):
                rows = todo[chunks[c]]
                out[rows] = d
                cache.put({keys[r]: float(x) for r, x in zip(rows, d)})
                self._busy["vnm"] += busy
                self._calls["vnm"] += 1
                progress(len(rows))
        finally:
            self._stop(actors)
        return out, int(todo.size)

    def write_images(self, writer, logs, nodes: BuildNodes, clip, *, progress: bool, batch: int, camera=None) -> None:
        """Node images in node order; with CLIP, embedded on CLIP actors, ``2 x workers`` batches in flight."""
        if clip is None:  # copying JPEGs: I/O on the driver, streamed a batch at a time as the local build does
            write_node_images(writer, logs, nodes, None, progress=progress, batch=batch, camera=camera)
            return
        files = [self._config.models.clip_image_file, self._config.models.clip_text_file]
        actors = self._actors(ClipWorker, model_bundle(self._models_dir, files), self._config, list(logs), camera)
        pending: collections.deque = collections.deque()
        try:
            with _progress_bar(nodes.t_s.size, "node images", progress, unit="node") as bar:
                for k, (li, idx) in enumerate(node_batches(nodes, batch)):
                    fids = logs[li].frame_id[nodes.frame_index[idx]]
                    pending.append((idx.size, actors[k % len(actors)].rows.remote(li, idx, fids)))
                    while len(pending) > 2 * len(actors):
                        self._write_next(writer, pending, bar)
                while pending:
                    self._write_next(writer, pending, bar)
        finally:
            self._stop(actors)

    def _write_next(self, writer, pending: collections.deque, bar) -> None:
        n, ref = pending.popleft()
        rows, busy = _get(ref)
        write_image_rows(writer, rows)
        self._busy["clip"] += busy
        self._calls["clip"] += 1
        bar.update(n)
