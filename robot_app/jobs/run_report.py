"""A report of one route job from its run record (``[paths] logs_dir/runs/run-*.json``) and its map.

``robot-app log run-report RECORD`` writes ``<record>.png`` and ``<record>.html`` next to the record (or
into ``--out``): the map zoomed to the planned walk and the drive, the landmarks' chosen nodes, each
landmark's CLIP match over the map (the plan's best-matching nodes), and over time the speed, the distance
from the planned walk and who drove. The page is self-contained (the picture inline) and defines its
figures. The record is what :meth:`robot_app.jobs.mission.MissionExecutive` writes after each route job:
``plan`` (walk ``nodes``, ``landmarks``, ``grounding``), ``outcome``, ``message``, ``disengagements``,
``replans``, ``failures``, ``duration_s`` and ``trace`` (:class:`robot_app.nav.policy.TraceRow` per step:
``t_s``, ``driver``, pose ``x_m`` / ``y_m`` UTM metres, the command).
"""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path

import numpy as np

from core.control import polyline_distance
from core.mapstore import open_map
from robot_app.plots import plot_grounding, plot_timeline

#: what the page's figures mean (LM-Nav, Shah et al. 2022, Sec. 5, for disengagements)
DEFINITIONS = [
    ("driven", "metres between successive poses of the trace (the fused pose, or the GPS fix)"),
    ("cross-track error", "distance of each pose to the planned walk's polyline through its node positions"),
    ("speed", "driven metres over the time between successive trace steps"),
    ("disengagements", "operator interventions during the job: a stuck, collided or timed-out walk, a loss the "
                       "re-plans did not recover, a STOP of a run (LM-Nav Sec. 5 counts them per km)"),
    ("CLIP match", "cosine of the landmark's text embedding with each node's best image embedding; the plan "
                   "keeps its 300 best nodes (LM-Nav Sec. 4.3 grounding)"),
]
REQUIRED = ("plan", "outcome", "trace")


class RunRecordError(ValueError):
    """The run record or its map cannot be reported on; the message names the file and what is wrong."""


def load_record(path: str | os.PathLike) -> dict:
    """Read and check a run record. Raises :class:`RunRecordError` (unreadable, not JSON, a key missing)."""
    p = Path(path)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunRecordError(f"{p}: not a readable run record: {exc}") from exc
    missing = [k for k in REQUIRED if not isinstance(rec, dict) or k not in rec]
    if missing:
        raise RunRecordError(f"{p}: not a run record (missing {', '.join(missing)})")
    if not isinstance(rec["plan"], dict) or not rec["plan"].get("nodes"):
        raise RunRecordError(f"{p}: its plan has no walk nodes")
    return rec


def timeline(trace: list, walk_xy: np.ndarray, *, origin=(0.0, 0.0), period_s: float = 0.5) -> dict:
    """The drive over time from the trace rows, resampled every ``period_s``: ``speed_mps`` (per interval),
    ``cross_track_m`` (per sample, to ``walk_xy`` (K, 2) m, the map frame) and ``drivers`` (``[t_s, driver]``
    at each change); ``driven_m`` sums the raw steps; ``xy_m`` the poses in the map frame (the trace's UTM
    metres minus ``origin``). Rows without a pose (NaN) are skipped."""
    t = np.array([float(r["t_s"]) for r in trace], dtype=float)
    xy = np.array([[float(r["x_m"]), float(r["y_m"])] for r in trace], dtype=float).reshape(-1, 2)
    ok = np.isfinite(xy).all(axis=1) & np.isfinite(t)
    t_ok, xy_ok = t[ok], xy[ok] - np.asarray(origin, dtype=float)
    driven = float(np.hypot(*np.diff(xy_ok, axis=0).T).sum()) if len(xy_ok) > 1 else 0.0
    if len(t_ok) > 1 and t_ok[-1] > t_ok[0]:
        ts = np.arange(t_ok[0], t_ok[-1] + 1e-9, period_s)
        xs = np.stack([np.interp(ts, t_ok, xy_ok[:, 0]), np.interp(ts, t_ok, xy_ok[:, 1])], axis=1)
    else:
        xs = xy_ok[:1]
    speed = np.hypot(*np.diff(xs, axis=0).T) / period_s if len(xs) > 1 else np.zeros(0)
    xt = [polyline_distance(walk_xy, x, y) for x, y in xs] if len(walk_xy) else []
    drivers, last = [], None
    for r in trace:
        if r["driver"] != last:
            drivers.append([round(float(r["t_s"]), 3), str(r["driver"])])
            last = r["driver"]
    return {"period_s": period_s, "speed_mps": np.round(speed, 3).tolist(),
            "cross_track_m": [round(float(v), 3) for v in xt], "drivers": drivers,
            "driven_m": round(driven, 2), "xy_m": xy_ok}


def write_run_report(record_path: str | os.PathLike, map_path: str | os.PathLike,
                     out_dir: str | os.PathLike | None = None) -> dict:
    """Write ``<record stem>.png`` and ``.html`` for one run record; returns the figures and the file paths.

    Raises
    ------
    RunRecordError
        The record is unreadable, or its walk names nodes the map does not have (another map).
    core.mapstore.MapError
        The map cannot be opened.
    """
    record_path = Path(record_path)
    rec = load_record(record_path)
    with open_map(map_path) as m:
        xy = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1).astype(float)
        images = {}
        for lm in rec["plan"].get("landmarks") or []:
            node = lm.get("node")
            if isinstance(node, int) and 0 <= node < len(xy):
                images[node] = (m.images(node) or [None])[0]
    walk = np.asarray(rec["plan"]["nodes"], dtype=int)
    if walk.min() < 0 or walk.max() >= len(xy):
        raise RunRecordError(f"{record_path}: its walk names node {int(walk.max())}, the map {map_path} has "
                             f"{len(xy)} nodes: give the map the run was planned on (--map)")
    origin = xy.min(axis=0)
    xy -= origin
    try:
        tl = timeline(rec["trace"], xy[walk], origin=origin)
    except (KeyError, TypeError, ValueError) as exc:
        raise RunRecordError(f"{record_path}: a trace row is malformed ({exc!r})") from exc
    out = Path(out_dir) if out_dir is not None else record_path.parent
    out.mkdir(parents=True, exist_ok=True)
    png = out / (record_path.stem + ".png")
    _plot(png, rec, xy, walk, tl)
    page = out / (record_path.stem + ".html")
    facts = {"outcome": rec.get("outcome"), "message": rec.get("message"), "mode": rec.get("mode"),
             "duration_s": round(float(rec.get("duration_s") or 0.0), 1), "driven_m": tl["driven_m"],
             "planned_m": round(float(rec["plan"].get("length_m") or 0.0), 1),
             "disengagements": rec.get("disengagements"), "replans": rec.get("replans"),
             "max_cross_track_m": max(tl["cross_track_m"]) if tl["cross_track_m"] else None}
    _write_atomic(page, _html(rec, facts, png, images))
    return {**facts, "files": [str(png), str(page)]}


def _plot(out: Path, rec: dict, xy: np.ndarray, walk: np.ndarray, tl: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grounding = _grounding(rec["plan"])
    k = max(1, len(grounding))
    ratios = [4] + ([1.6] if grounding else []) + [1.4]
    fig = plt.figure(figsize=(9, 5 + 2.2 * len(ratios)), dpi=100)
    gs = fig.add_gridspec(len(ratios), k, height_ratios=ratios)
    ax = fig.add_subplot(gs[0, :])
    ax.scatter(xy[:, 0], xy[:, 1], s=4, c="0.6", zorder=1, label="map nodes")
    ax.plot(xy[walk, 0], xy[walk, 1], "-", color="tab:blue", lw=2.5, alpha=0.7, zorder=2,
            label=f"planned walk ({rec['plan'].get('length_m', 0):.0f} m)")
    d = tl["xy_m"]
    if len(d):
        ax.plot(d[:, 0], d[:, 1], "-", color="tab:red", lw=1.2, zorder=3, label=f"driven ({tl['driven_m']:.0f} m)")
    for i, lm in enumerate(rec["plan"].get("landmarks") or []):
        node = lm.get("node")
        if isinstance(node, int) and 0 <= node < len(xy):
            ax.scatter(*xy[node], marker="*", s=220, c="gold", edgecolors="k", zorder=4)
            ax.annotate(f"{i + 1}. {lm.get('name')}", xy[node], xytext=(8, 4), textcoords="offset points",
                        fontsize=9, bbox=dict(boxstyle="round,pad=0.2", fc="white", alpha=0.85), zorder=5)
    pts = np.concatenate([xy[walk]] + ([d] if len(d) else []))
    lo, hi = pts.min(axis=0) - 15.0, pts.max(axis=0) + 15.0  # the walk and the drive, not the whole map
    centre, half = (lo + hi) / 2, np.maximum((hi - lo) / 2, 0.6 * ((hi - lo) / 2).max())
    ax.set_xlim(centre[0] - half[0], centre[0] + half[0])
    ax.set_ylim(centre[1] - half[1], centre[1] + half[1])
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("east [m]")
    ax.set_ylabel("north [m]")
    ax.set_title(f"route job {rec.get('utc', '')}: {rec.get('outcome')}\n{rec['plan'].get('instruction') or ''}",
                 fontsize=10)
    ax.legend(loc="upper left", fontsize=7)
    ax.grid(True, lw=0.3)
    rows = {lm.get("name"): lm for lm in rec["plan"].get("landmarks") or []}
    for i, g in enumerate(grounding):
        plot_grounding(fig.add_subplot(gs[1, i]), xy, g, rows.get(g.get("name"), {}), i)
    plot_timeline(fig.add_subplot(gs[len(ratios) - 1, :]), tl)
    tmp = out.with_name(out.name + ".partial.png")
    fig.savefig(tmp, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, out)


def _grounding(plan: dict) -> list:
    """The plan's grounded landmarks that carry node scores (the mission's ``grounding`` is a dict with
    ``landmarks``; a plan to a chosen node has none)."""
    g = plan.get("grounding")
    items = g.get("landmarks") if isinstance(g, dict) else g
    return [x for x in items or [] if isinstance(x, dict) and x.get("scores")]


def _html(rec: dict, facts: dict, png: Path, images: dict) -> str:
    esc = html.escape
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in facts.items())
    fails = "".join(f"<li>{esc(json.dumps(f, default=str))}</li>" for f in rec.get("failures") or [])
    lms = []
    for i, lm in enumerate(rec["plan"].get("landmarks") or []):
        jpeg = images.get(lm.get("node"))
        img = (f'<img alt="node {lm.get("node")}" src="data:image/jpeg;base64,{base64.b64encode(jpeg).decode()}">'
               if jpeg else "")
        lms.append(f"<figure>{img}<figcaption>{i + 1}. {esc(str(lm.get('name')))} (node {lm.get('node')})"
                   "</figcaption></figure>")
    defs = "".join(f"<dt>{esc(a)}</dt><dd>{esc(b)}</dd>" for a, b in DEFINITIONS)
    pic = base64.b64encode(png.read_bytes()).decode()
    return (f"<!doctype html><meta charset=utf-8><title>route job {esc(str(rec.get('utc', '')))}</title>"
            "<style>body{font-family:system-ui,sans-serif;max-width:980px;margin:auto}th{text-align:left;"
            "padding-right:1em}figure{display:inline-block;margin:4px}img{max-width:100%}</style>"
            f"<h1>Route job: {esc(str(rec.get('outcome')))}</h1>"
            f"<p>{esc(str(rec['plan'].get('instruction') or 'to a chosen node'))}</p>"
            f"<table>{rows}</table>"
            + (f"<h2>Failures</h2><ul>{fails}</ul>" if fails else "")
            + f"<h2>Landmarks</h2>{''.join(lms) or '<p>none (a walk to a chosen node)</p>'}"
            f"<h2>Map, grounding and the drive over time</h2><img alt=report src=\"data:image/png;base64,{pic}\">"
            f"<h2>What the figures mean</h2><dl>{defs}</dl>")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["RunRecordError", "load_record", "timeline", "write_run_report"]
