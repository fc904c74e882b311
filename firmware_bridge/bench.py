"""Serial benchmarks (``robot-app bench serial``): decoder throughput, host -> MCU command latency
over a pty, and the 50 Hz drive loop's period jitter while the decoders run.

All figures come from this machine's monotonic clock; the simulator runs in the same process and
event loop as the driver, so latency includes one event-loop wake-up on each side (an upper bound
for a separate MCU's USB link, which adds its own USB frame latency instead).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from firmware_bridge import ros1
from firmware_bridge.nmea import NmeaDecoder
from firmware_bridge.rosserial import FrameDecoder, encode_frame

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


async def drive_link_bench(robot, *, seconds: float = 5.0, directory: str | None = None) -> dict:
    """Run the Jackal driver against the simulated MCU (Feedback/IMU 50 Hz, NMEA 10 Hz) plus a GPS
    receiver simulator at 20 lines/s, commanding a slow turn; return latency and jitter stats (ms).

    Jitter is each drive tick's lateness against its fixed schedule (t0 + k / rate), so one late
    tick counts once; ``commands_matched`` checks that the k-th frame received is the k-th sent.
    """
    from firmware_bridge.base import JackalBase
    from firmware_bridge.gps import NmeaGps
    from firmware_bridge.sim.devices import SimulatedDevices

    with tempfile.TemporaryDirectory(dir=directory) as d:
        async with SimulatedDevices(Path(d), imu=False) as sims:
            async with JackalBase(sims.ports["jackal"], robot=robot) as base, NmeaGps(sims.ports["gps"]) as gps:
                await base.wait_connected(5.0)
                await gps.wait_connected(5.0)
                base.sent_log.clear()
                base.tick_lateness_s.clear()
                sims.mcu.drive_log.clear()
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    base.set_velocity(0.3, 0.2)
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.1)
                sent, recv = list(base.sent_log), list(sims.mcu.drive_log)
                late_ms = [x * 1e3 for x in base.tick_lateness_s]
                frames = base.frames.stats.frames
                nmea_lines = gps.decoder.stats.lines + base.nmea.stats.lines
    n = min(len(sent), len(recv))
    matched = sum(1 for i in range(n) if sent[i][1].serialize() == recv[i][1].serialize())
    lat_ms = [(recv[i][0] - sent[i][0]) * 1e3 for i in range(n)]
    jitter_ms = [abs(x) for x in late_ms]  # each tick's lateness against its fixed 50 Hz schedule
    return {
        "seconds": seconds, "commands_sent": len(sent), "commands_received": len(recv),
        "commands_matched": matched, "frames_decoded": frames, "nmea_lines_decoded": nmea_lines,
        "latency_ms_p50": percentile(lat_ms, 50), "latency_ms_p99": percentile(lat_ms, 99),
        "latency_ms_max": max(lat_ms, default=float("nan")),
        "drive_period_ms_mean": statistics.fmean([(b[0] - a[0]) * 1e3 for a, b in zip(sent, sent[1:])] or [float("nan")]),
        "drive_jitter_ms_p50": percentile(jitter_ms, 50), "drive_jitter_ms_p99": percentile(jitter_ms, 99),
        "drive_jitter_ms_max": max(jitter_ms, default=float("nan")),
    }
