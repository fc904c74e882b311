"""Totals, the text table and the bar chart of ``robot-app eval sim`` (:mod:`robot_app.sim.eval`).

Metrics (LM-Nav, Shah et al., CoRL 2022, Sec. 5; Tables 1 and 4):

- planning success rate: fraction of instructions whose planned walk visits every landmark, in order,
  at a ground-truth node (instructions whose truth could not be placed on the map are left out and
  counted as ``invalid``);
- planning efficiency ``min(1, intended / planned)`` in VNM time steps: ``efficiency_mean`` averages
  it over the successful plans (a failed plan has no meaningful efficiency), ``efficiency_mean_all``
  over all instructions with 0 for failed plans;
- execution: ``success_rate`` (plan succeeded AND the drive reached the walk's end), ``reached_rate``,
  disengagements in total and per 100 m driven, executed efficiency ``min(1, intended m / driven m)``
  averaged over the reached drives, the metres GPS drove (``gps_m``, ``gps_share`` of those driven) and
  the re-plans after a failure (``replans``);
- grounding: ``landmarks`` parsed from the instructions and ``flagged_not_in_map`` (judged absent from
  the map by the model's presence rule, :mod:`core.presence`): every landmark of an instruction set is in
  its world, so each flag is a false alarm the operator would have had to confirm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["summarise", "format_table", "write_chart"]

_PLANNER_LABEL = {"lmnav": "LM-Nav search", "max-likelihood": "max-likelihood"}
_EXEC_LABEL = {"lmnav-vnm": "LM-Nav walk, VNM", "lmnav-gps": "LM-Nav walk, GPS only"}


def _mean(values) -> float | None:
    return round(float(np.mean(values)), 4) if len(values) else None


def summarise(rows: list[dict], *, executed: bool = True) -> dict:
    """Totals over per-instruction rows (see the module docstring for each figure)."""
    valid = [r for r in rows if "error" not in r]
    out = {"instructions": len(rows), "invalid": len(rows) - len(valid), "planning": {}, "execution": {}}
    judged = [r for r in rows if "not_in_map" in r]
    if judged:
        n = sum(len(r["landmarks"]) for r in judged)
        k = sum(len(r["not_in_map"]) for r in judged)
        out["grounding"] = {"landmarks": n, "flagged_not_in_map": k, "flagged_rate": round(k / n, 4) if n else None}
    for name in ("lmnav", "max-likelihood"):
        items = [r["planners"][name] for r in valid]
        ok = [it for it in items if it["success"]]
        out["planning"][name] = {
            "success_rate": _mean([float(it["success"]) for it in items]),
            "successes": len(ok),
            "efficiency_mean": _mean([it["efficiency"] for it in ok]),
            "efficiency_mean_all": _mean([it["efficiency"] if it["success"] else 0.0 for it in items]),
        }
    if executed:
        for name in ("lmnav-vnm", "lmnav-gps"):
            items = [r["executions"][name] for r in valid if name in r.get("executions", {})]
            if not items:
                continue
            driven = float(sum(it["driven_m"] for it in items))
            dis = int(sum(it["disengagements_total"] for it in items))
            kinds: dict = {}
            for it in items:
                for k, v in it["disengagements"].items():
                    kinds[k] = kinds.get(k, 0) + v
            out["execution"][name] = {
                "runs": len(items),
                "success_rate": _mean([float(it["success"]) for it in items]),
                "reached_rate": _mean([float(it["reached"]) for it in items]),
                "disengagements": dis, "disengagements_by_kind": kinds,
                "disengagements_per_100m": round(100.0 * dis / driven, 3) if driven > 0 else None,
                "driven_m": round(driven, 1),
                "gps_m": round(float(sum(it.get("gps_m", 0.0) for it in items)), 1),
                "gps_share": (round(float(sum(it.get("gps_m", 0.0) for it in items)) / driven, 3) if driven > 0
                              else None),
                "replans": int(sum(it.get("replans", 0) for it in items)),
                "efficiency_mean": _mean([it["efficiency"] for it in items if it["reached"]]),
            }
    return out


def _fmt(v, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.0f}%" if pct else (f"{v:.2f}" if isinstance(v, float) else str(v))


def format_table(report: dict) -> str:
    """Plain-text tables: one line per instruction, then the totals (the paper's Table 1 / 4 layout)."""
    lines = [f"eval sim: world {report['world']}, {len(report['instructions'])} instructions, "
             f"models {report['models']['clip']} / {report['models']['vnm'] or 'no VNM'}",
             f"alpha {report.get('alpha')} ({report.get('alpha_source', '?')}), max_cosine "
             f"{report.get('max_cosine', 1.0):g} ({report.get('max_cosine_source', '?')})", ""]
    head = f"{'id':<15} {'K':>2}  {'LM-Nav':>11}  {'max-lik.':>11}  {'VNM drive':>13}  {'GPS drive':>13}"
    lines += [head, "-" * len(head)]

    def plan_cell(p):
        return f"{'ok' if p['success'] else 'FAIL':>4} {p['efficiency']:.2f}"

    def exec_cell(e):
        if e is None:
            return "-"
        return f"{'ok' if e['reached'] else 'no':>3} d={e['disengagements_total']}"

    for r in report["instructions"]:
        if "error" in r:
            lines.append(f"{r['id']:<15} {len(r['truth']):>2}  truth error: {r['error']}")
            continue
        ex = r.get("executions", {})
        lines.append(f"{r['id']:<15} {len(r['truth']):>2}  {plan_cell(r['planners']['lmnav']):>11}  "
                     f"{plan_cell(r['planners']['max-likelihood']):>11}  {exec_cell(ex.get('lmnav-vnm')):>13}  "
                     f"{exec_cell(ex.get('lmnav-gps')):>13}")
    t = report["totals"]
    lines += ["", f"{'planner':<24} {'planning success':>16} {'planning eff.':>13} {'eff. (all)':>10}"]
    for name, p in t["planning"].items():
        lines.append(f"{_PLANNER_LABEL[name]:<24} {_fmt(p['success_rate'], True):>16} {_fmt(p['efficiency_mean']):>13} "
                     f"{_fmt(p['efficiency_mean_all']):>10}")
    if t["execution"]:
        lines += ["", f"{'execution':<24} {'success':>8} {'reached':>8} {'diseng.':>8} {'per 100 m':>10} {'eff.':>6} "
                      f"{'GPS m':>6} {'re-plans':>8}"]
        for name, e in t["execution"].items():
            lines.append(
                f"{_EXEC_LABEL[name]:<24} {_fmt(e['success_rate'], True):>8} {_fmt(e['reached_rate'], True):>8} "
                f"{e['disengagements']:>8} {_fmt(e['disengagements_per_100m']):>10} "
                f"{_fmt(e['efficiency_mean']):>6} {_fmt(e.get('gps_share'), True):>6} "
                f"{e.get('replans', 0):>8}"
            )
    g = t.get("grounding")
    if g:
        rule = report.get("presence_rule", {}).get("source", "?")
        lines.append(f"\nlandmarks judged not in the map: {g['flagged_not_in_map']} of {g['landmarks']} (all are in "
                     f"the world: false alarms; rule: {rule})")
    if t["invalid"]:
        lines.append(f"\n{t['invalid']} instruction(s) left out: their truth could not be placed on the map")
    return "\n".join(lines)


def write_chart(report: dict, path: Path) -> Path:
    """Bar chart (PNG) of the totals: planning success and efficiency per planner, execution figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = report["totals"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    labels = ["planning success", "planning eff.", "eff. (all)"]
    x = np.arange(len(labels))
    for j, (name, p) in enumerate(t["planning"].items()):
        vals = [p["success_rate"] or 0.0, p["efficiency_mean"] or 0.0, p["efficiency_mean_all"] or 0.0]
        axes[0].bar(x + (j - 0.5) * 0.38, vals, 0.38, label=_PLANNER_LABEL[name])
    if t["execution"]:
        for j, (name, e) in enumerate(t["execution"].items()):
            vals = [e["success_rate"] or 0.0, e["efficiency_mean"] or 0.0]
            axes[0].bar(np.array([0, 1]) + 3.2 + (j - 0.5) * 0.38, vals, 0.38, label=_EXEC_LABEL[name],
                        hatch="//" if name.endswith("gps") else None, alpha=0.8)
        names = list(t["execution"])
        axes[1].bar(range(len(names)), [t["execution"][n]["disengagements_per_100m"] or 0.0 for n in names],
                    color=["tab:green", "tab:red"][: len(names)])
        axes[1].set_xticks(range(len(names)), [_EXEC_LABEL[n] for n in names], fontsize=8)
        axes[1].set_ylabel("disengagements per 100 m")
        labels += ["exec. success", "exec. eff."]
        x = np.concatenate([x, [3.2, 4.2]])
    else:
        axes[1].axis("off")
    axes[0].set_xticks(x, labels, fontsize=8)
    axes[0].set_ylim(0, 1.05)
    axes[0].axhline(0.85, color="grey", lw=0.8, ls="--")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"robot-app eval sim: world {report['world']} ({len(report['instructions'])} instructions, "
                 f"grounding {report.get('grounding', 'vlm')}, alpha {report.get('alpha')}, "
                 f"max_cosine {report.get('max_cosine', 1.0):g})")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
