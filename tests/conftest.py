"""Suite-wide fixtures: fail a test that leaks threads (docs/design.md, "Conventions"; the asyncio task, file
descriptor and pty checks are in tests/firmware_bridge/conftest.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "tests" / "data"

# Keep numba's on-disk cache inside the checkout so a clean clone starts cold and CI stays hermetic.
os.environ.setdefault("NUMBA_CACHE_DIR", str(REPO_ROOT / ".numba_cache"))


def pytest_addoption(parser):
    parser.addoption("--port", action="store", default=None,
                     help="serial port of real hardware for tests marked `hil` (e.g. /dev/jackal)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--port"):
        return
    skip_hil = pytest.mark.skip(reason="hardware-in-the-loop test: give --port /dev/... to run it")
    for item in items:
        if "hil" in item.keywords:
            item.add_marker(skip_hil)


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    before = set(threading.enumerate())
    yield
    leaked = []
    for t in threading.enumerate():
        if t in before or not t.is_alive():
            continue
        t.join(timeout=2.0)
        if t.is_alive():
            leaked.append(t)
    assert not leaked, f"test leaked threads: {[t.name for t in leaked]}"


@pytest.fixture
def dev_data() -> Path:
    """``tests/data``: the real NMEA captures, the landmark development set, the LASP cases
    (``tests/data/README.md`` lists them with their licences)."""
    return DATA_DIR


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 1 MB tmpfs mounted for the test (a full disk in seconds); skipped, with the reason, where the
    test may not mount one (mounting needs root: CI runs as root)."""
    import subprocess
    import uuid

    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a 1 MB tmpfs needs root (CI runs as root)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
