"""Byte-exact ROS 2 messages: every type of the ``ros2`` backend serialises (with its 4-byte CDR
encapsulation header) to exactly what the independent ``rosbags`` serialiser writes for the same
values, and each reads the other's bytes back to the same values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

pytest.importorskip("cyclonedds")
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from firmware_bridge.ros2 import msgs  # noqa: E402

TS = get_typestore(Stores.ROS2_HUMBLE)
_NUMPY = {"float64": np.float64, "float32": np.float32, "uint8": np.uint8, "int8": np.int8, "uint16": np.uint16,
          "int32": np.int32, "uint32": np.uint32}


def _random_value(rng: random.Random, base: str):
    if base in ("float64", "float32"):
        v = rng.choice([0.0, -0.0, 1.5, -2.25, 1e-300 if base == "float64" else 1e-30, rng.uniform(-1e3, 1e3),
                        math.inf, 12345.678])
        return float(np.float32(v)) if base == "float32" else v
    if base == "bool":
        return rng.random() < 0.5
    if base == "string":
        return rng.choice(["", "base_link", "j100_0000/gps_0_link", "ünïcödé", "x" * 37])
    lo, hi = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int32": (-2**31, 2**31 - 1),
              "uint32": (0, 2**32 - 1)}[base]
    return rng.choice([lo, hi, 0, rng.randint(lo, hi)])


def _random_ours(cls, rng: random.Random):
    """A random instance of our IDL class, filled field by field from rosbags' definition of the type."""
    ros_name = next(k for k, c in msgs.MESSAGE_TYPES.items() if c is cls)
    kwargs = {}
    for name, (kind, spec) in TS.fielddefs[ros_name][1]:
        if kind.name == "NAME":
            kwargs[name] = _random_ours(msgs.MESSAGE_TYPES[spec], rng)
        elif kind.name == "BASE":
            kwargs[name] = _random_value(rng, spec[0])
        else:
            (_, (base, _)), n = spec
            count = n if kind.name == "ARRAY" else rng.choice([0, 1, 3, 17])
            vals = [_random_value(rng, base) for _ in range(count)]
            kwargs[name] = vals
    return cls(**kwargs)


def _to_rosbags(obj, ros_name: str):
    cls = TS.types[ros_name]
    kwargs = {}
    for name, (kind, spec) in TS.fielddefs[ros_name][1]:
        v = getattr(obj, name)
        if kind.name == "NAME":
            kwargs[name] = _to_rosbags(v, spec)
        elif kind.name == "BASE":
            kwargs[name] = v
        else:
            base = spec[0][1][0]
            kwargs[name] = np.array(v, _NUMPY[base])
    return cls(**kwargs)


def _from_rosbags(obj, ros_name: str):
    kwargs = {}
    for name, (kind, spec) in TS.fielddefs[ros_name][1]:
        v = getattr(obj, name)
        if kind.name == "NAME":
            kwargs[name] = _from_rosbags(v, spec)
        elif kind.name == "BASE":
            kwargs[name] = v.item() if hasattr(v, "item") else v
        else:
            kwargs[name] = [x.item() for x in v]
    return msgs.MESSAGE_TYPES[ros_name](**kwargs)


@pytest.mark.parametrize("ros_name", sorted(msgs.MESSAGE_TYPES))
def test_fields_match_the_ros2_definition(ros_name):
    cls = msgs.MESSAGE_TYPES[ros_name]
    ours = [f for f in cls.__dataclass_fields__]
    assert ours == [name for name, _ in TS.fielddefs[ros_name][1]]
    assert cls.__idl_typename__ == msgs.dds_type_name(ros_name)


@pytest.mark.parametrize("ros_name", sorted(msgs.MESSAGE_TYPES))
def test_cdr_bytes_equal_rosbags_both_ways(ros_name):
    cls = msgs.MESSAGE_TYPES[ros_name]
    rng = random.Random(ros_name)
    samples = [cls()] + [_random_ours(cls, rng) for _ in range(6)]
    for ours in samples:
        wire = ours.serialize()
        assert wire[:4] == b"\x00\x01\x00\x00"  # CDR_LE, options 0: what ROS 2's rmw layers write
        theirs = bytes(TS.serialize_cdr(_to_rosbags(ours, ros_name), ros_name))
        assert wire == theirs
        back = _from_rosbags(TS.deserialize_cdr(wire, ros_name), ros_name)
        assert back == ours
        assert cls.deserialize(theirs) == ours


def test_image_data_may_be_written_from_bytes():
    img = msgs.CompressedImage(msgs.Header(msgs.Time(3, 4), "cam"), "jpeg", b"\xff\xd8\x00\x01")
    wire = img.serialize()
    assert msgs.CompressedImage.deserialize(wire).data == [0xFF, 0xD8, 0, 1]
    ref = TS.types["sensor_msgs/msg/CompressedImage"](
        _to_rosbags(msgs.Header(msgs.Time(3, 4), "cam"), "std_msgs/msg/Header"), "jpeg",
        np.array([0xFF, 0xD8, 0, 1], np.uint8))
    assert wire == bytes(TS.serialize_cdr(ref, "sensor_msgs/msg/CompressedImage"))


def test_known_bytes_of_a_twist():
    t = msgs.Twist(msgs.Vector3(0.5, 0.0, 0.0), msgs.Vector3(0.0, 0.0, -0.25))
    assert t.serialize().hex() == ("00010000" + "000000000000e03f" + "00" * 16 + "00" * 16 + "000000000000d0bf")


def test_time_from_seconds_and_type_names():
    t = msgs.Time.from_seconds(1700000000.25)
    assert (t.sec, t.nanosec) == (1700000000, 250000000) and t.to_seconds() == 1700000000.25
    assert msgs.dds_type_name("sensor_msgs/msg/NavSatFix") == "sensor_msgs::msg::dds_::NavSatFix_"
    with pytest.raises(ValueError, match="package/msg/Name"):
        msgs.dds_type_name("sensor_msgs/NavSatFix")
