"""Development drives for the VNM navigator: seeded random walks on a map's TRUE geometry, driven in the sim.

Choosing the navigator's rules (:class:`robot_app.nav.walk_following.WalkRules`) on ``robot-app eval sim``'s
instruction sets would tune on the figures it reports; these walks are drawn from the map alone.
:func:`dev_walks` picks random start nodes and, for each, a random end node 40-150 m away along the
shortest FORWARD path on the nodes' true positions (nodes within ``link_m`` joined, as
:func:`robot_app.sim.eval_tune.true_graph`; a step u -> v is forward when its direction is within
``max_turn_deg`` of both nodes' recorded headings, so node images face the way the walk drives, the way
``eval sim``'s instruction routes are laid out). Paths join stretches of the exploration where it crossed
itself, so they turn at junctions. :func:`drive_dev_walks` drives each with
:func:`robot_app.sim.eval_drive.drive_walk` (mode ``vnm``, the eval's judge and operator) and sums the
outcome: share of walks reaching their end, disengagements per 100 m by kind, and how many happened
near a turn (the node headings 4 walk nodes before and after differ by more than 40 degrees).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from core.mapstore import open_map
from core.tlog import read_log
from models.vnm import open_vnm
from robot_app.config import Config, nav_options
from robot_app.mapping.map_build import decode_jpeg
from robot_app.nav.policy import NavOptions
from robot_app.nav.walk_following import WalkRules
from robot_app.sim import eval_drive, shipped_models_dir, sim_nav_config
from robot_app.sim.eval_truth import node_true_poses
from robot_app.sim.eval_tune import true_graph
from robot_app.sim.world import load_world

__all__ = ["dev_walks", "drive_dev_walks"]

log = logging.getLogger(__name__)


def dev_walks(xy: np.ndarray, yaw: np.ndarray, *, n: int = 30, seed: int = 0, min_m: float = 40.0,
              max_m: float = 150.0, link_m: float = 3.0, max_turn_deg: float = 72.5) -> list[list[int]]:
    """Seeded random forward walks (lists of node indices) between map nodes.

    Parameters
    ----------
    xy : (N, 2) float, true node positions, m ENU, in recording order.
    yaw : (N,) float, true node headings, rad (the way each node image faces).
    n, seed : how many walks, and the seed of the draw.
    min_m, max_m : walk length range, m (along the path).
    link_m : nodes at most this far apart are joined (:func:`robot_app.sim.eval_tune.true_graph`).
    max_turn_deg : a step is forward when its direction is within this of both nodes' headings.

    Returns
    -------
    list of ``n`` walks (fewer when the map has too few such paths), each a list of node indices.

    Raises
    ------
    ValueError
        ``xy`` / ``yaw`` shapes disagree, or a bad length range.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    xy, yaw = np.asarray(xy, np.float64), np.asarray(yaw, np.float64).reshape(-1)
    if xy.ndim != 2 or xy.shape[1] != 2 or yaw.shape[0] != xy.shape[0]:
        raise ValueError(f"xy (N, 2) and yaw (N,) must agree, got {xy.shape} and {yaw.shape}")
    if not 0 <= min_m < max_m:
        raise ValueError(f"walk length range: need 0 <= min_m < max_m, got {min_m}, {max_m}")
    m = xy.shape[0]
    indptr, dst, w = true_graph(xy, link_m=link_m)
    src = np.repeat(np.arange(m), np.diff(indptr))
    d = xy[dst] - xy[src]
    h = np.arctan2(d[:, 1], d[:, 0])
    c = math.cos(math.radians(max_turn_deg))
    fwd = (np.cos(h - yaw[src]) > c) & (np.cos(h - yaw[dst]) > c)
    graph = csr_matrix((w[fwd].astype(np.float64), (src[fwd], dst[fwd])), shape=(m, m))
    rng = np.random.default_rng(seed)
    walks: list[list[int]] = []
    for _ in range(200 * n):
        if len(walks) >= n:
            break
        a = int(rng.integers(m))
        dist, pred = dijkstra(graph, indices=a, return_predecessors=True)
        ends = np.flatnonzero(np.isfinite(dist) & (dist >= min_m) & (dist <= max_m))
        if ends.size == 0:
            continue
        path = [int(rng.choice(ends))]
        while path[-1] != a:
            path.append(int(pred[path[-1]]))
        walks.append(path[::-1])
    return walks


def _near_turn(yaw: np.ndarray, walk: list[int], i: int, k: int = 4) -> bool:
    a, b = walk[max(0, i - k)], walk[min(len(walk) - 1, i + k)]
    return abs(math.remainder(float(yaw[b] - yaw[a]), 2 * math.pi)) > math.radians(40.0)


def drive_dev_walks(world, walks: list[list[int]], xy: np.ndarray, yaw: np.ndarray, node_image, vnm, *,
                    options=None, params=None, camera: dict | None = None) -> dict:
    """Drive ``walks`` with the VNM (``eval sim``'s driver and judge) and sum the outcome.

    Parameters
    ----------
    world : robot_app.sim.world.World
    walks : from :func:`dev_walks`; xy, yaw : as there (true node poses).
    node_image : callable node index -> (H, W, 3) uint8 RGB, the map's image of the node.
    vnm : models.vnm.VnmModel
    options : robot_app.nav.policy.NavOptions, optional (default: eval sim's, :func:`sim_options`).
    params : robot_app.sim.eval_drive.DriveParams, optional (default: eval sim's judge).
    camera : the sim camera (``width``, ``height``, ``hfov_deg``), default 160 x 120, 90 deg.

    Returns
    -------
    dict: ``walks``, ``km``, ``reached`` (share), ``per_100m`` (disengagements), ``kinds`` (count by
    kind), ``near_turn`` (disengagements near a turn), ``rows`` (per walk: length_m, reached,
    disengagements, final_error_m).
    """
    params = params or eval_drive.DriveParams()
    options = options or sim_options()
    camera = camera or {"width": 160, "height": 120, "hfov_deg": 90.0}
    rows, near = [], 0
    for k, walk in enumerate(walks):
        length = float(np.hypot(*np.diff(xy[walk], axis=0).T).sum())
        sw = eval_drive.SimWalk(xy[walk], images=[node_image(v) for v in walk])
        res = eval_drive.drive_walk(world, sw, mode="vnm", options=options, vnm=vnm, camera=camera, params=params,
                                    seed=k)
        near += sum(_near_turn(yaw, walk, i) for _, i in res.events)
        rows.append({"length_m": round(length, 1), "reached": res.reached,
                     "disengagements": dict(res.disengagements),
                     "final_error_m": None if not math.isfinite(res.final_error_m) else round(res.final_error_m, 2)})
        log.info("dev walk %d/%d: %.0f m, %s, %s", k + 1, len(walks), length,
                 "reached" if res.reached else "not reached", res.disengagements)
    km = sum(r["length_m"] for r in rows) / 1000.0
    kinds = {kd: sum(r["disengagements"][kd] for r in rows) for kd in eval_drive.DISENGAGEMENT_KINDS}
    return {
        "walks": len(rows),
        "km": round(km, 3),
        "reached": float(np.mean([r["reached"] for r in rows])) if rows else 0.0,
        "per_100m": round(sum(kinds.values()) / (10.0 * km), 2) if km > 0 else 0.0,
        "kinds": kinds,
        "near_turn": int(near),
        "rows": rows,
    }


def sim_options():
    """The navigation policy's options as ``eval sim`` drives the sim VNM (:func:`robot_app.sim.sim_nav_config`
    of the default config)."""
    return nav_options(sim_nav_config(Config()))


def main(argv: list[str] | None = None) -> int:
    """``python -m robot_app.sim.vnm_devdrive EVAL_DIR --world W [--n N] [--seed S] [--models DIR] [RULE=VALUE ...]``.

    ``EVAL_DIR`` is a ``robot-app eval sim --out`` folder (its ``map.sqlite`` and ``exploration/``);
    ``RULE=VALUE`` overrides a :class:`robot_app.nav.policy.NavOptions` or
    :class:`robot_app.nav.walk_following.WalkRules` field (e.g. ``goal_confirm_steps=1 recover_window=0`` for
    GNM's own rules). Prints the summary as JSON.
    """
    import argparse
    import dataclasses
    import json
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m robot_app.sim.vnm_devdrive", description=main.__doc__)
    ap.add_argument("eval_dir", type=Path)
    ap.add_argument("--world", required=True)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", type=Path, default=None)
    ap.add_argument("rules", nargs="*", metavar="RULE=VALUE")
    a = ap.parse_intermixed_args(argv)

    fields = {f.name: f.type for f in (*dataclasses.fields(NavOptions), *dataclasses.fields(WalkRules))
              if f.name != "rules"}
    over = {}
    for item in a.rules:
        key, _, value = item.partition("=")
        if key not in fields or not value:
            ap.error(f"{item!r}: expected RULE=VALUE with RULE one of {', '.join(sorted(fields))}")
        over[key] = json.loads(value.lower()) if value.lower() in ("true", "false") else float(value)
        if "int" in str(fields[key]) and "float" not in str(fields[key]):
            over[key] = int(over[key])
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    world = load_world(a.world)
    with open_map(a.eval_dir / "map.sqlite") as tm:
        xy, yaw = node_true_poses(tm.nodes.timestamp_s, read_log(a.eval_dir / "exploration").odom)
        walks = dev_walks(xy, yaw, n=a.n, seed=a.seed)
        out = drive_dev_walks(world, walks, xy, yaw, lambda v: decode_jpeg(tm.images(int(v))[0]),
                              open_vnm(a.models or shipped_models_dir()), options=sim_options().replace(**over))
    out.pop("rows")
    print(json.dumps({"world": a.world, "seed": a.seed, "rules": over, **out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
