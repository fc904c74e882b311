"""ROS 1 message codecs against the independent rosbags serialiser (golden bytes and md5 sums)."""

from __future__ import annotations

import numpy as np
import pytest
from fb_msgdefs import typestore

from firmware_bridge import ros1
from firmware_bridge.errors import FrameError

rosbags = pytest.importorskip("rosbags")


@pytest.fixture(scope="module")
def store():
    return typestore()


def _ros(store, type_name):
    pkg, name = type_name.split("/")
    return store.types[f"{pkg}/msg/{name}"], f"{pkg}/msg/{name}"


@pytest.mark.parametrize("cls", list(ros1.MESSAGE_TYPES.values()), ids=lambda c: c.TYPE)
def test_md5_matches_rosbags(store, cls):
    _, full = _ros(store, cls.TYPE)
    assert store.generate_msgdef(full)[1] == cls.MD5


def _header(store, seq=7, sec=1700000000, nsec=123456789, frame="base_link"):
    Header, _ = _ros(store, "std_msgs/Header")
    Time, _ = _ros(store, "builtin_interfaces/Time")  # rosbags' in-memory type of ROS 1 `time`
    return Header(seq=seq, stamp=Time(sec=sec, nanosec=nsec), frame_id=frame)


def _golden(store, type_name, **fields):
    cls, full = _ros(store, type_name)
    return bytes(store.serialize_ros1(cls(**fields), full))


def test_drive_golden(store):
    ours = ros1.Drive(ros1.Drive.MODE_VELOCITY, 1.5, -2.25).serialize()
    ref = _golden(store, "jackal_msgs/Drive", mode=0, drivers=np.array([1.5, -2.25], dtype=np.float32))
    assert ours == ref and len(ours) == 9
    assert ros1.Drive.deserialize(ref) == ros1.Drive(0, 1.5, -2.25)


def test_feedback_golden(store):
    DF, _ = _ros(store, "jackal_msgs/DriveFeedback")
    vals = [(0.5, 0.25, 30.0, 31.5, 2.0, 100.5, False), (0.75, -0.25, 29.0, 30.5, -2.0, -50.25, True)]
    ref = _golden(store, "jackal_msgs/Feedback", header=_header(store),
                  drivers=[DF(*v) for v in vals], pcb_temperature=35.5, mcu_temperature=40.25,
                  commanded_mode=0, actual_mode=-1)
    ours = ros1.Feedback(ros1.Header(7, 1700000000, 123456789, "base_link"),
                         tuple(ros1.DriveFeedback(*v) for v in vals), 35.5, 40.25, 0, -1)
    assert ours.serialize() == ref
    assert ros1.Feedback.deserialize(ref) == ours


def test_status_golden(store):
    Dur, _ = _ros(store, "builtin_interfaces/Duration")
    ref = _golden(store, "jackal_msgs/Status", header=_header(store), hardware_id="jackal-A200",
                  mcu_uptime=Dur(sec=3600, nanosec=5), connection_uptime=Dur(sec=60, nanosec=0),
                  drivers_active=True, driver_external_stop_present=True, driver_external_stop_stopped=False,
                  measured_battery=27.5, measured_12v=12.0, measured_5v=5.0, drive_current=1.5,
                  user_current=0.25, computer_current=2.0, total_current=3.75, total_current_peak=10.0,
                  total_power_consumed=123.456)
    ours = ros1.Status(ros1.Header(7, 1700000000, 123456789, "base_link"), "jackal-A200", (3600, 5), (60, 0),
                       True, True, False, 27.5, 12.0, 5.0, 1.5, 0.25, 2.0, 3.75, 10.0, 123.456)
    assert ours.serialize() == ref
    assert ros1.Status.deserialize(ref) == ours


def test_topicinfo_sentence_imu_mag_bool_time_golden(store):
    ref = _golden(store, "rosserial_msgs/TopicInfo", topic_id=101, topic_name="feedback",
                  message_type="jackal_msgs/Feedback", md5sum=ros1.Feedback.MD5, buffer_size=512)
    ours = ros1.TopicInfo(101, "feedback", "jackal_msgs/Feedback", ros1.Feedback.MD5, 512)
    assert ours.serialize() == ref and ros1.TopicInfo.deserialize(ref) == ours

    line = "$GPRMC,113258,A,3238.9148,N,10822.4466,W,005.3,247.1,181022,009.3,E*6B"
    ref = _golden(store, "nmea_msgs/Sentence", header=_header(store, frame="gps"), sentence=line)
    ours = ros1.Sentence(ros1.Header(7, 1700000000, 123456789, "gps"), line)
    assert ours.serialize() == ref and ros1.Sentence.deserialize(ref) == ours

    Q, _ = _ros(store, "geometry_msgs/Quaternion")
    V, _ = _ros(store, "geometry_msgs/Vector3")
    cov = np.arange(9, dtype=np.float64)
    ref = _golden(store, "sensor_msgs/Imu", header=_header(store, frame="imu_link"),
                  orientation=Q(x=0.1, y=0.2, z=0.3, w=0.9), orientation_covariance=cov,
                  angular_velocity=V(x=0.01, y=-0.02, z=0.5), angular_velocity_covariance=cov * 2,
                  linear_acceleration=V(x=0.1, y=0.0, z=9.81), linear_acceleration_covariance=cov * 3)
    ours = ros1.Imu(ros1.Header(7, 1700000000, 123456789, "imu_link"), (0.1, 0.2, 0.3, 0.9), tuple(cov),
                    (0.01, -0.02, 0.5), tuple(cov * 2), (0.1, 0.0, 9.81), tuple(cov * 3))
    assert ours.serialize() == ref and ros1.Imu.deserialize(ref) == ours

    ref = _golden(store, "sensor_msgs/MagneticField", header=_header(store, frame="imu_link"),
                  magnetic_field=V(x=2e-5, y=-1e-5, z=4e-5), magnetic_field_covariance=cov)
    ours = ros1.MagneticField(ros1.Header(7, 1700000000, 123456789, "imu_link"), (2e-5, -1e-5, 4e-5), tuple(cov))
    assert ours.serialize() == ref and ros1.MagneticField.deserialize(ref) == ours

    assert ros1.Bool(True).serialize() == _golden(store, "std_msgs/Bool", data=True)
    Tm, _ = _ros(store, "builtin_interfaces/Time")
    assert ros1.Time(5, 6).serialize() == _golden(store, "std_msgs/Time", data=Tm(sec=5, nanosec=6))


@pytest.mark.parametrize("cls", [ros1.Feedback, ros1.Status, ros1.Imu, ros1.Sentence, ros1.TopicInfo, ros1.Drive])
def test_truncated_or_padded_payload_is_frame_error(cls):
    good = cls().serialize()
    for cut in range(len(good)):
        with pytest.raises(FrameError):
            cls.deserialize(good[:cut])
    with pytest.raises(FrameError, match="trailing"):
        cls.deserialize(good + b"\x00")


def test_bad_utf8_string_is_frame_error():
    bad = ros1.Sentence(sentence="ab").serialize()[:-2] + b"\xff\xfe"
    with pytest.raises(FrameError, match="UTF-8"):
        ros1.Sentence.deserialize(bad)
