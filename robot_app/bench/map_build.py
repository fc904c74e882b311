"""``robot-app bench map-build``: map building on synthetic drives of growing length.

Each drive is a lawnmower pattern (rows 10 m apart, 1 m/s, 4 Hz frames), so rows pass near each other
and candidate pairs exist all along. Reports per phase times, candidate pairs and VNM evaluations per
frame (they must stay about constant: the k-d tree limits pairs, the cost is linear in the log), and,
with a VNM installed, the measured latency of one batch and the time a 10k-frame build would spend
in the VNM.

``engine="ray"`` builds each drive once per worker count on the Ray engine
(:mod:`robot_app.mapping.map_build_ray`): VNM pairs per second in all and per worker, and the driver's peak
resident memory (``VmHWM``, MiB; a peak, so compare sizes in separate runs).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from robot_app.mapping.map_build import _open_optional, build_map
from robot_app.mapping.synthetic_logs import write_synthetic_log


def lawnmower(frames: int, *, row_m: float = 100.0, spacing_m: float = 10.0, speed_mps: float = 1.0,
              rate_hz: float = 4.0) -> list[tuple[float, float]]:
    """Waypoints of a lawnmower drive long enough for ``frames`` frames."""
    length = frames * speed_mps / rate_hz
    pts, y, east = [(0.0, 0.0)], 0.0, True
    while length > 0:
        x = row_m if east else 0.0
        pts.append((x, y))
        length -= row_m
        y += spacing_m
        pts.append((x, y))
        length -= spacing_m
        east = not east
    return pts


def peak_rss_mib() -> float | None:
    """This process's peak resident set (``/proc/self/status`` VmHWM) in MiB; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _builds(engine: str, workers: Sequence[int], ray_address: str | None):
    """(label, workers, engine object or None) of each build of one drive."""
    if engine == "local":
        return [("local", 1, None)]
    from robot_app.mapping.map_build_ray import RayEngine

    return [("ray", w, RayEngine(address=ray_address, workers=w)) for w in workers]


def run(sizes=(1_000, 10_000, 50_000), *, config, models_dir: str | None = None,
        progress: Callable[[str], None] | None = None, engine: str = "local", workers: Sequence[int] = (1, 2),
        ray_address: str | None = None) -> dict:
    models = Path(models_dir or config.paths.models_dir)
    cfg = dataclasses.replace(config, paths=dataclasses.replace(config.paths, models_dir=str(models)))
    out = {"sizes": [], "models_dir": str(models)}
    vnm = _open_optional("models.vnm:open_vnm", models, cfg, "VNM")
    if vnm is not None:
        h, w = vnm.image_height, vnm.image_width
        obs = np.zeros((1, vnm.obs_channels, h, w), np.float32)
        goals = np.zeros((cfg.mapping.vnm_batch, 3, h, w), np.float32)
        vnm.predict(obs, goals)
        t = time.perf_counter()
        for _ in range(5):
            vnm.predict(obs, goals)
        out["vnm_batch"] = cfg.mapping.vnm_batch
        out["vnm_batch_s"] = (time.perf_counter() - t) / 5
        out["vnm_model"] = vnm.model_id
    with tempfile.TemporaryDirectory() as tmp:
        for frames in sizes:
            if progress:
                progress(f"synthetic drive of {frames} frames")
            log_dir = Path(tmp) / f"log{frames}"
            t = time.perf_counter()
            write_synthetic_log(log_dir, lawnmower(frames), seed=frames)
            write_s = time.perf_counter() - t
            for label, n_workers, eng in _builds(engine, workers, ray_address):
                if progress:
                    progress(f"building the map of {frames} frames ({label}, {n_workers} worker(s))")
                rep = build_map([log_dir], Path(tmp) / f"map{frames}-{label}{n_workers}.sqlite", config=cfg,
                                use_clip=False, engine=eng)
                dist_s = rep.phase_s["distances"]
                row = {"frames": frames, "engine": label, "workers": n_workers, "nodes": rep.nodes,
                       "candidate_pairs": rep.candidate_pairs,
                       "pairs_per_node": rep.candidate_pairs / max(rep.nodes, 1),
                       "vnm_evaluations": rep.vnm_evaluations, "edges": rep.edges,
                       "removed_redundant": rep.removed_redundant, "components": rep.components,
                       "phase_s": rep.phase_s, "write_log_s": write_s, "distance_source": rep.distance_source,
                       "vnm_pairs_per_s": rep.vnm_evaluations / dist_s if dist_s > 0 else None,
                       "driver_peak_rss_mib": peak_rss_mib(), "engine_summary": rep.engine}
                if row["vnm_pairs_per_s"] is not None:
                    row["vnm_pairs_per_s_per_worker"] = row["vnm_pairs_per_s"] / n_workers
                if "vnm_batch_s" in out:
                    row["vnm_estimate_s"] = rep.candidate_pairs / out["vnm_batch"] * out["vnm_batch_s"]
                out["sizes"].append(row)
    if "vnm_batch_s" in out:
        per_pair = out["vnm_batch_s"] / out["vnm_batch"]
        ten_k = next((r for r in out["sizes"] if r["frames"] == 10_000), None)
        if ten_k:
            out["estimate_10k_frames_vnm_s"] = ten_k["candidate_pairs"] * per_pair
    return out


def format_table(res: dict) -> str:
    lines = [f"map build ({res['sizes'][0]['distance_source'] if res['sizes'] else ''})",
             f"{'frames':>7} {'engine':>8} {'nodes':>6} {'pairs':>7} {'pairs/node':>10} {'VNM evals':>9} "
             f"{'pairs s':>8} {'dist s':>8} {'pairs/s':>8} {'reduce s':>8} {'write s':>8} {'RSS MiB':>8}"]
    for r in res["sizes"]:
        p = r["phase_s"]
        eng = r["engine"] if r["engine"] == "local" else f"{r['engine']} x{r['workers']}"
        rate = f"{r['vnm_pairs_per_s']:>8.1f}" if r.get("vnm_pairs_per_s") else f"{'-':>8}"
        rss = f"{r['driver_peak_rss_mib']:>8.0f}" if r.get("driver_peak_rss_mib") else f"{'-':>8}"
        lines.append(f"{r['frames']:>7} {eng:>8} {r['nodes']:>6} {r['candidate_pairs']:>7} "
                     f"{r['pairs_per_node']:>10.1f} {r['vnm_evaluations']:>9} {p['pairs']:>8.2f} "
                     f"{p['distances']:>8.2f} {rate} {p['reduction']:>8.2f} {p['write']:>8.2f} {rss}")
    if "vnm_batch_s" in res:
        lines.append(f"VNM batch of {res['vnm_batch']}: {res['vnm_batch_s'] * 1e3:.1f} ms ({res['vnm_model']})")
    if "estimate_10k_frames_vnm_s" in res:
        lines.append(f"10k frames: about {res['estimate_10k_frames_vnm_s']:.0f} s of VNM time at that latency")
    return "\n".join(lines)
