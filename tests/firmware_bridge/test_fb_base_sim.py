"""JackalBase driver <-> simulated MCU over real virtual serial ports (pty pairs)."""

from __future__ import annotations

import asyncio
import time

import pytest

from firmware_bridge import ros1
from firmware_bridge.base import JackalBase
from firmware_bridge.errors import BridgeTimeout, EStopLatched, ProtocolMismatch
from firmware_bridge.readings import BaseStatus, GpsFix, GpsNoFix, ImuReading, WheelFeedback
from firmware_bridge.rosserial import FrameDecoder, encode_frame
from firmware_bridge.sim.mcu import PUBLISHERS, JackalMcuSim
from firmware_bridge.sim.plant import KinematicPlant
from firmware_bridge.sim.vport import VirtualPort
from robot_app.config import RobotConfig

ROBOT = RobotConfig()


def _pair(tmp_path, **sim_kwargs):
    port = VirtualPort(tmp_path / "jackal")
    sim = JackalMcuSim(port, KinematicPlant(), **sim_kwargs)
    drv = JackalBase(str(tmp_path / "jackal"), robot=ROBOT, handshake_timeout_s=1.0,
                     reconnect_min_s=0.05, reconnect_max_s=0.2)
    return sim, drv


async def _wait_for(pred, timeout_s=3.0):
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_handshake_readings_and_shutdown(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim:
            async with drv:
                await drv.wait_connected(3.0)
                assert drv.topics["subscribers"]["cmd_drive"] == 105
                kinds = set()
                while len(kinds) < 4:
                    kinds.add(type(await drv.recv(timeout_s=2.0)))
                assert {WheelFeedback, ImuReading, GpsFix} <= kinds
                await _wait_for(lambda: drv.latest(BaseStatus) is not None, 2.0)
                st = drv.latest(BaseStatus)
                assert st.hardware_id == "jackal-sim" and st.battery_v == pytest.approx(26.5)
                r = await drv.recv(timeout_s=1.0)
                assert r.t_mono_s <= time.monotonic()
            # close(): zero velocity, then MODE_NONE, then tx-stop reached the MCU
            await _wait_for(lambda: sim.tx_stops == 1, 1.0)
            assert sim.drive_log[-1][1].mode == ros1.Drive.MODE_NONE
            last_velocity = sim.drive_log[-2][1]
            assert last_velocity.mode == ros1.Drive.MODE_VELOCITY and (last_velocity.left, last_velocity.right) == (
                0.0,
                0.0,
            )
            assert not sim.configured
    arun(body)


def test_drive_command_reaches_wheels_and_watchdog_stops(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            t_end = time.monotonic() + 0.5
            while time.monotonic() < t_end:
                drv.set_velocity(0.5, 0.2)
                await asyncio.sleep(0.05)
            l, r = sim.wheel_cmd
            assert sim.drive_mode == ros1.Drive.MODE_VELOCITY
            assert l == pytest.approx((0.5 - 0.2 * ROBOT.wheel_separation_m / 2) / ROBOT.wheel_radius_m, rel=1e-5)
            assert r == pytest.approx((0.5 + 0.2 * ROBOT.wheel_separation_m / 2) / ROBOT.wheel_radius_m, rel=1e-5)
            await _wait_for(lambda: abs(sim.plant.state().v_mps - 0.5) < 0.01, 2.0)
            fb = drv.latest(WheelFeedback, max_age_s=0.2)
            assert fb.left.velocity_radps == pytest.approx(l, rel=0.05)
            # silence: the host watchdog sends zero on its own once the command is older than cmd_timeout_s,
            # not before (how soon after is a benchmark: `robot-app bench stale-stop`; under load the tick is
            # late, so no wall-clock bound here beyond "it stops")
            t_last = time.monotonic()
            drv.set_velocity(0.5, 0.2)
            await _wait_for(lambda: sim.drive_log[-1][1].left == 0.0 and sim.drive_log[-1][1].right == 0.0, 3.0)
            after = [(t, m) for t, m in drv.sent_log if t > t_last]
            k = next(i for i, (_t, m) in enumerate(after) if m.left == 0.0 and m.right == 0.0)
            assert after[k][0] - t_last >= ROBOT.cmd_timeout_s - 1e-3  # not early
            assert all(m.left != 0.0 for _t, m in after[:k])  # full speed until then: cut at once, not ramped
    arun(body)


def test_speed_and_acceleration_limits(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            t0 = time.monotonic()
            for _ in range(20):
                drv.set_velocity(10.0, -10.0)
                await asyncio.sleep(0.02)
            sent = [(t, m) for t, m in sim.drive_log if t > t0]
            # never above the speed limits (wheel rad/s of max_v and max_omega)
            lim = (ROBOT.max_v_mps + ROBOT.max_omega_radps * ROBOT.wheel_separation_m / 2) / ROBOT.wheel_radius_m
            assert max(abs(m.left) for _, m in sent) <= lim + 1e-3
            # the commands ramp: between two frames the speed changes by at most max_accel x the time between
            # them (the limiter steps on the measured tick interval, so a late tick under load takes a larger,
            # still bounded, step)
            log = list(drv.sent_log)
            before = [i for i, (t, _m) in enumerate(log) if t <= t0]
            # standing before the first command: the last frame sent before it, else t0 itself (the drive
            # loop had not ticked yet: its first step is measured from a time after t0)
            v = [(0.0, log[before[-1]][0] if before else t0)]
            v += [((m.left + m.right) / 2 * ROBOT.wheel_radius_m, t) for t, m in log if t > t0]
            assert v[1][0] > 0.0
            for (va, ta), (vb, tb) in zip(v, v[1:]):
                assert abs(vb - va) <= ROBOT.max_accel_mps2 * (tb - ta) * 1.2 + 0.02, (va, vb, tb - ta)
            with pytest.raises(ValueError):
                drv.set_velocity(float("nan"), 0.0)
    arun(body)


def test_estop_latch_software_and_hardware(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            drv.set_velocity(1.0, 0.0)
            await asyncio.sleep(0.1)
            drv.estop()
            t_stop = time.monotonic()
            with pytest.raises(EStopLatched):
                drv.set_velocity(1.0, 0.0)
            await _wait_for(lambda: any(t > t_stop and m.left == 0.0 for t, m in sim.drive_log), 0.5)
            drv.reset_estop()
            drv.set_velocity(0.2, 0.0)
            # the hardware stop loop opens: the driver latches on the MCU's status
            sim.estop_engaged = True
            await _wait_for(lambda: drv.estop_latched, 2.5)
            with pytest.raises(EStopLatched, match="still engaged"):
                drv.reset_estop()
            sim.estop_engaged = False
            await _wait_for(lambda: not drv.latest(BaseStatus).estop_stopped, 2.5)
            drv.reset_estop()
            drv.set_velocity(0.2, 0.0)
    arun(body)


def test_reconnect_after_port_vanishes_and_returns(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            sim.unplug()
            await _wait_for(lambda: not drv.connected, 2.0)
            await asyncio.sleep(0.3)  # a few failed reopen attempts with backoff
            sim.replug()
            await drv.wait_connected(3.0)
            assert drv.sessions >= 2 and sim.handshakes >= 2
            await drv.recv(timeout_s=1.0)
    arun(body)


def test_stalled_device_is_dropped_and_recovered(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            sim.stalled = True
            await _wait_for(lambda: not drv.connected, 3.0)
            sim.stalled = False
            await drv.wait_connected(4.0)
            assert drv.sessions >= 2
    arun(body)


def test_faults_garbage_drops_and_noise_do_not_break_the_link(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path, seed=3)
        async with sim, drv:
            await drv.wait_connected(3.0)
            sim.drop_probability, sim.noise_probability = 0.2, 0.002
            await sim.inject_garbage(500)
            n0 = drv.frames.stats.frames
            await asyncio.sleep(1.0)
            assert drv.frames.stats.frames - n0 > 30
            assert drv.frames.stats.dropped_bytes >= 500
            assert drv.connected
    arun(body)


def test_gps_dropout_and_recovery_over_mcu(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            await _wait_for(lambda: drv.latest(GpsFix, max_age_s=0.5) is not None)
            sim.gps_dropout = True
            await _wait_for(lambda: drv.latest(GpsFix, max_age_s=0.5) is None, 2.0)
            assert drv.latest(GpsNoFix, max_age_s=0.5) is not None
            sim.gps_dropout = False
            await _wait_for(lambda: drv.latest(GpsFix, max_age_s=0.5) is not None, 2.0)
    arun(body)


def test_md5_mismatch_is_an_error_naming_the_topic(tmp_path, arun):
    class WrongFeedback(ros1.Feedback):
        MD5 = "0" * 32

    async def body():
        pubs = tuple((i, n, WrongFeedback if n == "feedback" else c) for i, n, c in PUBLISHERS)
        sim, drv = _pair(tmp_path, publishers=pubs)
        async with sim, drv:
            with pytest.raises(ProtocolMismatch, match="'feedback'"):
                await drv.recv(timeout_s=2.0)
            with pytest.raises(BridgeTimeout):
                await drv.wait_connected(0.3)
    arun(body)


def test_missing_port_keeps_retrying_then_times_out(tmp_path, arun):
    async def body():
        drv = JackalBase(str(tmp_path / "nothing"), robot=ROBOT, reconnect_min_s=0.05, reconnect_max_s=0.1)
        async with drv:
            with pytest.raises(BridgeTimeout, match="cannot open"):
                await drv.wait_connected(0.3)
    arun(body)


def test_mcu_reset_to_unconfigured_is_renegotiated(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        drv.handshake_timeout_s = 5.0  # time requests (every 2.5 s) keep the link itself alive
        async with sim, drv:
            await drv.wait_connected(3.0)
            n = sim.handshakes
            sim.configured = False  # firmware reset: silent except for time requests
            await _wait_for(lambda: sim.handshakes > n and sim.configured, 3.0)
            await _wait_for(lambda: drv.latest(WheelFeedback, max_age_s=0.1) is not None, 1.0)
            assert drv.connected and drv.sessions == 1
    arun(body)


def test_imu_readings_carry_gyro_accel_and_the_latest_mag(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            await asyncio.sleep(0.2)
            r = drv.latest(ImuReading, max_age_s=0.1)
            assert r.angular_velocity_radps is not None and r.linear_acceleration_mps2[2] == pytest.approx(9.80665)
            assert r.magnetic_field_t is not None and r.magnetic_field_t[2] == pytest.approx(-4.4e-5)
            assert r.orientation_xyzw is None  # imu/data_raw: orientation covariance -1 = unknown
    arun(body)


class _Wire:
    """A transport that keeps every write in order: the bytes the port would carry."""

    def __init__(self):
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data) -> None:
        self.writes.append(bytes(data))


def _drives(chunks) -> list:
    """The ``cmd_drive`` (topic 105) messages in ``chunks``, in order."""
    dec = FrameDecoder()
    return [ros1.Drive.deserialize(f.payload) for c in chunks for f in dec.feed(c) if f.topic_id == 105]


def _wired_base():
    """A JackalBase whose link is up on a recording wire (``cmd_drive`` on 105, ``status`` on 100) and whose
    drive loop never runs: every drive tick below is called by hand, so a frame that appears without one
    was written by the call itself."""
    drv = JackalBase("inproc://never-opened", robot=ROBOT)
    drv._transport = wire = _Wire()
    drv._subs = {"cmd_drive": 105}
    drv._pubs = {100: ("status", ros1.Status)}
    drv._announced = {100}
    drv.set_velocity(1.0, 0.0)
    t_cmd = drv._cmd[2]
    for _ in range(5):  # drive ticks, on the command's own clock (never stale)
        drv._send_drive(t_cmd, 1.0 / ROBOT.control_rate_hz)
    assert _drives(wire.writes)[-1].left > 0.0  # driving
    return drv, wire, t_cmd


def _is_zero(m) -> bool:
    return m.mode == ros1.Drive.MODE_VELOCITY and (m.left, m.right) == (0.0, 0.0)


def test_estop_writes_zero_from_the_call_not_at_the_next_drive_tick():
    drv, wire, t_cmd = _wired_base()
    n = len(wire.writes)
    drv.estop("test STOP")
    after = _drives(wire.writes[n:])
    assert len(after) == 1 and _is_zero(after[0])  # on the wire before estop() returned, no tick between
    assert drv.estop_latched and _is_zero(drv.last_drive) and _is_zero(drv.sent_log[-1][1])
    drv._send_drive(t_cmd, 1.0 / ROBOT.control_rate_hz)  # the ticks after it keep sending zero
    assert all(_is_zero(m) for m in _drives(wire.writes[n:]))


def test_hardware_estop_status_frame_writes_zero_while_it_is_handled():
    drv, wire, t_cmd = _wired_base()
    n = len(wire.writes)
    status = ros1.Status(hardware_id="jackal-sim", drivers_active=True, driver_external_stop_present=True,
                         driver_external_stop_stopped=True, measured_battery=26.5)
    drv._on_bytes(encode_frame(100, status.serialize()), t_cmd)  # the MCU's Status: external stop loop open
    after = _drives(wire.writes[n:])
    assert len(after) == 1 and _is_zero(after[0])
    assert drv.estop_latched and drv.latest(BaseStatus).estop_stopped
    with pytest.raises(EStopLatched, match="still engaged"):
        drv.reset_estop()


def test_estop_without_a_link_latches_and_writes_nothing():
    drv = JackalBase("inproc://never-opened", robot=ROBOT)
    drv.estop("no link yet")  # no transport, no cmd_drive: the latch alone (ticks send zero once it is up)
    assert drv.estop_latched and drv.last_drive is None and not drv.sent_log


def test_estop_zero_reaches_the_mcu_right_after_the_last_moving_frame(tmp_path, arun):
    async def body():
        sim, drv = _pair(tmp_path)
        async with sim, drv:
            await drv.wait_connected(3.0)
            for _ in range(10):
                drv.set_velocity(1.0, 0.0)
                await asyncio.sleep(0.02)
            ticks = len(drv.tick_lateness_s)
            drv.estop("test STOP")
            assert len(drv.tick_lateness_s) == ticks  # no drive tick ran ...
            assert _is_zero(drv.sent_log[-1][1]) and drv.sent_log[-2][1].left > 0.0  # ... yet zero was written
            sent = [ros1.Drive.deserialize(m.serialize()) for _t, m in drv.sent_log]  # as float32 on the wire
            await _wait_for(lambda: len(sim.drive_log) >= len(sent), 2.0)
            got = [m for _t, m in sim.drive_log][:len(sent)]
            assert got == sent  # the MCU received every frame in the order written: the zero right after the
            #                     last moving frame, not a tick later
    arun(body)
