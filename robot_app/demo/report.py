"""The demo's report: ``report.json`` (everything), ``report.png`` (map, paths, landmark images) and
``report.html`` (one self-contained page: the picture, the metrics, the stages, the LASP trace).

Metrics follow LM-Nav Sec. 5: planning success and planning efficiency of the planned walk against the
ground truth (:mod:`robot_app.demo.truth`), efficiency of the executed drive (intended walk length over
the driven length, true metres), disengagements (runs ending lost/stuck, operator STOPs, collisions).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import time
from pathlib import Path

import numpy as np

from robot_app.demo.stages import STAGES
from robot_app.demo.truth import building_outline
from robot_app.plots import plot_grounding, plot_timeline

__all__ = ["summary", "write_report", "write_json", "plot_report", "render_html"]


def summary(ctx, records: dict, t0: float) -> dict:
    """The short result (``--json``): success, the paper's metrics, LASP success, the report's path."""
    plan, drive, task = records.get("plan", {}), records.get("drive", {}), records.get("task", {})
    failed = next((n for n in STAGES if n in records and not records[n].get("ok")), None)
    planned_right, recovered = bool(plan.get("planning_success", False)), bool(task.get("lasp_success", False))
    failure = None if failed is None else {"stage": failed, "reason": records[failed].get("reason")}
    if failure is None and not planned_right:
        wrong = [r["phrase"] for r in plan.get("landmarks", []) if not r.get("true")]
        failure = {"stage": "plan", "reason": f"planning success is false: the node chosen for {', '.join(wrong)} "
                                              "does not show it (ground truth)"}
    stages_ok = failed is None and all(records.get(n, {}).get("ok") for n in STAGES if n != "report")
    return {"success": stages_ok and planned_right and recovered,
            "planning_success": planned_right,
            "planning_efficiency": float(plan.get("planning_efficiency") or 0.0),
            "efficiency": float(drive.get("efficiency") or 0.0),
            "planned_m": plan.get("planned_m"), "direct_m": plan.get("direct_m"),
            "route_differs_from_direct": plan.get("route_differs_from_direct"),
            "disengagements": int(drive.get("disengagements") or 0),
            "lasp_success": recovered,
            "report": str(ctx.out / "report.json"),
            "world": ctx.world.name, "instruction": ctx.scenario.instruction, "quick": ctx.quick, "seed": ctx.seed,
            "failed_stage": failure,
            "wall_s": round(time.perf_counter() - t0, 1),
            "stage_wall_s": {n: records[n].get("wall_s") for n in STAGES if n in records}}


def write_json(ctx, summ: dict, records: dict) -> Path:
    """``report.json``: the summary, every stage's record, the driven path; written atomically."""
    doc = {"summary": summ, "stages": records,
           "driven_xy_m": [] if ctx.driven is None else ctx.driven.xy, "driven_marks": getattr(ctx.driven, "marks", {}),
           "models": {"dir": str(ctx.models_dir), "app": ctx.app_models},
           "route_xy_m": [list(p) for p in ctx.scenario.route],
           "start": {"xy_m": list(ctx.scenario.start[:2]), "yaw_rad": ctx.scenario.start[2],
                     "chosen": ctx.scenario.start_note or "hand-picked with the world's scenario"}}
    path = ctx.out / "report.json"
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(doc, indent=1, default=_jsonable), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def write_report(ctx, records: dict, t0: float) -> dict:
    """Write the three files; returns their paths (the report stage's record)."""
    png = plot_report(ctx, records, ctx.out / "report.png")
    # the page is this stage's output: it reports the other stages (the JSON is written again afterwards
    # with this stage's own record)
    # while this stage runs its own record still says ok: False; the page shows it as done (it is the page)
    done = {**records, "report": {"ok": True, "wall_s": None, "reason": ""}}
    summ = summary(ctx, done, t0)
    page = ctx.out / "report.html"
    page.write_text(render_html(ctx, summ, done, png), encoding="utf-8")
    js = write_json(ctx, summ, records)
    return {"files": [str(js), str(png), str(page)]}


def _landmark_rows(records: dict) -> list[dict]:
    return (records.get("plan") or {}).get("landmarks") or []


def plot_report(ctx, records: dict, out: Path) -> Path:
    """``report.png``: true node positions and edges, the world's landmark objects near the route, the
    planned, intended, direct (the shortest walk to the planned walk's goal) and driven paths, the node
    chosen for each landmark, the task places; below, the map image of each chosen node."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from PIL import Image

    rows = _landmark_rows(records)
    k = max(1, len(rows))
    timeline = (records.get("drive") or {}).get("timeline")
    # (landmark index, grounding) of the landmarks whose grounding carries node scores, in instruction order
    grounding = [(i, g) for i, g in enumerate((records.get("plan") or {}).get("grounding") or []) if g.get("scores")]
    heat = bool(grounding) and ctx.poses is not None
    ratios = [4, 1] + ([1.6] if heat else []) + ([1.4] if timeline else [])
    # constrained layout keeps the map's axis labels clear of the image captions below it
    fig = plt.figure(figsize=(9, 7 + 2.2 * len(ratios)), dpi=100, layout="constrained")
    gs = fig.add_gridspec(len(ratios), k, height_ratios=ratios)
    ax = fig.add_subplot(gs[0, :])
    route = np.asarray(ctx.scenario.route, dtype=float)
    ax.plot(route[:, 0], route[:, 1], color="0.85", lw=6, zorder=0, label="explored route")
    for b in ctx.world.buildings:
        o = building_outline(b)
        ax.fill(o[:, 0], o[:, 1], color=b.rgb, alpha=0.35, zorder=0)
        ax.annotate(b.name, b.center, fontsize=6, ha="center", color="0.3")
    for o in ctx.world.objects:
        ax.scatter(*o.at, s=8, c="0.5", marker="x", zorder=1)
    ax.annotate("x = landmark objects", (0.01, 0.01), xycoords="axes fraction", fontsize=7, color="0.4")
    if ctx.poses is not None:
        xy = ctx.poses[:, :2]
        if ctx.edges is not None and len(ctx.edges):
            ax.add_collection(LineCollection(xy[ctx.edges], colors="0.7", linewidths=0.5, zorder=1))
        ax.scatter(xy[:, 0], xy[:, 1], s=5, c="0.35", zorder=2, label="map nodes (true positions)")
        plan = records.get("plan") or {}
        if plan.get("intended_nodes"):
            w = xy[plan["intended_nodes"]]
            ax.plot(w[:, 0], w[:, 1], "--", color="tab:green", lw=1.5, zorder=3, label="intended walk (ground truth)")
        if plan.get("direct_nodes"):
            w = xy[plan["direct_nodes"]]
            # above the planned walk (dotted, so the planned one shows through where they share a way)
            ax.plot(w[:, 0], w[:, 1], ":", color="tab:orange", lw=2.0, zorder=6,
                    label=f"direct walk to the goal ({plan.get('direct_m')} m)")
        if ctx.plan_nodes:
            w = xy[ctx.plan_nodes]
            label = "planned walk" + (f" ({plan['planned_m']} m)" if plan.get("planned_m") is not None else "")
            ax.plot(w[:, 0], w[:, 1], "-", color="tab:blue", lw=2.5, alpha=0.7, zorder=4, label=label)
        for i, r in enumerate(rows):
            if r.get("node") is None:
                continue
            for v in r["truth_nodes"]:
                ax.scatter(*xy[v], s=40, facecolors="none", edgecolors="tab:green", lw=0.8, zorder=3)
            ax.scatter(*xy[r["node"]], marker="*", s=260, c="tab:red" if not r["true"] else "gold", edgecolors="k",
                       zorder=7)
            dx, dy, ha = LABEL_OFFSETS[i % len(LABEL_OFFSETS)]  # neighbouring landmarks' labels apart
            ax.annotate(f"{i + 1}. {r['phrase']}", xy[r["node"]], xytext=(dx, dy), textcoords="offset points",
                        fontsize=9, ha=ha, bbox=dict(boxstyle="round,pad=0.2", fc="white", alpha=0.85), zorder=8)
        for name, v in ctx.places.items():
            ax.scatter(*xy[v], marker="s", s=30, c="tab:purple", zorder=6)
            ax.annotate(name, xy[v], xytext=(-40, 0), textcoords="offset points", fontsize=7, color="tab:purple")
    if ctx.driven is not None and ctx.driven.xy:
        d = np.asarray(ctx.driven.xy)
        ax.plot(d[:, 0], d[:, 1], "-", color="tab:red", lw=1.2, zorder=5, label="driven (true pose)")
    pts = _driven_area(ctx, records, route)
    lo, hi = pts.min(axis=0) - 20.0, pts.max(axis=0) + 20.0  # the walks and the drive, not the whole world
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    half = np.maximum(half, 0.6 * half.max())  # not a sliver for a straight route
    ax.set_xlim(centre[0] - half[0], centre[0] + half[0])
    ax.set_ylim(centre[1] - half[1], centre[1] + half[1])
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("east [m]")
    ax.set_ylabel("north [m]")
    ax.set_title(f"robot-app demo: {ctx.world.name}\n{ctx.scenario.instruction}", fontsize=10)
    ax.legend(loc="upper left", fontsize=7)
    ax.grid(True, lw=0.3)
    for i, r in enumerate(rows):
        axi = fig.add_subplot(gs[1, i])
        jpeg = ctx.landmark_images.get(r.get("node"))
        if jpeg:
            with Image.open(io.BytesIO(jpeg)) as im:
                axi.imshow(np.asarray(im.convert("RGB")))
        axi.set_title(f"{i + 1}. {r['phrase']}\nnode {r.get('node')} ({'true' if r.get('true') else 'wrong'})",
                      fontsize=8)
        axi.axis("off")
    if heat:
        for col, (i, g) in enumerate(grounding[:k]):
            plot_grounding(fig.add_subplot(gs[2, col]), ctx.poses[:, :2], g, rows[i] if i < len(rows) else {}, i)
    if timeline:
        plot_timeline(fig.add_subplot(gs[len(ratios) - 1, :]), timeline)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out


#: (dx, dy points, horizontal alignment) of the i-th landmark's label on the map, cycling: consecutive
#: landmarks (often a few metres apart) get labels on different sides of their stars
LABEL_OFFSETS = ((10, 6, "left"), (-10, -18, "right"), (10, -18, "left"), (-10, 6, "right"))


def _driven_area(ctx, records: dict, route: np.ndarray) -> np.ndarray:
    """The points the map view must show: the planned, intended and direct walks and the drive (the
    explored route when there is none of them)."""
    parts = []
    if ctx.poses is not None:
        plan = records.get("plan") or {}
        for nodes in (ctx.plan_nodes, plan.get("intended_nodes"), plan.get("direct_nodes")):
            if nodes:
                parts.append(ctx.poses[np.asarray(nodes, dtype=int), :2])
    if ctx.driven is not None and ctx.driven.xy:
        parts.append(np.asarray(ctx.driven.xy, dtype=float))
    return np.concatenate(parts) if parts else route


#: what each metric of the page means (LM-Nav, Shah et al. 2022, Sec. 5; LASP, Chen et al. 2024, Sec. V)
METRIC_DEFINITIONS = [
    ("planning success", "every landmark's chosen node is one of the nodes that show it (ground truth), in the "
                         "instruction's order (LM-Nav Sec. 5)"),
    ("planning efficiency", "min(1, intended / planned walk length): the intended walk is the shortest one "
                            "through true nodes of the landmarks in order (LM-Nav Sec. 5)"),
    ("efficiency (executed)", "min(1, intended walk length / metres driven) when the goal was reached, else 0 "
                              "(LM-Nav Sec. 5)"),
    ("disengagements", "operator interventions: a stuck, collided or timed-out walk, a loss the re-plans did not "
                       "recover, a STOP of a run that took too long (LM-Nav Sec. 5 counts them per km)"),
    ("LASP success", "the task job reached its goal after the injected failure, having learned what it lacked "
                     "(LASP Sec. V)"),
    ("direct walk", "the shortest walk from the start to the planned walk's goal, ignoring the landmarks: a "
                    "planned walk longer than it shows the landmarks choosing the route (LM-Nav Fig. 5)"),
]


def trace_step_text(entry: dict) -> str:
    """One LASP trace entry (:mod:`core.lasp.loop`) as a line a reader follows."""
    kind = entry.get("kind", "?")
    if kind == "plan":
        steps = entry.get("plan") or []
        return f"plan ({entry.get('why', '')}): {entry.get('status', '')}, {len(steps)} steps: " + " ".join(steps)
    if kind == "execute":
        if entry.get("ok"):
            return f"done {entry.get('step')}"
        return f"failed {entry.get('step')}: \u201c{entry.get('observation', '')}\u201d"
    if kind == "diagnose":
        top = [c.get("pddl", "?") for c in (entry.get("candidates") or [])[:3]]
        return f"diagnosed {entry.get('error')}: the likeliest missing conditions {', '.join(top) or 'none'}"
    if kind == "refine":
        cand = entry.get("candidate") or {}
        return f"learned (try): {cand.get('pddl', cand)} for {cand.get('action', '?')}"
    if kind == "expand":
        return f"learned a new object: {(entry.get('object') or {}).get('pddl', '?')}"
    if kind in ("reject", "no-plan", "same-error"):
        what = entry.get("candidate") or entry.get("dropped")
        return {"reject": "rejected", "no-plan": "no plan with", "same-error": "did not explain the failure:"}[kind] + \
            f" {what}" + (f" ({entry['why']})" if entry.get("why") else "")
    if kind == "end":
        return "task " + ("succeeded" if entry.get("success") else f"ended: {entry.get('reason', '')}")
    return f"{kind}: {json.dumps(entry, default=str)}"


def learned_text(entry: dict) -> str:
    """One learned item (``core.lasp.knowledge``'s ``as_dict``) in words for the report."""
    kind = entry.get("kind")
    if kind == "precondition":
        return f"precondition {entry.get('pddl', '?')} of {entry.get('action', '?')}"
    if kind == "property":
        params = ", ".join(entry.get("params") or [])
        return f"property {entry.get('name', '?')}({params})" + (" (numeric)" if entry.get("numeric") else "")
    if kind == "object":
        return f"object {entry.get('name', '?')} of type {entry.get('type', '?')}"
    return json.dumps(entry, default=str)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _table(rows: list[tuple]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows[1:])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in rows[0])
    return f"<table><tr>{head}</tr>{cells}</table>"


def render_html(ctx, summ: dict, records: dict, png: Path) -> str:
    """One self-contained page (the PNG and the landmark images inlined as data URIs)."""
    esc = html.escape
    metrics = [("metric", "value"), ("success", summ["success"]), ("planning success", summ["planning_success"]),
               ("planning efficiency", summ["planning_efficiency"]), ("efficiency (executed)", summ["efficiency"]),
               ("disengagements", summ["disengagements"]), ("LASP success", summ["lasp_success"]),
               ("wall time, s", summ["wall_s"])]
    plan = records.get("plan") or {}
    for key in ("planned_m", "direct_m", "route_differs_from_direct"):
        if key in plan:
            metrics.append((key.replace("_", " "), plan[key]))
    drive = records.get("drive") or {}
    for key in ("driven_m", "final_error_m", "app_plan_matches_stage_3"):
        if key in drive:
            metrics.append((key.replace("_", " "), drive[key]))
    stages = [("stage", "ok", "wall s", "reason")] + [
        (n, records[n].get("ok"), "-" if records[n].get("wall_s") is None else records[n]["wall_s"],
         records[n].get("reason", ""))
        for n in STAGES if n in records]
    lm_html = []
    for i, r in enumerate(_landmark_rows(records)):
        jpeg = ctx.landmark_images.get(r.get("node"))
        img = f'<img src="data:image/jpeg;base64,{_b64(jpeg)}" width="240">' if jpeg else "(no image)"
        lm_html.append(f"<figure>{img}<figcaption>{i + 1}. {esc(r['phrase'])}: node {r.get('node')}, "
                       f"{'true' if r.get('true') else 'not a true node'} ({r.get('m_from_truth')} m from the "
                       f"nearest true node)</figcaption></figure>")
    task = records.get("task") or {}
    trace = "".join(f"<li>{esc(trace_step_text(t))}</li>" for t in task.get("trace", []))
    defs = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in METRIC_DEFINITIONS)
    png_uri = f"data:image/png;base64,{_b64(png.read_bytes())}" if png.is_file() else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>robot-app demo: {esc(ctx.world.name)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #bbb;padding:3px 8px;text-align:left}}
figure{{display:inline-block;margin:0 1em 1em 0}}code{{font-size:11px}}.bad{{color:#b00}}.good{{color:#070}}</style>
</head><body>
<h1>robot-app demo:
<span class="{'good' if summ['success'] else 'bad'}">{'success' if summ['success'] else 'FAILED'}</span></h1>
<p>World <b>{esc(ctx.world.name)}</b> (simulated; sim-only stand-in models from
<code>{esc(str(ctx.models_dir))}</code>),
seed {ctx.seed}{', quick' if ctx.quick else ''}. Instruction: <i>{esc(ctx.scenario.instruction)}</i></p>
{_failure(summ)}
{_provenance_html(ctx)}
<h2>Metrics (LM-Nav Sec. 5)</h2>{_table(metrics)}
<details><summary>What the metrics mean</summary><dl>{defs}</dl></details>
<h2>Map, planned and driven paths</h2><img src="{png_uri}" style="max-width:100%">
<h2>Image chosen for each landmark</h2>{''.join(lm_html) or '<p>no plan</p>'}
<h2>Stages</h2>{_table(stages)}
<h2>LASP task job</h2>
<p>Goal <code>{esc(str(task.get('goal', '')))}</code>; {esc(str(task.get('state', 'not run')))}:
{esc(str(task.get('message', task.get('reason', ''))))}</p>
<p>Injected: {esc(str((task.get('injected') or {}).get('failure', '-')))};
learned: {esc('; '.join(learned_text(e) for e in task.get('learned') or []) or 'nothing')}
(approved: {task.get('approved', 0)})</p>
<details open><summary>The LASP trace, step by step</summary><ol>{trace}</ol></details>
</body></html>
"""


#: the figures of the shipped stand-in models on generated worlds they were never trained or tuned on
#: (``robot-app eval sim --generated N --seed-range test``), kept beside the models
UNSEEN_EVAL_FILE = "unseen-worlds-eval.json"


def provenance(models_dir, world) -> dict:
    """Whether the stand-in VLM in ``models_dir`` was trained on ``world`` (its sidecar's ``train_worlds``), and
    the recorded planning figures on unseen generated worlds (:data:`UNSEEN_EVAL_FILE`), where present."""
    d = Path(models_dir)
    out: dict = {"world": world.name, "trained_on_world": None, "unseen_eval": None}
    try:
        params = json.loads((d / "clip-image.onnx.json").read_text(encoding="utf-8"))["params"]
        out["trained_on_world"] = world.name in (params.get("train_worlds") or [])
        out["train_seeds"] = params.get("train_seeds")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        u = json.loads((d / UNSEEN_EVAL_FILE).read_text(encoding="utf-8"))
        side = json.loads((d / "clip-image.onnx.json").read_text(encoding="utf-8"))
        if isinstance(u, dict) and u.get("clip_image_sha256") in (None, side.get("sha256")):
            out["unseen_eval"] = u  # figures of another VLM than the one installed are not quoted
    except (OSError, ValueError):
        pass
    return out


def _provenance_html(ctx) -> str:
    esc = html.escape
    p = provenance(ctx.models_dir, ctx.world)
    lines = []
    u = p.get("unseen_eval") or {}
    if u.get("lmnav_success_rate") is not None:
        lines.append(f"On {u.get('worlds')} generated worlds the models were never trained or tuned on, LM-Nav "
                     f"planning success is <b>{100 * u['lmnav_success_rate']:.0f} %</b> of {u.get('instructions')} "
                     f"instructions (a perfect category detector: {100 * (u.get('oracle_success_rate') or 0):.0f} %).")
    if p["trained_on_world"] is True:
        lines.append(f"The stand-in VLM was trained on this world ({esc(p['world'])}): the figures of this run are "
                     "on a world it has seen.")
    elif p["trained_on_world"] is False:
        lines.append(f"The stand-in VLM never saw this world ({esc(p['world'])}).")
    return f"<p>{' '.join(lines)}</p>" if lines else ""


def _failure(summ: dict) -> str:
    f = summ.get("failed_stage")
    if not f:
        return ""
    return f'<p class="bad">Stage <b>{html.escape(f["stage"])}</b> failed: {html.escape(str(f["reason"]))}</p>'
