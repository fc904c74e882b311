"""The onboard process: systemd notify protocol, supervised restarts, SIGTERM, simulated devices."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_app.service.sdnotify import Notifier
from robot_app.service.supervisor import Supervisor

REPO = Path(__file__).resolve().parents[2]


def test_notifier_is_a_no_op_without_systemd(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = Notifier()
    assert not n.enabled and n.ready() is False


@pytest.mark.parametrize("abstract", [False, True])
def test_notifier_sends_datagrams(tmp_path, abstract):
    name = f"@robot-app-test-{os.getpid()}" if abstract else str(tmp_path / "n.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name[1:] if abstract else name)
    try:
        n = Notifier(name)
        assert n.ready("all good") and n.watchdog()
        assert sock.recv(4096) == b"READY=1\nSTATUS=all good"
        assert sock.recv(4096) == b"WATCHDOG=1"
        n.close()
    finally:
        sock.close()


def test_supervisor_restarts_a_crashed_component_and_reports_it():
    downs = []

    class Flaky:
        name = "flaky"
        runs = 0

        async def run(self):
            Flaky.runs += 1
            if Flaky.runs < 3:
                raise RuntimeError(f"boom {Flaky.runs}")
            await asyncio.Event().wait()

    async def main():
        sup = Supervisor(min_backoff_s=0.01, max_backoff_s=0.05, on_down=lambda n, e: downs.append((n, str(e))))
        sup.start(Flaky())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if Flaky.runs >= 3:
                break
        st = sup.states["flaky"]
        assert st.restarts == 2 and st.state == "running" and st.last_error == "RuntimeError: boom 2"
        assert "flaky running (2 restarts)" in sup.summary()
        await sup.stop()
        assert st.state == "stopped"

    asyncio.run(main())
    assert downs == [("flaky", "boom 1"), ("flaky", "boom 2")]


class NotifyListener:
    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.5)
        self.messages: list[dict] = []

    def wait_for(self, predicate, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                raw = self.sock.recv(65536).decode()
            except socket.timeout:
                continue
            msg = dict(line.split("=", 1) for line in raw.splitlines())
            self.messages.append(msg)
            if predicate(msg):
                return msg
        raise AssertionError(f"no matching notification in {timeout_s} s; got {self.messages[-5:]}")

    def close(self):
        self.sock.close()


def start_app(tmp_path: Path, config_text: str, **env):
    conf = tmp_path / "config.toml"
    conf.write_text(config_text)
    listener = NotifyListener(tmp_path / "notify.sock")
    proc = subprocess.Popen([sys.executable, "-m", "robot_app", "--config", str(conf), "run"], cwd=REPO,
                            env=dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"), **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, listener


def stop_app(proc, listener):
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)  # a generous bound on a loaded machine: only a hang fails
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        listener.sock.settimeout(0.0)
        while True:  # drain what the process said while stopping
            try:
                raw = listener.sock.recv(65536).decode()
            except (BlockingIOError, socket.timeout):
                break
            listener.messages.append(dict(line.split("=", 1) for line in raw.splitlines()))
        listener.close()
    return proc.returncode, time.monotonic() - t0, out


def test_ready_without_devices_then_sigterm_exits_0(tmp_path):
    proc, notify = start_app(
        tmp_path,
        f'[serial]\nbase_port = "{tmp_path / "no-jackal"}"\ngps_source = "mcu"\n'
        f'imu_source = "mcu"\n[paths]\nmodels_dir = "{tmp_path / "models"}"\n[ui]\nport = 0\n',
    )
    try:
        ready = notify.wait_for(lambda m: m.get("READY") == "1", 60)
        assert "MCU link DOWN" in ready["STATUS"]
        assert "models missing: clip, vnm, text-embed, llm" in ready["STATUS"]
        status = notify.wait_for(lambda m: "control running" in m.get("STATUS", ""), 10)
        assert "base running" in status["STATUS"] or "base restarting" in status["STATUS"]
    finally:
        rc, took, out = stop_app(proc, notify)
    assert rc == 0, out  # stop_app gives up (rc != 0) if SIGTERM does not end it; no wall-clock bound here
    assert any(m.get("STOPPING") == "1" for m in notify.messages)
    assert "model vnm: missing" in out and "GPS straight-line controller" in out


def test_run_prints_the_touchscreen_address_but_not_the_token(tmp_path):
    """What `robot-app run` prints goes to the journal: the address, and where the kiosk finds the token."""
    import selectors

    proc, notify = start_app(tmp_path, f'[serial]\nbase_port = "{tmp_path / "no-jackal"}"\n'
                                       f'[paths]\nmodels_dir = "{tmp_path / "models"}"\n[ui]\nport = 0\n')
    seen = []
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(x.startswith("touchscreen:") for x in seen):
            if sel.select(timeout=1.0):
                line = proc.stdout.readline()
                if not line:
                    break
                seen.append(line)
    finally:
        rc, _took, out = stop_app(proc, notify)
    text = "".join(seen) + out
    assert rc == 0, text
    assert re.search(r"^touchscreen: http://127\.0\.0\.1:\d+/ \(session token in ", text, re.M), text
    assert "token=" not in text.replace("as #token=)", "")  # never the token itself


def test_app_connects_to_the_simulated_robot(tmp_path):
    ports = tmp_path / "ports"
    ports.mkdir()
    sim = subprocess.Popen([sys.executable, "-m", "robot_app", "sim", "devices", "--dir", str(ports), "--no-gps",
                            "--no-imu", "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = sim.stdout.readline()
        assert line, sim.stderr.read()
        base_port = json.loads(line)["jackal"]
        proc, notify = start_app(tmp_path, f'[serial]\nbase_port = "{base_port}"\n'
                                           f'[paths]\nmodels_dir = "{tmp_path / "models"}"\n[ui]\nport = 0\n')
        try:
            notify.wait_for(lambda m: m.get("READY") == "1", 60)
            notify.wait_for(lambda m: "MCU link up" in m.get("STATUS", ""), 20)
        finally:
            rc, took, out = stop_app(proc, notify)
        assert rc == 0, out
    finally:
        sim.send_signal(signal.SIGINT)
        try:
            sim.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.communicate()
