"""Route failures count: a stuck walk is a disengagement and is re-planned; a loss counts only when the
re-plans ([mission] max_replans) do not recover it; each failure is in the run record with its place."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import numpy as np
import pytest

from robot_app.commands import CommandMux, Source
from robot_app.config import Config
from robot_app.interfaces import Sensors
from robot_app.jobs.mission import MissionExecutive
from robot_app.nav.gps import RunReport


class ScriptedNavigator:
    """Ends each walk it is given with the next scripted outcome (the navigator's RunReport contract)."""

    trace: list = []

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = 0

    async def follow(self, *args, **kwargs):
        outcome = self.outcomes[self.calls]
        self.calls += 1
        return RunReport(outcome, 1 if outcome != "reached" else 2, 0.5 if outcome == "reached" else 12.0, 3.0)


class Replanning(MissionExecutive):
    def replan_from_here(self, targets):  # the map search itself is tested in test_ui_route / test_mission_replan
        self.progress["replanned_walk"] = list(targets)
        return np.array([52.5, 52.5001]), np.array([13.46, 13.4601])


def run_route(tmp_path, outcomes, *, max_replans=2):
    base = Config()
    cfg = dataclasses.replace(base, paths=dataclasses.replace(base.paths, logs_dir=str(tmp_path)),
                              mission=dataclasses.replace(base.mission, max_replans=max_replans))
    mission = Replanning(cfg, Sensors(), CommandMux({Source.AUTONOMY: 0.25, Source.TELEOP: 0.25}), models=None)
    mission.plan = {"id": 7, "nodes": [0, 1, 2], "landmarks": [{"node": 2, "position": 2, "name": "a mailbox"}]}
    mission.progress = {"mode": "gps", "started_mono_s": 0.0}
    nav = ScriptedNavigator(outcomes)
    asyncio.run(mission._drive(nav, ((), ())))
    record = json.loads(next((tmp_path / "runs").glob("run-*-7.json")).read_text())
    return mission, nav, record


def test_a_stuck_walk_is_a_disengagement_and_is_replanned(tmp_path):
    mission, nav, record = run_route(tmp_path, ["stuck", "reached"])
    assert nav.calls == 2 and mission.state == "reached" and mission.disengagements == 1
    assert record["disengagements"] == 1 and record["replans"] == 1 and record["outcome"] == "reached"
    (f,) = record["failures"]
    assert f["outcome"] == "stuck" and f["walk_index"] == 1 and f["distance_to_goal_m"] == 12.0
    assert f["lat_deg"] is None  # no GPS driver: the place is unknown, and says so


def test_a_loss_the_replan_recovers_is_no_disengagement(tmp_path):
    mission, nav, record = run_route(tmp_path, ["lost", "reached"])
    assert mission.state == "reached" and mission.disengagements == 0
    assert [f["outcome"] for f in record["failures"]] == ["lost"]


@pytest.mark.parametrize("max_replans, walks", [(2, 3), (0, 1)])
def test_an_unrecovered_loss_counts_once_after_max_replans(tmp_path, max_replans, walks):
    mission, nav, record = run_route(tmp_path, ["lost"] * 3, max_replans=max_replans)
    assert nav.calls == walks and mission.state == "lost" and mission.disengagements == 1
    assert record["replans"] == max_replans and len(record["failures"]) == walks


def test_max_replans_is_a_checked_config_key():
    from robot_app.config import ConfigError, config_from_mapping

    assert config_from_mapping({"mission": {"max_replans": 0}}, origin="cfg.toml").mission.max_replans == 0
    with pytest.raises(ConfigError, match=r"\[mission\] max_replans"):
        config_from_mapping({"mission": {"max_replans": -1}}, origin="cfg.toml")


def test_every_walk_outcome_is_a_mission_state():
    """The route job ends in the walk's outcome: each of the policy's outcomes is one of its states."""
    from robot_app.jobs.mission import FAILED_OUTCOMES, MissionState
    from robot_app.nav.policy import Outcome

    assert {MissionState(o.value) for o in Outcome} <= set(MissionState)
    assert FAILED_OUTCOMES == {o.value for o in Outcome} - {"reached"}
