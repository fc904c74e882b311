"""LASP task jobs in the running app on the simulated Jackal: navigate through route jobs, operator
questions for manipulation, the goal text check."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import pytest

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.config import Config
from robot_app.jobs.task_jobs import TaskError, replace_goal
from robot_app.mapping.synthetic_logs import write_synthetic_log
from robot_app.service.app import App

ORIGIN = (52.5148, 13.4643)


def test_replace_goal():
    text = "(define (problem p) (:domain d) (:objects a - t) (:init) (:goal (and (x a) (y a))))"
    assert replace_goal(text, "(z a)").endswith("(:goal (z a)))")
    with pytest.raises(TaskError, match="balanced"):
        replace_goal(text, "(z a")
    with pytest.raises(TaskError, match="no \\(:goal"):
        replace_goal("(define (problem p))", "(z a)")


@pytest.fixture
def task_app_config(tmp_path, capsys):
    write_synthetic_log(tmp_path / "log", [(0, 0), (9, 0)], seed=3, anchor=ORIGIN)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path / "none"}"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")]) == 0
    capsys.readouterr()
    base = Config()
    return dataclasses.replace(
        base, paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "none"), logs_dir=str(tmp_path / "logs")),
        mission=dataclasses.replace(base.mission, map_file=str(tmp_path / "m.map"), max_v_mps=1.5, goal_radius_m=0.8,
                                    places=["depot=0", "yard=3", "site-b=2", "site-c=1"]),
        ui=dataclasses.replace(base.ui, port=0, secret_file=""))


async def _wait(http, url, pred, timeout_s):
    for _ in range(int(timeout_s * 10)):
        st = await (await http.get(url + "/api/status")).json()
        if pred(st):
            return st
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out; last status task={st['task']} mission={st['mission']}")


def test_task_job_drives_inspects_and_asks_the_operator(tmp_path, task_app_config):
    async def main_():
        ports = tmp_path / "ports"
        ports.mkdir()
        async with SimulatedDevices(ports, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
            cfg = dataclasses.replace(task_app_config, serial=dataclasses.replace(
                task_app_config.serial, base_port=str(sim.ports["jackal"])))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                while not app.ui.port:
                    await asyncio.sleep(0.05)
                url = f"http://127.0.0.1:{app.ui.port}"
                async with aiohttp.ClientSession(headers={"X-Robot-Token": app.ui_token}) as http:
                    await _wait(http, url, lambda s: s["gps"] is not None, 10)
                    assert (await http.post(url + "/api/task/run", json={"goal": "(inspected yard"})).status == 400
                    r = await http.post(
                        url + "/api/task/run", json={"goal": "(and (inspected yard) (at jackal depot))"}
                    )
                    assert r.status == 200
                    st = await _wait(http, url, lambda s: s["task"]["state"] != "running", 90)
                    assert st["task"]["state"] == "succeeded", st["task"]
                    assert st["task"]["plan"] == ["(navigate jackal depot yard)", "(inspect jackal yard)",
                                                  "(navigate jackal yard depot)"]
                    # loading is the operator's job: the robot asks and waits for the answer
                    r = await http.post(url + "/api/task/run", json={"goal": "(carrying jackal parcel-1)"})
                    assert r.status == 200
                    st = await _wait(http, url, lambda s: s["task"]["question"] is not None, 30)
                    q = st["task"]["question"]
                    # in the operator's words, from the domain's sentence for the action
                    assert q["text"].startswith("Please load parcel 1 onto jackal at "), q["text"]
                    # while it runs, the screen has the plan and the step being done
                    t = st["task"]
                    assert t["state"] == "running" and t["plan"] and t["current"]["step"] in t["plan"]
                    assert t["message"].startswith("doing: load parcel 1 onto jackal at ") and " of " in t["message"]
                    assert (
                        await http.post(url + "/api/task/answer", json={"id": q["id"], "done": "yes"})
                    ).status == 400
                    assert (await http.post(url + "/api/task/answer", json={"id": q["id"], "done": True})).status == 200
                    st = await _wait(http, url, lambda s: s["task"]["state"] != "running", 30)
                    assert st["task"]["state"] == "succeeded", st["task"]
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 15.0)

    asyncio.run(main_())


def test_learned_knowledge_is_kept_only_when_approved_and_loaded_by_later_tasks(tmp_path, task_app_config):
    """A run in the Jackal environment learns (closed gate, battery, payload); the operator approves it."""
    from core.lasp.diagnosis import OfflineDiagnoser
    from core.lasp.environment import SimulatedEnvironment
    from core.lasp.loop import run_lasp
    from core.lasp.model import Task
    from core.lasp.similarity import lexical_similarity
    from robot_app.jobs.task_jobs import JACKAL_DIR

    robot = Task.from_pddl(
        (JACKAL_DIR / "robot_domain.pddl").read_text(), (JACKAL_DIR / "robot_patrol.pddl").read_text()
    )
    oracle = Task.from_pddl((JACKAL_DIR / "domain.pddl").read_text(), (JACKAL_DIR / "patrol.pddl").read_text())
    import json

    env = SimulatedEnvironment(oracle, templates=json.loads((JACKAL_DIR / "observations.json").read_text()), seed=0)
    learned = run_lasp(robot, env, OfflineDiagnoser(lexical_similarity)).learned
    assert learned

    async def main_():
        app = App(dataclasses.replace(task_app_config, serial=dataclasses.replace(
            task_app_config.serial, base_port="/nonexistent/jackal")))
        jobs = app.tasks
        with pytest.raises(TaskError, match="nothing learned"):
            jobs.approve(True)
        jobs.pending_learned = list(learned)
        assert jobs.status()["awaiting_approval"]
        assert jobs.approve(False) == 0 and not jobs.knowledge_path().exists()
        jobs.pending_learned = list(learned)
        assert jobs.approve(True) == len(learned)
        text = jobs.knowledge_path().read_text()
        task = Task.from_pddl((JACKAL_DIR / "robot_domain.pddl").read_text(),
                              (JACKAL_DIR / "robot_patrol.pddl").read_text())
        assert len(jobs._load_knowledge(task)) == len(learned) and text.strip()

    asyncio.run(main_())


# -- where a task starts: the robot's position, not the problem file --------------------------------------
def _jobs_at(task_app_config, node_offset_m):
    """TaskJobs on the test map with a fused pose ``node_offset_m`` (east, north) from node 3 (the yard)."""
    from core.mapstore import open_map
    from robot_app.commands import CommandMux, Source
    from robot_app.interfaces import Sensors
    from robot_app.jobs.mission import MissionExecutive
    from robot_app.jobs.task_jobs import TaskJobs
    from robot_app.sensing.state_estimation import Pose

    with open_map(task_app_config.mission.map_file) as m:
        e, n = float(m.nodes.easting_m[3]), float(m.nodes.northing_m[3])
        zone = (int(m.nodes.utm_zone[0]), str(m.nodes.utm_band[0]))
    pose = Pose(0.0, e + node_offset_m[0], n + node_offset_m[1], 0.0, 0.0, (0.0,) * 16, zone, 0.0, True)
    sensors = Sensors(pose=pose)
    mux = CommandMux({Source.AUTONOMY: 0.25, Source.TELEOP: 0.25})
    mission = MissionExecutive(task_app_config, sensors, mux, models=None)
    return TaskJobs(task_app_config, sensors, None, mission)


def test_a_task_starts_at_the_place_nearest_the_robot(task_app_config):
    from core.lasp.model import Task
    from robot_app.jobs.task_jobs import JACKAL_DIR, start_at

    jobs = _jobs_at(task_app_config, (0.5, -0.4))
    assert jobs.current_place(jobs.places()) == "yard"
    task = Task.from_pddl((JACKAL_DIR / "robot_domain.pddl").read_text(),
                          (JACKAL_DIR / "robot_patrol.pddl").read_text())
    assert task.initial_state().holds(("at", ("jackal", "depot")))  # what the file says
    start_at(task, "yard")
    state = task.initial_state()
    assert state.holds(("at", ("jackal", "yard")))
    assert not any(state.holds(("at", ("jackal", p))) for p in ("depot", "site-b", "site-c"))


def test_a_task_far_from_every_place_is_refused_with_the_distance(task_app_config):
    jobs = _jobs_at(task_app_config, (0.0, 40.0))
    with pytest.raises(TaskError, match=r"40 m from the nearest place \(yard\), more than 10 m") as exc:
        jobs.current_place(jobs.places())
    assert not exc.value.bad_input  # the robot's state refuses it (409), not the request
    no_fix = _jobs_at(task_app_config, (0.0, 0.0))
    no_fix.sensors.pose = None
    with pytest.raises(TaskError, match="no GPS fix"):
        no_fix.current_place(no_fix.places())


def test_a_bad_goal_is_named_as_the_goal_not_the_problem_file(task_app_config):
    jobs = _jobs_at(task_app_config, (0.0, 0.0))

    async def start(goal):
        await jobs.start(goal)

    with pytest.raises(TaskError, match=r"the goal \(inspected nowhere\) is not one the robot can plan for") as exc:
        asyncio.run(start("(inspected nowhere)"))
    assert exc.value.bad_input and "robot_patrol.pddl" not in str(exc.value)
