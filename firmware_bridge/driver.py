"""Common asyncio machinery of the serial drivers: open, read, reconnect with backoff, readings.

A driver owns one serial port. :meth:`SerialDriver.start` runs a supervisor task that opens the port
(pyserial-asyncio-fast), runs one session (:meth:`SerialDriver._session`, the subclass hook) until the
link is lost, and reopens it after ``reconnect_min_s``, doubling up to ``reconnect_max_s``
(rosserial_server reopens every 2 s). Received bytes reach :meth:`SerialDriver._on_bytes` with the
host's monotonic receive time. Decoded readings go to a bounded queue (:meth:`recv`, drop-oldest) and
to latest-value holders (:meth:`latest`, with a staleness bound): the one public place that applies
timeouts and staleness (docs/design.md, "Conventions"; after python-can's ``recv()``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from firmware_bridge import loopback
from firmware_bridge.errors import BridgeError, BridgeTimeout, DeviceNotFound, LinkLost

log = logging.getLogger(__name__)

__all__ = ["SerialDriver", "queue_get"]


async def queue_get(queue: asyncio.Queue, timeout_s: float | None):
    """``await queue.get()`` with a timeout, raising :class:`asyncio.TimeoutError` when nothing arrives
    within ``timeout_s`` seconds (None: wait forever).

    Unlike ``asyncio.wait_for(queue.get(), timeout_s)`` on Python 3.10/3.11, a cancellation that comes
    while an item is arriving is never swallowed (CPython gh-86296, fixed in 3.12): the awaiting task
    ends cancelled, and an item taken from the queue in that same moment is dropped with it. A task
    that loops over ``wait_for`` could otherwise survive its ``cancel()`` and, for one, keep a recording
    open forever.
    """
    getter = asyncio.ensure_future(queue.get())
    try:
        done, _ = await asyncio.wait({getter}, timeout=timeout_s)
    finally:
        if not getter.done():
            getter.cancel()
    if not done:
        raise asyncio.TimeoutError
    return getter.result()


class _Protocol(asyncio.Protocol):
    def __init__(self, driver: "SerialDriver") -> None:
        self.driver = driver
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.driver._rx_bytes(data, time.monotonic())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class SerialDriver:
    """Base class of the device drivers (not used directly).

    Parameters
    ----------
    port : str
        Serial device path (``/dev/jackal``, a pty name, a udev link), any pyserial URL
        (``socket://host:port``), or ``inproc://NAME`` for an in-process simulator.
    baud : int
        Baud rate (ignored by ptys).
    reconnect_min_s, reconnect_max_s : float
        Reconnect backoff bounds, seconds.
    queue_size : int
        Readings kept for :meth:`recv`; the oldest is dropped when full.
    """

    name = "device"

    def __init__(self, port: str, *, baud: int = 115200, reconnect_min_s: float = 0.25,
                 reconnect_max_s: float = 2.0, queue_size: int = 256) -> None:
        self.port, self.baud = port, baud
        self.reconnect_min_s, self.reconnect_max_s = reconnect_min_s, reconnect_max_s
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
        self._latest: dict[type, Any] = {}
        self._subscribers: list[tuple] = []
        self._transport: asyncio.BaseTransport | None = None
        self._proto: _Protocol | None = None
        self._task: asyncio.Task | None = None
        self._closing_ports: set = set()  # connection_lost futures of ports being closed
        self._closing = False
        self._connected = asyncio.Event()
        self.sessions = 0
        self.dropped_readings = 0
        self.last_error: BaseException | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> "SerialDriver":
        """Start the supervisor task (returns at once; see :meth:`wait_connected`)."""
        if self._task is None:
            self._closing = False
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"{self.name}-supervisor")
        return self

    async def close(self) -> None:
        """Stop: let the subclass say goodbye on a live link (:meth:`_goodbye`), then close the port."""
        self._closing = True
        if self._transport is not None and not self._transport.is_closing():
            try:
                await self._goodbye()
            except Exception as exc:  # noqa: BLE001 - shutting down; the port may be gone already
                log.debug("%s: goodbye failed: %s", self.name, exc)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self._close_transport()
        pending = [f for f in self._closing_ports if not f.done()]
        if pending:  # a port closed by the cancelled supervisor: wait for its connection_lost
            await asyncio.wait(pending, timeout=2.0)
        self._closing_ports.clear()
        await asyncio.sleep(0)

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """True while a session is up (for the MCU: after the handshake)."""
        return self._connected.is_set()

    async def wait_connected(self, timeout_s: float) -> None:
        """Wait until a session is up.

        Raises
        ------
        BridgeTimeout
            If it is not up within ``timeout_s`` (the message gives the last error).
        """
        try:
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise BridgeTimeout(f"{self.name} on {self.port}: not connected within {timeout_s} s"
                                + (f" (last error: {self.last_error})" if self.last_error else "")) from None

    # -- readings ---------------------------------------------------------------------------------
    async def recv(self, timeout_s: float | None = None):
        """Next reading, in arrival order.

        Raises
        ------
        BridgeTimeout
            If none arrives within ``timeout_s``.
        BridgeError
            A protocol error found by the background session (e.g. an md5 mismatch naming the topic)
            is raised once, in order with the readings.
        """
        try:
            item = await queue_get(self._queue, timeout_s)
        except asyncio.TimeoutError:
            raise BridgeTimeout(f"{self.name} on {self.port}: no reading within {timeout_s} s") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def latest(self, kind: type, *, max_age_s: float | None = None):
        """Latest reading of class ``kind`` or None if there is none or it is older than ``max_age_s``
        (host monotonic time)."""
        r = self._latest.get(kind)
        if r is None or (max_age_s is not None and time.monotonic() - r.t_mono_s > max_age_s):
            return None
        return r

    def subscribe(self, *, kinds: tuple = (), maxsize: int = 256) -> asyncio.Queue:
        """A queue of its own for one more consumer (recorder, UI, navigator), so consumers do not
        take readings from each other as they would sharing :meth:`recv`.

        Parameters
        ----------
        kinds : tuple of type
            Reading classes to receive (empty: all readings). Errors are not delivered here.
        maxsize : int
            When full, the oldest reading is dropped (counted in ``dropped_readings``).
        """
        q: asyncio.Queue = asyncio.Queue(maxsize=maxsize)
        self._subscribers.append((q, tuple(kinds)))
        return q

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        """Stop filling a queue returned by :meth:`subscribe`."""
        self._subscribers = [(q, k) for q, k in self._subscribers if q is not queue]

    def _publish(self, reading) -> None:
        self._latest[type(reading)] = reading
        self._put(self._queue, reading)
        for q, kinds in self._subscribers:
            if not kinds or isinstance(reading, kinds):
                self._put(q, reading)

    def _report(self, exc: BridgeError) -> None:
        log.error("%s: %s", self.name, exc)
        self.last_error = exc
        self._put(self._queue, exc)

    def _put(self, queue: asyncio.Queue, item) -> None:
        if queue.full():
            queue.get_nowait()
            self.dropped_readings += 1
        queue.put_nowait(item)

    # -- transport --------------------------------------------------------------------------------
    def _write(self, data: bytes) -> bool:
        """Queue ``data`` for the port; False when no link is up."""
        tr = self._transport
        if tr is None or tr.is_closing():
            return False
        tr.write(data)
        return True

    async def _close_transport(self) -> None:
        self._connected.clear()
        tr, proto = self._transport, self._proto
        self._transport = self._proto = None
        if tr is None:
            return
        tr.close()
        # pyserial-asyncio-fast closes the port in an executor and reports connection_lost last:
        # wait for it so no task outlives the driver. Remembered until done, so a close() that cancels
        # this wait (shutdown during a reconnect) still waits for it.
        self._closing_ports.add(proto.lost)
        try:
            await asyncio.wait_for(asyncio.shield(proto.lost), 2.0)
        except asyncio.TimeoutError:
            log.warning("%s: %s did not close within 2 s", self.name, self.port)
        finally:
            if proto.lost.done():
                self._closing_ports.discard(proto.lost)
        await asyncio.sleep(0)

    async def _open(self) -> _Protocol:
        import serial
        import serial_asyncio_fast

        loop = asyncio.get_running_loop()
        proto = _Protocol(self)
        if self.port.startswith("inproc://"):  # in-process simulator (firmware_bridge.loopback)

            self._transport, self._proto = loopback.connect(self.port, proto), proto
            return proto
        try:
            transport, _ = await serial_asyncio_fast.create_serial_connection(
                loop, lambda: proto, url=self.port, baudrate=self.baud, exclusive=True)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise DeviceNotFound(f"{self.name}: cannot open {self.port}: {exc}") from exc
        self._transport, self._proto = transport, proto
        return proto

    async def _supervise(self) -> None:
        delay = self.reconnect_min_s
        while not self._closing:
            try:
                proto = await self._open()
            except DeviceNotFound as exc:
                self.last_error = exc
                log.warning("%s; retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.reconnect_max_s)
                continue
            self.sessions += 1
            log.info("%s: opened %s (session %d)", self.name, self.port, self.sessions)
            session = asyncio.get_running_loop().create_task(self._session(), name=f"{self.name}-session")
            try:
                done, _ = await asyncio.wait({session, proto.lost}, return_when=asyncio.FIRST_COMPLETED)
                if session in done and session.exception() is not None:
                    raise session.exception()
                if proto.lost in done:
                    raise LinkLost(f"{self.name}: {self.port} went away: {proto.lost.result() or 'closed'}")
                delay = self.reconnect_min_s
            except LinkLost as exc:
                self.last_error = exc
                log.warning("%s; reconnecting", exc)
                delay = self.reconnect_min_s
            except BridgeError as exc:
                self._report(exc)
                delay = self.reconnect_max_s
            except Exception:  # noqa: BLE001 - keep supervising; a bug must not leave the robot deaf
                log.exception("%s: session failed unexpectedly; reconnecting", self.name)
                delay = self.reconnect_max_s
            finally:
                session.cancel()
                try:
                    await session
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - already reported above
                    pass
                await self._close_transport()
                self._on_disconnect()
            if not self._closing:
                await asyncio.sleep(delay)

    # -- subclass hooks ---------------------------------------------------------------------------
    def _rx_bytes(self, data: bytes, t_mono_s: float) -> None:
        try:
            self._on_bytes(data, t_mono_s)
        except Exception:  # noqa: BLE001 - a decoder bug must not kill the transport callback
            log.exception("%s: unexpected error while decoding %d bytes", self.name, len(data))

    def _on_bytes(self, data: bytes, t_mono_s: float) -> None:
        """Decode received bytes (subclass hook; must not raise on any input)."""
        raise NotImplementedError

    async def _session(self) -> None:
        """Run one session on an open port until it fails (raise LinkLost) or is cancelled."""
        self._connected.set()
        await asyncio.Event().wait()

    async def _goodbye(self) -> None:
        """Last words on a live link before :meth:`close` (subclass hook)."""

    def _on_disconnect(self) -> None:
        """Called after each session ends (subclass hook)."""
