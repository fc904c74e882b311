"""Mission executive, route jobs: instruction -> landmarks -> grounding -> walk -> confirm -> drive.

The operator (touchscreen) asks for a plan, sees the parsed landmarks and the node chosen for each,
and only then presses Go. Planning (map loading, CLIP, the walk search) runs in a worker thread so the
control loop never waits for it. Driving uses the VNM navigator (:mod:`robot_app.nav.vnm`) when
a VNM and a camera are installed and every walk node has an image, else the GPS navigator. STOP latches
the base's e-stop and ends any run; after a start the robot is idle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import secrets
import time
from pathlib import Path
from typing import Any

import numpy as np

from core.mapstore import MapFormatError, open_map
from firmware_bridge.readings import GpsFix
from robot_app.commands import Source
from robot_app.config import nav_options
from robot_app.errors import RequestError
from robot_app.mapping.map_build import HEADINGS_METHOD, decode_jpeg
from robot_app.nav.gps import GpsNavigator
from robot_app.nav.policy import FAILED, Outcome
from robot_app.nav.vnm import VnmNavigator
from robot_app.route.grounding_service import ground_instruction, mark_found
from robot_app.route.planning import PLANNERS, PlanningError, plan_on_map

log = logging.getLogger(__name__)



class MissionState(str, enum.Enum):
    """The route job's state (a ``str``: compares equal to, and serialises to JSON as, its value).

    IDLE -> PLANNING -> CONFIRM -> RUNNING -> one of the walk's outcomes (robot_app.nav.policy.Outcome:
    REACHED, LOST, STUCK, COLLIDED, OFF_WALK, TIMEOUT, GPS_LOST, CAMERA_LOST; or CANCELLED) or STOPPED
    (operator STOP, safety fault, take-over) or ERROR; a failed plan returns to
    IDLE (bad input) or ERROR.
    """

    IDLE = "idle"
    PLANNING = "planning"
    CONFIRM = "confirm"
    RUNNING = "running"
    REACHED = "reached"
    LOST = "lost"
    STUCK = "stuck"
    COLLIDED = "collided"
    OFF_WALK = "off-walk"
    TIMEOUT = "timeout"
    ABORTED = "aborted"
    GPS_LOST = "gps-lost"
    CAMERA_LOST = "camera-lost"
    CANCELLED = "cancelled"
    STOPPED = "stopped"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


#: navigator outcomes that end a walk short of its goal (robot_app.nav.gps.RunReport.outcome)
FAILED_OUTCOMES = frozenset(o.value for o in FAILED)
#: failures the route job re-plans from the GPS fix (at most [mission] max_replans times)
REPLANNED = frozenset({Outcome.LOST.value, Outcome.OFF_WALK.value, Outcome.STUCK.value, Outcome.COLLIDED.value})
#: failures that are a disengagement each (the operator frees the robot); a loss counts once, when the
#: re-plans do not recover it
DISENGAGING = frozenset({Outcome.STUCK.value, Outcome.COLLIDED.value, Outcome.TIMEOUT.value})


def fix_error_m(fix) -> float:
    """1-sigma horizontal error of a GPS fix (m) from its covariance (east + north variances)."""
    cov = getattr(fix, "covariance_enu_m2", None)
    if not cov or not all(np.isfinite(cov[:2])):
        return 5.0
    return float(np.sqrt(max(cov[0], 0.0) + max(cov[1], 0.0)))


class MissionError(RequestError):
    """A request the executive cannot carry out as asked (route jobs); ``bad_input`` as in
    :class:`robot_app.errors.RequestError`."""


class MissionExecutive:
    """The route job (module docstring).

    Parameters
    ----------
    config : robot_app.config.Config
        ``[mission]``, ``[planner]``, ``[paths]``, ``[serial]`` and, through
        :func:`robot_app.config.nav_options`, the navigation policy's options.
    sensors : robot_app.interfaces.Sensors
        The base (connected, e-stop latch), the GPS fixes, the camera.
    commands : robot_app.commands.CommandMux
        The command multiplexer: STOP latches there, the navigators write the autonomy slot.
    models
        The model registry (:class:`robot_app.service.models.ModelRegistry`: ``llm()``, ``clip()``,
        ``vnm()``, each a runtime or None).
    safety
        Gets the map's geofence when a plan is made (:meth:`robot_app.sensing.safety.SafetyMonitor.set_geofence`).
    fault
        ``() -> fault or None``: the safety fault now (a route does not start during one).

    ``on_stop`` holds callables run on operator STOP (the app adds the task jobs' stop).
    """

    def __init__(self, config, sensors, commands, models, *, safety=None, fault=lambda: None):
        self.config, self.sensors, self.commands, self.models = config, sensors, commands, models
        self.safety, self.fault = safety, fault
        self.on_stop: list = []
        self.state = MissionState.IDLE
        self.message = ""
        self.plan: dict[str, Any] | None = None
        self.progress: dict[str, Any] = {}
        self.disengagements = 0
        self._nav_task: asyncio.Task | None = None
        self._nav = None  # the running (or last) route's navigator: its trace feeds the status
        self._walk_latlon: tuple | None = None
        self._walk_jpegs: list = []
        self._walk_heading = None  # (K,) the map's node headings along the walk (VNM stretches facing away go to GPS)
        self.max_replans = int(config.mission.max_replans)
        self.map_zone: tuple | None = None  # UTM zone of the route map, once it has been opened
        #: (TopoMap.graph_key(), checked CSR arrays) of the last route map planned on: the map is opened
        #: for every plan, its graph is checked once (see _route_csr)
        self._csr_cache: tuple | None = None

    # -- map ------------------------------------------------------------------------------------------
    def map_path(self) -> Path:
        cfg = self.config
        return Path(cfg.mission.map_file) if cfg.mission.map_file else Path(cfg.paths.maps_dir) / "current.sqlite"

    def open_map(self):
        try:
            m = open_map(self.map_path(), allow_unverified=self.config.mission.allow_unverified_maps)
            if len(m.nodes):
                self.map_zone = (int(m.nodes.utm_zone[0]), str(m.nodes.utm_band[0]))
            return m
        except (FileNotFoundError, MapFormatError) as exc:
            raise MissionError(f"no usable map ({exc}): build one on the Record screen (it becomes "
                               f"[paths] maps_dir/current.sqlite) or set [mission] map_file") from exc

    def _route_csr(self, m) -> tuple:
        """The opened route map ``m``'s checked CSR arrays (:meth:`core.mapstore.TopoMap.csr`), validated
        once per map rather than once per plan: kept while the map opened for the next plan has the same
        verified graph (:meth:`~core.mapstore.TopoMap.graph_key`: node count and edges content hash);
        a rebuilt or replaced map has another key and gets its own. A map without content hashes is
        checked on every open. Holds one map's graph (about 80 MB at 1M nodes, 6M edges)."""
        key = m.graph_key()
        cached = self._csr_cache
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        csr = m.csr()
        self._csr_cache = (key, csr) if key is not None else None
        return csr

    # -- planning -------------------------------------------------------------------------------------
    def _start_node(self, topomap, start: int | None) -> int:
        self._start_info = None
        n = len(topomap.nodes)
        if start is not None:
            if not 0 <= start < n:
                raise MissionError(f"start node {start} is not in the map (0..{n - 1})", bad_input=True)
            return start

        gps = self.sensors.gps
        fix = gps.latest(GpsFix, max_age_s=self.config.serial.gps_max_age_s) if gps is not None else None
        if fix is None:
            raise MissionError("no GPS fix: pick the start node on the map")
        import utm

        zone, band = int(topomap.nodes.utm_zone[0]), str(topomap.nodes.utm_band[0])
        e, nn, _, _ = utm.from_latlon(fix.latitude_deg, fix.longitude_deg, force_zone_number=zone,
                                      force_zone_letter=band)
        d = np.hypot(topomap.nodes.easting_m - e, topomap.nodes.northing_m - nn)
        best = int(np.argmin(d))
        if d[best] > self.config.mission.start_max_distance_m:
            raise MissionError(f"the robot is {d[best]:.0f} m from the nearest map node: drive onto the map or "
                               "pick the start node")
        # the GPS prior gives the candidates; the camera picks among them (GPS error is metres)
        candidates = np.flatnonzero(d <= max(d[best] + 2.0 * fix_error_m(fix), 3.0))
        picked = self._localise_by_image(topomap, candidates) if candidates.size > 1 else None
        self._start_info = {"gps_nearest": best, "candidates": candidates.tolist(), "picked": picked}
        return best if picked is None else picked

    def _localise_by_image(self, topomap, candidates: np.ndarray) -> int | None:
        """The candidate node the current camera frame matches best: the smallest VNM temporal distance
        when a VNM is installed, else the highest CLIP image-image cosine; None without a camera frame or
        models (the GPS-nearest node is used then)."""
        cam = self.sensors.camera
        frame = cam.latest if cam is not None else None
        if frame is None:
            return None

        try:
            rgb = decode_jpeg(frame.jpeg)
            vnm = self.models.vnm()
            if vnm is not None:
                imgs = [(topomap.images(int(v)) or [None])[0] for v in candidates]
                keep = [i for i, j in enumerate(imgs) if j is not None]
                if not keep:
                    return None
                ctx = np.concatenate([vnm.preprocess(rgb)] * (vnm.context_size + 1), axis=0)[None]
                goals = vnm.preprocess_many([decode_jpeg(imgs[i]) for i in keep])
                dist = vnm.predict(ctx, goals).dist_steps
                return int(candidates[keep[int(np.argmin(dist))]])
            clip = self.models.clip()
            if clip is not None:
                emb, node = topomap.embeddings(clip.model_id)
                mask = np.isin(node, candidates)
                if not mask.any():
                    return None
                q = clip.encode_images([rgb])[0]
                sims = emb[mask].astype(np.float32) @ q
                return int(node[mask][int(np.argmax(sims))])
        except Exception as exc:  # noqa: BLE001 - localisation by image is a refinement: fall back to GPS
            log.warning("start localisation by image failed (%s): using the GPS-nearest node", exc)
        return None

    def _plan_blocking(self, instruction: str | None, start: int | None, goal: int | None = None) -> dict:
        with self.open_map() as m:
            s = self._start_node(m, start)
            try:
                if goal is not None:  # to a chosen node: works without CLIP (docs/design.md, "Fallbacks")
                    if not 0 <= goal < len(m.nodes):
                        raise MissionError(f"goal node {goal} is not in the map (0..{len(m.nodes) - 1})",
                                           bad_input=True)
                    logp = np.full((len(m.nodes), 1), -np.inf)
                    logp[goal, 0] = 0.0
                    landmarks, info = [f"node {goal}"], None
                else:
                    llm = self.models.llm() if self.config.llm.landmark_parser != "rules" else None
                    landmarks, logp, info = ground_instruction(instruction, m, config=self.config, llm=llm)
                planned = plan_on_map(m, landmarks, logp, start=s, alpha=self.config.planner.alpha,
                                      planner=self.config.planner.planner, csr=self._route_csr(m))
            except PlanningError as exc:
                raise MissionError(str(exc), bad_input=exc.bad_input) from exc
            out = planned.describe(m)
            out.update(grounding=info, start=s, instruction=instruction, id=secrets.token_hex(16),
                       start_localisation=self._start_info)
            mark_found(out, info)
            walk = planned.result.nodes
            if self.safety is not None:
                self.safety.set_geofence(m.nodes.lat_deg, m.nodes.lon_deg)
            self._walk_latlon = (m.nodes.lat_deg[walk].copy(), m.nodes.lon_deg[walk].copy())
            self._walk_heading = self._headings(m, walk)
            self._walk_jpegs = [(m.images(int(v)) or [None])[0] for v in walk]
        if out["status"] != "ok":
            raise MissionError("no walk from the start reaches all landmarks in order")
        return out

    async def plan_route(self, instruction: str | None, start: int | None = None, goal: int | None = None) -> dict:
        """Plan from an instruction, or to the node ``goal``; the plan waits for :meth:`go`."""
        if self.state in ("planning", "running"):
            raise MissionError(f"busy ({self.state}): stop first")
        if goal is None and (not isinstance(instruction, str) or not instruction.strip() or len(instruction) > 500):
            raise MissionError("the instruction must be 1 to 500 characters of text", bad_input=True)
        self.state, self.message, self.plan = MissionState.PLANNING, "", None
        try:
            self.plan = await asyncio.to_thread(self._plan_blocking, instruction, start, goal)
        except MissionError as exc:
            self.state, self.message = MissionState.IDLE, str(exc)
            raise
        except Exception as exc:  # noqa: BLE001 - planning must never take the process down
            log.exception("planning failed")
            self.state, self.message = MissionState.ERROR, f"planning failed: {exc}"
            raise MissionError(self.message) from exc
        absent = self.plan.get("absent_landmarks") or []
        self.state, self.message = MissionState.CONFIRM, (
            f"not in the map: {', '.join(absent)}. Check the landmarks; Go asks to confirm" if absent
            else "check the landmarks, then press Go")
        return self.plan

    # -- driving --------------------------------------------------------------------------------------
    async def go(self, plan_id: str) -> None:
        """Drive the confirmed plan ``plan_id`` (its random 128-bit id: single use, a plan is driven once)."""
        if self.plan is None:
            raise MissionError("nothing to confirm: plan a route first")
        if plan_id != self.plan["id"]:
            raise MissionError("that plan has expired: a newer plan replaced it; check its landmarks and press Go "
                               "again")
        if self.state == "running":
            raise MissionError("this route is being driven already (another Go was first)")
        if self.state != "confirm":
            raise MissionError(f"this plan was used already (the route is {self.state}): plan the route again")
        base = self.sensors.base
        if base is None or not base.connected:
            raise MissionError("the robot base is not connected")
        if base.estop_latched:
            raise MissionError("the e-stop is latched: release it first")
        fault = self.fault()
        if fault is not None:
            raise MissionError(f"cannot drive: {fault.message}")
        vnm = self.models.vnm() if self.sensors.camera is not None else None
        # the policy's options: robot_app.config.nav_options ([vnm_nav], [mission] caps and radii, [robot])
        opts = nav_options(self.config)
        gps = GpsNavigator(self.sensors, self.commands, opts)
        if vnm is not None and all(j is not None for j in self._walk_jpegs):
            # stretches whose node images face away from the walk go to GPS (the policy's stretches)
            nav = VnmNavigator(self.sensors, self.commands, vnm, opts, gps_navigator=gps)
            args, mode = self._vnm_args(), "vnm"
        else:
            nav, args, mode = gps, self._walk_latlon, "gps"
        self.state, self.message = MissionState.RUNNING, f"driving the walk ({mode} mode)"
        self.progress = {"started_mono_s": time.monotonic(), "walk_nodes": len(self.plan["nodes"]), "mode": mode}
        self._nav = nav
        self._nav_task = asyncio.ensure_future(self._drive(nav, args))

    async def _drive(self, nav, args) -> None:
        disengaged_before = self.disengagements
        try:
            report = await nav.follow(*args)
            while True:
                if report.outcome in FAILED_OUTCOMES:
                    self._note_failure(report)
                if report.outcome not in REPLANNED or self.progress.get("replans", 0) >= self.max_replans:
                    break
                # stop, re-localise on the map from the GPS fix and re-plan to the landmarks not yet reached
                self.progress["replans"] = self.progress.get("replans", 0) + 1
                self.message = f"walk {report.outcome}: re-localising and re-planning"
                remaining = [lm["node"] for lm in self.plan["landmarks"] if lm["position"] > report.final_index]
                remaining = remaining or [self.plan["nodes"][-1]]
                try:
                    walk = await asyncio.to_thread(self.replan_from_here, remaining)
                except MissionError as exc:
                    self.message = f"walk {report.outcome}; re-planning failed: {exc}"
                    break
                if self.progress.get("mode") == "gps":
                    report = await nav.follow(*walk)
                else:  # the VNM failed where the new walk starts: GPS drives its first metres
                    lost = report.outcome in (Outcome.LOST.value, Outcome.OFF_WALK.value)
                    after_lost = self.config.vnm_nav.gps_after_lost_m if lost else 0.0
                    report = await nav.follow(*self._vnm_args(), gps_first_m=after_lost)
            if report.outcome in FAILED_OUTCOMES and report.outcome not in DISENGAGING:
                self.disengagements += 1  # a loss the re-plans did not recover: the operator takes over
            self.state = MissionState(report.outcome)
            self.message = f"walk {report.outcome}, {report.distance_to_goal_m:.1f} m from the goal"
            self.progress.update(walk_index=report.final_index, duration_s=report.duration_s)
        except asyncio.CancelledError:
            self.state = MissionState.STOPPED
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("navigator failed")
            self.state, self.message = MissionState.ERROR, f"navigation failed: {exc}"
        finally:
            self._record_run(nav, self.disengagements - disengaged_before)

    def _note_failure(self, report) -> None:
        """A walk that ended short of its goal (lost, off-walk, stuck, collided, timeout, without GPS or camera):
        where (walk index, fix), when and why, into the progress (and so the run record). A stuck, collided
        or timed-out walk always counts as a disengagement; a loss counts only when the re-plans do not
        recover it (counted at the end of the route)."""
        gps = self.sensors.gps
        fix = gps.latest(GpsFix, max_age_s=self.config.serial.gps_max_age_s) if gps is not None else None
        entry = {"outcome": report.outcome, "why": report.why, "walk_index": int(report.final_index),
                 "distance_to_goal_m": float(report.distance_to_goal_m),
                 "t_s": time.monotonic() - self.progress.get("started_mono_s", time.monotonic()),
                 "lat_deg": None if fix is None else fix.latitude_deg,
                 "lon_deg": None if fix is None else fix.longitude_deg}
        self.progress.setdefault("failures", []).append(entry)
        if report.outcome in DISENGAGING:
            self.disengagements += 1
        log.warning("route: walk %s at walk index %d (%s): %s", report.outcome, report.final_index,
                    "no fix" if fix is None else f"{fix.latitude_deg:.6f}, {fix.longitude_deg:.6f}", report.why)

    @staticmethod
    def _headings(m, walk):
        """The map's node headings along ``walk``, or None for a map whose headings do not come from the
        smoothed GPS track (robot_app.mapping.map_build.HEADINGS_METHOD): those are too noisy to tell which
        stretches run against the recorded direction, so the VNM then drives the whole walk."""
        if (m.metadata.get("build") or {}).get("node_headings") != HEADINGS_METHOD:
            log.warning("map: node headings from consecutive GPS fixes (built before %s headings); the VNM drives "
                        "whole walks, stretches against the recorded direction included: rebuild the map "
                        "(robot-app map build) to drive those by GPS", HEADINGS_METHOD)
            return None
        return m.nodes.heading_rad[np.asarray(walk)].copy()

    def _vnm_args(self) -> tuple:
        """VnmNavigator.follow's arguments for the current walk: node images, positions and headings."""
        return self._walk_jpegs, self._walk_latlon, self._walk_heading

    def replan_from_here(self, targets: list[int]) -> tuple:
        """A new walk from the node nearest the GPS fix through ``targets`` (node ids, in order), searched
        with ``[planner] planner`` like the first plan.

        Returns the walk's (lat_deg, lon_deg) arrays and updates the stored walk images. Raises
        :class:`MissionError` without a fix near the map or when the targets cannot be reached.
        """
        planner = self.config.planner
        with self.open_map() as m:
            start = self._start_node(m, None)
            logp = np.full((len(m.nodes), len(targets)), -np.inf)
            logp[np.asarray(targets), np.arange(len(targets))] = 0.0
            # the configured planner, as for the first plan ([planner] planner)
            r = PLANNERS[planner.planner](*self._route_csr(m), logp, start, alpha=planner.alpha)
            if not r.ok:
                raise MissionError("the remaining landmarks cannot be reached from here")
            self._walk_latlon = (m.nodes.lat_deg[r.nodes].copy(), m.nodes.lon_deg[r.nodes].copy())
            self._walk_heading = self._headings(m, r.nodes)
            self._walk_jpegs = [(m.images(int(v)) or [None])[0] for v in r.nodes]
            self.progress["replanned_walk"] = r.nodes.tolist()
        return self._walk_latlon

    def _record_run(self, nav, disengagements: int) -> None:
        """Write what was planned and what happened to ``[paths] logs_dir/runs/`` (for the paper's metrics
        and later analysis). Written to a temporary name and renamed: never a half file."""
        import json
        import os

        runs = Path(self.config.paths.logs_dir) / "runs"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        record = {"utc": stamp, "plan": self.plan, "mode": self.progress.get("mode"),
                  "outcome": self.state, "message": self.message, "disengagements": disengagements,
                  "failures": self.progress.get("failures", []), "replans": self.progress.get("replans", 0),
                  "duration_s": time.monotonic() - self.progress.get("started_mono_s", time.monotonic()),
                  "trace": [dataclasses.asdict(row) for row in nav.trace]}
        try:
            runs.mkdir(parents=True, exist_ok=True)
            path = runs / f"run-{stamp}-{self.plan['id'] if self.plan else 0}.json"
            tmp = path.with_suffix(".json.partial")
            tmp.write_text(json.dumps(record, default=str))
            os.replace(tmp, path)
            self.progress["record"] = str(path)
        except OSError as exc:  # a full disk must not stop the robot: say it
            log.error("could not write the run record: %s", exc)

    def stop(self, reason: str = "operator STOP") -> None:
        """Latch the base e-stop, end any run. The base's e-stop comes first and writes a zero command to the
        wire from this call (not at the next drive tick); the multiplexer's STOP slot, the hooks and the
        end of the run follow."""
        if self.sensors.base is not None:
            self.sensors.base.estop(reason)
        self.commands.latch_stop(reason)
        self.commands.release(Source.AUTONOMY)
        for hook in self.on_stop:
            hook()
        if self._nav_task is not None and not self._nav_task.done():
            self.disengagements += 1
            self._nav_task.cancel()
        self.state, self.message = MissionState.STOPPED, reason

    def abort(self, reason: str) -> None:
        """End a running route without latching the e-stop (a safety fault; commands go to zero)."""
        self.commands.release(Source.AUTONOMY)
        if self._nav_task is not None and not self._nav_task.done():
            self._nav_task.cancel()
            self.state, self.message = MissionState.STOPPED, reason

    def release_stop(self) -> None:
        """Release the STOP: the base's e-stop latch, then the command multiplexer's STOP slot. A route planned
        while the stop was latched stays to confirm (the touchscreen held its Go until this release)."""
        if self.sensors.base is None:
            self.commands.release_stop()
            raise MissionError("no robot base")
        try:
            self.sensors.base.reset_estop()
        except Exception as exc:  # noqa: BLE001 - e.g. the hardware stop loop still open
            raise MissionError(str(exc)) from exc
        self.commands.release_stop()
        if self.state == MissionState.CONFIRM and self.plan is not None:
            if not self.message.startswith("e-stop released"):
                self.message = f"e-stop released: {self.message}"
        else:
            self.state, self.message = MissionState.IDLE, "e-stop released"

    async def close(self) -> None:
        if self._nav_task is not None and not self._nav_task.done():
            self._nav_task.cancel()
            await asyncio.gather(self._nav_task, return_exceptions=True)

    def _live_progress(self) -> dict:
        """Walk index and next subgoal node while driving (from the navigator's trace)."""
        trace = self._nav.trace if self._nav is not None else None
        if self.state != "running" or not trace or self.plan is None:
            return {}
        row = trace[-1]
        walk = self.progress.get("replanned_walk") or self.plan["nodes"]
        idx = min(row.walk_index, len(walk) - 1)
        # who drives now: the VNM, GPS (stretches that face away from the walk), a turn in place, nobody
        return {"walk_index": idx, "subgoal_node": int(walk[min(idx + 1, len(walk) - 1)]), "driver": row.driver}

    def status(self) -> dict:
        progress = {k: v for k, v in self.progress.items() if k != "started_mono_s"}
        progress.update(self._live_progress())
        return {"state": self.state, "message": self.message, "plan_id": self.plan["id"] if self.plan else None,
                "progress": progress, "disengagements": self.disengagements}
