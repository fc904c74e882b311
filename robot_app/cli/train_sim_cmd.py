"""``robot-app models train-sim``: train the SIM-ONLY stand-in models in the simulated worlds.

Runs :func:`robot_app.sim.train_vlm.train_sim_vlm` (a CNN image encoder aligned with the frozen MiniLM
sentence space, written in the CLIP file format) and :func:`robot_app.sim.train_vnm.train_sim_vnm` (a
small network with the GNM contract, trained self-supervised on simulated drives) into one models
folder, then checks that the folder loads through the robot's runtimes (``open_clip_model``,
``open_vnm``) and prints the held-out quality figures. Workstation only: needs the ``export`` extra
(torch) and the ``sim`` extra (pybullet). The folder shipped in the package
(:func:`robot_app.sim.shipped_models_dir`) is this command's output with the defaults.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from robot_app.errors import UsageError
from robot_app.extras import require

log = logging.getLogger(__name__)

PARTS = ("vlm", "vnm")


def register(sub, groups) -> None:
    p = groups["models"].add_parser(
        "train-sim",
        help="train the SIM-ONLY stand-in VLM (CLIP format) and VNM (GNM contract) in the simulated worlds",
        description="Render views and drives in the simulated worlds, train the stand-in models (seeded), export "
        "them into --out in the robot's file formats and print their quality on held-out renders. "
        "SIM-ONLY: they mean nothing on real camera images. Needs the export and sim extras.",
    )
    p.add_argument("--world", action="append", default=None, metavar="W",
                   help="shipped world name or world .toml file; repeat for several (default: every shipped world)")
    p.add_argument("--generated", type=int, default=None, metavar="N",
                   help="also train on the first N generated worlds of the train seed range (1000-1999; "
                        "robot_app.sim.worldgen), so that the VLM learns appearance, not place; the seeds are "
                        "recorded in the sidecar")
    p.add_argument("--views-per-world", type=int, default=None, metavar="V",
                   help="VLM training views rendered per world (default 6000, or 300 with --generated)")
    p.add_argument("--epochs", type=int, default=None, help="VLM training epochs (default 12)")
    p.add_argument("--shipped-views", type=int, default=None, metavar="V",
                   help="with --generated: training views of each --world (default: as --views-per-world)")
    p.add_argument("--text-projection", type=float, default=None, metavar="LAMBDA",
                   help="also train a linear projection of the text embeddings (from the identity, penalty "
                        "LAMBDA x |W - I|^2; e.g. 0.001), exported inside clip-text.onnx (default: none)")
    p.add_argument("--out", required=True, metavar="DIR", help="models folder to write (created)")
    p.add_argument("--only", choices=PARTS, default=None, help="train one of the two models only")
    p.add_argument("--seed", type=int, default=0, help="seed of poses, drives, initialisation and batches (default 0)")
    p.add_argument("--quick", action="store_true", help="tiny data and epochs (smoke test; figures mean little)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: chosen from the machine's load)"
    )
    p.add_argument("--json", action="store_true", help="print the quality figures as JSON")
    p.set_defaults(func=_train_sim)


def _worlds(names):
    from robot_app.sim.world import WorldError, load_world, shipped_worlds

    names = names or sorted(shipped_worlds())
    worlds = []
    for name in names:
        try:
            worlds.append(load_world(name))
        except (WorldError, FileNotFoundError, ValueError) as exc:
            raise UsageError(f"--world {name}: {exc}") from exc
    return worlds


def _check_loads(out: Path, parts) -> dict:
    """Open what was written with the robot's runtimes (no torch involved)."""
    loaded = {}
    if "vlm" in parts:
        from models.clip import open_clip_model

        clip = open_clip_model(out)
        loaded["vlm"] = clip.model_id
    if "vnm" in parts:
        from models.vnm import open_vnm

        loaded["vnm"] = open_vnm(out).model_id
    return loaded


def _train_sim(args, config) -> int:
    require("export", "sim", what="models train-sim (workstation only)")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads: expected >= 1, got {args.threads}")
    if args.generated is not None and not 1 <= args.generated <= 1000:
        raise UsageError(f"--generated {args.generated}: must be 1-1000 (the train seed range)")
    if args.views_per_world is not None and not 10 <= args.views_per_world <= 100_000:
        raise UsageError(f"--views-per-world {args.views_per_world}: must be 10-100000")
    if args.epochs is not None and not 1 <= args.epochs <= 200:
        raise UsageError(f"--epochs {args.epochs}: must be 1-200")
    if args.text_projection is not None and not 0.0 <= args.text_projection <= 100.0:
        raise UsageError(f"--text-projection {args.text_projection}: must be 0-100")
    worlds = _worlds(args.world)
    out = Path(args.out)
    provenance = None
    if args.generated:
        from robot_app.sim.generated import materialise
        from robot_app.sim.world import load_world

        files = materialise("train", args.generated, out / "train-worlds", n_instructions=1)
        worlds += [load_world(str(f.world)) for f in files]
        provenance = {"train_split": "train", "train_seeds": [files[0].seed, files[-1].seed],
                      "train_shipped_worlds": [w.name for w in worlds if not w.name.startswith("gen-")]}
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    parts = (args.only,) if args.only else PARTS
    progress = sys.stderr.isatty() or not args.json
    report = {"worlds": [w.name for w in worlds], "seed": args.seed, "quick": args.quick, "out": str(out)}
    t0 = time.perf_counter()
    if "vlm" in parts:
        from robot_app.sim.train_vlm import train_sim_vlm

        log.info("training the sim VLM on %s", ", ".join(report["worlds"]))
        t = time.perf_counter()
        per_world = args.views_per_world or (300 if args.generated else None)
        views = None if per_world is None else (per_world, max(20, per_world // 10), max(20, per_world // 15))
        if views is not None and args.shipped_views:
            if not 10 <= args.shipped_views <= 100_000:
                raise UsageError(f"--shipped-views {args.shipped_views}: must be 10-100000")
            sv = args.shipped_views
            views = {"*": views, **{w.name: (sv, max(20, sv // 10), max(20, sv // 15)) for w in worlds
                                    if not w.name.startswith("gen-")}}
        report["vlm"] = train_sim_vlm(worlds, out, seed=args.seed, quick=args.quick, progress=progress,
                                      threads=args.threads, views_per_world=views, epochs=args.epochs,
                                      provenance=provenance, text_projection=args.text_projection)
        report["vlm_wall_s"] = time.perf_counter() - t
    if "vnm" in parts:
        from robot_app.sim.train_vnm import train_sim_vnm

        log.info("training the sim VNM on %s", ", ".join(report["worlds"]))
        t = time.perf_counter()
        report["vnm"] = train_sim_vnm(worlds, out, seed=args.seed, quick=args.quick, progress=progress,
                                      threads=args.threads)
        report["vnm_wall_s"] = time.perf_counter() - t
    report["wall_s"] = time.perf_counter() - t0
    report["loaded"] = _check_loads(out, parts)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return 0
    print(f"SIM-ONLY stand-in models written to {out} in {report['wall_s']:.0f} s "
          f"(worlds: {', '.join(report['worlds'])}; seed {args.seed}{'; quick' if args.quick else ''})")
    if "vlm" in report:
        q = report["vlm"]
        print(f"  VLM {report['loaded']['vlm']}: landmark retrieval top-3 on held-out renders "
              f"{_pct(q.get('top3_held_out_phrasings'))} with held-out phrasings, "
              f"{_pct(q.get('top3_train_phrasings'))} with training phrasings "
              f"(chance {_pct(q.get('chance_top3_held_out_phrasings'))}); "
              f"{report['vlm_wall_s']:.0f} s")
    if "vnm" in report:
        q = report["vnm"]
        figures = [f"distance MAE {_fmt(q.get('dist_mae_steps'))} steps",
                   f"far pairs rejected {_pct(q.get('negative_rejection'))}",
                   f"localisation {_pct(q.get('localisation_acc'))} (chance {_pct(q.get('localisation_chance'))})",
                   f"waypoint error {_fmt(q.get('waypoint_err_m'))} m"]
        figures = "; ".join(figures)
        print(f"  VNM {report['loaded']['vnm']}: {figures}; {report['vnm_wall_s']:.0f} s")
    print(f"  point [paths] models_dir at {out} (SIM-ONLY: for the simulated world, never a real robot)")
    print(f"  choose the planner's alpha for these models: robot-app eval sim-tune --models {out} --write")
    return 0


def _pct(x) -> str:
    return "-" if x is None else f"{100 * float(x):.0f} %"


def _fmt(x) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)
