"""``robot-app bench service-memory``: the service's resident memory at idle, with the compiled walk-search
kernels and with numba's JIT kernels.

What it runs, as on the robot: the simulated devices (``robot-app sim devices``) in one child process and
the service (``robot-app run``, no camera, the touchscreen API on a free loopback port) in another, with the
shipped simulator models in ``[paths] models_dir`` (the idle service opens no model: CLIP and the VNM open
on their first use, so the figure does not depend on them). Once both warm-up steps are logged (route
planner and task planner: the service is then as loaded as it stays while idle) it samples the service's
``VmRSS`` (``/proc/PID/status``) every 0.25 s for ``idle_s``; it also records whether LLVM is mapped into
the process (``libllvmlite`` in ``/proc/PID/maps``) and each warm-up step's time from the log. The compiled
kernels are built first, into the run's temporary folder (``robot-app kernels build``), unless
``kernels_dir`` names a current build. Linux only (``/proc``).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from core.machine import load_average_1m

_STEP = re.compile(r"warm-up: (.+) loaded in ([0-9.]+) s")
_FAILED = re.compile(r"warm-up of the (.+) failed")
_CONFIG = """\
[paths]
models_dir = {models!r}
maps_dir = {tmp!r}
logs_dir = {tmp!r}
kernels_dir = {kernels!r}
[serial]
base_port = {port!r}
[ui]
port = 0
secret_file = {secret!r}
"""


class BenchError(RuntimeError):
    """A child process did not come up (its last log lines are in the message)."""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "robot_app", *args]


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _llvm_mapped(pid: int) -> bool:
    try:
        return "libllvmlite" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


class _LogReader(threading.Thread):
    """Collects a child's stderr lines (the service logs at INFO) and the warm-up steps in them."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []
        self.steps: dict[str, float | None] = {}

    def run(self) -> None:
        for line in self.stream:
            self.lines.append(line.rstrip())
            if m := _STEP.search(line):
                self.steps[m.group(1)] = float(m.group(2))
            elif m := _FAILED.search(line):
                self.steps[m.group(1)] = None

    def tail(self, n: int = 8) -> str:
        return "\n".join(self.lines[-n:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _measure(config: Path, *, idle_s: float, timeout_s: float) -> dict:
    proc = subprocess.Popen(_cli("--config", str(config), "--log-level", "INFO", "run"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    reader = _LogReader(proc.stderr)
    reader.start()
    try:
        t0 = time.monotonic()
        while len(reader.steps) < 2:  # the route planner and the task planner
            if proc.poll() is not None:
                raise BenchError(f"the service exited ({proc.returncode}):\n{reader.tail()}")
            if time.monotonic() - t0 > timeout_s:
                raise BenchError(f"the service did not finish its warm-up within {timeout_s:.0f} s:\n{reader.tail()}")
            time.sleep(0.1)
        warm_s = time.monotonic() - t0
        samples = []
        end = time.monotonic() + idle_s
        while time.monotonic() < end:
            kib = _rss_kib(proc.pid)
            if kib is not None:
                samples.append(kib / 1024.0)
            time.sleep(0.25)
        if not samples:
            raise BenchError("no VmRSS sample (is /proc mounted?)")
        backend = next((ln.split("walk search: ", 1)[1] for ln in reader.lines if "walk search: " in ln), "")
        return {"idle_rss_mib_median": statistics.median(samples), "idle_rss_mib_max": max(samples),
                "samples": len(samples), "llvm_mapped": _llvm_mapped(proc.pid), "warm_up_steps_s": reader.steps,
                "start_to_warm_s": round(warm_s, 2), "kernels_log": backend}
    finally:
        _stop(proc)
        reader.join(timeout=5)


def _wait_devices(dev: Path, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    t0 = time.monotonic()
    while not all((dev / n).exists() for n in ("jackal", "gps", "imu")):
        if proc.poll() is not None or time.monotonic() - t0 > timeout_s:
            raise BenchError(f"the simulated devices did not come up in {dev}")
        time.sleep(0.1)


def run(models_dir: str, *, backends=("compiled", "jit"), kernels_dir: str | None = None, idle_s: float = 10.0,
        timeout_s: float = 180.0, progress: Callable[[str], None] | None = None) -> dict:
    """Measure the idle service once per backend; returns a JSON-ready dict (MiB, seconds)."""
    from core import _search_aot

    say = progress or (lambda _m: None)
    if not Path("/proc/self/status").exists():
        raise BenchError("bench service-memory reads /proc: Linux only")
    out = {"models_dir": str(models_dir), "idle_s": idle_s, "load_1m_before": load_average_1m(), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="robot-bench-mem-") as tmp:
        tmp_p = Path(tmp)
        compiled = kernels_dir
        if "compiled" in backends and (compiled is None or _search_aot.stamp_problem(compiled) is not None):
            compiled = str(tmp_p / "kernels")
            say(f"building the compiled kernels into {compiled}")
            res = subprocess.run(_cli("kernels", "build", "--dir", compiled), capture_output=True, text=True)
            if res.returncode != 0:
                raise BenchError(f"robot-app kernels build failed: {res.stderr.strip()}")
        dev = tmp_p / "dev"
        sim = subprocess.Popen(_cli("sim", "devices", "--dir", str(dev)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            _wait_devices(dev, sim)
            for backend in backends:
                say(f"service with the {backend} kernels: warm-up, then {idle_s:.0f} s idle")
                cfg = tmp_p / f"{backend}.toml"
                kdir = compiled if backend == "compiled" else str(tmp_p / "no-kernels")
                cfg.write_text(_CONFIG.format(models=str(models_dir), tmp=tmp, kernels=kdir,
                                              port=str(dev / "jackal"), secret=str(tmp_p / f"{backend}-secret")))
                out["runs"][backend] = _measure(cfg, idle_s=idle_s, timeout_s=timeout_s)
        finally:
            _stop(sim)
    out["load_1m_after"] = load_average_1m()
    return out


def format_table(res: dict) -> str:
    lines = [f"robot-app run, idle after its warm-up, models {res['models_dir']} (load average "
             f"{res['load_1m_before']:.2f} -> {res['load_1m_after']:.2f}; VmRSS every 0.25 s for "
             f"{res['idle_s']:.0f} s)",
             f"{'kernels':<10} {'RSS median':>11} {'RSS max':>9} {'LLVM':>5} {'route warm-up':>14} "
             f"{'task warm-up':>13} {'start->warm':>12}"]
    for backend, r in res["runs"].items():
        steps = r["warm_up_steps_s"]
        route = next((v for k, v in steps.items() if k.startswith("route")), None)
        task = next((v for k, v in steps.items() if k.startswith("task")), None)
        fmt = (lambda v: f"{v:.2f} s" if v is not None else "failed")
        lines.append(f"{backend:<10} {r['idle_rss_mib_median']:>7.0f} MiB {r['idle_rss_mib_max']:>5.0f} MiB "
                     f"{'yes' if r['llvm_mapped'] else 'no':>5} {fmt(route):>14} {fmt(task):>13} "
                     f"{r['start_to_warm_s']:>10.1f} s")
    return "\n".join(lines)


def default_models_dir() -> str:
    """The shipped simulator models (robot_app/data/models/sim), the figures' reference."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models", "sim")
