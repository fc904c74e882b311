"""The ``[serial]`` config section: defaults and bad values named by key."""

from __future__ import annotations

import pytest

from robot_app.config import Config, ConfigError, config_from_mapping


def test_defaults_follow_the_protocol_document():
    s = Config().serial
    assert (s.base_port, s.base_baud, s.gps_baud, s.imu_baud) == ("/dev/jackal", 115200, 57600, 115200)
    assert s.gps_source == "mcu" and s.gps_ignore_checksum_for == []


@pytest.mark.parametrize("key,value,match", [
    ("base_baud", 1234, "base_baud.*not one of"),
    ("gps_source", "usb", "gps_source.*not one of"),
    ("imu_source", "um7", "imu_source.*not one of"),
    ("reconnect_min_s", 0.0, "reconnect_min_s.*minimum"),
    ("handshake_timeout_s", 100.0, "handshake_timeout_s.*maximum"),
    ("gps_ignore_checksum_for", "GGA", "gps_ignore_checksum_for.*list of str"),
    ("base_port", 5, "base_port.*string"),
    ("imu_rate_hz", 5000.0, "imu_rate_hz.*maximum"),
    ("baud", 115200, "unknown key"),
])
def test_bad_values_name_the_key(key, value, match):
    with pytest.raises(ConfigError, match=match):
        config_from_mapping({"serial": {key: value}}, origin="robot.toml")


def test_good_values_are_kept():
    c = config_from_mapping({"serial": {"gps_source": "serial", "gps_ignore_checksum_for": ["GGA"]}})
    assert c.serial.gps_source == "serial" and c.serial.gps_ignore_checksum_for == ["GGA"]
