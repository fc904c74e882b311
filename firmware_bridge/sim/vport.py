"""Virtual serial ports for simulators: the device side of a pty pair, with a stable link name.

``os.openpty()`` gives a master (the simulated device writes and reads here) and a slave, a real tty
the driver opens by name exactly like ``/dev/jackal``. The slave is put in raw mode
(docs/protocols.md, "Simulators and virtual serial ports"); the simulator keeps its slave fd open so early writes
are not lost to EIO. :class:`VirtualPort` publishes the slave under a fixed symlink (like
``socat ... link=/tmp/jackal``) and can :meth:`~VirtualPort.unplug` and :meth:`~VirtualPort.replug`
it: the driver sees the device vanish (EIO) and return under the same name.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import tty
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["VirtualPort"]


class VirtualPort:
    """Device end of a pty pair, used from asyncio.

    Parameters
    ----------
    link : str or Path, optional
        Create this symlink to the slave tty (the name drivers open). Without it, use :attr:`name`.
    """

    def __init__(self, link: str | Path | None = None) -> None:
        self.link = Path(link) if link is not None else None
        self._master = -1
        self._slave = -1
        self.name = ""
        self._rx: asyncio.Queue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.bytes_out = 0
        self.bytes_dropped = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def open(self) -> "VirtualPort":
        """Create the pty pair (and the link). Call from within the event loop."""
        if self._master >= 0:
            return self
        self._loop = asyncio.get_running_loop()
        if self._rx is None:  # kept across unplug/replug: readers wait on the same queue
            self._rx = asyncio.Queue()
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        os.set_blocking(self._master, False)
        self.name = os.ttyname(self._slave)
        if self.link is not None:
            tmp = self.link.with_name(self.link.name + ".tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(self.name)
            os.replace(tmp, self.link)
        self._loop.add_reader(self._master, self._on_readable)
        return self

    @property
    def is_open(self) -> bool:
        return self._master >= 0

    @property
    def path(self) -> str:
        """What a driver should open: the link if there is one, else the slave tty name."""
        return str(self.link) if self.link is not None else self.name

    def close(self) -> None:
        """Close both ends and remove the link (the driver sees EIO, then the name is gone)."""
        if self._master >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._master)
            for fd in (self._master, self._slave):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._master = self._slave = -1
        if self.link is not None and self.link.is_symlink():
            self.link.unlink(missing_ok=True)

    unplug = close

    def replug(self) -> "VirtualPort":
        """Open a fresh pty pair under the same link (the device came back)."""
        self.close()
        return self.open()

    # -- I/O --------------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            data = os.read(self._master, 65536)
        except BlockingIOError:
            return
        except OSError as exc:
            # EIO: no process has the slave open (between driver sessions); keep waiting.
            if exc.errno != errno.EIO:
                log.debug("virtual port %s read error: %s", self.name, exc)
            return
        if data:
            self._rx.put_nowait(data)

    async def read(self) -> bytes:
        """Next chunk the driver wrote (waits)."""
        return await self._rx.get()

    def read_nowait(self) -> bytes:
        """Everything the driver wrote so far (possibly empty)."""
        chunks = []
        while self._rx is not None and not self._rx.empty():
            chunks.append(self._rx.get_nowait())
        return b"".join(chunks)

    async def write(self, data: bytes) -> None:
        """Write all of ``data`` to the driver side (non-blocking writes can be partial: loop)."""
        view = memoryview(data)
        waited = 0
        while view and self._master >= 0:
            try:
                n = os.write(self._master, view)
            except BlockingIOError:
                # Nobody drains the other side: like a UART without flow control, drop the rest
                # after a short wait instead of stalling the simulated device.
                if waited >= 50:
                    self.bytes_dropped += len(view)
                    return
                waited += 1
                await asyncio.sleep(0.001)
                continue
            except OSError as exc:
                log.debug("virtual port %s write error: %s", self.name, exc)
                return
            self.bytes_out += n
            view = view[n:]

    async def __aenter__(self) -> "VirtualPort":
        return self.open()

    async def __aexit__(self, *exc) -> None:
        self.close()
