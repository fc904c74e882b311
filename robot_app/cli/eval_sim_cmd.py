"""``robot-app eval sim``: LM-Nav vs max-likelihood vs GPS-only driving in a simulated world.

See :mod:`robot_app.sim.eval` for what runs; the output folder keeps the exploration log and the map
between runs (reused while the world, route, seed, models and mapping settings are unchanged), the
JSON report and the PNG chart.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from robot_app.errors import UsageError
from robot_app.extras import require

log = logging.getLogger(__name__)


def register(sub, groups) -> None:
    p = groups["eval"].add_parser(
        "sim", help="LM-Nav planning and driving vs the max-likelihood planner and GPS-only in a simulated world",
        description="Record (or reuse) a scripted exploration of the world, build the map with the sim VNM, then "
                    "for each instruction of the set: parse, ground with the sim VLM, plan with LM-Nav search and "
                    "the max-likelihood planner (planning success, planning efficiency), and drive the LM-Nav walk "
                    "with the VNM and with GPS only (disengagements, efficiency). Writes eval-WORLD.json and "
                    "eval-WORLD.png to --out.")
    p.add_argument("--world", default=None, help="shipped world name (campus, industrial) or a world .toml file")
    p.add_argument("--generated", type=int, default=None, metavar="N",
                   help="instead of --world: the first N generated worlds of --seed-range (robot_app.sim.worldgen), "
                        "each with its generated instruction set; one pooled report")
    p.add_argument("--seed-range", choices=("train", "dev", "test"), default="test",
                   help="with --generated: test (default; seeds 3000-3099, never trained or tuned on), dev (the "
                        "planner's tuning seeds) or train (the stand-in VLM's training seeds)")
    p.add_argument("--instructions", type=Path, default=None,
                   help="instruction set JSON (default: the world's shipped <world>-instructions.json)")
    p.add_argument("--models", default=None, metavar="DIR",
                   help="models folder (default: the shipped sim models, else [paths] models_dir)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: ./eval-sim-WORLD)")
    p.add_argument("--seed", type=int, default=0, help="seed of the exploration's and the drives' noise (default 0)")
    p.add_argument("--parser", choices=("auto", "rules", "llm", "llm-spans"), default=None,
                   help="landmark parser (default: [llm] landmark_parser)")
    p.add_argument("--alpha", type=float, default=None,
                   help="walk-length weight per VNM time step (default: the alpha `eval sim-tune --write` recorded "
                        "for the models, else [planner] alpha; the cosine cap recorded with it applies either way)")
    p.add_argument("--max-cosine", type=float, default=None,
                   help="the grounding's cosine cap, [planner] max_cosine (1 = off; default: the cap `eval sim-tune "
                        "--write` recorded for the models, else [planner] max_cosine)")
    p.add_argument("--node-spacing", type=float, default=1.0, metavar="M",
                   help="map node spacing in metres driven ([mapping] min_travel_m for this map; default 1, as GNM's "
                        "topological maps, so that consecutive nodes are a few VNM time steps apart)")
    p.add_argument("--grounding", choices=("vlm", "oracle"), default="vlm",
                   help="vlm: parse and ground with the sim VLM (default); oracle: a perfect category detector on "
                        "the truth's landmarks, every instance of a category alike (separates the search from "
                        "the VLM's errors)")
    p.add_argument("--limit", type=int, default=None, help="only the first N instructions")
    p.add_argument("--drive-time-limit", type=float, default=None, metavar="S",
                   help="end each simulated drive after S sim seconds (default: 2 x the walk's length at the "
                        "driving speed + 60 s)")
    p.add_argument("--no-drive", action="store_true", help="planning metrics only (skip the simulated drives)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.add_argument("--write", action="store_true",
                   help="with --generated and --seed-range test: record the planning success beside the models "
                        "(unseen-worlds-eval.json, which the demo's report quotes first)")
    _engine_args(p)
    p.set_defaults(func=_eval_sim)

    t = groups["eval"].add_parser(
        "sim-tune", help="choose the planner's alpha and cosine cap on generated development instructions "
                         "(not the reported sets)",
        description="Generate a seeded development set of instructions per world from the world's ground truth "
                    "(random start, 2-4 landmark categories, truth = the instances a perfect category detector's "
                    "shortest walk visits), ground them with the sim VLM and report LM-Nav planning success for "
                    "each alpha and cosine cap of a grid. Prints the alpha and cap to set as [planner] alpha and "
                    "max_cosine; writes sim-tune.json and "
                    "sim-tune.png to --out. Reuses the explorations and maps of `robot-app eval sim` in "
                    "--out/WORLD.")
    t.add_argument("--world", action="append", default=None,
                   help="shipped world name or .toml file; repeat for several (default: campus and industrial)")
    t.add_argument("--generated", type=int, default=None, metavar="N",
                   help="tune on the first N generated worlds of the dev seed range (2000-2099; never trained on or "
                        "evaluated on) instead of --world; the seeds are recorded in planner-tuning.json")
    t.add_argument("--models", default=None, metavar="DIR",
                   help="models folder (default: the shipped sim models, else [paths] models_dir)")
    t.add_argument("--instructions", type=Path, default=None,
                   help="instruction set JSON whose exploration route records the map (its instructions are not "
                        "used; default: the world's shipped set)")
    t.add_argument("--out", type=Path, default=Path("eval-sim-tune"), help="output folder (default: ./eval-sim-tune)")
    t.add_argument("--n", type=int, default=300, help="development instructions per world (default 300)")
    t.add_argument("--seed", type=int, default=1, help="seed of the development set (default 1)")
    t.add_argument("--alphas", default=None,
                   help="comma-separated alpha grid per VNM time step (default 0.001,0.002,0.005,...,0.2)")
    t.add_argument("--max-cosines", default=None,
                   help="comma-separated grid of the grounding's cosine cap, [planner] max_cosine (1 = off; "
                        "default 1,0.5,0.48,0.46,0.44,0.42, fitted to the sim VLM's 0.5 target; real CLIP's "
                        "cosines sit near 0.2-0.35)")
    t.add_argument("--logit-scale", type=float, default=None,
                   help="grounding logit scale (default: [planner] logit_scale, else the model's own)")
    t.add_argument("--write", action="store_true",
                   help="record the chosen alpha and cosine cap in the models folder (planner-tuning.json), "
                        "where eval sim and demo take them from for those model files")
    t.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    _engine_args(t)
    t.set_defaults(func=_eval_sim_tune)


def _number_grid(text: str | None, flag: str, default: tuple, ok, rule: str) -> tuple[float, ...]:
    """A comma-separated grid of numbers from the command line (``default`` when not given)."""
    if text is None:
        return default
    try:
        grid = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: expected comma-separated numbers") from exc
    if not grid or not all(ok(x) for x in grid):
        raise UsageError(f"{flag} {text!r}: {rule}")
    return grid


def _engine_args(p) -> None:
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: the instructions one after the other here (default); ray: fanned out over Ray "
                        "workers (the fleet extra), the same figures")
    p.add_argument("--ray-address", metavar="ADDR", help="with --engine ray: join this cluster (the head's HOST:PORT, "
                   "e.g. head:6379; auto; ray://HOST:10001 needs ray[client]); default: a local Ray runtime")
    p.add_argument("--workers", type=int, metavar="N", help="with --engine ray: worker processes (default: the "
                   "cluster's CPUs)")


def _rows_fn(args, fan_out: str = "eval_rows_on_ray"):
    """None (local) or the Ray fan-out of ``--engine ray`` (``fan_out``: the function of
    robot_app.sim.eval_ray); checks the flags and the fleet extra."""
    if args.engine == "local":
        if args.ray_address or args.workers is not None:
            raise UsageError("--ray-address and --workers need --engine ray")
        return None
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers: expected >= 1, got {args.workers}")
    require("fleet", what=f"{args.command_name} --engine ray")
    from robot_app.fleet import check_ray_address

    check_ray_address(args.ray_address)
    import functools

    from robot_app.sim import eval_ray

    return functools.partial(getattr(eval_ray, fan_out), address=args.ray_address, workers=args.workers)


def _eval_sim(args, config) -> int:
    require("sim", what="eval sim (the simulated world)")
    args.command_name = "eval sim"
    rows_fn = _rows_fn(args)
    from robot_app.sim.eval import EvalError, EvalSettings, run_sim_eval
    from robot_app.sim.eval_drive import DriveParams
    from robot_app.sim.eval_instructions import InstructionFileError
    from robot_app.sim.eval_report import format_table
    from robot_app.sim.world import WorldError

    if (args.world is None) == (args.generated is None):
        raise UsageError("give --world W or --generated N (not both)")
    if args.generated is not None and args.instructions is not None:
        raise UsageError("--instructions: generated worlds bring their own instruction sets")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit}: must be at least 1")
    if args.alpha is not None and not (args.alpha >= 0 and args.alpha < float("inf")):
        raise UsageError(f"--alpha {args.alpha}: must be a finite number >= 0")
    if args.max_cosine is not None and not -1.0 < args.max_cosine <= 1.0:
        raise UsageError(f"--max-cosine {args.max_cosine}: must be in (-1, 1] (1 = off)")
    if not 0.2 <= args.node_spacing <= 20.0:
        raise UsageError(f"--node-spacing {args.node_spacing}: must be 0.2-20 m")
    if args.drive_time_limit is not None and not args.drive_time_limit > 0:
        raise UsageError(f"--drive-time-limit {args.drive_time_limit}: must be > 0 seconds")
    if args.models is not None and not Path(args.models).is_dir():
        raise UsageError(f"--models {args.models}: no such folder")
    if args.instructions is not None and not args.instructions.is_file():
        raise UsageError(f"--instructions {args.instructions}: no such file")
    out = args.out or Path(f"eval-sim-{Path(args.world).stem}" if args.world
                           else f"eval-sim-generated-{args.seed_range}")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    settings = EvalSettings(world=args.world or "", out_dir=str(out),
                            instructions=str(args.instructions) if args.instructions else None,
                            models_dir=args.models or None, seed=args.seed, parser=args.parser,
                            grounding=args.grounding, alpha=args.alpha, max_cosine=args.max_cosine,
                            node_spacing_m=args.node_spacing,
                            execute=not args.no_drive, limit=args.limit, progress=not args.json,
                            drive=DriveParams(time_limit_s=args.drive_time_limit))
    if args.generated is not None:
        return _eval_generated(args, settings, config)
    try:
        report = run_sim_eval(settings, config, rows_fn=rows_fn)
    except (WorldError, InstructionFileError, EvalError) as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
        t, pl = report["targets"], report["totals"]["planning"]
        lm, ml = pl["lmnav"], pl["max-likelihood"]
        print(
            f"\ntargets: LM-Nav planning success >= 85 % (the paper's): "
            f"{'yes' if t['lmnav_planning_success_at_least_0.85'] else 'NO'} "
            f"({100 * (lm['success_rate'] or 0):.0f} %); "
            f"LM-Nav efficiency above max-likelihood: {'yes' if t['lmnav_efficiency_above_max_likelihood'] else 'NO'} "
            f"({lm['efficiency_mean_all'] or 0:.2f} vs {ml['efficiency_mean_all'] or 0:.2f}, failed plans = 0)"
        )
        print(f"\nreport: {report['report']}\nchart:  {report['chart']}\n({report['wall_s']:.0f} s)")
    return 0


def _eval_generated(args, settings, config) -> int:
    import sys

    from robot_app.sim.generated import run_generated_eval
    from robot_app.sim.worldgen import seeds

    if not 1 <= args.generated <= len(seeds(args.seed_range)):
        raise UsageError(f"--generated {args.generated}: must be 1-{len(seeds(args.seed_range))} "
                         f"(the {args.seed_range} range's seeds)")
    if args.engine != "local":
        raise UsageError("--generated runs the worlds one after the other (--engine local)")

    def progress(i, n, seed):
        if not args.json:
            print(f"[{i + 1}/{n}] gen-{seed}", file=sys.stderr, flush=True)

    if args.write and args.seed_range != "test":
        raise UsageError("--write records figures on unseen worlds only: use --seed-range test")
    doc = run_generated_eval(args.seed_range, args.generated, settings, config, progress=progress)
    if args.write:
        from robot_app.sim.eval import default_models_dir
        from robot_app.sim.generated import record_unseen_eval

        try:
            doc["written"] = str(record_unseen_eval(settings.models_dir or default_models_dir(config), doc))
        except ValueError as exc:
            raise UsageError(f"--write: {exc}") from exc
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    used = "trained" if args.seed_range == "train" else "tuned"
    label = ("worlds the models were never trained or tuned on" if doc["unseen"] else
             f"{args.seed_range} seeds: worlds the models were {used} on")
    print(f"{'seed':>6}  {'LM-Nav':>7}  {'max-lik.':>8}  instructions")
    for seed, w in doc["worlds"].items():
        if "error" in w:
            print(f"{seed:>6}  {'-':>7}  {'-':>8}  not evaluated: {w['error']}")
        else:
            print(f"{seed:>6}  {100 * w['lmnav']:>6.0f}%  {100 * w['max-likelihood']:>7.0f}%  {w['instructions']}")
    t = doc["totals"]
    print(f"\nLM-Nav planning success on {doc['worlds_evaluated']} generated worlds ({label}; grounding "
          f"{doc['grounding']}): {100 * (t['lmnav']['success_rate'] or 0):.1f} % of {t['lmnav']['instructions']} "
          f"instructions (max-likelihood {100 * (t['max-likelihood']['success_rate'] or 0):.1f} %); worst world "
          f"{100 * (doc['lmnav_success_min_world'] or 0):.0f} %")
    if doc["worlds_failed"]:
        print(f"{doc['worlds_failed']} world(s) could not be evaluated (above)")
    print(f"report: {doc['report']}  ({doc['wall_s']:.0f} s)")
    if doc.get("written"):
        print(f"recorded beside the models: {doc['written']}")
    return 0


def _eval_sim_tune(args, config) -> int:
    require("sim", what="eval sim-tune (the simulated world)")
    args.command_name = "eval sim-tune"
    grid_fn = _rows_fn(args, "dev_grid_on_ray")
    from robot_app.sim.eval import EvalError
    from robot_app.sim.eval_instructions import InstructionFileError
    from robot_app.sim.eval_tune import DEFAULT_ALPHAS, DEFAULT_MAX_COSINES, TuneSettings, run_sim_tune
    from robot_app.sim.world import WorldError

    if not 1 <= args.n <= 10000:
        raise UsageError(f"--n {args.n}: must be 1-10000")
    alphas = _number_grid(args.alphas, "--alphas", DEFAULT_ALPHAS, lambda a: 0 < a < float("inf"),
                          "every alpha must be a finite number > 0")
    caps = _number_grid(args.max_cosines, "--max-cosines", DEFAULT_MAX_COSINES, lambda c: -1 < c <= 1,
                        "every cap must be in (-1, 1]")
    if args.logit_scale is not None and not 0 < args.logit_scale < float("inf"):
        raise UsageError(f"--logit-scale {args.logit_scale}: must be a finite number > 0")
    if args.models is not None and not Path(args.models).is_dir():
        raise UsageError(f"--models {args.models}: no such folder")
    if args.instructions is not None and not args.instructions.is_file():
        raise UsageError(f"--instructions {args.instructions}: no such file")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    worlds = tuple(args.world or ("campus", "industrial"))
    if args.generated is not None:
        from robot_app.sim.generated import materialise

        if args.world:
            raise UsageError("give --world or --generated, not both")
        if not 1 <= args.generated <= 100:
            raise UsageError(f"--generated {args.generated}: must be 1-100 (the dev seed range)")
        args.out.mkdir(parents=True, exist_ok=True)
        files = materialise("dev", args.generated, args.out / "worlds", n_instructions=1)
        worlds = tuple(str(f.world) for f in files)
    settings = TuneSettings(worlds=worlds, out_dir=str(args.out),
                            instructions=str(args.instructions) if args.instructions else None,
                            models_dir=args.models or None, n=args.n, seed=args.seed,
                            alphas=alphas, max_cosines=caps, logit_scale=args.logit_scale, write=args.write,
                            progress=not args.json)
    try:
        report = run_sim_tune(settings, config, grid_fn=grid_fn)
    except (WorldError, InstructionFileError, EvalError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"--write: cannot write the tuning file: {exc}") from exc
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    names = list(report["worlds"])
    if len(report["max_cosines"]) > 1:
        worlds = [report["worlds"][n] for n in names if report["worlds"][n]["instructions"]]
        best = []
        for c in report["max_cosines"]:
            rates = [w["success_rate_by_max_cosine"][f"{c:g}"] for w in worlds]
            best.append(f"{c:g} {100 * max(sum(col) / len(col) for col in zip(*rates)):.0f}%")
        print("mean success at the best alpha, per cosine cap ([planner] max_cosine; 1 = off): "
              + ", ".join(best) + "\n")
    print(f"with max_cosine {report['max_cosine']:g}:")
    print(f"{'alpha':>8}  " + "  ".join(f"{n:>12}" for n in names) + f"  {'mean':>6}")
    for i, a in enumerate(report["alphas"]):
        rates = [report["worlds"][n]["success_rate"] for n in names]
        cells = "  ".join(f"{100 * r[i]:>11.0f}%" if r else f"{'-':>12}" for r in rates)
        print(f"{a:>8.4g}  {cells}  {100 * report['mean_success_rate'][i]:>5.0f}%")
    scales = ", ".join(f"{n} {w['logit_scale']:.4g}" for n, w in report["worlds"].items())
    where = (f"written to {report['written']}" if report.get("written")
             else "--write records them with the models; or set [planner] alpha and max_cosine")
    print(f"\nLM-Nav planning success on {report['n']} development instructions per world (seed {report['seed']}), "
          f"logit scale {scales}.\nchosen alpha: {report['alpha']:.4g}, max_cosine {report['max_cosine']:g}  ({where})"
          f"\nreport: {report['report']}\nchart:  {report['chart']}\n({report['wall_s']:.0f} s)")
    return 0
