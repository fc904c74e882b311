"""``robot-app plan``: the walk through the map that visits the landmarks in order (LM-Nav)."""

from __future__ import annotations

import json

from robot_app.cli.map_cmd import UNVERIFIED_HELP
from robot_app.errors import UsageError


def register(sub, groups) -> None:
    p = sub.add_parser("plan", help="plan the walk that visits landmarks in order (LM-Nav search)",
                       description="Plan the walk from --start that visits the landmarks in order. "
                                   "Landmark log-likelihoods come from --scores (an (N, K) .npy) or, with "
                                   "--instruction, from the landmark parser and CLIP grounding.")
    p.add_argument("--map", required=True, metavar="MAP", help="map file (SQLite)")
    p.add_argument("--allow-unverified", action="store_true", help=UNVERIFIED_HELP)
    p.add_argument("--start", required=True, type=int, metavar="NODE", help="start node id")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--landmarks", metavar="'a; b; c'", help="landmarks in visiting order, ';'-separated "
                                                              "(needs --scores)")
    src.add_argument("--instruction", metavar="TEXT", help="route instruction in plain words")
    p.add_argument("--scores", metavar="FILE.npy", help="(N, K) float log-likelihoods G(v, i) for --landmarks")
    p.add_argument("--alpha", type=float, default=None,
                   help="weight per VNM time step (default: [planner] alpha of the config)")
    p.add_argument("--planner", choices=("lmnav", "max-likelihood"), default=None,
                   help="search (default: [planner] planner of the config)")
    p.add_argument("--parser", choices=("auto", "rules", "llm"), default=None,
                   help="landmark parser for --instruction (default: the config's)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="OUT.png", help="write a picture of the map, the walk and the landmarks")
    p.set_defaults(func=_plan)


def _landmarks_and_scores(args, config, topomap):
    from robot_app.route.planning import PlanningError, load_scores

    if args.landmarks is not None:
        landmarks = [t.strip() for t in args.landmarks.split(";") if t.strip()]
        if not landmarks:
            raise UsageError("--landmarks: no landmark given")
        if not args.scores:
            raise UsageError("--landmarks needs --scores FILE.npy with the (N, K) log-likelihoods "
                             "(or use --instruction to ground them with CLIP)")
        try:
            return landmarks, load_scores(args.scores, n_nodes=len(topomap.nodes), n_landmarks=len(landmarks)), None
        except PlanningError as exc:
            raise UsageError(str(exc)) from exc
    if args.scores:
        raise UsageError("--scores goes with --landmarks; --instruction grounds its landmarks with CLIP")
    from robot_app.route.grounding_service import ground_instruction

    try:
        return ground_instruction(args.instruction, topomap, config=config, parser=args.parser)
    except (PlanningError, ValueError) as exc:  # ValueError: the parser's own limits (length, empty)
        raise UsageError(f"--instruction: {exc}") from exc


def _plan(args, config) -> int:
    import numpy as np

    from robot_app.cli.map_cmd import open_map_or_usage_error
    from robot_app.route.planning import PlanningError, plan_on_map

    alpha = config.planner.alpha if args.alpha is None else args.alpha
    if not np.isfinite(alpha) or alpha < 0:
        raise UsageError(f"--alpha: expected a finite value >= 0, got {alpha}")
    planner = args.planner or config.planner.planner
    if args.plot:
        from robot_app.plots import check_plot_path

        check_plot_path(args.plot, "--plot")
    with open_map_or_usage_error(args.map, args, config) as m:
        landmarks, logp, grounding = _landmarks_and_scores(args, config, m)
        try:
            planned = plan_on_map(m, landmarks, logp, start=args.start, alpha=alpha, planner=planner)
        except PlanningError as exc:
            raise UsageError(str(exc)) from exc
        summary = planned.describe(m)
        if grounding is not None:
            from robot_app.route.grounding_service import mark_found

            summary["grounding"] = grounding
            mark_found(summary, grounding)
        if args.plot:
            from robot_app.plots import plot_walk

            xy = np.stack([m.nodes.easting_m, m.nodes.northing_m], axis=1)
            edges = np.stack([m.edges.src, m.edges.dst], axis=1)
            r = planned.result
            plot_walk(args.plot, xy_m=xy, edges=edges, walk=r.nodes, start=args.start,
                      landmark_nodes=r.landmark_nodes.tolist() if r.ok else [],
                      landmark_names=landmarks if r.ok else [],
                      title=f"{planner} walk, J = {summary['objective']:.3f}" if r.ok else f"{planner}: no walk")
            summary["plot"] = args.plot
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_human(summary)
    return 0 if summary["status"] == "ok" else 1


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _print_absent(s: dict) -> None:
    """The landmarks judged not in the map, in whole words, and by which rule."""
    g = s.get("grounding")
    if not g or not s.get("absent_landmarks"):
        return
    rule = g.get("presence_rule", {})
    how = "calibrated for this model" if rule.get("calibrated") else "NOT calibrated: [models] landmark_min_cosine"
    print(f"NOT IN THE MAP: {', '.join(s['absent_landmarks'])}")
    print(f"  (presence score below {rule.get('threshold')}, {how}); the walk below still goes to the best "
          "match: rephrase, or confirm on the screen before Go")


def _print_human(s: dict) -> None:
    _print_absent(s)  # first: the operator must not miss it
    if s["status"] != "ok":
        print(f"no walk: from the start node no walk reaches all landmarks in order ({s['status']})")
        return
    print(f"{s['planner']} walk: {len(s['nodes'])} nodes, {s['length_steps']:.0f} time steps "
          f"(~{s['length_m']:.0f} m), objective J = {s['objective']:.3f} (alpha {s['alpha']})")
    flags = s.get("grounding", {}).get("landmarks", [])
    flags = flags if len(flags) == len(s["landmarks"]) else [None] * len(s["landmarks"])  # same order
    if "grounding" in s:
        print(f"  landmarks from the {s['grounding']['parser']} parser, grounded with {s['grounding']['clip_model']}")
    for i, lm in enumerate(s["landmarks"], 1):
        g = flags[i - 1]
        note = ""
        if g is not None:
            note = (f"; best cosine {_fmt(g['best_cosine'])}, presence score {_fmt(g['presence_score'])}, top nodes "
                    f"{g['top_nodes']}")
            if not g["found"]:
                note += "  <- NOT IN THE MAP: confirm or rephrase"
        print(f"  {i}. {lm['name']}: node {lm['node']} (walk position {lm['position']}, "
              f"{lm['lat_deg']:.6f}, {lm['lon_deg']:.6f}), log-likelihood {lm['logp']:.2f}{note}")
    if "plot" in s:
        print(f"plot: {s['plot']}")
