"""Drivers built from the config sections."""

from __future__ import annotations

import dataclasses

import pytest

from firmware_bridge.base import JackalBase
from firmware_bridge.factory import drivers_from_config
from firmware_bridge.gps import NmeaGps
from firmware_bridge.imu import MipImu
from robot_app.config import Config, config_from_mapping


def test_defaults_give_only_the_base():
    c = Config()
    d = drivers_from_config(c.serial, c.robot)
    assert list(d) == ["base"] and isinstance(d["base"], JackalBase)
    assert d["base"].port == "/dev/jackal" and d["base"].baud == 115200


def test_separate_gps_and_imu():
    c = config_from_mapping({"serial": {"gps_source": "serial", "imu_source": "mip", "imu_rate_hz": 250.0,
                                        "gps_ignore_checksum_for": ["GGA"]}})
    d = drivers_from_config(c.serial, c.robot)
    assert isinstance(d["gps"], NmeaGps) and d["gps"].baud == 57600
    assert isinstance(d["imu"], MipImu) and d["imu"].port == "/dev/microstrain" and d["imu"].decimation == 4
    assert d["gps"].decoder._ignore_cs == {"GGA"}


def test_unknown_source_is_refused():
    c = Config()
    with pytest.raises(ValueError, match="gps_source"):
        drivers_from_config(dataclasses.replace(c.serial, gps_source="usb"), c.robot)
