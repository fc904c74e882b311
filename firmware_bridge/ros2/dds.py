"""A Cyclone DDS participant shared by the ``ros2`` drivers: ROS 2 topic names, QoS, the asyncio hand-off.

ROS 2 conventions (ROS 2 design article "Topic and Service name mapping to DDS"; rmw_cyclonedds_cpp):
a ROS topic ``/ns/name`` is the DDS topic ``rt/ns/name``; its type is ``pkg::msg::dds_::Type_``
(:mod:`.msgs`). QoS as rclcpp's profiles: ``SENSOR_DATA`` (best effort, keep last 5, volatile:
``rmw_qos_profile_sensor_data``) for sensor streams, ``DEFAULT`` (reliable, keep last 10, volatile:
``rmw_qos_profile_default``) for commands and status. A best-effort reader matches both kinds of writer;
a reliable reader would not match a best-effort sensor publisher.

Samples arrive on Cyclone's listener threads; :class:`DdsNode` stamps each with ``time.monotonic()``
there and hands it to the asyncio loop with ``call_soon_threadsafe``, so drivers run in the loop only.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from typing import Callable

from firmware_bridge.errors import BridgeError, DeviceNotFound

log = logging.getLogger(__name__)

__all__ = ["DdsNode", "ros_topic", "loopback_config", "SENSOR_DATA", "DEFAULT"]

SENSOR_DATA = "sensor_data"
DEFAULT = "default"
_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)+$")


def ros_topic(namespace: str, name: str) -> str:
    """The DDS topic name of ROS topic ``name`` under ``namespace``: ``("/j100_0000", "cmd_vel")`` ->
    ``"rt/j100_0000/cmd_vel"``; an absolute ``name`` (``/cmd_vel``) ignores the namespace.

    Raises
    ------
    ValueError
        For an empty name, or characters ROS 2 does not allow in names (letters, digits, ``_``, ``/``).
    """
    full = name if name.startswith("/") else f"{namespace.rstrip('/')}/{name}"
    full = "/" + full.strip("/")
    if not name or not _NAME.match(full) or "//" in full or full == "/":
        raise ValueError(f"not a valid ROS 2 topic name: namespace {namespace!r}, topic {name!r}")
    return "rt" + full


def loopback_config(*, max_participants: int = 32) -> str:
    """Cyclone DDS XML that keeps a domain on this machine: the loopback interface only, no multicast,
    unicast discovery to 127.0.0.1 with automatic participant indices (for tests and simulators)."""
    return ("<CycloneDDS><Domain id=\"any\"><General><Interfaces><NetworkInterface name=\"lo\"/></Interfaces>"
            "<AllowMulticast>false</AllowMulticast></General><Discovery><Peers><Peer address=\"127.0.0.1\"/>"
            f"</Peers><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>{max_participants}"
            "</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>")


def _import_cyclonedds():
    try:
        import cyclonedds.core
        import cyclonedds.domain
        import cyclonedds.internal
        import cyclonedds.pub
        import cyclonedds.qos
        import cyclonedds.sub
        import cyclonedds.topic
    except ImportError as exc:  # the ros2 extra is not installed
        raise DeviceNotFound("the ros2 backend needs the cyclonedds package (the ros2 extra): "
                             f"pip install 'robot-app[ros2]' ({exc})") from exc
    return cyclonedds


class DdsNode:
    """One DDS domain participant for all ``ros2`` drivers of a process (reference counted).

    Parameters
    ----------
    domain_id : int
        ``ROS_DOMAIN_ID`` of the robot's graph (0-232; Clearpath robots use 0 unless configured).
    config : str
        Cyclone DDS configuration (XML text or a ``file://`` URI); empty: Cyclone's own defaults
        (including the ``CYCLONEDDS_URI`` environment variable). :func:`loopback_config` for tests.
    """

    def __init__(self, domain_id: int = 0, *, config: str = "") -> None:
        if not 0 <= domain_id <= 232:
            raise ValueError(f"DDS domain id must be in 0..232, got {domain_id}")
        self.domain_id, self.config = domain_id, config
        self._users = 0
        self._dds = None
        self._domain = self._participant = None
        self._topics: dict[str, object] = {}
        self._entities: list = []  # readers and writers, deleted before the participant
        self._lock = threading.Lock()

    def acquire(self) -> "DdsNode":
        """Join the domain on first use (later calls only count users).

        Raises
        ------
        DeviceNotFound
            Without cyclonedds, or when Cyclone refuses the configuration (the message says why).
        """
        if self._users == 0:
            dds = _import_cyclonedds()
            try:
                self._domain = dds.domain.Domain(self.domain_id, self.config) if self.config else None
                self._participant = dds.domain.DomainParticipant(self.domain_id)
            except dds.core.DDSException as exc:
                self._delete_all()
                raise DeviceNotFound(f"cannot join DDS domain {self.domain_id}: {exc}") from exc
            self._dds = dds
        self._users += 1
        return self

    def release(self) -> None:
        """Leave the domain when the last user releases it (deletes every reader, writer and topic)."""
        self._users = max(0, self._users - 1)
        if self._users == 0:
            self._delete_all()

    def _delete_all(self) -> None:
        with self._lock:
            ents, self._entities = self._entities, []
            for e in reversed(ents + list(self._topics.values()) + [self._participant, self._domain]):
                if e is not None:
                    e.__del__()  # cyclonedds deletes on __del__ and forgets the handle (idempotent)
            self._topics.clear()
            self._participant = self._domain = None

    def _qos(self, profile: str):
        q = self._dds.qos
        if profile == SENSOR_DATA:
            return q.Qos(q.Policy.Reliability.BestEffort, q.Policy.History.KeepLast(5), q.Policy.Durability.Volatile)
        if profile == DEFAULT:
            return q.Qos(q.Policy.Reliability.Reliable(max_blocking_time=100_000_000), q.Policy.History.KeepLast(10),
                         q.Policy.Durability.Volatile)
        raise ValueError(f"unknown QoS profile {profile!r} ({SENSOR_DATA}, {DEFAULT})")

    def _topic(self, name: str, msg_type):
        if self._participant is None:
            raise BridgeError("DdsNode: acquire() it before creating readers or writers")
        t = self._topics.get(name)
        if t is None:
            t = self._topics[name] = self._dds.topic.Topic(self._participant, name, msg_type)
        elif t.data_type is not msg_type:
            raise ValueError(f"DDS topic {name}: already used with type {t.data_type.__name__}, "
                             f"not {msg_type.__name__}")
        return t

    def writer(self, name: str, msg_type, *, qos: str = DEFAULT):
        """A DataWriter on DDS topic ``name`` (``rt/...``, see :func:`ros_topic`)."""
        w = self._dds.pub.DataWriter(self._participant, self._topic(name, msg_type), self._qos(qos))
        self._entities.append(w)
        return w

    def reader(self, name: str, msg_type, callback: Callable[[object, float], None], *,
               loop: asyncio.AbstractEventLoop, qos: str = SENSOR_DATA):
        """A DataReader on ``name`` that calls ``callback(sample, t_mono_s)`` in ``loop`` for every valid
        sample (``t_mono_s``: ``time.monotonic()`` when Cyclone handed it over)."""
        dds = self._dds
        invalid = dds.internal.InvalidSample

        def on_data(reader) -> None:
            t = time.monotonic()
            try:
                samples = reader.take(64)
            except Exception as exc:  # noqa: BLE001 - never raise into Cyclone's thread
                log.debug("DDS %s: take failed: %s", name, exc)
                return
            for s in samples:
                if isinstance(s, invalid):  # a writer went away (dispose / unregister)
                    continue
                try:
                    loop.call_soon_threadsafe(callback, s, t)
                except RuntimeError:  # the loop is closed: the driver is shutting down
                    return

        r = dds.sub.DataReader(self._participant, self._topic(name, msg_type), self._qos(qos),
                               listener=dds.core.Listener(on_data_available=on_data))
        self._entities.append(r)
        return r

    def delete(self, entity) -> None:
        """Delete one reader or writer now (its listener stops calling back)."""
        with self._lock:
            if entity in self._entities:
                self._entities.remove(entity)
                entity.__del__()
