"""``robot-app log import-recon``, ``import-rosbag2``, ``info``, ``verify`` (traversal logs) and ``run-report``
(a route job)."""

from __future__ import annotations

import json
import math

from robot_app.errors import UsageError
from robot_app.extras import require


def register(sub, groups) -> None:
    imp = groups["log"].add_parser("import-recon", help="import RECON-style HDF5 drives into a traversal log")
    imp.add_argument("files", nargs="+", metavar="FILE.hdf5")
    imp.add_argument("--out", required=True, metavar="LOG", help="log folder (created or continued)")
    imp.add_argument("--rate-hz", type=float, default=3.0, help="sample rate of the files (RECON: 3 Hz)")
    imp.add_argument("--json", action="store_true")
    imp.set_defaults(func=_import)
    rb = groups["log"].add_parser("import-rosbag2", help="import a drive recorded as a ROS 2 bag (rosbag2: "
                                  "sqlite3 or mcap) into a new traversal log")
    rb.add_argument("bag", metavar="BAG", help="the bag folder (the one with metadata.yaml)")
    rb.add_argument("--out", required=True, metavar="LOG", help="new log folder (written to LOG.partial, renamed "
                    "when complete)")
    rb.add_argument("--image-topic", metavar="TOPIC", help="sensor_msgs/msg/CompressedImage or Image topic "
                    "(default: the only one in the bag)")
    rb.add_argument("--fix-topic", metavar="TOPIC", help="sensor_msgs/msg/NavSatFix topic (default: the only one)")
    rb.add_argument("--odom-topic", metavar="TOPIC", help="nav_msgs/msg/Odometry topic (default: the only one, if "
                    "any; none: skip)")
    rb.add_argument("--imu-topic", metavar="TOPIC", help="sensor_msgs/msg/Imu topic (default: the only one, if any; "
                    "none: skip)")
    rb.add_argument("--rate-hz", type=float, default=None, metavar="HZ", help="frames kept per second "
                    "(default [mapping] frame_rate_hz, 4; 0 keeps every image)")
    rb.add_argument("--max-gap-s", type=float, default=1.0, metavar="S", help="a frame is kept only with a GPS "
                    "fix within this many seconds (nearest fix in time; default 1.0)")
    rb.add_argument("--time", choices=("auto", "header", "receive"), default="auto", help="message times: "
                    "header stamps, bag receive times, or auto (header stamps when every message has one)")
    rb.add_argument("--distro", choices=("humble", "jazzy"), default=None, help="message definitions "
                    "(default: the bag's ros_distro, else humble)")
    rb.add_argument("--overwrite", action="store_true", help="replace LOG if it is a traversal log")
    rb.add_argument("--json", action="store_true")
    rb.set_defaults(func=_import_rosbag2)
    info = groups["log"].add_parser("info", help="what a traversal log holds")
    info.add_argument("log", metavar="LOG")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=_info)
    ver = groups["log"].add_parser("verify", help="check every table of a traversal log against its content hashes")
    ver.add_argument("log", metavar="LOG")
    ver.add_argument("--json", action="store_true")
    ver.set_defaults(func=_verify)
    rr = groups["log"].add_parser("run-report", help="picture and page of one route job from its run record")
    rr.add_argument("record", metavar="RECORD", help="run record ([paths] logs_dir/runs/run-*.json)")
    rr.add_argument("--map", default=None, metavar="MAP", help="the map the run was planned on "
                    "(default [mission] map_file)")
    rr.add_argument("--out", default=None, metavar="DIR", help="output folder (default: the record's)")
    rr.add_argument("--json", action="store_true")
    rr.set_defaults(func=_run_report)


def _run_report(args, config) -> int:
    from core.mapstore import MapError
    from robot_app.jobs.run_report import RunRecordError, write_run_report

    map_path = args.map or config.mission.map_file
    if not map_path:
        raise UsageError("give --map MAP (or set [mission] map_file): the map the run was planned on")
    try:
        res = write_run_report(args.record, map_path, args.out)
    except (RunRecordError, MapError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['outcome']}: {res['message']} ({res['driven_m']} m driven of {res['planned_m']} m planned, "
              f"{res['duration_s']} s, {res['disengagements']} disengagement(s))")
        print("wrote " + ", ".join(res["files"]))
    return 0


def _import(args, config) -> int:
    require("recon", what="importing RECON files")
    from robot_app.mapping.recon_import import ReconFormatError, import_recon

    try:
        counts = import_recon(args.files, args.out, rate_hz=args.rate_hz)
    except (ReconFormatError, FileNotFoundError, ValueError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    print(json.dumps(counts) if args.json else
          f"imported {counts['files']} file(s) into {args.out}: {counts['frames']} frames, "
          f"{counts['gps_fixes']} GPS fixes, {counts['gps_no_fix']} samples without a fix")
    return 0


def _import_rosbag2(args, config) -> int:
    import sys

    try:
        import rosbags  # noqa: F401
    except ImportError as exc:
        raise UsageError("importing a ROS 2 bag needs rosbags (the ros2 extra): pip install 'robot-app[ros2]'") \
            from exc
    from robot_app.mapping.rosbag2_import import Rosbag2ImportError, import_rosbag2

    rate = config.mapping.frame_rate_hz if args.rate_hz is None else args.rate_hz
    if not (rate >= 0 and math.isfinite(rate)):
        raise UsageError(f"--rate-hz: expected >= 0 frames per second (0 keeps every image), got {rate}")
    if not (args.max_gap_s > 0 and math.isfinite(args.max_gap_s)):
        raise UsageError(f"--max-gap-s: expected > 0 seconds, got {args.max_gap_s}")
    try:
        s = import_rosbag2(args.bag, args.out, image_topic=args.image_topic, fix_topic=args.fix_topic,
                           odom_topic=args.odom_topic, imu_topic=args.imu_topic, rate_hz=rate,
                           max_gap_s=args.max_gap_s, time_source=args.time, distro=args.distro,
                           jpeg_quality=config.camera.jpeg_quality, overwrite=args.overwrite,
                           progress=sys.stderr.isatty())
    except (Rosbag2ImportError, FileNotFoundError, FileExistsError, ValueError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps(s))
        return 0
    tp = s["topics"]
    print(f"imported {s['bag']} into {s['out']}: {s['frames']} frames from {tp['image']} ({s['image_messages']} "
          f"images: {s['frames_over_rate']} over the rate, {s['frames_no_fix_nearby']} with no fix within "
          f"{s['max_gap_s']} s, {s['frames_undecodable']} undecodable); {s['gps_fixes']} GPS fixes from {tp['fix']}, "
          f"{s['gps_no_fix']} without a fix (status < 0: no position); {s['odom_samples']} odometry samples "
          f"({tp['odom'] or 'no topic'}), {s['imu_samples']} IMU samples ({tp['imu'] or 'no topic'}); "
          f"{s['span_m']:.1f} m over {s['span_s']:.1f} s; times from the "
          f"{'message header stamps' if s['time_source'] == 'header' else 'bag receive times'}")
    return 0


def _info(args, config) -> int:
    import numpy as np

    from core.tlog import LogFormatError, frame_positions, read_log

    try:
        tl = read_log(args.log)
    except LogFormatError as exc:
        raise UsageError(str(exc)) from exc
    _, _, valid = frame_positions(tl)
    ft = tl.frame_t_s
    out = {"log": args.log, "meta": tl.meta, "frames": int(ft.size),
           "duration_s": float(ft[-1] - ft[0]) if ft.size else 0.0,
           "frames_with_position": int(valid.sum()), "gps_samples": int(tl.gps["t_s"].size),
           "gps_fixes": int(np.sum(tl.gps["quality"] > 0)), "odom_samples": int(tl.odom["t_s"].size)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"log {args.log}: {out['frames']} frames over {out['duration_s']:.1f} s, "
              f"{out['frames_with_position']} with a GPS position; {out['gps_fixes']}/{out['gps_samples']} "
              f"GPS samples with a fix; {out['odom_samples']} odometry samples")
    return 0


def _verify(args, config) -> int:
    """Exit 0: every table matches; 1: a table does not (the message names it); 2: not a log."""
    import sys
    from pathlib import Path

    from core.tlog import LOG_FILE, LogFormatError, verify_log

    if not (Path(args.log) / LOG_FILE).is_file():
        raise UsageError(f"{args.log}: not a traversal log (no {LOG_FILE})")
    try:
        counts = verify_log(args.log)
    except LogFormatError as exc:
        print(f"robot-app log verify: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"log": args.log, "ok": True, "rows": counts}))
    else:
        print(f"log {args.log}: ok ({', '.join(f'{n} {t}' for t, n in counts.items())})")
    return 0
