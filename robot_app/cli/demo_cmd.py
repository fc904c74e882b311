"""``robot-app demo``: the main job end to end in the simulated world (see :mod:`robot_app.demo`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from robot_app.errors import UsageError
from robot_app.extras import require

log = logging.getLogger(__name__)


def register(sub, groups) -> None:
    p = sub.add_parser(
        "demo", help="the main job end to end in the simulated world (explore, map, plan, drive, task, report)",
        description="Explore the simulated world while recording, build the map with the sim VNM and VLM, plan "
                    "the instruction (LM-Nav), start the onboard app on the simulated devices and drive the walk "
                    "through its HTTP API, run a LASP task job that recovers from a closed gate, and write "
                    "report.json/.png/.html. Exit 0 when every stage succeeded, 1 otherwise (the reason is "
                    "printed). The models are sim-only stand-ins.")
    p.add_argument("--world", default="campus", help="shipped world name (campus, industrial) or a world .toml file "
                                                     "(default campus)")
    p.add_argument("--generated", type=int, default=None, metavar="SEED",
                   help="instead of --world: the world generated from SEED (robot-app sim generate; written to "
                        "OUT/gen-SEED.toml)")
    p.add_argument("--instruction", default=None,
                   help="route instruction (default: the world's, naming landmarks along the explored route)")
    p.add_argument("--out", default="demo-out", help="report folder (default ./demo-out; its files are replaced)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sensor noise (default 0)")
    p.add_argument("--models", default=None,
                   help="models folder (default: the shipped sim stand-ins; llm.gguf there selects the LLM parser)")
    p.add_argument("--quick", action="store_true", help="short route with two landmarks (CI, ~1-2 minutes)")
    p.add_argument("--serve", action="store_true",
                   help="afterwards keep the onboard app running on the demo's map and models in the simulated "
                        "world, and print the touchscreen's address (stop with Ctrl-C)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (stage lines still go to stderr)")
    p.set_defaults(func=_demo)


def _demo(args, config) -> int:
    from robot_app.demo.runner import context_for, run_demo
    from robot_app.demo.scenario import DemoInputError

    if not 0 <= args.seed <= 2**31 - 1:
        raise UsageError(f"--seed {args.seed}: must be 0..2147483647")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    try:  # before any stage runs: a folder the report can be written to
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc})") from exc
    require("sim", what="the demo (it drives in the simulated world)")
    if args.instruction is not None and not args.instruction.strip():
        raise UsageError("--instruction: empty")
    world = args.world
    if args.generated is not None:
        from robot_app.sim.worldgen import generate

        if args.generated < 0:
            raise UsageError(f"--generated {args.generated}: expected a seed >= 0")
        world = out / f"gen-{args.generated}.toml"
        world.write_text(generate(args.generated).text, encoding="utf-8")
        world = str(world)
    try:
        ctx = context_for(world=world, instruction=args.instruction, out=out, seed=args.seed,
                          models=args.models, quick=args.quick, config=config, progress_bars=not args.no_progress)
        result = run_demo(ctx)
    except DemoInputError as exc:
        raise UsageError(str(exc)) from exc
    s = result["summary"]
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(f"demo {'succeeded' if s['success'] else 'FAILED'} in {s['wall_s']:.0f} s: planning success "
              f"{s['planning_success']}, planning efficiency {s['planning_efficiency']:.2f}, efficiency "
              f"{s['efficiency']:.2f}, disengagements {s['disengagements']}, LASP success {s['lasp_success']}")
        print(f"report: {out / 'report.html'} (and report.json, report.png)")
    if not s["success"]:
        f = s["failed_stage"] or {}
        print(f"robot-app demo: stage {f.get('stage')} failed: {f.get('reason')}", file=sys.stderr)
        return 1
    if args.serve:  # the desk recipe in one command: the app on the demo's map, models and world
        return serve(out)
    return 0


def serve(out: Path, duration_s: float | None = None) -> int:
    """``robot-app --config OUT/config.toml sim run``: the app the demo drove, with its map and models, in
    the simulated world, until Ctrl-C (or ``duration_s``)."""
    from types import SimpleNamespace

    from robot_app.cli.sim_world_cmd import _run
    from robot_app.config import load_config

    print(f"serving the demo's app (the same as robot-app --config {out / 'config.toml'} sim run); Ctrl-C stops it",
          flush=True)
    return _run(SimpleNamespace(world=None, duration=duration_s), load_config(out / "config.toml"))
