"""The unit files pass `systemd-analyze verify` (when the tool is on the machine) and say what we rely on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"


def test_service_unit_declares_notify_watchdog_and_hardening():
    text = (UNITS / "robot-app.service").read_text()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "PrivateTmp=yes", "SupplementaryGroups=dialout video input", "CacheDirectory=robot-app",
                 "NUMBA_CACHE_DIR=/var/cache/robot-app/numba", " run", "RuntimeDirectory=robot-app",
                 "RuntimeDirectoryMode=0750"):
        assert line in text, line


def test_service_unit_builds_the_compiled_kernels_where_the_service_looks_for_them():
    """ExecStartPre builds them when stale (a failure tolerated: "-"), into [paths] kernels_dir's default,
    which lies in the unit's CacheDirectory (writable under ProtectSystem=strict)."""
    from robot_app.config import Config

    text = (UNITS / "robot-app.service").read_text()
    pre = [ln for ln in text.splitlines() if ln.startswith("ExecStartPre=")]
    assert pre == ["ExecStartPre=-/opt/robot-app/venv/bin/robot-app --config /etc/robot-app/config.toml "
                   "kernels build --if-stale"]
    assert Config().paths.kernels_dir.startswith("/var/cache/robot-app/")
    assert "TimeoutStartSec=180" in text


def test_kiosk_unit_passes_the_session_secret_to_the_page():
    """The kiosk reads the per-start session token ([ui] secret_file's default) into the page's URL fragment,
    waits for it, and restarts with the service (a new token each start)."""
    from robot_app.config import Config

    text = (UNITS / "robot-app-kiosk.service").read_text()
    secret = Config().ui.secret_file
    assert secret == "/run/robot-app/ui-secret"
    assert f"#token=$(cat {secret})" in text and f"[ -s {secret} ]" in text
    assert "PartOf=robot-app.service" in text.split("[Service]")[0]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
@pytest.mark.parametrize("unit", ["robot-app.service", "robot-app-kiosk.service"])
def test_units_verify(tmp_path, unit):
    exe = Path(sys.executable).with_name("robot-app")
    text = (UNITS / unit).read_text().replace("/opt/robot-app/venv/bin/robot-app", str(exe))
    if "chromium" in text and shutil.which("chromium") is None:
        pytest.skip("chromium is not installed: the kiosk unit's ExecStart cannot be checked")
    (tmp_path / unit).write_text(text)
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / unit)], capture_output=True,
                         text=True, cwd=tmp_path)
    # verify prints "UNIT: problem" for each problem of the unit (other lines are about the host)
    problems = [ln for ln in (res.stdout + res.stderr).splitlines() if unit in ln]
    assert res.returncode == 0 and not problems, res.stdout + res.stderr


def test_service_unit_is_hardened_but_reaches_its_devices_and_directories():
    text = (UNITS / "robot-app.service").read_text()
    for line in (
        "CapabilityBoundingSet=\n",
        "DevicePolicy=closed",
        "DeviceAllow=char-ttyUSB rw",
        "DeviceAllow=char-ttyACM rw",
        "DeviceAllow=char-video4linux rw",
        "DeviceAllow=char-input r",
        "SystemCallFilter=@system-service",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "IPAddressAllow=localhost",
        "ProtectProc=invisible",
        "StateDirectory=robot-app",
        "LogsDirectory=robot-app",
        "CacheDirectory=robot-app",
        "RuntimeDirectory=robot-app",
    ):
        assert line in text, line
    # the ones left out are said so, with the reason
    for left_out in ("MemoryDenyWriteExecute", "PrivateUsers", "PrivateNetwork", "ProcSubset"):
        assert f"{left_out} (" in text and f"\n{left_out}=" not in text, left_out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_service_unit_scores_at_most_3_5_in_systemd_analyze_security(tmp_path):
    unit = tmp_path / "robot-app.service"
    unit.write_text((UNITS / "robot-app.service").read_text())
    res = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                         text=True, cwd=tmp_path)
    line = [ln for ln in res.stdout.splitlines() if "Overall exposure level" in ln]
    if not line:
        pytest.skip(f"this systemd-analyze has no offline security check: {res.stderr.strip()[:200]}")
    score = float(line[0].split(":")[1].split()[0])
    assert score <= 3.5, res.stdout
