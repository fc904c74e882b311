"""``robot-app gps decode``: run a captured NMEA log or a live receiver through the driver's decoder."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path


def register(sub, groups) -> None:
    p = groups["gps"].add_parser(
        "decode", help="decode an NMEA log (or a serial receiver) with the driver's decoder",
        description="Decode NMEA with the same decoder the GPS driver uses and print the fixes it would "
                    "report, one per receiver epoch. Lines starting with '#' in a file are comments (gpsd log "
                    "headers).")
    p.add_argument("file", nargs="?", help="captured NMEA log ('-' = stdin)")
    p.add_argument("--port", help="read a serial receiver instead of a file (e.g. /dev/clearpath/gps)")
    p.add_argument("--baud", type=int, default=None, help="serial baud rate (default: [serial] gps_baud)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds to read from --port (default 10)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: counts per line (lines, used, ignored, bad, bad_by_reason) and "
                        "per epoch (fixes, no_fix), and the fixes")
    p.add_argument("--ignore-checksum-for", metavar="TYPES", default=None,
                   help="comma-separated sentence types whose wrong checksum is tolerated "
                        "(default: [serial] gps_ignore_checksum_for)")
    p.set_defaults(func=_decode)


def _chunks_from_file(name: str):
    from robot_app.errors import UsageError

    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise UsageError(f"{name}: cannot read the NMEA log: {exc.strerror or exc}") from exc
    yield b"\n".join(ln for ln in data.splitlines() if not ln.lstrip().startswith(b"#")) + b"\n"


def _chunks_from_port(port: str, baud: int, duration_s: float):
    import serial

    from robot_app.errors import UsageError

    try:
        ser = serial.Serial(port, baud, timeout=0.2)
    except (serial.SerialException, OSError) as exc:
        raise UsageError(f"{port}: cannot open the GPS port: {exc}") from exc
    with ser:
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            chunk = ser.read(4096)
            if chunk:
                yield chunk


def _fix_dict(fix) -> dict:
    d = dataclasses.asdict(fix)
    d["type"] = type(fix).__name__
    for k in ("utc", "utc_time"):
        if d.get(k) is not None:
            d[k] = d[k].isoformat()
    return d


def _decode(args, config) -> int:
    from firmware_bridge.nmea import NmeaDecoder
    from firmware_bridge.readings import GpsFix
    from robot_app.errors import UsageError

    if bool(args.file) == bool(args.port):
        raise UsageError("gps decode: give either a FILE or --port PORT")
    ignore = (args.ignore_checksum_for.split(",") if args.ignore_checksum_for is not None
              else config.serial.gps_ignore_checksum_for)
    dec = NmeaDecoder(ignore_checksum_for=[t.strip() for t in ignore if t.strip()],
                      max_age_s=config.serial.gps_max_age_s, log_interval_s=config.serial.bad_log_interval_s,
                      allow_dead_reckoning=config.serial.gps_allow_dead_reckoning,
                      max_sentence_chars=config.serial.gps_max_sentence_chars)
    chunks = (_chunks_from_file(args.file) if args.file
              else _chunks_from_port(args.port, args.baud or config.serial.gps_baud, args.duration))
    fixes = []

    def take(readings) -> None:
        for r in readings:
            if isinstance(r, GpsFix):
                fixes.append(r)
                if not args.json:
                    print(
                        f"{r.utc_time.isoformat() if r.utc_time else '-':>15}  {r.latitude_deg:12.7f} "
                        f"{r.longitude_deg:13.7f}  q={r.quality} "
                        f"sats={r.satellites if r.satellites is not None else '-'} "
                        f"hdop={r.hdop if r.hdop is not None else '-'} src={r.talker}{r.source}"
                    )

    for chunk in chunks:
        take(dec.feed(chunk))
    take(dec.finish())  # the last epoch (a file's end, or the end of --duration)
    stats = dec.stats.as_dict()
    if args.json:
        stats["positions"] = [_fix_dict(f) for f in fixes]
        print(json.dumps(stats, indent=1))
    else:
        print(f"lines {stats['lines']}  fixes {stats['fixes']}  no_fix {stats['no_fix']}  used {stats['used']}  "
              f"ignored {stats['ignored']}  bad {stats['bad']} {stats['bad_by_reason'] or ''}".rstrip())
    return 0
