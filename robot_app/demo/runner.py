"""The demo's stage runner: context, timing, progress, and the order of the six stages.

:func:`run_demo` runs explore -> map -> plan (:mod:`robot_app.demo.offline`), then drive -> task in
the running app (:mod:`robot_app.demo.onboard`), then writes the report
(:mod:`robot_app.demo.report`), even when a stage failed (the report says which and why). A failed
stage stops the stages that need its result; the task job still runs after a drive that did not
arrive (the robot's task starts wherever it is).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from robot_app.demo import offline, onboard, report
from robot_app.demo.scenario import DemoInputError, check_start, scenario_for
from robot_app.demo.stages import STAGES, TITLES, StageFailed  # noqa: F401 - re-exported
from robot_app.sim import SIM_VNM_NAV, model_clip_crops, tuned_planner
from robot_app.sim.world import WorldError, load_world

log = logging.getLogger(__name__)

DEMO_NODE_SPACING_M = 1.0
#: the quick demo's map (one straight drive): VNM edges only between nodes a few metres apart
DEMO_VNM_RADIUS_M = 6.0
DEMO_TAU_STEPS = 10.0
#: the full demo's map (drives that meet at a junction or close a loop): eval sim's settings, the config's
#: candidate radius and 75 % of the sim VNM's trained range, so that the passes through a junction are
#: joined (with 6 m / 10 steps the sim VNM joined none: the map was a chain)
DEMO_JUNCTION_RADIUS_M = 25.0
DEMO_JUNCTION_TAU_STEPS = 15.0
@dataclass
class DemoContext:
    """Everything the stages share: inputs, paths, and what earlier stages produced."""

    world: Any
    scenario: Any
    config: Any
    out: Path
    models_dir: Path
    seed: int = 0
    quick: bool = False
    progress_bars: bool = True
    landmarks: list = field(default_factory=list)
    poses: Any = None
    edges: Any = None
    start_node: int = 0
    plan_nodes: list = field(default_factory=list)
    landmark_images: dict = field(default_factory=dict)
    intended_m: float | None = None
    places: dict = field(default_factory=dict)
    drive: dict = field(default_factory=dict)
    task: dict = field(default_factory=dict)
    driven: Any = None
    app_models: dict = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        return self.out / "explore-log"

    @property
    def map_path(self) -> Path:
        return self.out / "map.sqlite"


class Stages:
    """Times each stage, logs and announces it, and keeps its record (``ok``, ``wall_s``, result or reason)."""

    def __init__(self, announce: Callable[[str], None]):
        self.records: dict[str, dict] = {}
        self.announce = announce

    def _begin(self, name: str) -> dict:
        i = STAGES.index(name) + 1
        self.announce(f"[{i}/{len(STAGES)}] {name}: {TITLES[name]}")
        log.info("demo stage %s started", name)
        rec = {"ok": False, "wall_s": None}
        self.records[name] = rec
        return rec

    def _end(self, name: str, rec: dict, t0: float, exc: BaseException | None) -> None:
        rec["wall_s"] = round(time.perf_counter() - t0, 2)
        if exc is None:
            rec["ok"] = True
            self.announce(f"      {name}: ok in {rec['wall_s']:.1f} s")
        else:
            rec["reason"] = str(exc) or type(exc).__name__
            rec.update({k: v for k, v in getattr(exc, "detail", {}).items() if k not in rec})
            self.announce(f"      {name}: FAILED after {rec['wall_s']:.1f} s: {rec['reason']}")
            log.warning("demo stage %s failed: %s", name, rec["reason"])

    def run(self, name: str, fn, *args) -> bool:
        """Run a synchronous stage; True when it succeeded."""
        rec = self._begin(name)
        t0 = time.perf_counter()
        try:
            rec.update(fn(*args))
        except StageFailed as exc:
            self._end(name, rec, t0, exc)
            return False
        except Exception as exc:  # noqa: BLE001 - a stage's crash is reported as that stage's failure
            log.exception("demo stage %s crashed", name)
            self._end(name, rec, t0, exc)
            return False
        self._end(name, rec, t0, None)
        return True

    @contextlib.asynccontextmanager
    async def stage(self, name: str):
        """``async with stages.stage(name) as rec:`` around an async stage; failures are recorded, not raised."""
        rec = self._begin(name)
        t0 = time.perf_counter()
        try:
            yield rec
        except asyncio.CancelledError:
            self._end(name, rec, t0, RuntimeError("cancelled"))
            raise
        except StageFailed as exc:
            self._end(name, rec, t0, exc)
        except Exception as exc:  # noqa: BLE001
            log.exception("demo stage %s crashed", name)
            self._end(name, rec, t0, exc)
        else:
            self._end(name, rec, t0, None)

    def skip(self, name: str, reason: str) -> None:
        self.records[name] = {"ok": False, "wall_s": 0.0, "reason": f"skipped: {reason}"}
        self.announce(f"[{STAGES.index(name) + 1}/{len(STAGES)}] {name}: skipped ({reason})")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_demo(ctx: DemoContext, *, announce: Callable[[str], None] = _stderr) -> dict:
    """Run the six stages; returns the report (also written under ``ctx.out``).

    Raises
    ------
    robot_app.demo.scenario.DemoInputError
        The instruction has no landmark or names one the world does not have (checked before any stage
        runs). Anything later is a failed stage, in the report.
    """
    t0 = time.perf_counter()
    ctx.out.mkdir(parents=True, exist_ok=True)
    parsed = offline.check_instruction(ctx)
    announce(f"robot-app demo: world {ctx.world.name}, instruction {ctx.scenario.instruction!r} -> "
             f"landmarks {parsed['landmarks']} ({parsed['parser']} parser); models {ctx.models_dir}")
    if ctx.scenario.start_note:
        announce(f"robot-app demo: {ctx.scenario.start_note}")
    st = Stages(announce)
    ok = st.run("explore", offline.explore, ctx) and st.run("map", offline.build, ctx)
    if ok:
        ok = st.run("plan", offline.plan, ctx)
    else:
        st.skip("plan", "needs the map")
    if ok:
        reason = "the onboard app did not come up"
        try:
            asyncio.run(onboard.run_onboard(ctx, st))
        except Exception as exc:  # noqa: BLE001 - the app did not start or stop cleanly: the report says so
            log.exception("onboard app")
            reason = f"the onboard app: {exc}"
            announce(f"      onboard app FAILED: {exc}")
        for name in ("drive", "task"):
            if name not in st.records:
                st.records[name] = {"ok": False, "wall_s": 0.0, "reason": reason}
    else:
        st.skip("drive", "needs a plan")
        st.skip("task", "needs the map")
    if st.run("report", report.write_report, ctx, st.records, t0):
        summary = report.summary(ctx, st.records, t0)
        report.write_json(ctx, summary, st.records)  # again, with the report stage's own time
    else:
        summary = report.summary(ctx, st.records, t0)
    return {"summary": summary, "stages": st.records}


def context_for(*, world: str, instruction: str | None, out: str | Path, seed: int, models: str | None,
                quick: bool, config, progress_bars: bool = True) -> DemoContext:
    """Resolve the demo's inputs into a :class:`DemoContext` (world, scenario, config for the sim).

    Raises
    ------
    robot_app.demo.scenario.DemoInputError
        Unknown world, a world without a route the demo can drive from a start with a GPS fix
        (:func:`robot_app.demo.scenario.scenario_for`), or a models folder that does not exist.
    """
    try:
        w = load_world(world)
    except WorldError as exc:
        raise DemoInputError(str(exc)) from exc
    sc = scenario_for(w, quick=quick, instruction=instruction)
    check_start(w, sc)
    models_dir = Path(models) if models else shipped_models_dir()
    if not models_dir.is_dir():
        raise DemoInputError(f"--models {models_dir}: no such folder (the sim stand-in models ship in "
                             f"{shipped_models_dir()})")

    tuned = tuned_planner(models_dir)  # chosen for these model files by `robot-app eval sim-tune --write`
    try:
        crops = model_clip_crops(models_dir) or 1  # as the sim VLM was trained
    except ValueError as exc:
        raise DemoInputError(f"--models: {exc}") from exc
    cfg = dataclasses.replace(
        config,
        paths=dataclasses.replace(config.paths, models_dir=str(models_dir)),
        planner=config.planner if tuned is None else dataclasses.replace(config.planner, **tuned),
        camera=dataclasses.replace(config.camera, source="sim", width=160, height=120, fisheye_k=[], fisheye_d=[],
                                   clip_crops=crops),
        sim=dataclasses.replace(config.sim, world=str(w.source), seed=seed),
        # a node per metre: a few VNM steps apart, as in GNM's topological maps (the navigator advances
        # its subgoal within [close_steps] of a node)
        mapping=dataclasses.replace(config.mapping, min_travel_m=DEMO_NODE_SPACING_M, min_dt_s=0.5,
                                    # quick: VNM edges only between nodes a few metres apart (the stand-in VNM's
                                    # distances beyond ~10 steps are rough); full: junctions joined
                                    candidate_radius_m=DEMO_VNM_RADIUS_M if quick else DEMO_JUNCTION_RADIUS_M,
                                    tau_steps=DEMO_TAU_STEPS if quick else DEMO_JUNCTION_TAU_STEPS),
        # the sim VNM's "lost" level and GPS at sharp turns, as eval sim drives with them
        vnm_nav=dataclasses.replace(config.vnm_nav, **SIM_VNM_NAV))
    return DemoContext(world=w, scenario=sc, config=cfg, out=Path(out), models_dir=models_dir, seed=seed, quick=quick,
                       progress_bars=progress_bars)


def shipped_models_dir() -> Path:
    """The sim stand-in models' folder in the package (``robot_app.sim.shipped_models_dir`` when present)."""
    try:
        from robot_app.sim import shipped_models_dir as shipped

        return Path(shipped())
    except (ImportError, AttributeError):
        return Path(__file__).resolve().parents[1] / "data" / "models" / "sim"
