"""``robot-app log import-rosbag2``: real rosbag2 bags (sqlite3 and mcap) written with rosbags, imported
through the CLI, read back with the product's log reader, and a map built from the result."""

from __future__ import annotations

import io
import json
import sqlite3

import numpy as np
import pytest

from core.tlog import frame_positions, read_log, verify_log
from robot_app.cli import main
from robot_app.mapping.map_build import decode_jpeg
from robot_app.mapping.synthetic_logs import enu_to_latlon, tiny_jpeg

rosbags = pytest.importorskip("rosbags", reason="the `ros2` extra (rosbags) is part of `dev`")
from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from robot_app.mapping.rosbag2_import import import_rosbag2  # noqa: E402

TS = get_typestore(Stores.ROS2_HUMBLE)
T = TS.types
T0_NS = 1_700_000_000_000_000_000  # bag wall-clock start (ROS time = Unix epoch ns)
SPEED = 2.0  # m/s east


def _header(t_ns: int, frame_id: str = ""):
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=int(t_ns // 1_000_000_000),
                                                                            nanosec=int(t_ns % 1_000_000_000)),
                                    frame_id=frame_id)


def _colour(i: int):
    return (40 + 9 * i % 200, 200 - 7 * i % 150, 90)


def _png(rgb, size=(32, 24)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), rgb, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _image_msg(i: int, t_ns: int, kind: str):
    """Image i of the drive: compressed JPEG / PNG, or raw with encoding ``kind``."""
    rgb = _colour(i)
    if kind == "jpeg":
        return T["sensor_msgs/msg/CompressedImage"](header=_header(t_ns, "cam"), format="rgb8; jpeg compressed bgr8",
                                                   data=np.frombuffer(tiny_jpeg(rgb, seed=i), np.uint8))
    if kind == "png":
        return T["sensor_msgs/msg/CompressedImage"](header=_header(t_ns, "cam"), format="png",
                                                   data=np.frombuffer(_png(rgb), np.uint8))
    w, h = 16, 12
    px = np.zeros((h, w, 3), np.uint8) + np.asarray(rgb, np.uint8)
    if kind == "rgb8":
        data, step = px, w * 3
    elif kind == "bgr8":
        data, step = px[:, :, ::-1], w * 3
    elif kind == "mono8":
        data, step = px[:, :, :1], w
    else:  # an encoding the importer does not convert
        data, step = px[:, :, :2], w * 2
    return T["sensor_msgs/msg/Image"](header=_header(t_ns, "cam"), height=h, width=w, encoding=kind, is_bigendian=0,
                                      step=step, data=np.ascontiguousarray(data).reshape(-1))


def _fix_msg(t_ns: int, x_m: float, status: int = 0):
    lat, lon = enu_to_latlon(np.array([[x_m, 0.0]]))
    cov = np.zeros(9)
    cov[0] = cov[4] = 0.25
    cov[8] = 1.0
    return T["sensor_msgs/msg/NavSatFix"](
        header=_header(t_ns, "gps"), status=T["sensor_msgs/msg/NavSatStatus"](status=status, service=1),
        latitude=float(lat[0]), longitude=float(lon[0]), altitude=10.0, position_covariance=cov,
        position_covariance_type=2)


def _odom_msg(t_ns: int, x_m: float):
    g = T
    pose = g["geometry_msgs/msg/PoseWithCovariance"](
        pose=g["geometry_msgs/msg/Pose"](position=g["geometry_msgs/msg/Point"](x=x_m, y=0.0, z=0.0),
                                         orientation=g["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)),
        covariance=np.zeros(36))
    tw = g["geometry_msgs/msg/TwistWithCovariance"](
        twist=g["geometry_msgs/msg/Twist"](linear=g["geometry_msgs/msg/Vector3"](x=SPEED, y=0.0, z=0.0),
                                           angular=g["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.1)),
        covariance=np.zeros(36))
    return g["nav_msgs/msg/Odometry"](header=_header(t_ns, "odom"), child_frame_id="base_link", pose=pose, twist=tw)


def _imu_msg(t_ns: int):
    v3 = T["geometry_msgs/msg/Vector3"]
    return T["sensor_msgs/msg/Imu"](
        header=_header(t_ns, "imu"), orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
        orientation_covariance=np.zeros(9), angular_velocity=v3(x=0.01, y=0.02, z=0.1),
        angular_velocity_covariance=np.zeros(9), linear_acceleration=v3(x=0.1, y=0.0, z=9.81),
        linear_acceleration_covariance=np.zeros(9))


def write_bag(path, *, storage="sqlite3", n_img=20, img_hz=4.0, fix_hz=5.0, kind="jpeg", no_fix=(),
              image_lag_s=0.3, image_stamps=True, fix_offset_s=0.0, odom=True, imu=True, extra_topics=(),
              bad_from=None):
    """A drive east at SPEED m/s: n_img images at img_hz, fixes at fix_hz over the same time.

    Images arrive ``image_lag_s`` after their header stamp (so header and receive times differ); fixes
    in ``no_fix`` (indices) have status -1; ``bad_from``: images from this index on use an unsupported
    encoding. Returns the images' header times (s from the start).
    """
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    dur = n_img / img_hz
    img_t = np.arange(n_img) / img_hz
    fix_t = np.arange(0.0, dur + 1e-9, 1.0 / fix_hz)
    msgs = []  # (receive ns, connection key, message)
    for i, t in enumerate(img_t):
        stamp = T0_NS + int(round(t * 1e9))
        k = "yuv422" if bad_from is not None and i >= bad_from else kind
        msg = _image_msg(i, stamp if image_stamps else 0, k)
        msgs.append((stamp + int(image_lag_s * 1e9), "img", msg))
    for j, t in enumerate(fix_t):
        stamp = T0_NS + int(round((t + fix_offset_s) * 1e9))
        msgs.append((stamp + 5_000_000, "fix", _fix_msg(stamp, SPEED * t, status=-1 if j in no_fix else 0)))
        if odom:
            msgs.append((stamp + 1_000_000, "odom", _odom_msg(stamp, SPEED * t)))
        if imu:
            msgs.append((stamp + 2_000_000, "imu", _imu_msg(stamp)))
    types = {"img": ("/camera/image/compressed" if kind in ("jpeg", "png") else "/camera/image_raw",
                     "sensor_msgs/msg/CompressedImage" if kind in ("jpeg", "png") else "sensor_msgs/msg/Image"),
             "fix": ("/fix", "sensor_msgs/msg/NavSatFix"), "odom": ("/odometry/filtered", "nav_msgs/msg/Odometry"),
             "imu": ("/imu/data", "sensor_msgs/msg/Imu")}
    with Writer(path, version=9, storage_plugin=plugin) as w:
        conns = {k: w.add_connection(topic, mt, typestore=TS) for k, (topic, mt) in types.items()
                 if (k != "odom" or odom) and (k != "imu" or imu)}
        for topic, mt in extra_topics:
            w.add_connection(topic, mt, typestore=TS)
        for recv, key, msg in sorted(msgs, key=lambda m: m[0]):
            w.write(conns[key], recv, TS.serialize_cdr(msg, msg.__msgtype__))
    return img_t


def _metres_off(lat, lon, xy):
    want_lat, want_lon = enu_to_latlon(xy)
    return np.hypot((lat - want_lat) * 111_320.0, (lon - want_lon) * 111_320.0 * np.cos(np.radians(want_lat)))


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_import_round_trip(tmp_path, capsys, storage):
    img_t = write_bag(tmp_path / "bag", storage=storage, no_fix=(3, 4))
    out = tmp_path / "log"
    assert main(["log", "import-rosbag2", str(tmp_path / "bag"), "--out", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["storage"] == storage and s["time_source"] == "header"
    assert s["topics"] == {"image": "/camera/image/compressed", "fix": "/fix", "odom": "/odometry/filtered",
                           "imu": "/imu/data"}
    assert s["image_messages"] == 20 and s["frames"] == 20 and s["frames_over_rate"] == 0
    assert s["frames_no_fix_nearby"] == 0 and s["frames_undecodable"] == 0
    assert s["gps_fixes"] == 24 and s["gps_no_fix"] == 2          # 26 fixes at 5 Hz over 5 s, two without a fix
    assert s["odom_samples"] == 26 and s["imu_samples"] == 26 and s["imu_skipped"] == 0
    assert s["span_s"] == pytest.approx(4.75) and s["span_m"] == pytest.approx(SPEED * 4.6, abs=0.01)
    assert s["match_gap_s_max"] == pytest.approx(0.25)  # the frame at 0.75 s: no fix at 0.6 and 0.8 s

    tl = read_log(out)
    verify_log(out)
    assert tl.meta["source"] == "rosbag2-import" and tl.meta["time_source"] == "header"
    np.testing.assert_allclose(tl.frame_t_s, img_t, atol=1e-6)        # header stamps, in order, from 0 s
    lat, lon, valid = frame_positions(tl)
    assert valid.all()
    off = _metres_off(lat, lon, np.stack([SPEED * img_t, np.zeros_like(img_t)], axis=1))
    assert off.max() < 0.01                                            # matched to the fixes by header time
    jpegs = tl.frame_jpeg(tl.frame_id)
    assert all(j == tiny_jpeg(_colour(i), seed=i) for i, j in enumerate(jpegs))  # JPEG kept byte for byte
    q = tl.gps["quality"]
    assert np.sum(q == 0) == 2 and np.all(q[q > 0] == 1)
    np.testing.assert_allclose(tl.gps["hacc_m"][q > 0], np.sqrt(0.5))
    np.testing.assert_allclose(tl.odom["x_m"], SPEED * tl.odom["t_s"], atol=1e-6)
    np.testing.assert_allclose(tl.odom["v_mps"], SPEED)
    np.testing.assert_allclose(tl.odom["omega_radps"], 0.1)
    with sqlite3.connect(out / "log.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*), AVG(az_mps2), AVG(gz_radps) FROM imu").fetchone() == \
            pytest.approx((26, 9.81, 0.1))
    assert not (tmp_path / "log.partial").exists()
    assert main(["log", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["frames"] == 20 and info["frames_with_position"] == 20 and info["gps_fixes"] == 24


@pytest.mark.parametrize("kind", ["rgb8", "bgr8", "mono8", "png"])
def test_raw_and_png_images_are_converted(tmp_path, capsys, kind):
    write_bag(tmp_path / "bag", kind=kind, n_img=6, odom=False, imu=False)
    assert main(["log", "import-rosbag2", str(tmp_path / "bag"), "--out", str(tmp_path / "log")]) == 0
    text = capsys.readouterr().out
    assert "6 frames" in text and "times from the message header stamps" in text
    tl = read_log(tmp_path / "log")
    for i, jpeg in enumerate(tl.frame_jpeg(tl.frame_id)):
        rgb = decode_jpeg(jpeg).reshape(-1, 3).mean(axis=0)
        want = np.asarray(_colour(i), float)
        if kind == "mono8":
            want = np.full(3, want[0])
        np.testing.assert_allclose(rgb, want, atol=6)  # colours survive (channel order right)


def test_rate_subsampling_zero_stamps_and_a_gps_dropout(tmp_path, capsys):
    # a 10 Hz camera without header stamps: receive times are used for every topic; 4 Hz kept
    write_bag(tmp_path / "bag", n_img=40, img_hz=10.0, image_stamps=False, image_lag_s=0.0, odom=False, imu=False)
    assert main(["log", "import-rosbag2", str(tmp_path / "bag"), "--out", str(tmp_path / "log"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["time_source"] == "receive" and s["topics"]["odom"] is None and s["topics"]["imu"] is None
    tl = read_log(tmp_path / "log")
    assert s["frames"] == tl.frame_t_s.size == 16 and s["frames_over_rate"] == 24
    assert np.diff(tl.frame_t_s).min() >= 0.8 * 0.25 - 1e-9
    assert main(["log", "import-rosbag2", str(tmp_path / "bag"), "--out", str(tmp_path / "all"), "--rate-hz", "0",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 40
    # with header stamps required, the zero stamps are refused
    assert main(["log", "import-rosbag2", str(tmp_path / "bag"), "--out", str(tmp_path / "h"), "--time",
                 "header"]) == 2
    assert "without a header stamp" in capsys.readouterr().err
    # fixes 0..1.2 s lost: frames more than --max-gap-s from the nearest fix are not written
    write_bag(tmp_path / "gap", n_img=20, no_fix=range(0, 7), odom=False, imu=False)
    assert main(["log", "import-rosbag2", str(tmp_path / "gap"), "--out", str(tmp_path / "g"), "--max-gap-s", "0.3",
                 "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["frames_no_fix_nearby"] == 5 and s["frames"] == 15 and s["gps_no_fix"] == 7  # frames at 0..1 s


def test_map_from_imported_bag(tmp_path, capsys):
    write_bag(tmp_path / "bag", storage="mcap", n_img=60, odom=False, imu=False)  # 15 s, 30 m east
    assert main(["log", "import-rosbag2", str(tmp_path / "bag"), "--out", str(tmp_path / "log")]) == 0
    capsys.readouterr()
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{tmp_path / "none"}"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map"),
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["nodes"] == 10 and rep["components"] == 1  # 29.5 m driven, one node per 3 m


def _err(capsys) -> str:
    return capsys.readouterr().err


def test_topic_choice_errors(tmp_path, capsys):
    bag = tmp_path / "bag"
    write_bag(bag, n_img=4, extra_topics=[("/front/image_raw/compressed", "sensor_msgs/msg/CompressedImage")])
    run = ["log", "import-rosbag2", str(bag), "--out", str(tmp_path / "log")]
    assert main(run) == 2
    err = _err(capsys)
    assert "several image topics" in err and "/camera/image/compressed" in err and "/front/image_raw/compressed" in err
    assert main(run + ["--image-topic", "/fix"]) == 2
    assert "--image-topic /fix: the topic's type is sensor_msgs/msg/NavSatFix" in _err(capsys)
    assert main(run + ["--image-topic", "/camera/image/compressed", "--fix-topic", "/gps/fix"]) == 2
    assert "--fix-topic /gps/fix: no such topic" in _err(capsys)
    assert main(run + ["--image-topic", "/front/image_raw/compressed"]) == 2
    assert "the image topic has no messages" in _err(capsys)
    assert main(run + ["--image-topic", "/camera/image/compressed", "--odom-topic", "none", "--imu-topic", "none",
                       "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["topics"]["odom"] is None and s["odom_samples"] == 0 and read_log(tmp_path / "log").odom["t_s"].size == 0
    assert main(run + ["--image-topic", "/camera/image/compressed"]) == 2  # the log exists now
    assert "already exists (pass --overwrite" in _err(capsys)
    assert main(run + ["--image-topic", "/camera/image/compressed", "--rate-hz", "2", "--overwrite", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 2 and read_log(tmp_path / "log").frame_t_s.size == 2
    assert not (tmp_path / "log.replaced").exists()


def test_bad_bags(tmp_path, capsys):
    def run(bag, *extra):
        out = tmp_path / f"out-{bag.name}"
        rc = main(["log", "import-rosbag2", str(bag), "--out", str(out), *extra])
        assert not out.exists() and not out.with_name(out.name + ".partial").exists()
        return rc, _err(capsys)

    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(tiny_jpeg((1, 2, 3)))
    assert run(folder) == (2, f"robot-app: error: {folder}: not a ROS 2 bag folder (no metadata.yaml)\n")
    assert "no such file or folder" in run(tmp_path / "missing")[1]
    ros1 = tmp_path / "drive.bag"
    ros1.write_bytes(b"#ROSBAG V2.0\n")
    assert "a ROS 1 bag" in run(ros1)[1]
    ros1_folder = tmp_path / "ros1-drives"
    ros1_folder.mkdir()
    (ros1_folder / "drive.bag").write_bytes(b"#ROSBAG V2.0\n")
    assert f"no metadata.yaml, but 1 ROS 1 bag(s) (drive.bag); convert each first (rosbags-convert --src " \
           f"{ros1_folder / 'drive.bag'}" in run(ros1_folder)[1]
    good = tmp_path / "good"
    write_bag(good, n_img=4)
    assert run(good, "--rate-hz", "-1")[1] == ("robot-app: error: --rate-hz: expected >= 0 frames per second (0 "
                                               "keeps every image), got -1.0\n")
    assert run(good, "--max-gap-s", "nan")[1] == "robot-app: error: --max-gap-s: expected > 0 seconds, got nan\n"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metadata.yaml").write_text("rosbag2_bagfile_information: [\n")
    assert "not a readable ROS 2 bag" in run(broken)[1]

    empty = tmp_path / "empty"
    with Writer(empty, version=9) as w:
        w.add_connection("/camera/image/compressed", "sensor_msgs/msg/CompressedImage", typestore=TS)
    assert "the bag holds no messages" in run(empty)[1]

    enc = tmp_path / "enc"
    write_bag(enc, kind="yuv422", n_img=4)
    rc, err = run(enc)
    assert rc == 2 and "image encoding 'yuv422' (message 0) is not supported; supported: rgb8, bgr8, mono8" in err

    nofix = tmp_path / "nofix"
    write_bag(nofix, n_img=4, no_fix=range(100))
    assert "no GPS fix in the bag" in run(nofix)[1]

    clocks = tmp_path / "clocks"  # the fixes stamped on another clock, an hour off
    write_bag(clocks, n_img=4, fix_offset_s=3600.0)
    assert "no image within 1.0 s of a GPS fix" in run(clocks)[1]

    corrupt = tmp_path / "corrupt"  # a fix cut short
    with Writer(corrupt, version=9) as w:
        ci = w.add_connection("/camera/image/compressed", "sensor_msgs/msg/CompressedImage", typestore=TS)
        cf = w.add_connection("/fix", "sensor_msgs/msg/NavSatFix", typestore=TS)
        w.write(ci, T0_NS, TS.serialize_cdr(_image_msg(0, T0_NS, "jpeg"), "sensor_msgs/msg/CompressedImage"))
        w.write(cf, T0_NS, TS.serialize_cdr(_fix_msg(T0_NS, 0.0), "sensor_msgs/msg/NavSatFix")[:30])
    assert "/fix: message 0 does not deserialise as sensor_msgs/msg/NavSatFix" in run(corrupt)[1]

    # like the pntos-cobra-datasets-ros bag: custom aspn23 messages, no images
    aspn = tmp_path / "aspn"
    with Writer(aspn, version=8) as w:
        for topic, mt in [("/sensor/ublox_ZED_F9T/position", "aspn23_ros_interfaces/msg/MeasurementPosition"),
                          ("/sensor/vn_100/imu", "aspn23_ros_interfaces/msg/MeasurementImu")]:
            c = w.add_connection(topic, mt, msgdef="int32 x\n", rihs01="RIHS01_" + "0" * 64)
            w.write(c, T0_NS, b"\x00\x01\x00\x00\x01\x00\x00\x00")
    rc, err = run(aspn)
    assert rc == 2 and "no image topic (sensor_msgs/msg/CompressedImage or sensor_msgs/msg/Image) in the bag" in err
    assert "/sensor/vn_100/imu (aspn23_ros_interfaces/msg/MeasurementImu, 1 messages)" in err


def test_an_interrupted_or_failed_write_leaves_no_log(tmp_path, capsys):
    bag = tmp_path / "bag"
    write_bag(bag, n_img=20)
    out = tmp_path / "log"

    def ctrl_c(phase, k):
        if phase == "write" and k == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_rosbag2(bag, out, on_message=ctrl_c)
    assert not out.exists() and not (tmp_path / "log.partial").exists()
    # a partial log left by a killed import is replaced by the next one
    (tmp_path / "log.partial").mkdir()
    (tmp_path / "log.partial" / "log.sqlite").write_bytes(b"half")
    assert main(["log", "import-rosbag2", str(bag), "--out", str(out)]) == 0
    assert read_log(out).frame_t_s.size == 20 and not (tmp_path / "log.partial").exists()
    # an interruption while replacing an old log keeps the old one
    with pytest.raises(KeyboardInterrupt):
        import_rosbag2(bag, out, overwrite=True, rate_hz=2.0, on_message=ctrl_c)
    assert read_log(out).frame_t_s.size == 20 and not (tmp_path / "log.partial").exists()
    # --out naming a folder that is not a log is never replaced
    other = tmp_path / "docs"
    other.mkdir()
    assert main(["log", "import-rosbag2", str(bag), "--out", str(other), "--overwrite"]) == 2
    assert "not a traversal log" in capsys.readouterr().err and other.is_dir()
