"""Task jobs: a PDDL goal in the robot's own domain, planned and repaired with LASP, executed on the robot.

The robot's domain and problem come from ``[mission] task_domain`` / ``task_problem`` (default: the
shipped Jackal jobs domain); the operator gives the goal (PDDL) on the touchscreen. LASP (Algorithm 1,
:func:`core.lasp.loop.run_lasp`) runs in a worker thread against :class:`RobotTaskEnvironment`:

- ``navigate ?r ?from ?to`` drives a route job to the map node of ``?to`` (``[mission] places``,
  ``"name=node"`` entries); a walk that ends lost, stuck or stopped is a failed action and its message
  the observation the diagnoser reads;
- ``inspect ?r ?p`` keeps the current camera frame as the inspection photo;
- every other action (open a gate, load, unload, charge...) is asked of the operator on the screen,
  who answers done, or not done with what was observed in words;
- the robot reports its battery charge (percent, from the MCU's battery voltage) as a property.

What a task learned (a missing precondition, property or object) is shown to the operator, who approves
it before it is kept: approved knowledge goes into the knowledge file (``[lasp] knowledge_file``, default
``[paths] logs_dir/../lasp-knowledge.pddl``) and is loaded before every later task, so the same failure
does not happen twice. The job's status carries the trace for the screen.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import utm

from core.lasp.environment import Outcome, PropertyInfo
from core.lasp.knowledge import apply_edits, parse_pddl_diff, to_pddl_diff
from core.lasp.loop import LaspRun
from core.lasp.model import PddlError, Task, describe_name
from firmware_bridge.readings import BaseStatus, GpsFix
from robot_app.errors import RequestError
from robot_app.jobs.lasp_setup import LLM_DIAGNOSERS, build_diagnoser, loop_config, make_similarity
from robot_app.jobs.mission import MissionError

log = logging.getLogger(__name__)

JACKAL_DIR = Path(__file__).resolve().parents[1] / "data" / "lasp" / "jackal"
BATTERY_EMPTY_V, BATTERY_FULL_V = 23.0, 29.0  # Jackal 24 V lead/LiFePO4 pack, linear approximation


class TaskError(RequestError):
    """A task request that cannot run as given (bad goal, unknown place, busy); ``bad_input`` as in
    :class:`robot_app.errors.RequestError`."""


@dataclass
class Question:
    """Something the robot cannot do itself: the operator answers on the screen."""

    id: int
    text: str
    done: bool | None = None
    observation: str = ""
    answered: threading.Event = field(default_factory=threading.Event)


def replace_goal(problem_text: str, goal_pddl: str) -> str:
    """``problem_text`` with its ``(:goal ...)`` replaced by ``(:goal GOAL)``.

    Raises :class:`TaskError` when the problem has no goal section or the goal's parentheses do not balance.
    """
    depth = 0
    for ch in goal_pddl:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            break
    if depth != 0 or not goal_pddl.strip().startswith("("):
        raise TaskError(f"goal: not one balanced PDDL expression: {goal_pddl!r}", bad_input=True)
    start = problem_text.find("(:goal")
    if start < 0:
        raise TaskError("the task problem has no (:goal ...) section")
    depth, end = 0, None
    for i in range(start, len(problem_text)):
        depth += (problem_text[i] == "(") - (problem_text[i] == ")")
        if depth == 0:
            end = i + 1
            break
    if end is None:
        raise TaskError("the task problem's (:goal ...) section does not close")
    return problem_text[:start] + f"(:goal {goal_pddl.strip()})" + problem_text[end:]


def start_at(task, place: str) -> None:
    """Make ``(at R place)`` the only ``at`` fact of every robot R in ``task``'s initial state (the robot
    starts where it is, not where the problem file says). A domain without the ``at`` predicate over
    robots and places is left unchanged."""
    try:
        if "at" not in task.fluent_names() or place not in task.objects_of("place") or not task.objects_of("robot"):
            return
    except Exception:  # noqa: BLE001 - a domain without the robot / place types (unified-planning raises)
        return
    state = task.initial_state()
    changes = {("at", (r, p)): p == place for r in task.objects_of("robot") for p in task.objects_of("place")}
    task.set_initial_state(state.updated(changes))


class RobotTaskEnvironment:
    """LASP's environment interface, backed by the running app (called from the LASP worker thread)."""

    def __init__(self, jobs: "TaskJobs", task, places: dict[str, int]):
        self.jobs = jobs
        self.sensors = jobs.sensors
        self.task = task
        self.places = places
        self.state = task.initial_state()

    def _run(self, coro, timeout_s: float):
        return asyncio.run_coroutine_threadsafe(coro, self.jobs.loop).result(timeout_s)

    def execute(self, step):
        if self.jobs.cancelled.is_set():
            return Outcome(False, step, "The operator stopped the task.")
        try:
            words = self.task.action_sentence(step.name, step.args)
        except PddlError:
            words = str(step)
        self.jobs.current = {"step": str(step), "words": words}  # the screen shows it while it runs
        blocked = self.jobs.field_events(step) if self.jobs.field_events is not None else None
        if blocked:  # the (simulated) world stops the step, e.g. a closed gate: its observation in words
            return Outcome(False, step, blocked)
        if step.name == "navigate" and len(step.args) == 3:
            node = self.places.get(step.args[2])
            if node is None:
                return Outcome(False, step, f"The robot does not know where {describe_name(step.args[2])} is on "
                                            "its map.")
            state, message = self._run(self.jobs.route_to(node), self.jobs.route_timeout_s)
            if state != "reached":
                return Outcome(False, step, f"The robot could not get from {describe_name(step.args[1])} to "
                                            f"{describe_name(step.args[2])}: {message}.")
        elif step.name == "inspect":
            cam = self.sensors.camera
            if cam is not None and cam.latest is not None:
                self.jobs.photos.append({"place": step.args[-1], "t_mono_s": cam.latest.t_mono_s})
        else:
            try:  # the domain's sentence for the action ("load parcel 1 onto jackal at depot")
                what = self.task.action_sentence(step.name, step.args)
            except PddlError:
                what = f"{describe_name(step.name)} ({', '.join(describe_name(a) for a in step.args)})"
            q = self.jobs.ask(f"Please {what}. Press Done when it is done, or describe what went wrong.")
            if not q.done:
                return Outcome(False, step, q.observation or f"The operator could not {what}.")
        try:
            self.state = self.task.apply(step.name, step.args, self.state)
        except Exception as exc:  # noqa: BLE001 - the robot's model cannot follow: say so, do not crash
            log.warning("task model cannot apply %s: %s", step, exc)
        return Outcome(True, step)

    def goal_reached(self) -> bool:
        return self.task.goal_holds(self.state)

    def properties(self) -> list:
        return [PropertyInfo("battery", True, ("robot",), "the robot's battery charge, percent")]

    def value(self, name: str, args):
        if name != "battery" or self.sensors.base is None:
            return None
        st = self.sensors.base.latest(BaseStatus, max_age_s=10.0)
        if st is None or not math.isfinite(st.battery_v):  # NaN: the robot publishes no battery state
            return None
        return round(100.0 * min(1.0, max(0.0, (st.battery_v - BATTERY_EMPTY_V) / (BATTERY_FULL_V - BATTERY_EMPTY_V))))

    def objects(self) -> dict:
        return {o.name: o.type.name for o in self.task.problem.all_objects}

    def describe_object(self, name: str) -> str:
        return describe_name(name)


class TaskJobs:
    """One task job at a time; status, trace and the operator's pending question for the screen.

    ``config`` gives ``[mission]`` (places, task files), ``[lasp]`` and ``[llm]``; ``sensors``
    (:class:`robot_app.interfaces.Sensors`) the camera (inspect steps) and the base (battery);
    ``models`` the model registry (the LLM diagnoser when an LLM is installed); ``mission`` the route job
    that drives the navigate steps (:class:`robot_app.jobs.mission.MissionExecutive`).
    """

    route_timeout_s = 900.0
    question_timeout_s = 600.0

    def __init__(self, config, sensors, models, mission):
        self.config, self.sensors, self.models, self.mission = config, sensors, models, mission
        self.loop: asyncio.AbstractEventLoop | None = None
        self.state = "idle"          # idle, running, succeeded, failed, error
        self.message = ""
        self.result: dict | None = None
        self.question: Question | None = None
        self.photos: list = []
        self.cancelled = threading.Event()
        self._ids = itertools.count(1)
        self._task: asyncio.Task | None = None
        self._run_obj = None  # the LaspRun in progress: its trace grows live
        self.pending_learned: list = []  # learned by the last run, waiting for the operator's approval
        self.current: dict | None = None  # the step being executed: {"step": PDDL, "words": for the operator}
        #: simulation hook (robot-app demo, tests): ``callable(step) -> str | None``, called before each step;
        #: a non-empty string fails the step with that observation, as the world would (a closed gate)
        self.field_events = None

    def places(self) -> dict[str, int]:
        out = {}
        for entry in self.config.mission.places:
            name, _, node = entry.partition("=")
            try:
                out[name.strip()] = int(node)
            except ValueError:
                raise TaskError(f"[mission] places: {entry!r} is not 'name=node'") from None
        return out

    def current_place(self, places: dict[str, int]) -> str:
        """The ``[mission] places`` entry the robot is at: the one whose map node is nearest the fused pose
        (else the GPS fix), if within ``[mission] place_radius_m``.

        Raises
        ------
        TaskError
            Without a position, without places, with a place naming no node of the map, or when the robot
            is farther than the radius from every place (the message names the nearest and its distance).
        robot_app.jobs.mission.MissionError
            Without a usable map.
        """
        if not places:
            raise TaskError("no places are configured ([mission] places): the robot cannot tell where a task starts")
        with self.mission.open_map() as m:
            nodes = m.nodes
            zone, band = int(nodes.utm_zone[0]), str(nodes.utm_band[0])
            xy = self._robot_xy(zone, band)
            if xy is None:
                raise TaskError("no GPS fix: the robot cannot tell which place it is at; wait for a fix")
            dist = {}
            for name, node in places.items():
                if not 0 <= node < len(nodes):
                    raise TaskError(f"[mission] places: {name}={node} is not a node of the map (0..{len(nodes) - 1})")
                dist[name] = math.hypot(nodes.easting_m[node] - xy[0], nodes.northing_m[node] - xy[1])
        name = min(dist, key=dist.get)
        radius = self.config.mission.place_radius_m
        if dist[name] > radius:
            raise TaskError(f"the robot is {dist[name]:.0f} m from the nearest place ({describe_name(name)}), more "
                            f"than {radius:.0f} m: drive it to one of the places first")
        log.info("task: the robot is at %s (%.1f m from its node)", name, dist[name])
        return name

    def _robot_xy(self, zone: int, band: str) -> tuple[float, float] | None:
        """The robot's UTM position (m) in the map's zone: the fused pose when it is in that zone, else the
        latest GPS fix converted; None without either."""
        pose = self.sensors.pose
        if pose is not None and int(pose.utm_zone[0]) == zone:
            return float(pose.x_m), float(pose.y_m)
        gps = self.sensors.gps
        fix = gps.latest(GpsFix, max_age_s=self.config.serial.gps_max_age_s) if gps is not None else None
        if fix is None:
            return None
        e, n, _, _ = utm.from_latlon(fix.latitude_deg, fix.longitude_deg, force_zone_number=zone,
                                     force_zone_letter=band)
        return float(e), float(n)

    def ask(self, text: str) -> Question:
        """Post a question to the operator and wait for the answer (called from the worker thread)."""
        q = Question(next(self._ids), text)
        self.question = q
        if not q.answered.wait(self.question_timeout_s) or self.cancelled.is_set():
            q.done, q.observation = False, q.observation or "No answer from the operator."
        self.question = None
        return q

    def answer(self, question_id: int, done: bool, observation: str = "") -> None:
        q = self.question
        if q is None or q.id != question_id:
            raise TaskError("no such question is waiting", bad_input=True)
        if not isinstance(observation, str) or len(observation) > 500:
            raise TaskError("the observation must be text of at most 500 characters", bad_input=True)
        q.done, q.observation = bool(done), observation
        q.answered.set()

    async def route_to(self, node: int) -> tuple[str, str]:
        mission = self.mission

        try:
            plan = await mission.plan_route(None, goal=node)
            if len(plan["nodes"]) == 1:
                mission.state = "reached"
                return "reached", "already there"
            await mission.go(plan["id"])
        except MissionError as exc:
            return "error", str(exc)
        while mission.state == "running":
            await asyncio.sleep(0.2)
        return mission.state, mission.message

    async def start(self, goal_pddl: str) -> None:
        if self.state == "running":
            raise TaskError("a task is running: stop it first")
        if not isinstance(goal_pddl, str) or not goal_pddl.strip() or len(goal_pddl) > 2000:
            raise TaskError("the goal must be PDDL text of at most 2000 characters", bad_input=True)
        mc = self.config.mission
        domain = Path(mc.task_domain) if mc.task_domain else JACKAL_DIR / "robot_domain.pddl"
        problem = Path(mc.task_problem) if mc.task_problem else JACKAL_DIR / "robot_patrol.pddl"
        try:
            domain_text, problem_text = domain.read_text(encoding="utf-8"), problem.read_text(encoding="utf-8")
        except OSError as exc:
            raise TaskError(f"the robot's task files cannot be read ([mission] task_domain / task_problem): "
                            f"{exc}") from exc
        try:
            task = Task.from_pddl(domain_text, replace_goal(problem_text, goal_pddl), where="the goal")
        except PddlError as exc:
            try:  # whose fault: the robot's own files (a set-up fault), else the operator's goal
                Task.from_pddl(domain_text, problem_text, where=str(problem))
            except PddlError as own:
                raise TaskError(f"the robot's task files cannot be read ([mission] task_domain / task_problem): "
                                f"{own}") from own
            raise TaskError(f"the goal {goal_pddl.strip()} is not one the robot can plan for: {exc}",
                            bad_input=True) from exc
        places = self.places()
        here = self.current_place(places)
        start_at(task, here)
        self.prior = self._load_knowledge(task)
        self.loop = asyncio.get_running_loop()
        self.cancelled.clear()
        self.state, self.message, self.result, self.photos = "running", f"planning {goal_pddl.strip()}", None, []
        self.current, self._run_obj = None, None
        self._task = asyncio.ensure_future(self._run(task, places))

    async def _run(self, task, places) -> None:
        env = RobotTaskEnvironment(self, task, places)
        try:
            diagnoser = await asyncio.to_thread(self._diagnoser, make_similarity)
            t0 = time.monotonic()
            self._run_obj = LaspRun(task, env, diagnoser, loop_config(self.config))
            res = await asyncio.to_thread(self._run_obj.run)
            self.result = res.as_dict()
            self.pending_learned = list(res.learned)
            self.state = "succeeded" if res.success else "failed"
            self.message = (f"task {'done' if res.success else 'not done'} in {time.monotonic() - t0:.0f} s: "
                            f"{res.replans} replans, {len(res.learned)} things learned"
                            + (f" ({res.reason})" if res.reason else ""))
        except Exception as exc:  # noqa: BLE001 - shown to the operator; the robot is stopped
            log.exception("task job failed")
            self.state, self.message = "error", f"task failed: {exc}"

    def _diagnoser(self, make_similarity):
        """``[lasp] diagnoser`` on the process's shared LLM (:func:`robot_app.jobs.lasp_setup.build_diagnoser`);
        the offline diagnoser, logged, when an LLM choice finds no usable model."""
        sim, _ = make_similarity(self.config)
        choice = self.config.lasp.diagnoser
        llm = self.models.llm() if choice != "offline" else None
        if llm is None and choice in LLM_DIAGNOSERS:
            log.warning("LASP: [lasp] diagnoser = %s but the LLM is not usable; using the offline diagnoser", choice)
            choice = "offline"
        return build_diagnoser(self.config, choice, sim, llm)

    def knowledge_path(self) -> Path:
        c = self.config
        return (
            Path(c.lasp.knowledge_file)
            if c.lasp.knowledge_file
            else Path(c.paths.logs_dir).parent / "lasp-knowledge.pddl"
        )

    def _load_knowledge(self, task) -> list:
        """Apply the approved knowledge to ``task``; returns the edits applied."""
        path = self.knowledge_path()
        if not path.is_file():
            return []
        try:
            return apply_edits(task, parse_pddl_diff(path.read_text(encoding="utf-8")))
        except Exception as exc:  # noqa: BLE001 - a damaged file must not stop tasks: say it
            raise TaskError(f"the knowledge file {path} cannot be read: {exc}") from exc

    def approve(self, keep: bool) -> int:
        """Keep (or drop) what the last run learned; returns how many edits were kept."""
        import os

        if not self.pending_learned:
            raise TaskError("nothing learned is waiting for approval")
        edits, self.pending_learned = self.pending_learned, []
        if not keep:
            return 0
        path = self.knowledge_path()
        old = parse_pddl_diff(path.read_text(encoding="utf-8")) if path.is_file() else []
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".partial")
        tmp.write_text(to_pddl_diff(old + edits), encoding="utf-8")
        os.replace(tmp, path)  # never a half-written knowledge file
        return len(edits)

    def stop(self) -> None:
        self.cancelled.set()
        q = self.question
        if q is not None:
            q.done, q.observation = False, "The operator stopped the task."
            q.answered.set()

    async def close(self) -> None:
        self.stop()
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task], timeout=5.0)

    def status(self) -> dict:
        """The task for the screen; while it runs, the plan and the step being done are live (the plan is
        the newest one the planner made, the message says what the robot is doing now)."""
        q = self.question
        run = self._run_obj
        trace = (self.result or {}).get("trace") or (list(run.trace) if run is not None else [])
        plan = (self.result or {}).get("plan")
        message, current = self.message, None
        if self.state == "running":
            plan = [str(st) for st in run.last_plan] if run is not None else None
            current = self.current
            if current is not None:
                message = f"doing: {current['words']}"
                if plan and current["step"] in plan:
                    message += f" (step {plan.index(current['step']) + 1} of {len(plan)})"
        return {"state": self.state, "message": message, "current": current,
                "question": None if q is None else {"id": q.id, "text": q.text},
                "plan": plan, "learned": (self.result or {}).get("learned"),
                "awaiting_approval": [e.as_dict() for e in self.pending_learned],
                "trace": trace[-40:], "photos": len(self.photos)}
