"""Workstation / cluster side: checks shared by the ``--engine ray`` commands (``map build``, ``bench
map-build``, ``eval sim``, ``eval sim-tune``) before Ray is asked to join a cluster."""

from __future__ import annotations

import socket

from robot_app.errors import UsageError

#: seconds the head's port is given to accept a TCP connection
CONNECT_TIMEOUT_S = 5.0


def check_ray_address(address: str | None) -> None:
    """Refuse a ``--ray-address HOST:PORT`` whose head does not accept a connection (``ray.init`` would retry
    for minutes with only Ray's own warnings). ``None``, ``auto`` and ``ray://`` (Ray Client) addresses are
    left to Ray.

    Raises
    ------
    UsageError
        For an address that is not ``HOST:PORT`` or a head that cannot be reached within
        :data:`CONNECT_TIMEOUT_S`.
    """
    if address is None or address == "auto" or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray-address {address}: expected HOST:PORT of the cluster's head (e.g. head:6379), "
                         "auto, or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise UsageError(f"--ray-address {address}: cannot reach a Ray cluster's head there ({exc}); is "
                         "`ray start --head` running and the port open?") from exc
