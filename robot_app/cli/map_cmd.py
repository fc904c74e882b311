"""``robot-app map info``, ``map example``, ``map build`` (``--engine local|ray``) and ``map plot``."""

from __future__ import annotations

import json
from pathlib import Path

from robot_app.config import SIM_MODELS
from robot_app.errors import UsageError


def register(sub, groups) -> None:
    info = groups["map"].add_parser("info", help="counts, bounding box, edge statistics and models of a map")
    info.add_argument("map", metavar="MAP", help="map file (SQLite)")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.add_argument("--allow-unverified", action="store_true", help=UNVERIFIED_HELP)
    info.set_defaults(func=_info)
    ex = groups["map"].add_parser(
        "example", help="write the synthetic example map (street grid, landmark scores) for a first plan")
    ex.add_argument("--out", required=True, metavar="DIR", help="folder for map.sqlite, scores.npy, landmarks.txt")
    ex.add_argument("--landmarks", default="a stop sign; a white car; a glass building",
                    help="landmarks (';'-separated) to score; see core.example_map.LANDMARKS")
    ex.add_argument("--overwrite", action="store_true", help="replace an existing example in DIR")
    ex.set_defaults(func=_example)
    b = groups["map"].add_parser("build", help="build a map from traversal logs (LM-Nav Algorithm 2)")
    b.add_argument("logs", nargs="+", metavar="LOG", help="traversal log folders")
    b.add_argument("--out", required=True, metavar="MAP", help="map file to write")
    b.add_argument("--models", metavar="DIR",
                   help="models directory with the VNM and CLIP (default: [paths] models_dir; the SIM-ONLY "
                        f"stand-ins shipped for the simulated world: {SIM_MODELS})")
    b.add_argument("--require-models", action="store_true",
                   help="refuse to build without the VNM (unless --no-vnm) and CLIP instead of falling back "
                        "(GPS edges, no image embeddings); exit 2")
    b.add_argument("--overwrite", action="store_true", help="replace an existing map")
    b.add_argument("--no-vnm", action="store_true", help="GPS fallback even when a VNM is installed")
    b.add_argument("--json", action="store_true", help="print the build report as JSON")
    b.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this process (default); ray: a Ray cluster (the fleet extra; docs/maps.md)")
    b.add_argument("--ray-address", metavar="ADDR",
                   help="with --engine ray: join this cluster (the head's HOST:PORT, e.g. head:6379; auto; "
                        "ray://HOST:10001 needs ray[client]); default: start a local Ray runtime")
    b.add_argument("--workers", type=int, metavar="N",
                   help="with --engine ray: model workers per stage (default: the cluster's CPUs)")
    b.set_defaults(func=_build)
    pl = groups["map"].add_parser("plot", help="picture of a map: nodes, edges by source, thumbnails")
    pl.add_argument("map", metavar="MAP")
    pl.add_argument("--out", required=True, metavar="PNG")
    pl.add_argument("--allow-unverified", action="store_true", help=UNVERIFIED_HELP)
    pl.add_argument("--thumbnails", default="", metavar="IDS", help="comma-separated node ids to show images of")
    pl.set_defaults(func=_plot)


UNVERIFIED_HELP = ("open a format-1 map that has no content hashes (its rows cannot be checked; shown as "
                   "unverified); [mission] allow_unverified_maps = true does the same")


def open_map_or_usage_error(path: str, args=None, config=None):
    """Open a map for a CLI command; unreadable maps become a :class:`UsageError` (exit 2). A format-1 map
    without content hashes opens when ``args.allow_unverified`` or ``[mission] allow_unverified_maps``."""
    from core.mapstore import MapFormatError, open_map

    allow = bool(getattr(args, "allow_unverified", False)) or bool(
        config is not None and config.mission.allow_unverified_maps)
    try:
        return open_map(path, allow_unverified=allow)
    except (FileNotFoundError, IsADirectoryError, PermissionError, MapFormatError) as exc:
        raise UsageError(str(exc)) from exc


def map_summary(m) -> dict:
    """Dictionary of counts, bounding box, edge statistics and models of an open map."""
    import numpy as np

    n, e = len(m.nodes), len(m.edges)
    out = {"path": str(m.path), "format_version": m.metadata.get("format_version"), "verified": m.verified,
           "nodes": n,
           "edges": e, "images": m.image_count(), "embedding_models": m.embedding_models(),
           "metadata": {k: v for k, v in m.metadata.items() if k != "format_version"}}
    if n:
        out["bbox"] = {"lat_min_deg": float(m.nodes.lat_deg.min()), "lat_max_deg": float(m.nodes.lat_deg.max()),
                       "lon_min_deg": float(m.nodes.lon_deg.min()), "lon_max_deg": float(m.nodes.lon_deg.max()),
                       "extent_east_m": float(np.ptp(m.nodes.easting_m)),
                       "extent_north_m": float(np.ptp(m.nodes.northing_m)),
                       "utm_zones": sorted({f"{z}{b}" for z, b in zip(m.nodes.utm_zone.tolist(), m.nodes.utm_band)})}
        out["time_span_s"] = float(np.ptp(m.nodes.timestamp_s))
    if e:
        w = m.edges.weight_steps.astype(np.float64)
        by_source = {}
        for s in sorted(set(m.edges.source.tolist())):
            ws = w[m.edges.source == s]
            by_source[s] = {"count": int(ws.size), "mean_steps": float(ws.mean()), "max_steps": float(ws.max())}
        deg = np.bincount(m.edges.src, minlength=n)
        out["edge_stats"] = {"weight_min_steps": float(w.min()), "weight_median_steps": float(np.median(w)),
                             "weight_max_steps": float(w.max()), "mean_out_degree": float(deg.mean()),
                             "isolated_nodes": int(np.sum((deg == 0) & (np.bincount(m.edges.dst, minlength=n) == 0))),
                             "by_source": by_source}
        from scipy.sparse.csgraph import connected_components

        from core.search import csr_graph

        ncomp, _ = connected_components(csr_graph(*m.csr()), directed=True, connection="weak")
        out["edge_stats"]["components"] = int(ncomp)
    return out


def _info(args, config) -> int:
    with open_map_or_usage_error(args.map, args, config) as m:
        s = map_summary(m)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"map {s['path']} (format {s['format_version']}"
          f"{'' if s['verified'] else ', UNVERIFIED: no content hashes, altered rows cannot be detected'})")
    print(f"  nodes {s['nodes']}, edges {s['edges']} (directed rows), images {s['images']}")
    if "bbox" in s:
        b = s["bbox"]
        print(f"  lat {b['lat_min_deg']:.6f} .. {b['lat_max_deg']:.6f} deg, lon {b['lon_min_deg']:.6f} .. "
              f"{b['lon_max_deg']:.6f} deg ({b['extent_east_m']:.0f} m x {b['extent_north_m']:.0f} m, "
              f"UTM {', '.join(b['utm_zones'])}), recorded over {s['time_span_s']:.0f} s")
    if "edge_stats" in s:
        es = s["edge_stats"]
        print(f"  D per edge: min {es['weight_min_steps']:.1f}, median {es['weight_median_steps']:.1f}, "
              f"max {es['weight_max_steps']:.1f} time steps; mean out-degree {es['mean_out_degree']:.2f}; "
              f"{es['components']} connected component(s), {es['isolated_nodes']} isolated node(s)")
        for src, st in es["by_source"].items():
            print(f"    {src}: {st['count']} edges, mean {st['mean_steps']:.1f} steps")
    print(f"  embedding models: {', '.join(s['embedding_models']) or 'none'}")
    for k, v in s["metadata"].items():
        print(f"  {k}: {json.dumps(v)}")
    return 0


def _example(args, config) -> int:
    import numpy as np

    from core.example_map import build_example, example_scores
    from core.mapstore import MapWriter

    landmarks = [t.strip() for t in args.landmarks.split(";") if t.strip()]
    ex = build_example()
    try:
        logp, truth = example_scores(ex, landmarks)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from exc
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the folder ({exc.strerror or exc})") from exc
    map_path = out / "map.sqlite"
    try:
        writer = MapWriter.create(map_path, overwrite=args.overwrite,
                                  metadata={"build": {"kind": "synthetic example (no images, no models)",
                                                      "node_spacing_m": 3.0}})
    except FileExistsError as exc:
        raise UsageError(str(exc)) from exc
    with writer as w:
        w.add_nodes(timestamp_s=np.arange(len(ex.xy_m), dtype=np.float64), lat_deg=ex.lat_deg, lon_deg=ex.lon_deg)
        w.add_edges(ex.edges[:, 0], ex.edges[:, 1], ex.weights_steps, source="gps")
    np.save(out / "scores.npy", logp)
    (out / "landmarks.txt").write_text("; ".join(landmarks) + "\n")
    (out / "truth.json").write_text(json.dumps([sorted(t) for t in truth]) + "\n")
    start = ex.corner_node[(0, 0)]
    print(f"wrote {map_path} ({len(ex.xy_m)} nodes), {out / 'scores.npy'} {logp.shape}, {out / 'landmarks.txt'}")
    print("plan a walk with:")
    print(f"  robot-app plan --map {map_path} --start {start} --landmarks \"{'; '.join(landmarks)}\" "
          f"--scores {out / 'scores.npy'} --plot {out / 'walk.png'}")
    return 0


def _build(args, config) -> int:
    import sys

    from core.tlog import LogFormatError
    from models.sidecar import ModelMissing
    from robot_app.mapping.map_build import build_map

    if args.models is not None and not Path(args.models).is_dir():
        raise UsageError(f"--models {args.models}: no such folder")
    models_dir = args.models or config.paths.models_dir
    engine = _engine(args)
    try:
        rep = build_map(args.logs, args.out, config=config, models_dir=models_dir, overwrite=args.overwrite,
                        progress=sys.stderr.isatty(), use_vnm=not args.no_vnm, engine=engine,
                        require_models=args.require_models)
    except ModelMissing as exc:  # --require-models (before any work)
        raise UsageError(f"--require-models: {exc} (give --models DIR; the SIM-ONLY stand-ins for the "
                         f"simulated world: --models {SIM_MODELS})") from exc
    except (LogFormatError, FileExistsError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    d = rep.as_dict()
    d["models_dir"] = str(models_dir)
    hint = (f"to build with models: --models DIR (the SIM-ONLY stand-ins for the simulated world: --models "
            f"{SIM_MODELS}); --require-models makes a missing model an error")
    if args.json:
        print(json.dumps(d, indent=2))
        if d["fallbacks"]:
            print(f"robot-app map build: built without models in {models_dir} (see \"fallbacks\"); {hint}",
                  file=sys.stderr)
        return 0
    print(f"built {args.out}: {d['nodes']} nodes, edges {d['edges']}, {d['components']} component(s)")
    print(f"  distances: {d['distance_source']}; {d['candidate_pairs']} candidate pairs, "
          f"{d['vnm_evaluations']} VNM evaluations ({d['vnm_cached']} from the checkpoint)")
    print(f"  rejected: {d['rejected_wormholes']} wormholes (> eta), {d['rejected_far']} too far (>= tau); "
          f"removed {d['removed_redundant']} redundant edges")
    print("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in d["phase_s"].items()))
    eng = d.get("engine", {})
    if eng.get("name") == "ray":
        busy = ", ".join(f"{k} {v:.2f} s" for k, v in eng.get("worker_busy_s", {}).items()) or "none"
        rate = d["vnm_evaluations"] / d["phase_s"]["distances"] if d["phase_s"].get("distances") else 0.0
        print(f"  ray ({eng.get('address')}): {eng.get('workers')} workers; worker time {busy}; "
              f"{rate:.1f} VNM pairs/s")
    if args.no_vnm:
        print("  GPS edges (--no-vnm)")
    if d["fallbacks"]:
        print(f"  fallbacks (models directory {models_dir}):")
        for line in d["fallbacks"]:
            print(f"    {line}")
        print(f"  {hint}")
    return 0


def _engine(args):
    """The build engine of ``--engine`` (None: local); checks the flags and the fleet extra."""
    if args.engine == "local":
        if args.ray_address or args.workers is not None:
            raise UsageError("--ray-address and --workers need --engine ray")
        return None
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: expected >= 1, got {args.workers}")
    from robot_app.extras import require

    require("fleet", what="map build --engine ray")
    from robot_app.fleet import check_ray_address

    check_ray_address(args.ray_address)
    from robot_app.mapping.map_build_ray import RayEngine

    return RayEngine(address=args.ray_address, workers=args.workers)


def _plot(args, config) -> int:
    from robot_app.plots import check_plot_path, plot_map

    check_plot_path(args.out, "--out")
    try:
        thumbs = [int(x) for x in args.thumbnails.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--thumbnails: expected comma-separated node ids, got {args.thumbnails!r}") from exc
    with open_map_or_usage_error(args.map, args, config) as m:
        bad = [t for t in thumbs if not 0 <= t < len(m.nodes)]
        if bad:
            raise UsageError(f"--thumbnails: nodes {bad} are not in the map (0..{len(m.nodes) - 1})")
        plot_map(args.out, m, thumbnails=thumbs)
    print(f"wrote {args.out}")
    return 0
