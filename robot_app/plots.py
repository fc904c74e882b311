"""Pictures of maps and walks (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from robot_app.errors import UsageError

PLOT_FORMATS = (".png", ".pdf", ".svg")


def check_plot_path(path: str, option: str) -> None:
    """Refuse an output the plots cannot write, before any work is done.

    Raises
    ------
    robot_app.errors.UsageError
        Unsupported extension, or the folder does not exist.
    """
    p = Path(path)
    if p.suffix.lower() not in PLOT_FORMATS:
        raise UsageError(f"{option} {path}: use a {', '.join(PLOT_FORMATS)} file name")
    if p.parent != Path("") and not p.parent.is_dir():
        raise UsageError(f"{option} {path}: the folder {p.parent} does not exist")


def plot_walk(out: str | Path, *, xy_m: np.ndarray, edges: np.ndarray, walk: np.ndarray | None,
              landmark_nodes: Sequence[int] = (), landmark_names: Sequence[str] = (),
              start: int | None = None, title: str = "", truth_nodes: Sequence[Sequence[int]] = ()) -> Path:
    """Write a PNG of the map with the walk and the node chosen for each landmark.

    Parameters
    ----------
    xy_m : (N, 2) float, node positions in metres (UTM easting/northing or any local ENU frame).
    edges : (E, 2) int, node pairs to draw (direction ignored).
    walk : (m,) int node indices of the walk, or None.
    landmark_nodes, landmark_names : the node chosen for each landmark and its text.
    truth_nodes : optional ground-truth node sets per landmark (drawn as hollow circles).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    xy = np.asarray(xy_m, dtype=np.float64)
    origin = xy.min(axis=0) if xy.size else np.zeros(2)
    xy = xy - origin
    fig, ax = plt.subplots(figsize=(8, 8), dpi=110)
    if len(edges):
        segs = xy[np.asarray(edges)]
        ax.add_collection(LineCollection(segs, colors="0.8", linewidths=0.6, zorder=1))
    ax.scatter(xy[:, 0], xy[:, 1], s=4, c="0.55", zorder=2, label="map nodes")
    for i, nodes in enumerate(truth_nodes):
        pts = xy[list(nodes)]
        ax.scatter(pts[:, 0], pts[:, 1], s=60, facecolors="none", edgecolors="tab:green", zorder=3,
                   label="ground truth" if i == 0 else None)
    if walk is not None and len(walk):
        w = xy[np.asarray(walk)]
        ax.plot(w[:, 0], w[:, 1], "-", color="tab:blue", lw=2.2, zorder=4, label="planned walk")
    if start is not None:
        ax.scatter(*xy[start], marker="s", s=90, c="black", zorder=6, label="start")
    for i, (node, name) in enumerate(zip(landmark_nodes, landmark_names)):
        ax.scatter(*xy[node], marker="*", s=220, c="tab:red", edgecolors="k", zorder=7,
                   label="landmark" if i == 0 else None)
        ax.annotate(f"{i + 1}. {name}", xy[node], xytext=(6, 6), textcoords="offset points", fontsize=9,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", alpha=0.85), zorder=8)
    ax.set_aspect("equal")
    ax.autoscale()
    ax.set_xlabel("east [m]")
    ax.set_ylabel("north [m]")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, lw=0.3)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out


EDGE_COLOURS = {"temporal": "tab:blue", "vnm": "tab:orange", "gps": "tab:green", "manual": "tab:purple"}


def plot_map(out: str | Path, topomap, *, thumbnails: Sequence[int] = (), title: str = "") -> Path:
    """PNG of a map: nodes on their UTM positions, edges coloured by source, optional node thumbnails.

    Parameters
    ----------
    topomap : an open :class:`core.mapstore.TopoMap`.
    thumbnails : node ids whose first image is drawn next to the node.
    """
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.offsetbox import AnnotationBbox, OffsetImage

    nodes, edges = topomap.nodes, topomap.edges
    xy = np.stack([nodes.easting_m, nodes.northing_m], axis=1)
    xy = xy - (xy.min(axis=0) if len(xy) else 0.0)
    fig, ax = plt.subplots(figsize=(9, 9), dpi=110)
    for source, colour in EDGE_COLOURS.items():
        sel = edges.source == source
        if sel.any():
            segs = np.stack([xy[edges.src[sel]], xy[edges.dst[sel]]], axis=1)
            ax.add_collection(LineCollection(segs, colors=colour, linewidths=0.9, label=f"{source} ({sel.sum()})"))
    ax.scatter(xy[:, 0], xy[:, 1], s=5, c="0.3", zorder=3, label=f"nodes ({len(xy)})")
    for node in thumbnails:
        imgs = topomap.images(int(node))
        if not imgs:
            continue
        from PIL import Image

        with Image.open(io.BytesIO(imgs[0])) as im:
            im.thumbnail((96, 96))
            ab = AnnotationBbox(OffsetImage(np.asarray(im.convert("RGB")), zoom=1.0), xy[node], xybox=(40, 40),
                                boxcoords="offset points", arrowprops=dict(arrowstyle="-", color="0.4"))
        ax.add_artist(ab)
        ax.annotate(str(node), xy[node], fontsize=7)
    ax.set_aspect("equal")
    ax.autoscale()
    ax.set_xlabel("east [m]")
    ax.set_ylabel("north [m]")
    ax.set_title(title or str(topomap.path.name))
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, lw=0.3)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_grounding(ax, xy: np.ndarray, g: dict, row: dict, i: int) -> None:
    """One landmark's CLIP match over the map (LM-Nav Sec. 4.3, the grounding the walk search uses): the
    plan's best-matching nodes coloured by cosine, the chosen node starred, the nodes that truly show the
    landmark (ground truth) circled green."""
    ax.scatter(xy[:, 0], xy[:, 1], s=2, c="0.8", zorder=1)
    sc = np.asarray(g["scores"], dtype=float)
    order = np.argsort(sc[:, 1])  # best drawn last, on top
    pts = ax.scatter(xy[sc[order, 0].astype(int), 0], xy[sc[order, 0].astype(int), 1], s=7, c=sc[order, 1],
                     cmap="viridis", zorder=2)
    ax.figure.colorbar(pts, ax=ax, fraction=0.05, pad=0.02).ax.tick_params(labelsize=6)
    for v in row.get("truth_nodes") or []:
        ax.scatter(*xy[v], s=30, facecolors="none", edgecolors="tab:green", lw=0.8, zorder=3)
    node = row.get("node", g.get("best_node"))
    if node is not None:
        ax.scatter(*xy[node], marker="*", s=120, c="tab:red", edgecolors="k", zorder=4)
    ax.set_title(f"{i + 1}. {g['name']}: CLIP match", fontsize=8)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xticks([])
    ax.set_yticks([])


#: background colour of the time plot per driver (robot_app.nav.policy.Driver)
DRIVER_COLOURS = {"vnm": "#cfe8ff", "gps": "#ffe2b8", "turn": "#e6d5f5", "back": "#ffc9c9", "stop": "#e8e8e8"}


def plot_timeline(ax, timeline: dict) -> None:
    """Speed (m/s) and cross-track error to the planned walk (m) over the drive's time, on a background
    coloured by who drove (the drive stage's ``timeline``)."""
    dt = float(timeline["period_s"])
    speed, xt = np.asarray(timeline["speed_mps"]), np.asarray(timeline["cross_track_m"])
    drivers = timeline.get("drivers") or []
    for (t, who), nxt in zip(drivers, drivers[1:] + [[None, None]]):
        end = nxt[0] if nxt[0] is not None else t + 0.5
        ax.axvspan(t, end, color=DRIVER_COLOURS.get(str(who).lower(), "#f4f4f4"), lw=0)
    ax.plot(np.arange(1, len(speed) + 1) * dt, speed, color="tab:blue", lw=1.2, label="speed [m/s]")
    ax.set_xlabel("time since the drive started [s]")
    ax.set_ylabel("speed [m/s]", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(np.arange(len(xt)) * dt, xt, color="tab:red", lw=1.0, label="cross-track error [m]")
    ax2.set_ylabel("cross-track error [m]", color="tab:red")
    seen = [w for w in DRIVER_COLOURS if any(str(d[1]).lower() == w for d in drivers)]
    handles = [plt_patch(DRIVER_COLOURS[w], f"{w.upper()} drives") for w in seen]
    if handles:
        ax.legend(handles=handles, loc="upper right", fontsize=7, ncol=len(handles))
    ax.set_title("the drive over time: speed, distance from the planned walk, who drove", fontsize=9)
    ax.grid(True, lw=0.3)


def plt_patch(colour: str, label: str):
    from matplotlib.patches import Patch

    return Patch(color=colour, label=label)
