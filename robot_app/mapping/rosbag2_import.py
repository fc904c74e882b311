"""Import a teleoperated drive recorded as a ROS 2 bag (rosbag2) as a traversal log.

The bag is a folder with ``metadata.yaml`` and its ``.db3`` (sqlite3) or ``.mcap`` storage files, read
with the ``rosbags`` library (the ``ros2`` extra) and its typestore of ROS 2 Humble / Jazzy message
definitions; no ROS installation is needed. The log it writes has the tables and fields of
``robot-app log import-recon`` and the recorder (:mod:`core.tlog`), so ``robot-app map build`` reads it
unchanged. Topics read (one of each, see :func:`pick_topic`):

* images, required: ``sensor_msgs/msg/CompressedImage`` (JPEG kept byte for byte, PNG decoded with
  OpenCV and re-encoded as JPEG) or ``sensor_msgs/msg/Image`` (encodings :data:`RAW_ENCODINGS`, encoded
  as JPEG; any other encoding is refused, naming it);
* GPS fixes, required: ``sensor_msgs/msg/NavSatFix`` -> ``gps`` rows. ``status.status < 0`` is no fix:
  written as a quality-0 row (as the recorder and the RECON import write one) and counted. Quality:
  NavSatStatus FIX -> 1 (GPS), SBAS_FIX -> 2 (DGPS), GBAS_FIX -> 5 (RTK float: the message does not tell
  fixed from float). ``hacc_m`` = sqrt(east variance + north variance) of ``position_covariance``
  (ENU, m^2), the recorder's figure; empty when the covariance type is UNKNOWN;
* wheel odometry, optional: ``nav_msgs/msg/Odometry`` -> ``odom`` rows (x, y m and yaw rad of the pose in
  its ``header.frame_id`` frame, the odom frame; v = ``twist.linear.x`` m/s and omega = ``twist.angular.z``
  rad/s in the child (body) frame);
* IMU, optional: ``sensor_msgs/msg/Imu`` -> ``imu`` rows (``linear_acceleration`` m/s^2 and
  ``angular_velocity`` rad/s, body frame, REP-103); a sample whose covariance marks either as missing
  (element 0 = -1) is skipped and counted.

Times: a message's ``header.stamp`` (``time_source="header"``) or the bag's receive time
(``"receive"``); ``"auto"`` takes the header stamps when every message read has a non-zero one, else
the receive times for all topics (never a mix of clocks). Log time ``t_s`` = that time less the
earliest of the messages read (stored in the log's metadata as ``time_origin_ns``), so a log starts at
0 s like an imported RECON drive; ``t_utc_s`` stays empty (ROS stamps are not the receiver's UTC).

Frames: subsampled to ``rate_hz`` by time with the recorder's rule
(:meth:`robot_app.mapping.recorder.Recorder.on_frame`: a nominal grid, never two frames closer than
0.8 periods; ``rate_hz=0`` keeps every image), then matched to the nearest GPS fix in time: a frame with
no fix within ``max_gap_s`` is not written (counted). The map builder places a written frame by linear
interpolation between the fixes either side (:func:`core.tlog.frame_positions`).

The log is written to ``OUT.partial`` and renamed to ``OUT`` only when complete; an error or an
interruption removes it, so a half-written log never appears under ``OUT``.
"""

from __future__ import annotations

import logging
import math
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from core.tlog import LOG_FILE, TraversalLogWriter

log = logging.getLogger(__name__)

COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
RAW_IMAGE = "sensor_msgs/msg/Image"
IMAGE_TYPES = (COMPRESSED_IMAGE, RAW_IMAGE)
FIX_TYPES = ("sensor_msgs/msg/NavSatFix",)
ODOM_TYPES = ("nav_msgs/msg/Odometry",)
IMU_TYPES = ("sensor_msgs/msg/Imu",)
#: sensor_msgs/Image encodings converted (8 bits per channel); others are refused
RAW_ENCODINGS = ("rgb8", "bgr8", "mono8", "rgba8", "bgra8")
DISTROS = ("humble", "jazzy")
TIME_SOURCES = ("auto", "header", "receive")
DEFAULT_RATE_HZ = 4.0   # the recorder's [mapping] frame_rate_hz
DEFAULT_MAX_GAP_S = 1.0
_JPEG, _PNG = b"\xff\xd8", b"\x89PNG\r\n\x1a\n"
# NavSatStatus.status -> the log's GGA-style quality (0 no fix, 1 GPS, 2 DGPS, 5 RTK float)
_QUALITY = {0: 1, 1: 2, 2: 5}


class Rosbag2ImportError(ValueError):
    """The bag cannot be imported (not a bag, empty, a missing or ambiguous topic, a wrong message type,
    an unsupported image encoding, no GPS fix, no frame near a fix); the message says which."""


@dataclass
class _Topic:
    name: str
    msgtype: str
    connections: list
    count: int


@dataclass
class _Scan:
    """Pass 1: times (ns) of every message read and the values of the small ones."""

    recv: dict = field(default_factory=dict)    # role -> list[int] receive time ns
    stamp: dict = field(default_factory=dict)   # role -> list[int] header stamp ns
    fix: list = field(default_factory=list)     # (lat, lon, quality, hacc_m | None)
    odom: list = field(default_factory=list)    # (x, y, yaw, v, omega)
    imu: list = field(default_factory=list)     # (ax, ay, az, gx, gy, gz) or None (skipped)


def resolve_bag(path: str | Path) -> Path:
    """The bag folder for ``path`` (the folder itself, or the folder of one of its storage files).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    Rosbag2ImportError
        A ROS 1 ``.bag`` file, or no ``metadata.yaml`` (not a rosbag2 folder).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.is_file():
        if p.suffix == ".bag":
            raise Rosbag2ImportError(f"{p}: a ROS 1 bag, not a ROS 2 one; convert it first "
                                     f"(rosbags-convert --src {shlex.quote(str(p))} --dst FOLDER)")
        if p.suffix in (".db3", ".mcap") and (p.parent / "metadata.yaml").is_file():
            return p.parent
        raise Rosbag2ImportError(f"{p}: not a ROS 2 bag (give the bag folder, the one with metadata.yaml)")
    if not (p / "metadata.yaml").is_file():
        ros1 = sorted(p.glob("*.bag"))
        if ros1:
            raise Rosbag2ImportError(f"{p}: no metadata.yaml, but {len(ros1)} ROS 1 bag(s) ({ros1[0].name}); convert "
                                     f"each first (rosbags-convert --src {shlex.quote(str(ros1[0]))} --dst FOLDER)")
        raise Rosbag2ImportError(f"{p}: not a ROS 2 bag folder (no metadata.yaml)")
    return p


def _topics(reader) -> dict[str, _Topic]:
    out: dict[str, _Topic] = {}
    for c in reader.connections:
        t = out.setdefault(c.topic, _Topic(c.topic, c.msgtype, [], 0))
        if c.msgtype != t.msgtype:
            raise Rosbag2ImportError(f"topic {c.topic} carries two message types ({t.msgtype}, {c.msgtype})")
        t.connections.append(c)
        t.count += int(c.msgcount)
    return out


def _listing(topics: dict[str, _Topic]) -> str:
    return ", ".join(f"{t.name} ({t.msgtype}, {t.count} messages)" for t in sorted(topics.values(),
                                                                                   key=lambda t: t.name))


def pick_topic(topics: dict[str, _Topic], given: str | None, types: tuple[str, ...], *, role: str, option: str,
               required: bool) -> _Topic | None:
    """The topic to read for ``role``: ``given``, else the only topic of one of ``types``.

    ``given`` = "none" skips an optional topic. Returns None for an optional role with no topic.

    Raises
    ------
    Rosbag2ImportError
        ``given`` is not in the bag or has another type; no topic of ``types`` for a required role; or,
        without ``given``, several topics of ``types`` (all listed: choose one with ``option``).
    """
    if given is not None and given.lower() == "none":
        if required:
            raise Rosbag2ImportError(f"{option}: the {role} topic is required")
        return None
    if given is not None:
        if given not in topics:
            raise Rosbag2ImportError(f"{option} {given}: no such topic in the bag; it has: {_listing(topics)}")
        t = topics[given]
        if t.msgtype not in types:
            raise Rosbag2ImportError(f"{option} {given}: the topic's type is {t.msgtype}, expected "
                                     f"{' or '.join(types)}")
        return t
    found = {n: t for n, t in topics.items() if t.msgtype in types}
    if len(found) > 1:
        raise Rosbag2ImportError(f"several {role} topics in the bag: {_listing(found)}; choose one with "
                                 f"{option} TOPIC" + ("" if required else " (or none)"))
    if not found:
        if required:
            raise Rosbag2ImportError(f"no {role} topic ({' or '.join(types)}) in the bag; it has: {_listing(topics)}")
        return None
    return next(iter(found.values()))


def _deserialize(store, raw, conn, k: int):
    """The message, or a :class:`Rosbag2ImportError` naming the topic and message for data that is not CDR
    of its type (a corrupt bag, or definitions that differ from the typestore's)."""
    try:
        return store.deserialize_cdr(raw, conn.msgtype)
    except Exception as exc:  # rosbags raises struct, index and value errors on bad data
        raise Rosbag2ImportError(f"{conn.topic}: message {k} does not deserialise as {conn.msgtype} ({exc!r})") \
            from exc


def _stamp_ns(msg) -> int:
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


def _yaw(q) -> float:
    """Yaw (rad, CCW about z) of a geometry_msgs/Quaternion."""
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def _check_image(msg, msgtype: str, topic: str, k: int) -> None:
    """Refuse an image the importer cannot convert (before anything is written)."""
    if msgtype == RAW_IMAGE:
        if msg.encoding.lower() not in RAW_ENCODINGS:
            raise Rosbag2ImportError(f"{topic}: image encoding {msg.encoding!r} (message {k}) is not supported; "
                                     f"supported: {', '.join(RAW_ENCODINGS)}")
        return
    head = bytes(msg.data[:8])
    if not (head.startswith(_JPEG) or head.startswith(_PNG)):
        raise Rosbag2ImportError(f"{topic}: compressed image format {msg.format!r} (message {k}) is not JPEG or "
                                 f"PNG data")


class _Undecodable(Exception):
    pass


def image_to_jpeg(msg, msgtype: str, *, jpeg_quality: int = 85) -> bytes:
    """JPEG bytes of a deserialised CompressedImage or Image message.

    A JPEG CompressedImage is returned as recorded (after checking that OpenCV decodes it); PNG and raw
    images (:data:`RAW_ENCODINGS`; rows of ``step`` bytes, alpha dropped, mono as grey BGR) are encoded
    with OpenCV at ``jpeg_quality``.

    Raises
    ------
    Rosbag2ImportError
        An encoding or format that is not supported.
    _Undecodable
        Data that does not decode (corrupt or short); the caller skips the frame.
    """
    import cv2

    if msgtype == COMPRESSED_IMAGE:
        data = np.asarray(msg.data, dtype=np.uint8)
        head = data[:8].tobytes()
        if not (head.startswith(_JPEG) or head.startswith(_PNG)):
            raise Rosbag2ImportError(f"compressed image format {msg.format!r} is not JPEG or PNG data")
        bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
        if bgr is None:
            raise _Undecodable(f"format {msg.format!r}: OpenCV cannot decode it")
        if head.startswith(_JPEG):
            return data.tobytes()
    else:
        enc = msg.encoding.lower()
        if enc not in RAW_ENCODINGS:
            raise Rosbag2ImportError(f"image encoding {msg.encoding!r} is not supported; supported: "
                                     f"{', '.join(RAW_ENCODINGS)}")
        ch = 1 if enc == "mono8" else 3 if enc in ("rgb8", "bgr8") else 4
        h, w = int(msg.height), int(msg.width)
        step = int(msg.step) or w * ch
        data = np.asarray(msg.data, dtype=np.uint8)
        if h <= 0 or w <= 0 or step < w * ch or data.size < h * step:
            raise _Undecodable(f"{w}x{h} {enc} image with step {step} and {data.size} bytes of data")
        px = data[:h * step].reshape(h, step)[:, :w * ch].reshape(h, w, ch)
        if enc == "mono8":
            bgr = cv2.cvtColor(np.ascontiguousarray(px[:, :, 0]), cv2.COLOR_GRAY2BGR)
        elif enc.startswith("rgb"):
            bgr = np.ascontiguousarray(px[:, :, 2::-1])
        else:
            bgr = np.ascontiguousarray(px[:, :, :3])
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)])
    if not ok:
        raise _Undecodable("OpenCV could not encode it as JPEG")
    return buf.tobytes()


def rate_mask(t_s: np.ndarray, rate_hz: float) -> np.ndarray:
    """Which frames (times ``t_s`` s, any order) the recorder would keep at ``rate_hz`` (0: all)."""
    t_s = np.asarray(t_s, dtype=np.float64)
    keep = np.zeros(t_s.shape, dtype=bool)
    if not rate_hz:
        keep[:] = True
        return keep
    period, nxt = 1.0 / rate_hz, None
    for i in np.argsort(t_s, kind="stable"):
        t = float(t_s[i])
        if nxt is not None and t < nxt:
            continue
        keep[i] = True
        if nxt is None or t - nxt > period:
            nxt = t + period
        else:
            nxt = max(nxt + period, t + 0.8 * period)
    return keep


def nearest_gap_s(t_s: np.ndarray, fix_t_s: np.ndarray) -> np.ndarray:
    """Time (s) from each of ``t_s`` to the nearest of ``fix_t_s`` (inf without fixes)."""
    t_s = np.asarray(t_s, dtype=np.float64)
    f = np.sort(np.asarray(fix_t_s, dtype=np.float64))
    if f.size == 0:
        return np.full(t_s.shape, np.inf)
    i = np.searchsorted(f, t_s)
    before = np.where(i > 0, t_s - f[np.maximum(i - 1, 0)], np.inf)
    after = np.where(i < f.size, f[np.minimum(i, f.size - 1)] - t_s, np.inf)
    return np.minimum(np.abs(before), np.abs(after))


def _track_m(lat: np.ndarray, lon: np.ndarray) -> float:
    """Length (m) of the polyline through the fixes, in the first fix's UTM zone."""
    import utm

    if lat.size < 2:
        return 0.0
    _, _, zone, letter = utm.from_latlon(float(lat[0]), float(lon[0]))
    e, n, _, _ = utm.from_latlon(lat, lon, force_zone_number=zone, force_zone_letter=letter)
    return float(np.sum(np.hypot(np.diff(e), np.diff(n))))


def _storage(bag: Path) -> str:
    kinds = sorted({"mcap" if f.suffix == ".mcap" else "sqlite3" for f in bag.iterdir()
                    if f.suffix in (".mcap", ".db3")})
    return "+".join(kinds) or "unknown"


def _typestore(distro: str):
    from rosbags.typesys import Stores, get_typestore

    # an older rosbags without a Jazzy store: Humble's definitions of the messages read are the same
    return get_typestore(getattr(Stores, f"ROS2_{distro.upper()}", Stores.ROS2_HUMBLE))


def _remove_partial(partial: Path) -> None:
    if partial.is_dir():
        shutil.rmtree(partial)
    elif partial.exists():
        partial.unlink()


def import_rosbag2(bag: str | Path, out: str | Path, *, image_topic: str | None = None,
                   fix_topic: str | None = None, odom_topic: str | None = None, imu_topic: str | None = None,
                   rate_hz: float = DEFAULT_RATE_HZ, max_gap_s: float = DEFAULT_MAX_GAP_S,
                   time_source: str = "auto", distro: str | None = None, jpeg_quality: int = 85,
                   overwrite: bool = False, progress: bool = False,
                   on_message: Callable[[str, int], None] | None = None) -> dict:
    """Import the drive in the ROS 2 bag ``bag`` as a new traversal log folder ``out``.

    Topics default to the only one of the right type (see the module docstring); ``"none"`` skips the
    odometry or IMU topic. ``rate_hz`` frames per second are kept (0: every image); a frame is written
    only when a GPS fix lies within ``max_gap_s`` seconds of it. ``time_source``: "auto", "header" or
    "receive". ``distro`` ("humble" or "jazzy") picks the typestore (default: the bag's ``ros_distro``
    when it is one of them, else humble; the messages read are the same in both). ``progress`` shows a
    tqdm bar on stderr over the messages read (every message of the chosen topics, then the images
    again); ``on_message(phase, k)`` is called after each (phase "scan" or "write", k from 0).

    ``out`` must not exist (``overwrite=True`` replaces an existing traversal log, never another folder).

    Returns the summary: ``bag``, ``out``, ``storage``, ``distro``, ``time_source`` ("header" or
    "receive"), ``topics`` {image, fix, odom, imu}, ``image_messages``, ``frames`` (written),
    ``frames_over_rate``, ``frames_no_fix_nearby``, ``frames_undecodable``, ``gps_fixes``,
    ``gps_no_fix``, ``odom_samples``, ``imu_samples``, ``imu_skipped``, ``match_gap_s_median`` and
    ``match_gap_s_max`` (frame to nearest fix, s), ``span_s`` (first to last frame, s), ``span_m``
    (length of the GPS track between them, m), ``rate_hz``, ``max_gap_s``.

    Raises
    ------
    FileNotFoundError
        ``bag`` does not exist.
    FileExistsError
        ``out`` exists (and is not a log to overwrite).
    Rosbag2ImportError
        Not a ROS 2 bag, unreadable, empty, a missing / ambiguous / wrongly typed topic, an unsupported
        image encoding, no GPS fix, header stamps missing with ``time_source="header"``, or no frame
        within ``max_gap_s`` of a fix. Nothing is written.
    ValueError
        A bad argument (rate, gap, time source, distro).
    """
    from rosbags.rosbag2 import Reader
    from rosbags.rosbag2.errors import ReaderError

    if not (rate_hz >= 0 and math.isfinite(rate_hz)):
        raise ValueError(f"rate_hz: expected >= 0 (0 keeps every image), got {rate_hz}")
    if not (max_gap_s > 0 and math.isfinite(max_gap_s)):
        raise ValueError(f"max_gap_s: expected > 0, got {max_gap_s}")
    if time_source not in TIME_SOURCES:
        raise ValueError(f"time_source: expected one of {', '.join(TIME_SOURCES)}, got {time_source!r}")
    if distro is not None and distro not in DISTROS:
        raise ValueError(f"distro: expected one of {', '.join(DISTROS)}, got {distro!r}")
    bag = resolve_bag(bag)
    out = Path(out)
    if out.exists() and not (overwrite and (out / LOG_FILE).is_file()):
        why = "pass --overwrite to replace it" if (out / LOG_FILE).is_file() else "not a traversal log"
        raise FileExistsError(f"{out}: already exists ({why}); the import writes a new log")
    try:
        reader = Reader(bag)
        reader.open()
    except (ReaderError, KeyError, TypeError, ValueError, OSError) as exc:
        raise Rosbag2ImportError(f"{bag}: not a readable ROS 2 bag ({exc})") from exc
    try:
        return _import(reader, bag, out, image_topic=image_topic, fix_topic=fix_topic, odom_topic=odom_topic,
                       imu_topic=imu_topic, rate_hz=rate_hz, max_gap_s=max_gap_s, time_source=time_source,
                       distro=distro, jpeg_quality=jpeg_quality, progress=progress, on_message=on_message)
    except ReaderError as exc:
        raise Rosbag2ImportError(f"{bag}: cannot read the bag ({exc})") from exc
    finally:
        reader.close()


def _import(reader, bag: Path, out: Path, *, image_topic, fix_topic, odom_topic, imu_topic, rate_hz, max_gap_s,
            time_source, distro, jpeg_quality, progress, on_message) -> dict:
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: nothing outlives the job
    if reader.message_count == 0:
        raise Rosbag2ImportError(f"{bag}: the bag holds no messages")
    topics = _topics(reader)
    for t in topics.values():
        fmt = getattr(getattr(t.connections[0], "ext", None), "serialization_format", "cdr")
        if t.msgtype in IMAGE_TYPES + FIX_TYPES + ODOM_TYPES + IMU_TYPES and fmt != "cdr":
            raise Rosbag2ImportError(f"{t.name}: serialization format {fmt!r}, expected cdr")
    chosen = {
        "image": pick_topic(topics, image_topic, IMAGE_TYPES, role="image", option="--image-topic", required=True),
        "fix": pick_topic(topics, fix_topic, FIX_TYPES, role="GPS fix", option="--fix-topic", required=True),
        "odom": pick_topic(topics, odom_topic, ODOM_TYPES, role="odometry", option="--odom-topic", required=False),
        "imu": pick_topic(topics, imu_topic, IMU_TYPES, role="IMU", option="--imu-topic", required=False),
    }
    chosen = {r: t for r, t in chosen.items() if t is not None}
    for role in ("image", "fix"):
        if chosen[role].count == 0:
            raise Rosbag2ImportError(f"{chosen[role].name}: the {role} topic has no messages")
    if distro is None:
        bag_distro = str(getattr(reader, "ros_distro", "") or "").lower()
        distro = bag_distro if bag_distro in DISTROS else "humble"
    store = _typestore(distro)
    role_of = {c.id: r for r, t in chosen.items() for c in t.connections}
    img = chosen["image"]
    total = sum(t.count for t in chosen.values()) + img.count
    with tqdm(total=total, desc=f"rosbag2 import {bag.name}", unit="msg", disable=not progress) as bar:
        scan = _scan(reader, store, chosen, role_of, bar, on_message)
        n_img = len(scan.recv["image"])
        fixes = np.array([f[:3] for f in scan.fix], dtype=np.float64).reshape(-1, 3)
        good = fixes[:, 2] > 0
        if not good.any():
            raise Rosbag2ImportError(f"{chosen['fix'].name}: no GPS fix in the bag ({len(scan.fix)} NavSatFix "
                                     f"messages, all without a fix: status < 0 or no finite position)")
        # the clock: header stamps when every message read has one, else the receive times
        zero = [r for r in chosen if any(s == 0 for s in scan.stamp[r])]
        if time_source == "header" and zero:
            raise Rosbag2ImportError(f"{', '.join(chosen[r].name for r in zero)}: messages without a header stamp "
                                     f"(0); use --time receive or auto")
        used = "receive" if time_source == "receive" or (time_source == "auto" and zero) else "header"
        times = scan.recv if used == "receive" else scan.stamp
        origin = min(min(v) for v in times.values() if v)
        t = {r: (np.asarray(v, dtype=np.int64) - origin) / 1e9 for r, v in times.items()}
        keep = rate_mask(t["image"], rate_hz)
        gap = nearest_gap_s(t["image"], t["fix"][good])
        matched = gap <= max_gap_s
        write = keep & matched
        if not write.any():
            raise Rosbag2ImportError(
                f"no image within {max_gap_s} s of a GPS fix (images {t['image'].min():.1f}..{t['image'].max():.1f} s,"
                f" fixes {t['fix'][good].min():.1f}..{t['fix'][good].max():.1f} s on the {used} times): check the "
                f"topics' clocks (--time) or raise --max-gap-s")
        partial = out.with_name(out.name + ".partial")
        _remove_partial(partial)  # left by an import that was killed
        meta = {"source": "rosbag2-import", "frame_rate_hz": rate_hz or None, "bag": str(bag.resolve()),
                "bag_storage": _storage(bag), "ros_distro": distro, "time_source": used, "time_origin_ns": int(origin),
                "topics": {r: tp.name for r, tp in chosen.items()}, "max_gap_s": max_gap_s}
        undecodable = 0
        written_t: list[float] = []
        try:
            with TraversalLogWriter(partial, metadata=meta) as w:
                for (lat, lon, q, hacc), ts in zip(scan.fix, t["fix"]):
                    w.add_gps(float(ts), lat if q else None, lon if q else None, quality=q, hacc_m=hacc if q else None)
                for row, ts in zip(scan.odom, t.get("odom", ())):
                    w.add_odom(float(ts), *row)
                for row, ts in zip(scan.imu, t.get("imu", ())):
                    if row is not None:
                        w.add_imu(float(ts), row[:3], row[3:])
                for k, (conn, recv_ns, raw) in enumerate(reader.messages(connections=img.connections)):
                    if k >= n_img or recv_ns != scan.recv["image"][k]:
                        raise Rosbag2ImportError(f"{img.name}: the bag read back differently the second time")
                    if write[k]:
                        msg = _deserialize(store, raw, conn, k)
                        try:
                            jpeg = image_to_jpeg(msg, conn.msgtype, jpeg_quality=jpeg_quality)
                        except _Undecodable as exc:
                            log.warning("%s: image %d skipped: %s", img.name, k, exc)
                            undecodable += 1
                        else:
                            w.add_frame(float(t["image"][k]), jpeg)
                            written_t.append(float(t["image"][k]))
                    bar.update(1)
                    if on_message:
                        on_message("write", k)
            if not written_t:
                raise Rosbag2ImportError(f"{img.name}: no image could be decoded ({undecodable} tried)")
            _publish(partial, out)
        except BaseException:
            _remove_partial(partial)
            raise
    ft = np.asarray(written_t)
    fix_t, fix_ll = t["fix"][good], fixes[good]
    inside = (fix_t >= ft.min()) & (fix_t <= ft.max())
    order = np.argsort(fix_t[inside], kind="stable")
    span_m = _track_m(fix_ll[inside][order, 0], fix_ll[inside][order, 1])
    g = gap[write]
    summary = {
        "bag": str(bag), "out": str(out), "storage": _storage(bag), "distro": distro, "time_source": used,
        "topics": {r: (chosen[r].name if r in chosen else None) for r in ("image", "fix", "odom", "imu")},
        "image_messages": n_img, "frames": int(ft.size), "frames_over_rate": int(np.sum(~keep)),
        "frames_no_fix_nearby": int(np.sum(keep & ~matched)), "frames_undecodable": undecodable,
        "gps_fixes": int(good.sum()), "gps_no_fix": int((~good).sum()),
        "odom_samples": len(scan.odom), "imu_samples": sum(r is not None for r in scan.imu),
        "imu_skipped": sum(r is None for r in scan.imu),
        "match_gap_s_median": round(float(np.median(g)), 4), "match_gap_s_max": round(float(np.max(g)), 4),
        "span_s": round(float(ft.max() - ft.min()), 3), "span_m": round(span_m, 2),
        "rate_hz": rate_hz, "max_gap_s": max_gap_s,
    }
    log.info("imported %s", summary)
    return summary


def _scan(reader, store, chosen: dict, role_of: dict, bar, on_message) -> _Scan:
    """Pass 1 over every message of the chosen topics: times, fixes, odometry, IMU; check the images."""
    scan = _Scan(recv={r: [] for r in chosen}, stamp={r: [] for r in chosen})
    conns = [c for t in chosen.values() for c in t.connections]
    for k, (conn, recv_ns, raw) in enumerate(reader.messages(connections=conns)):
        role = role_of[conn.id]
        msg = _deserialize(store, raw, conn, len(scan.recv[role]))
        if role == "image":
            _check_image(msg, conn.msgtype, conn.topic, len(scan.recv["image"]))
        elif role == "fix":
            lat, lon = float(msg.latitude), float(msg.longitude)
            q = _QUALITY.get(int(msg.status.status), 1) if int(msg.status.status) >= 0 else 0
            if not (math.isfinite(lat) and math.isfinite(lon)):
                q = 0
            cov = np.asarray(msg.position_covariance, dtype=np.float64)
            hacc = None
            if int(msg.position_covariance_type) != 0 and cov.size == 9 and cov[0] >= 0 and cov[4] >= 0:
                hacc = float(math.sqrt(cov[0] + cov[4]))
                hacc = hacc if math.isfinite(hacc) else None
            scan.fix.append((lat, lon, q, hacc))
        elif role == "odom":
            p, tw = msg.pose.pose, msg.twist.twist
            scan.odom.append((float(p.position.x), float(p.position.y), _yaw(p.orientation), float(tw.linear.x),
                              float(tw.angular.z)))
        else:
            missing = msg.linear_acceleration_covariance[0] == -1 or msg.angular_velocity_covariance[0] == -1
            a, g = msg.linear_acceleration, msg.angular_velocity
            scan.imu.append(None if missing else (float(a.x), float(a.y), float(a.z), float(g.x), float(g.y),
                                                  float(g.z)))
        scan.recv[role].append(int(recv_ns))
        scan.stamp[role].append(_stamp_ns(msg))
        bar.update(1)
        if on_message:
            on_message("scan", k)
    return scan


def _publish(partial: Path, out: Path) -> None:
    """Rename the complete ``partial`` log to ``out`` (replacing an old log there last)."""
    if out.exists():
        old = out.with_name(out.name + ".replaced")
        _remove_partial(old)
        out.rename(old)
        partial.rename(out)
        shutil.rmtree(old)
    else:
        partial.rename(out)
