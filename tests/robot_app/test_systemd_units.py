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
