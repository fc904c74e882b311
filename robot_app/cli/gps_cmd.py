"""``robot-app gps decode``: run a captured NMEA log or a live receiver through the driver's decoder;
``robot-app bench gpsd``: the decoder's fix epochs against gpsd's expected output on gpsd's test logs."""

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

    b = groups["bench"].add_parser(
        "gpsd", help="compare the NMEA decoder's fix epochs with gpsd's expected output on gpsd's test logs",
        description="Replay every NMEA X.log of --logs that has gpsd's expected output X.log.chk through the "
                    "driver's decoder and compare fix epochs (same UTC time of day) with gpsd's TPV reports of "
                    "mode >= 2: per log gpsd's fix epochs, ours, matched, ours that gpsd does not report "
                    "(extra), gpsd's we miss beyond the first of the stream (missed, with our reason), and the "
                    "largest distance between matched positions. Binary-protocol logs are skipped. Exits 1 "
                    "when --strict and any extra or missed epoch.")
    b.add_argument("--logs", required=True, metavar="DIR", help="directory with gpsd's X.log and X.log.chk files")
    b.add_argument("--json", action="store_true", help="print the per-log figures and the total as JSON")
    b.add_argument("--strict", action="store_true", help="exit 1 if any log has an extra or a missed epoch")
    b.add_argument("--allow-dead-reckoning", action="store_true", default=None,
                   help="report dead-reckoning fixes (default: [serial] gps_allow_dead_reckoning)")
    b.add_argument("--max-sentence-chars", type=int, default=None, metavar="N",
                   help="longest sentence accepted (default: [serial] gps_max_sentence_chars, 82)")
    b.set_defaults(func=_bench_gpsd)


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


def _bench_gpsd(args, config) -> int:
    import logging

    from firmware_bridge.gpsd_compare import compare_dir
    from robot_app.errors import UsageError

    logs = Path(args.logs)
    if not logs.is_dir():
        raise UsageError(f"--logs {args.logs}: not a directory")
    chars = args.max_sentence_chars if args.max_sentence_chars is not None else config.serial.gps_max_sentence_chars
    if not 82 <= chars <= 200:
        raise UsageError(f"--max-sentence-chars must be in 82..200, got {chars}")
    allow_dr = config.serial.gps_allow_dead_reckoning if args.allow_dead_reckoning is None else True
    nmea_log = logging.getLogger("firmware_bridge.nmea")
    level = nmea_log.level
    nmea_log.setLevel(logging.ERROR)  # the logs' bad sentences are counted in the table, not logged
    try:
        results = compare_dir(logs, allow_dead_reckoning=allow_dr, max_sentence_chars=chars,
                              ignore_checksum_for=config.serial.gps_ignore_checksum_for)
    except OSError as exc:
        raise UsageError(f"--logs {args.logs}: {exc.strerror or exc}") from exc
    finally:
        nmea_log.setLevel(level)
    if not results:
        raise UsageError(f"--logs {args.logs}: no NMEA X.log with an X.log.chk there")
    keys = ("gpsd_epochs", "ours", "matched", "extra", "missed", "missed_first", "cut_at_end")
    total = {k: sum(getattr(r, k) for r in results) for k in keys}
    dists = [r.max_distance_m for r in results if r.max_distance_m is not None]
    total["max_distance_m"] = max(dists) if dists else None
    total["logs"] = len(results)
    if args.json:
        print(json.dumps({"logs": [r.as_dict() for r in results], "total": total,
                          "decoder": {"allow_dead_reckoning": allow_dr, "max_sentence_chars": chars}}, indent=1))
    else:
        print(f"NMEA decoder vs gpsd: fix epochs per log (max_sentence_chars {chars}, "
              f"allow_dead_reckoning {str(allow_dr).lower()})")
        print(f"{'log':36s} {'gpsd':>5s} {'ours':>5s} {'match':>5s} {'extra':>5s} {'miss':>5s} {'1st':>3s} "
              f"{'end':>3s} {'max m':>7s}  notes")
        for r in results:
            notes = []
            if r.missed_reasons:
                notes.append("missed: " + ", ".join(f"{k} {v}" for k, v in r.missed_reasons.items()))
            if r.extra_times:
                notes.append("extra at " + ", ".join(r.extra_times[:3]) + (" ..." if len(r.extra_times) > 3 else ""))
            if r.bad:
                notes.append("bad: " + ", ".join(f"{k} {v}" for k, v in sorted(r.bad.items())))
            dist = "-" if r.max_distance_m is None else f"{r.max_distance_m:.3f}"
            print(f"{r.name[:36]:36s} {r.gpsd_epochs:5d} {r.ours:5d} {r.matched:5d} {r.extra:5d} {r.missed:5d} "
                  f"{r.missed_first:3d} {r.cut_at_end:3d} {dist:>7s}  {'; '.join(notes)}")
        dist = "-" if total["max_distance_m"] is None else f"{total['max_distance_m']:.3f}"
        print(f"{'total (' + str(len(results)) + ' logs)':36s} {total['gpsd_epochs']:5d} {total['ours']:5d} "
              f"{total['matched']:5d} {total['extra']:5d} {total['missed']:5d} {total['missed_first']:3d} "
              f"{total['cut_at_end']:3d} {dist:>7s}")
    if args.strict and (total["extra"] or total["missed"]):
        return 1
    return 0
