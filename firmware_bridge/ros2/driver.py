"""The common part of the ``ros2`` drivers: the readings API of the serial drivers over a DDS session.

A :class:`Ros2Driver` is a :class:`~firmware_bridge.driver.SerialDriver` whose "port" is a set of DDS
topics: :meth:`start` runs a supervisor that joins the domain (:class:`~firmware_bridge.ros2.dds.DdsNode`,
shared by the drivers of one process), creates the subclass's readers and writers (:meth:`_open_endpoints`)
and keeps :attr:`connected` true while a peer is matched (:meth:`_matched`); the readings go through the
same queue, latest-value holders and subscriber queues as the serial drivers' (``recv``, ``latest``,
``subscribe``), stamped with the monotonic time Cyclone handed the sample over. Joining fails
(no cyclonedds, a bad Cyclone configuration) are retried with the same backoff as a missing serial port.
"""

from __future__ import annotations

import asyncio
import logging

from firmware_bridge.driver import SerialDriver
from firmware_bridge.errors import BridgeError, DeviceNotFound
from firmware_bridge.faults import InputFaults
from firmware_bridge.ros2.dds import DdsNode, ros_topic

log = logging.getLogger(__name__)

__all__ = ["Ros2Driver"]

MATCH_POLL_S = 0.05


class Ros2Driver(SerialDriver):
    """Base class of the ``ros2`` drivers (not used directly).

    Parameters
    ----------
    node : DdsNode
        The process's DDS participant (acquired on start, released on close).
    namespace : str
        ROS namespace of the robot (``/j100_0000``); relative topic names are resolved in it.
    **kwargs
        ``reconnect_min_s``, ``reconnect_max_s``, ``queue_size`` as for serial drivers.
    """

    name = "ros2"

    def __init__(self, node: DdsNode, *, namespace: str = "", **kwargs) -> None:
        super().__init__(f"dds://domain-{node.domain_id}{namespace.rstrip('/') or '/'}", **kwargs)
        self.node, self.namespace = node, namespace
        self._readers: list = []
        self._writers: list = []
        self.samples: dict[str, int] = {}  # DDS topic -> samples received
        self.faults = InputFaults(self.name, log)  # DDS topic -> samples its handler could not use

    def topic(self, name: str) -> str:
        """DDS name (``rt/...``) of the ROS topic ``name`` in this driver's namespace."""
        return ros_topic(self.namespace, name)

    def _reader(self, name: str, msg_type, handler, *, qos: str):
        dds_name = self.topic(name)

        def deliver(sample, t_mono_s: float) -> None:
            if self._closing:
                return
            self.samples[dds_name] = self.samples.get(dds_name, 0) + 1
            try:
                handler(sample, t_mono_s)
            except Exception as exc:  # noqa: BLE001 - one sample must not stop the other samples or topics
                self.faults.record(dds_name, f"{type(exc).__name__}: {exc}")

        r = self.node.reader(dds_name, msg_type, deliver, loop=asyncio.get_running_loop(), qos=qos)
        self._readers.append(r)
        return r

    def _writer(self, name: str, msg_type, *, qos: str):
        w = self.node.writer(self.topic(name), msg_type, qos=qos)
        self._writers.append(w)
        return w

    async def _supervise(self) -> None:
        delay = self.reconnect_min_s
        while not self._closing:
            try:
                self.node.acquire()
            except DeviceNotFound as exc:
                self.last_error = exc
                log.warning("%s; retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.reconnect_max_s)
                continue
            self.sessions += 1
            try:
                self._open_endpoints()
                log.info("%s: joined DDS domain %d as %s", self.name, self.node.domain_id, self.port)
                await self._run_session()
            except (BridgeError, ValueError) as exc:
                self._report(exc if isinstance(exc, BridgeError) else BridgeError(f"{self.name}: {exc}"))
                delay = self.reconnect_max_s
            finally:
                self._connected.clear()
                for e in self._readers + self._writers:
                    self.node.delete(e)
                self._readers, self._writers = [], []
                self.node.release()
                self._on_disconnect()
            if not self._closing:
                await asyncio.sleep(delay)

    async def _run_session(self) -> None:
        while True:
            if self._matched():
                self._connected.set()
            else:
                self._connected.clear()
            await asyncio.sleep(MATCH_POLL_S)

    def _matched(self) -> bool:
        """True while some peer publishes to one of this driver's readers (subclass hook)."""
        return any(r.get_subscription_matched_status().current_count > 0 for r in self._readers)

    def _open_endpoints(self) -> None:  # pragma: no cover - abstract: every ros2 driver defines its endpoints
        """Create the readers and writers (subclass hook; runs in the event loop). Ros2Base, Ros2Gps, Ros2Imu
        and Ros2Camera define it; this base class is never used directly."""
        raise NotImplementedError(f"{type(self).__name__} does not define its DDS endpoints")

    def _on_bytes(self, data: bytes, t_mono_s: float) -> None:  # pragma: no cover - no byte stream here
        raise BridgeError(f"{self.name}: a DDS driver receives samples, not bytes")
