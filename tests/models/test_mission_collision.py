"""A route job that drives into an obstacle in the simulated world: the policy's collision rule (the
wheels blocked while commanded) backs the robot off and ends the walk collided; the route job counts it as
a disengagement, writes it to the run record with the place, and re-plans from the fix like a loss.

The app runs on the simulated Jackal whose plant is a world with a parked van (a box) across the path the
map was recorded on (``robot-app map build`` with the tiny CLIP export, GPS mode: no camera)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path

from firmware_bridge.sim.devices import SimulatedDevices
from robot_app.cli import main
from robot_app.config import Config
from robot_app.mapping.synthetic_logs import write_synthetic_log
from robot_app.service.app import App
from tests.robot_app.test_record_a_map import ORIGIN


def test_a_collision_ends_the_walk_collided_counts_and_is_replanned(tmp_path, clip_export_dir, capsys):
    from robot_app.sim.plant import WorldPlant
    from robot_app.sim.world import world_from_mapping

    models = tmp_path / "models"
    shutil.copytree(clip_export_dir, models)
    write_synthetic_log(tmp_path / "log", [(0, 0), (30, 0)], seed=5, anchor=ORIGIN)  # 30 m east
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models}"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")]) == 0
    capsys.readouterr()
    # parked across the recorded path since the map was made: 2 m long, 6 m wide, 12-14 m east
    world = world_from_mapping({
        "world": {"name": "van", "extent_m": [100.0, 100.0], "anchor_latlon": list(ORIGIN), "start": [0, 0, 0]},
        "paths": [{"name": "p", "points": [[-5.0, 0.0], [40.0, 0.0]]}],
        "buildings": [{"name": "van", "category": "grey building", "center": [13.0, 0.0], "size_m": [2.0, 6.0, 2.0]}],
    }, origin="van")
    plant = WorldPlant(world, start=(0.0, 0.0, 0.0))
    (tmp_path / "ports").mkdir()
    base = Config()

    async def main_():
        async with SimulatedDevices(tmp_path / "ports", plant=plant, gps=False, imu=False,
                                    origin_latlon=ORIGIN) as sim:
            plant.attach(sim, gps_noise_m=0.2)
            cfg = dataclasses.replace(
                base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
                paths=dataclasses.replace(base.paths, models_dir=str(models), logs_dir=str(tmp_path / "logs")),
                mission=dataclasses.replace(base.mission, map_file=str(tmp_path / "m.map"), max_replans=1),
                ui=dataclasses.replace(base.ui, enabled=False))
            app = App(cfg)
            task = asyncio.ensure_future(app.run())
            try:
                await app.base.wait_connected(10.0)
                for _ in range(100):  # the base simulator's first fix
                    if app.status_dict()["gps"]:
                        break
                    await asyncio.sleep(0.1)
                mission = app.mission
                with mission.open_map() as m:
                    n = len(m.nodes)
                plan = await mission.plan_route(None, goal=n - 1)
                await mission.go(plan["id"])
                for _ in range(900):
                    if mission.state != "running":
                        break
                    await asyncio.sleep(0.1)
                return mission.status(), plant.state()
            finally:
                app.request_stop()
                await asyncio.wait_for(task, 10.0)

    status, st = asyncio.run(main_())
    assert status["state"] == "collided", status
    progress = status["progress"]
    assert progress["mode"] == "gps" and progress["replans"] == 1  # re-planned once ([mission] max_replans)
    # each collision a disengagement: the first, and the re-planned walk's
    assert status["disengagements"] == 2
    fails = progress["failures"]
    assert [f["outcome"] for f in fails] == ["collided", "collided"]
    for f in fails:  # where: a fix just before the van (lat/lon), and the walk index reached
        assert f["lat_deg"] is not None and f["lon_deg"] is not None and f["walk_index"] >= 0
    assert plant.collisions and all(11.0 < c.x_m < 12.2 for c in plant.collisions)
    assert 10.0 < st.x_m < 11.9  # backed off the van and stopped
    record = json.loads(Path(progress["record"]).read_text())
    assert record["outcome"] == "collided" and record["disengagements"] == 2 and record["replans"] == 1
    assert [f["outcome"] for f in record["failures"]] == ["collided", "collided"]
    assert all("blocked" in f["why"] and "backed off" in f["why"] for f in record["failures"])  # the cause
    assert record["trace"] and {"t_s", "driver", "walk_index", "v_mps"} <= set(record["trace"][0])
    assert any(row["driver"] == "back" for row in record["trace"])
