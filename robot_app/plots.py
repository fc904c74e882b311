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
