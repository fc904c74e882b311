"""Microstrain MIP codec on plain bytes, and the MipImu driver <-> simulator over a virtual port."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_bridge import mip
from firmware_bridge.imu import MipImu
from firmware_bridge.readings import ImuReading
from firmware_bridge.sim.imu import MipImuSim
from firmware_bridge.sim.plant import KinematicPlant
from firmware_bridge.sim.vport import VirtualPort


def test_commands_match_the_manual_examples():
    # 3DM-GX5 DCP manual: "Ping" and "Set to Idle" example packets.
    assert mip.command(mip.CMD_PING) == bytes.fromhex("7565010202 01E0C6".replace(" ", ""))
    assert mip.command(mip.CMD_IDLE) == bytes.fromhex("756501020202E1C7")


def test_imu_packet_roundtrip_and_frame_conversion():
    wire = mip.imu_data((0.1, 0.2, -1.0), (0.01, 0.02, -0.5), (0.2, 0.0, 0.44))
    n, pkt = mip.decode_packet(wire)
    assert n == len(wire) and pkt.descriptor_set == mip.SET_IMU_DATA
    r = mip.packet_to_reading(pkt, 3.0)
    assert r.linear_acceleration_mps2 == pytest.approx((0.1 * 9.80665, -0.2 * 9.80665, 9.80665), rel=1e-6)
    assert r.angular_velocity_radps == pytest.approx((0.01, -0.02, 0.5), rel=1e-6)
    assert r.magnetic_field_t == pytest.approx((0.2e-4, 0.0, -0.44e-4), rel=1e-6)
    assert mip.ack_of(mip.decode_packet(mip.ack(6))[1]) == (mip.SET_BASE, 6, 0)
    assert mip.ack_of(pkt) is None
    fmt = mip.decode_packet(mip.imu_format(5))[1]
    assert fmt.descriptor_set == mip.SET_3DM
    assert mip.parse_imu_format(fmt.fields[0][1]) == (1, [(4, 5), (5, 5), (6, 5)])
    with pytest.raises(ValueError):
        mip.parse_imu_format(b"\x01\x02\x04\x00")
    with pytest.raises(ValueError):
        mip.imu_format(0)


def _stream():
    pkts = [mip.command(mip.CMD_RESUME), mip.imu_data((0, 0, -1), (0, 0, 0), None), mip.ack(2, 3),
            mip.imu_data(None, (1.0, 2.0, 3.0), (0.1, 0.2, 0.3))]
    return pkts, b"".join(pkts)


def test_every_split_point_and_every_bit_flip():
    pkts, wire = _stream()
    expected = [mip.decode_packet(p)[1] for p in pkts]
    for cut in range(len(wire) + 1):
        dec = mip.PacketDecoder()
        assert dec.feed(wire[:cut]) + dec.feed(wire[cut:]) == expected
    marker = mip.command(mip.CMD_PING)
    for i in range(len(wire)):
        for bit in range(8):
            bad = bytearray(wire)
            bad[i] ^= 1 << bit
            dec = mip.PacketDecoder()
            got = dec.feed(bytes(bad)) + dec.feed(b"\x00" * 260 + marker)
            assert got[-1] == mip.decode_packet(marker)[1], (i, bit)
            assert all(p in expected or p == got[-1] for p in got)


def test_bad_field_structure_and_sizes_never_raise():
    body = mip.SYNC + bytes((0x80, 3, 9, 4, 0))   # field length 9 runs past the payload
    wire = body + bytes(mip.fletcher16(body))
    dec = mip.PacketDecoder()
    assert dec.feed(wire) == [] and dec.stats.errors == {"field_structure": 1}
    short = mip.encode_packet(0x80, [(mip.IMU_GYRO, b"\x00" * 8)])
    assert mip.packet_to_reading(mip.decode_packet(short)[1], 0.0) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_fuzz(chunks):
    dec = mip.PacketDecoder()
    for c in chunks:
        for p in dec.feed(c):
            mip.packet_to_reading(p, 0.0)
            mip.ack_of(p)
        assert dec.buffered <= 262 + len(c)


def test_driver_and_simulator(tmp_path, arun):
    async def body():
        plant = KinematicPlant(tau_s=0.0)
        plant.step(5.0, 6.0, 0.02)
        port = VirtualPort(tmp_path / "imu")
        async with MipImuSim(port, plant, rate_hz=10.0) as sim:
            async with MipImu(port.path, rate_hz=200.0, reconnect_min_s=0.05) as imu:
                await imu.wait_connected(2.0)
                assert sim.rate_hz == pytest.approx(200.0)  # the driver configured the stream
                assert sim.commands[:3] == [mip.CMD_IDLE, mip.CMD_IMU_FORMAT, mip.CMD_RESUME]
                r = await imu.recv(timeout_s=1.0)
                assert isinstance(r, ImuReading) and r.source == "mip"
                assert r.angular_velocity_radps[2] == pytest.approx(plant.state().omega_radps, rel=1e-5)
                assert r.linear_acceleration_mps2[2] == pytest.approx(9.80665)
                # a stalled device is dropped and the session comes back
                sim.stalled = True
                end = time.monotonic() + 3.0
                while imu.connected and time.monotonic() < end:
                    await asyncio.sleep(0.02)
                assert not imu.connected
                sim.stalled = False
                await imu.wait_connected(3.0)
            assert sim.commands[-1] == mip.CMD_IDLE and not sim.streaming
    arun(body)


def test_nack_is_a_protocol_error(tmp_path, arun):
    from firmware_bridge.errors import ProtocolMismatch

    class PickySim(MipImuSim):
        async def _on_command(self, dset, desc, data):
            if dset == mip.SET_3DM:
                self.commands.append(desc)
                await self.port.write(mip.ack(desc, 0x03, descriptor_set=dset))
            else:
                await super()._on_command(dset, desc, data)

    async def body():
        port = VirtualPort(tmp_path / "imu")
        async with PickySim(port, KinematicPlant()):
            async with MipImu(port.path, reconnect_min_s=0.05, reconnect_max_s=0.1) as imu:
                with pytest.raises(ProtocolMismatch, match="IMU message format"):
                    await imu.recv(timeout_s=2.0)
                assert not imu.connected
    arun(body)
