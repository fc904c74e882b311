"""systemd's notify protocol (sd_notify(3)): READY, STATUS, WATCHDOG and STOPPING messages.

A datagram of ``KEY=VALUE`` lines sent to the AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a leading
``@`` means the abstract namespace). Without the variable (not started by systemd) every call is a
no-op, so the same process runs by hand, in tests and under systemd.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


class Notifier:
    """Sends notifications to systemd; never raises (a lost status message must not stop the robot)."""

    def __init__(self, address: str | None = None):
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._address = None
        self._sock = None
        if address:
            self._address = "\0" + address[1:] if address.startswith("@") else address
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields: str) -> bool:
        """Send ``KEY=VALUE`` fields, e.g. ``send(READY="1", STATUS="...")``. Returns whether it went out."""
        if self._sock is None:
            return False
        msg = "\n".join(f"{k}={str(v).replace(chr(10), ' ')}" for k, v in fields.items()).encode()
        try:
            self._sock.sendto(msg, self._address)
            return True
        except OSError as exc:
            log.debug("sd_notify failed: %s", exc)
            return False

    def ready(self, status: str = "") -> bool:
        return self.send(READY="1", STATUS=status) if status else self.send(READY="1")

    def status(self, text: str) -> bool:
        return self.send(STATUS=text)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG="1")

    def stopping(self) -> bool:
        return self.send(STOPPING="1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def watchdog_interval_s() -> float | None:
    """Half the watchdog period systemd asks for (``$WATCHDOG_USEC``), or None when there is none."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    try:
        return max(int(usec) / 2e6, 0.05)
    except ValueError:
        return None
