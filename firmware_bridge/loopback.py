"""In-process loopback: a simulator and a driver in one event loop with no pty at all.

A :class:`LoopbackPort` has the device-side API of :class:`~firmware_bridge.sim.vport.VirtualPort`
(``open``, ``read``, ``write``, ``unplug``, ``replug``, ``path``), so every simulator runs on it
unchanged; a driver given ``port="inproc://NAME"`` connects to it instead of opening a serial device
(see :func:`connect`). Bytes are delivered through the event loop, never in the caller's stack.
"""

from __future__ import annotations

import asyncio
import logging

from firmware_bridge.errors import DeviceNotFound

log = logging.getLogger(__name__)

__all__ = ["LoopbackPort", "connect", "SCHEME"]

SCHEME = "inproc://"
_PORTS: dict[str, "LoopbackPort"] = {}


class _Transport(asyncio.Transport):
    def __init__(self, port: "LoopbackPort", protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._port, self._protocol, self._closing = port, protocol, False
        self._loop = asyncio.get_running_loop()

    def write(self, data) -> None:
        if not self._closing:
            self._port._from_driver(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._lose(None)

    def abort(self) -> None:
        self._lose(None)

    def _lose(self, exc) -> None:
        if self._closing:
            return
        self._closing = True
        if self._port._driver is self:
            self._port._driver = None
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def _deliver(self, data: bytes) -> None:
        if not self._closing:
            self._loop.call_soon(self._protocol.data_received, data)


class LoopbackPort:
    """Device end of an in-process link named ``name`` (drivers open ``inproc://name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._rx: asyncio.Queue | None = None
        self._driver: _Transport | None = None
        self._open = False
        self.bytes_out = 0

    @property
    def path(self) -> str:
        return SCHEME + self.name

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> "LoopbackPort":
        if self._rx is None:
            self._rx = asyncio.Queue()
        other = _PORTS.get(self.name)
        if other is not None and other is not self:
            raise DeviceNotFound(f"loopback port {self.path} is already in use")
        _PORTS[self.name] = self
        self._open = True
        return self

    def close(self) -> None:
        """The device vanishes: the connected driver sees its link lost."""
        if _PORTS.get(self.name) is self:
            del _PORTS[self.name]
        self._open = False
        if self._driver is not None:
            self._driver._lose(ConnectionResetError(f"{self.path} went away"))

    unplug = close

    def replug(self) -> "LoopbackPort":
        self.close()
        return self.open()

    def _from_driver(self, data: bytes) -> None:
        self._rx.put_nowait(data)

    async def read(self) -> bytes:
        return await self._rx.get()

    def read_nowait(self) -> bytes:
        chunks = []
        while self._rx is not None and not self._rx.empty():
            chunks.append(self._rx.get_nowait())
        return b"".join(chunks)

    async def write(self, data: bytes) -> None:
        if self._open and self._driver is not None:
            self._driver._deliver(bytes(data))
            self.bytes_out += len(data)

    async def __aenter__(self) -> "LoopbackPort":
        return self.open()

    async def __aexit__(self, *exc) -> None:
        self.close()


def connect(url: str, protocol: asyncio.Protocol) -> asyncio.Transport:
    """Attach ``protocol`` to the loopback port ``url`` (``inproc://NAME``).

    Raises
    ------
    DeviceNotFound
        If no such port is open or another driver holds it (like ``exclusive=True`` on a tty).
    """
    port = _PORTS.get(url[len(SCHEME):])
    if port is None or not port.is_open:
        raise DeviceNotFound(f"cannot open {url}: no in-process device of that name")
    if port._driver is not None:
        raise DeviceNotFound(f"cannot open {url}: already open by another driver")
    tr = _Transport(port, protocol)
    port._driver = tr
    asyncio.get_running_loop().call_soon(protocol.connection_made, tr)
    return tr
