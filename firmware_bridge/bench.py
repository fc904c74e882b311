"""Serial benchmarks (``robot-app bench serial``): decoder throughput, host -> MCU command latency
over a pty, and the 50 Hz drive loop's period jitter while the decoders run.

All figures come from this machine's monotonic clock. By default the simulators run in a child
process, like a real MCU on the other end of the wire; a real USB link adds its own frame latency
(1 ms full-speed USB frames) that a pty does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

from core.machine import load_average_1m
from firmware_bridge import ros1
from firmware_bridge.base import JackalBase
from firmware_bridge.errors import BridgeError
from firmware_bridge.gps import NmeaGps
from firmware_bridge.nmea import NmeaDecoder
from firmware_bridge.rosserial import FrameDecoder, encode_frame
from firmware_bridge.sim.devices import SimulatedDevices

__all__ = ["decoder_throughput", "drive_link_bench", "percentile"]


def percentile(values, q: float) -> float:
    """``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def decoder_throughput(*, seconds: float = 1.0, nmea_lines: list | None = None) -> dict:
    """Frames/s through the rosserial deframer + Feedback deserialiser, and NMEA lines/s through
    :class:`NmeaDecoder` (``nmea_lines``: e.g. a real log; default a GGA/RMC/GST mix)."""
    fb = ros1.Feedback(ros1.Header(1, 2, 3, "base_link"), (ros1.DriveFeedback(), ros1.DriveFeedback()))
    chunk = encode_frame(101, fb.serialize()) * 100
    dec = FrameDecoder()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for f in dec.feed(chunk):
            ros1.Feedback.deserialize(f.payload)
            n += 1
    frames_per_s = n / (time.perf_counter() - t0)
    lines = nmea_lines or [b"$GPRMC,113258,A,3238.9148,N,10822.4466,W,005.3,247.1,181022,009.3,E*6B",
                           b"$GPGGA,113258,3238.9148,N,10822.4466,W,2,08,1.1,1577.4,M,-24.6,M,,*4D",
                           b"$GNGST,181141.00,46,,,,4.7,1.9,5.3*4A"]
    blob = b"\r\n".join(lines) + b"\r\n"
    nd = NmeaDecoder(log_interval_s=1e9)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        nd.feed(blob, 0.0)
        n += len(lines)
    return {"rosserial_feedback_frames_per_s": frames_per_s, "nmea_lines_per_s": n / (time.perf_counter() - t0)}


async def drive_link_bench(robot, *, seconds: float = 5.0, separate_process: bool = True) -> dict:
    """Run the Jackal driver against the simulated MCU (Feedback/IMU 50 Hz, NMEA 10 Hz) plus a GPS
    receiver simulator at 20 lines/s, commanding a slow turn; return latency and jitter stats (ms).

    ``separate_process`` (default) runs the simulators in a child process (``robot-app sim devices``),
    as a real MCU would be: latency is then pty + both processes' wake-ups, measured on the shared
    monotonic clock (CLOCK_MONOTONIC is system-wide on Linux). Otherwise they share this event loop.
    Jitter is each drive tick's lateness against its fixed schedule (t0 + k / rate), so one late
    tick counts once; ``commands_matched`` checks that the k-th frame received is the k-th sent.

    Raises
    ------
    BridgeError
        If the simulator or the drivers do not come up.
    """
    if not 0 < seconds <= 120:
        raise ValueError(f"seconds must be in (0, 120], got {seconds}")
    with tempfile.TemporaryDirectory() as d:
        async with contextlib.AsyncExitStack() as stack:
            if separate_process:
                drive_file = Path(d) / "drive.jsonl"
                ports = await stack.enter_async_context(_sim_process(Path(d), drive_file, seconds + 60))
            else:
                sims = await stack.enter_async_context(SimulatedDevices(Path(d), imu=False))
                ports = sims.ports
            base = await stack.enter_async_context(JackalBase(ports["jackal"], robot=robot))
            gps = await stack.enter_async_context(NmeaGps(ports["gps"]))
            await base.wait_connected(10.0)
            await gps.wait_connected(10.0)
            await asyncio.sleep(0.2)
            base.tick_lateness_s.clear()
            t_start = time.monotonic()
            end = t_start + seconds
            while time.monotonic() < end:
                base.set_velocity(0.3, 0.2)
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)
            sent = list(base.sent_log)
            late_ms = [x * 1e3 for x in base.tick_lateness_s]
            frames = base.frames.stats.frames
            nmea_lines = gps.decoder.stats.lines + base.nmea.stats.lines
            if separate_process:
                await asyncio.sleep(0.05)
                recv = [(r["t_mono_s"], ros1.Drive(r["mode"], r["left"], r["right"]))
                        for r in map(json.loads, drive_file.read_text().splitlines()[:len(sent)])]
            else:
                recv = list(sims.mcu.drive_log)
    n = min(len(sent), len(recv))
    pairs = [(sent[i], recv[i]) for i in range(n) if sent[i][0] >= t_start]
    matched = sum(1 for s_, r_ in pairs if s_[1].serialize() == r_[1].serialize())
    lat_ms = [(r_[0] - s_[0]) * 1e3 for s_, r_ in pairs]
    jitter_ms = [abs(x) for x in late_ms]
    return {"loadavg_1m": load_average_1m(),
        "seconds": seconds, "simulator": "separate process" if separate_process else "same event loop",
        "commands_sent": len(pairs), "commands_matched": matched, "frames_decoded": frames,
        "nmea_lines_decoded": nmea_lines,
        "latency_ms_p50": percentile(lat_ms, 50), "latency_ms_p99": percentile(lat_ms, 99),
        "latency_ms_min": min(lat_ms, default=float("nan")), "latency_ms_max": max(lat_ms, default=float("nan")),
        "drive_jitter_ms_p50": percentile(jitter_ms, 50), "drive_jitter_ms_p99": percentile(jitter_ms, 99),
        "drive_jitter_ms_max": max(jitter_ms, default=float("nan")),
    }



@contextlib.asynccontextmanager
async def _sim_process(directory: Path, drive_file: Path, duration_s: float):
    """``robot-app sim devices`` in a child process; yields its port names."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "robot_app", "sim", "devices", "--dir", str(directory), "--json", "--no-imu",
        "--duration", str(duration_s), "--drive-log", str(drive_file),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 30.0)
            ports = json.loads(line)
        except (asyncio.TimeoutError, ValueError) as exc:
            raise BridgeError(f"the simulator process did not start: {exc!r}") from exc
        yield ports
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
