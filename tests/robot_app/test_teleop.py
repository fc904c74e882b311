"""Gamepad teleop: event mapping on real evdev InputEvents, takeover on the simulated robot, a uinput pad."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time

import numpy as np
import pytest

evdev = pytest.importorskip("evdev")
from evdev import InputEvent, ecodes  # noqa: E402

from firmware_bridge.sim.devices import SimulatedDevices  # noqa: E402
from robot_app.commands import CommandMux, Source  # noqa: E402
from robot_app.config import Config, ConfigError, config_from_mapping, nav_options  # noqa: E402
from robot_app.mapping.synthetic_logs import enu_to_latlon  # noqa: E402
from robot_app.nav.gps import GpsNavigator  # noqa: E402
from robot_app.service.app import App  # noqa: E402
from robot_app.service.teleop import AxisRange, GamepadMapper, TeleopComponent  # noqa: E402

ORIGIN = (52.5148, 13.4643)
PS4 = {ecodes.ABS_X: AxisRange(0, 255), ecodes.ABS_Y: AxisRange(0, 255), ecodes.ABS_RX: AxisRange(0, 255),
       ecodes.ABS_RY: AxisRange(0, 255)}


def key(code, down):
    return InputEvent(0, 0, ecodes.EV_KEY, code, 1 if down else 0)


def axis(code, value):
    return InputEvent(0, 0, ecodes.EV_ABS, code, value)


def mapper(**teleop):
    cfg = Config()
    return GamepadMapper(dataclasses.replace(cfg.teleop, **teleop), cfg.robot, PS4)


def feed(m, *events):
    for e in events:
        m.on_event(e)
    return m.command()


def test_default_codes_are_the_ps4_pad():
    t = Config().teleop
    assert (t.deadman_button, t.turbo_button) == (ecodes.BTN_TL, ecodes.BTN_TR)
    assert (t.linear_axis, t.angular_axis) == (ecodes.ABS_Y, ecodes.ABS_RX)


def test_no_deadman_no_motion():
    m = mapper()
    c = feed(m, axis(ecodes.ABS_Y, 0), axis(ecodes.ABS_RX, 255))
    assert not c.active and (c.v_mps, c.omega_radps) == (0.0, 0.0)


def test_sticks_map_to_velocity_within_limits():
    m = mapper(max_v_mps=0.5, max_omega_radps=1.0)
    c = feed(m, key(ecodes.BTN_TL, True), axis(ecodes.ABS_Y, 0))  # left stick fully up
    assert c.active and c.v_mps == pytest.approx(0.5, abs=0.01) and c.omega_radps == 0.0
    c = feed(m, axis(ecodes.ABS_RX, 255))  # right stick fully right: turn clockwise
    assert c.omega_radps == pytest.approx(-1.0, abs=0.01)
    c = feed(m, axis(ecodes.ABS_Y, 255))  # stick down: reverse
    assert c.v_mps == pytest.approx(-0.5, abs=0.01)
    c = feed(m, axis(ecodes.ABS_Y, 133), axis(ecodes.ABS_RX, 120))  # inside the dead zone
    assert c.active and (c.v_mps, c.omega_radps) == (0.0, 0.0)
    c = feed(m, axis(ecodes.ABS_Y, 64))  # half up: continuous past the dead zone
    assert 0.0 < c.v_mps < 0.5


def test_turbo_is_clipped_to_the_robot_limits():
    base = Config()
    m = GamepadMapper(dataclasses.replace(base.teleop, turbo_v_mps=5.0, turbo_omega_radps=10.0),
                      dataclasses.replace(base.robot, max_v_mps=1.2, max_omega_radps=2.5), PS4)
    c = feed(m, key(ecodes.BTN_TL, True), key(ecodes.BTN_TR, True), axis(ecodes.ABS_Y, 0), axis(ecodes.ABS_RX, 0))
    assert c.v_mps == pytest.approx(1.2, abs=0.01) and c.omega_radps == pytest.approx(2.5, abs=0.02)


def test_releasing_the_deadman_deactivates():
    m = mapper()
    feed(m, key(ecodes.BTN_TL, True), axis(ecodes.ABS_Y, 0))
    c = feed(m, key(ecodes.BTN_TL, False))
    assert not c.active and c.v_mps == 0.0


@pytest.mark.parametrize("table, key_name", [({"deadzone": 0.95}, "deadzone"), ({"max_v_mps": -0.1}, "max_v_mps"),
                                             ({"deadman_button": "L1"}, "deadman_button"),
                                             ({"device": 3}, "device"), ({"rate_hz": 0}, "rate_hz")])
def test_bad_teleop_config_is_refused(table, key_name):
    with pytest.raises(ConfigError, match=rf"\[teleop\] {key_name}"):
        config_from_mapping({"teleop": table}, origin="cfg.toml")


def test_missing_pad_is_waited_for_not_a_fault(tmp_path):
    """An absent pad must not fail the component (that would stop the robot during autonomy)."""
    cfg = Config()
    app = type("A", (), {})()
    app.config = dataclasses.replace(cfg, teleop=dataclasses.replace(cfg.teleop, device=str(tmp_path / "nope")))
    app.commands = CommandMux({Source.AUTONOMY: 0.25, Source.TELEOP: 0.25})
    app.commands.submit(Source.AUTONOMY, 0.5, 0.0, sender="navigator")
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(TeleopComponent(app.config, app.commands).run(), 1.2))
    assert not app.commands.live(Source.TELEOP)  # the absent pad never wrote its slot


def test_a_path_that_is_no_input_device_fails_the_component(tmp_path):
    cfg = Config()
    (tmp_path / "file").write_text("not a device")
    app = type("A", (), {})()
    app.config = dataclasses.replace(cfg, teleop=dataclasses.replace(cfg.teleop, device=str(tmp_path / "file")))
    with pytest.raises(OSError):
        asyncio.run(TeleopComponent(app.config, None).run())


async def _app_on_sim(tmp_path, body, **teleop):
    async with SimulatedDevices(tmp_path, gps=False, imu=False, origin_latlon=ORIGIN) as sim:
        base = Config()
        cfg = dataclasses.replace(
            base, serial=dataclasses.replace(base.serial, base_port=str(sim.ports["jackal"])),
            paths=dataclasses.replace(base.paths, models_dir=str(tmp_path / "none")),
            ui=dataclasses.replace(base.ui, enabled=False),
            teleop=dataclasses.replace(base.teleop, **teleop))
        app = App(cfg)
        task = asyncio.ensure_future(app.run())
        try:
            await app.base.wait_connected(10.0)
            return await body(app, sim)
        finally:
            app.request_stop()
            await asyncio.wait_for(task, 10.0)


def test_deadman_takes_over_a_running_route_and_release_stops(tmp_path):
    """On the simulated robot: a route is being driven; holding the deadman ends it (one disengagement)
    and drives backwards as the stick says; releasing stops the robot."""
    async def body(app, sim):
        tele = TeleopComponent(app.config, app.commands, app.mission)
        tele.mapper = GamepadMapper(app.config.teleop, app.config.robot, PS4)
        lat, lon = enu_to_latlon(np.array([(0.0, 0.0), (10.0, 0.0), (20.0, 0.0)]), anchor=ORIGIN)
        nav = GpsNavigator(app.sensors, app.commands, nav_options(app.config), max_v_mps=1.0, timeout_s=30.0)
        app.mission._nav_task = asyncio.ensure_future(nav.follow(lat, lon))
        app.mission.state = "running"
        await asyncio.sleep(2.0)
        assert app.command.sender == "navigator" and sim.plant.state().v_mps > 0.2
        tele.handle([key(ecodes.BTN_TL, True), axis(ecodes.ABS_Y, 255)])  # deadman + stick down
        assert app.command.source == "teleop" and app.command.v_mps < 0
        for _ in range(30):  # 1.5 s of pad refreshes at 20 Hz
            tele.tick()
            await asyncio.sleep(0.05)
        driving = sim.plant.state()
        # the cancelled navigator's clean-up wrote its own (autonomy) slot, never the pad's
        still_pad = app.command
        mission = dict(app.mission.status())
        tele.handle([key(ecodes.BTN_TL, False)])
        released = app.commands.live(Source.TELEOP)
        await asyncio.sleep(0.6)
        return driving, still_pad, mission, released, sim.plant.state(), app.mission._nav_task.done()

    driving, still_pad, mission, released, after, nav_done = asyncio.run(_app_on_sim(tmp_path, body))
    assert nav_done and mission["state"] == "stopped" and mission["disengagements"] == 1
    assert driving.v_mps < -0.2  # the operator reverses the robot
    assert still_pad.source == "teleop" and still_pad.v_mps < 0
    assert released is False  # the deadman released the teleop slot at once
    assert abs(after.v_mps) < 0.05


@pytest.mark.skipif(not os.access("/dev/uinput", os.W_OK),
                    reason="/dev/uinput is not available here (no uinput kernel module in this container): "
                           "the virtual-pad test runs on a machine that has it")
def test_virtual_pad_through_uinput_drives_the_simulated_robot(tmp_path):
    caps = {ecodes.EV_KEY: [ecodes.BTN_TL, ecodes.BTN_TR, ecodes.BTN_SOUTH],
            ecodes.EV_ABS: [(c, evdev.AbsInfo(128, 0, 255, 0, 0, 0))
                            for c in (ecodes.ABS_X, ecodes.ABS_Y, ecodes.ABS_RX, ecodes.ABS_RY)]}
    with evdev.UInput(caps, name="robot-app test pad") as pad:
        time.sleep(0.3)  # udev creates the event node

        async def body(app, sim):
            await asyncio.sleep(0.5)  # the app opened the pad ([teleop] device is set)
            assert app.supervisor.states["teleop"].state == "running"
            pad.write(ecodes.EV_KEY, ecodes.BTN_TL, 1)
            pad.write(ecodes.EV_ABS, ecodes.ABS_Y, 0)
            pad.syn()
            await asyncio.sleep(1.5)
            moving = sim.plant.state()
            pad.write(ecodes.EV_KEY, ecodes.BTN_TL, 0)
            pad.syn()
            await asyncio.sleep(0.6)
            return moving, sim.plant.state()

        moving, after = asyncio.run(_app_on_sim(tmp_path, body, device=pad.device.path))
    assert moving.v_mps > 0.3 and abs(after.v_mps) < 0.05


def test_a_route_started_while_the_deadman_is_held_is_taken_over_at_once():
    """Go pressed on the screen while the operator holds the deadman: the pad keeps the robot."""
    from robot_app.interfaces import Sensors
    from robot_app.jobs.mission import MissionExecutive

    async def main():
        app = type("A", (), {})()
        app.config = Config()
        app.commands = CommandMux({Source.AUTONOMY: 0.25, Source.TELEOP: 0.25})
        app.mission = MissionExecutive(app.config, Sensors(), app.commands, models=None)
        tele = TeleopComponent(app.config, app.commands, app.mission)
        tele.mapper = GamepadMapper(app.config.teleop, app.config.robot, PS4)
        tele.handle([key(ecodes.BTN_TL, True), axis(ecodes.ABS_Y, 0)])
        first = (app.mission.disengagements, app.commands.current.source)
        # Go: a route starts driving (stands in for the navigator task the executive runs)
        app.mission._nav_task = asyncio.ensure_future(asyncio.sleep(30))
        app.mission.state = "running"
        tele.tick()
        await asyncio.sleep(0)
        return first, app.mission.status(), app.mission._nav_task.cancelled(), app.commands.current

    first, status, cancelled, cmd = asyncio.run(main())
    assert first == (0, "teleop")
    assert status["state"] == "stopped" and status["disengagements"] == 1 and cancelled
    assert cmd.source == "teleop" and cmd.v_mps > 0
