"""rosserial wire framing (protocol version 0xFE, ROS Hydro and later): a pure, resumable codec.

Frame layout (ros-drivers/rosserial, ``rosserial_python/SerialClient.py`` and ``rosserial_server``)::

    FF FE lenLo lenHi lenChk topicLo topicHi payload[len] chk
    lenChk = 255 - ((lenLo + lenHi) % 256)
    chk    = 255 - ((topicLo + topicHi + sum(payload)) % 256)

:func:`decode_frame` looks at a byte buffer and says how many bytes to drop and whether a frame was
found; it never raises on wire bytes: garbage, bad checksums, a wrong protocol version byte or an
oversized length make it skip one byte and try again (resynchronisation). :class:`FrameDecoder` keeps
the partial tail between reads and counts what it dropped. The same codec serves the host driver and
the MCU simulator.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

__all__ = [
    "SYNC", "PROTOCOL_VERSION", "PROTOCOL_VERSION_PRE_HYDRO",
    "TOPIC_PUBLISHER", "TOPIC_SUBSCRIBER", "TOPIC_PARAMETER_REQUEST", "TOPIC_LOG", "TOPIC_TIME",
    "TOPIC_TX_STOP", "FIRST_USER_TOPIC", "MAX_PAYLOAD_BYTES",
    "Frame", "encode_frame", "decode_frame", "FrameDecoder", "REQUEST_TOPICS", "TX_STOP",
]

SYNC = 0xFF
PROTOCOL_VERSION = 0xFE
PROTOCOL_VERSION_PRE_HYDRO = 0xFF

# Reserved topic ids (rosserial_msgs/TopicInfo constants).
TOPIC_PUBLISHER = 0       # device publishers' TopicInfo; an empty frame from the host = "request topics"
TOPIC_SUBSCRIBER = 1
TOPIC_PARAMETER_REQUEST = 6
TOPIC_LOG = 7
TOPIC_TIME = 10
TOPIC_TX_STOP = 11
FIRST_USER_TOPIC = 100

# A length field above this is corrupt (resync at once, no waiting for the bytes it claims): the largest
# Jackal message is sensor_msgs/Imu with its three covariances, 320 bytes with frame_id "imu_link";
# TopicInfo, jackal_msgs Status/Feedback, nmea_msgs/Sentence and log lines are shorter (docs/protocols.md,
# "Messages and topics"); 512 leaves room for longer frame ids and log lines. (rosserial_server's receive buffer is
# 1023 bytes.) A false header below it holds the link for at most 512 bytes, 44 ms at 115200 baud.
MAX_PAYLOAD_BYTES = 512

_HEADER = 7  # FF FE lenLo lenHi lenChk topicLo topicHi


class Frame(NamedTuple):
    """One decoded rosserial frame: ``topic_id`` (uint16) and the raw ROS 1 serialised ``payload``."""

    topic_id: int
    payload: bytes


def encode_frame(topic_id: int, payload: bytes = b"") -> bytes:
    """Wrap ``payload`` for ``topic_id`` into a rosserial frame.

    Raises
    ------
    ValueError
        If ``topic_id`` is not a uint16 or the payload is longer than 65535 bytes.
    """
    if not 0 <= topic_id <= 0xFFFF:
        raise ValueError(f"rosserial topic id must be a uint16, got {topic_id}")
    n = len(payload)
    if n > 0xFFFF:
        raise ValueError(f"rosserial payload too long: {n} bytes (max 65535)")
    lo, hi = n & 0xFF, n >> 8
    tlo, thi = topic_id & 0xFF, topic_id >> 8
    chk = 255 - ((tlo + thi + sum(payload)) % 256)
    return bytes((SYNC, PROTOCOL_VERSION, lo, hi, 255 - ((lo + hi) % 256), tlo, thi)) + bytes(payload) + bytes((chk,))


REQUEST_TOPICS = encode_frame(TOPIC_PUBLISHER)  # FF FE 00 00 FF 00 00 FF
TX_STOP = encode_frame(TOPIC_TX_STOP)           # FF FE 00 00 FF 0B 00 F4


def _scan(buf, start: int, end: int, max_payload: int, validate=None):
    """Core of :func:`decode_frame` on ``buf[start:end]``: ``(consumed, frame | None, reason | None)``.

    ``reason`` names why bytes were dropped: ``garbage``, ``version``, ``length_checksum``,
    ``oversize``, ``checksum`` or ``invalid`` (``validate(topic_id, payload)`` was false). ``consumed == 0``
    means "need more bytes".
    """
    avail = end - start
    if avail <= 0:
        return 0, None, None
    if buf[start] != SYNC:
        i = buf.find(b"\xff", start, end)
        return (avail if i < 0 else i - start), None, "garbage"
    if avail < 2:
        return 0, None, None
    if buf[start + 1] != PROTOCOL_VERSION:
        # FF FF could be a pre-Hydro device or garbage followed by a real sync; drop one byte.
        return 1, None, ("version" if buf[start + 1] == PROTOCOL_VERSION_PRE_HYDRO else "garbage")
    if avail < 5:
        return 0, None, None
    lo, hi, lchk = buf[start + 2], buf[start + 3], buf[start + 4]
    if (lo + hi + lchk) % 256 != 255:
        return 1, None, "length_checksum"
    n = lo | (hi << 8)
    if n > max_payload:
        return 1, None, "oversize"
    total = _HEADER + n + 1
    if avail < total:
        return 0, None, None
    body = bytes(buf[start + 5:start + total])  # topic (2) + payload (n) + chk (1)
    if sum(body) % 256 != 255:
        return 1, None, "checksum"
    topic_id, payload = body[0] | (body[1] << 8), body[2:-1]
    if validate is not None and _overlaps_frame(buf, start, total, end, max_payload):
        # A frame that starts inside this one and checks out: this one lost bytes on the wire and its
        # checksum matched by chance (1 in 256); the real frame inside it wins.
        return 1, None, "overlap"
    if validate is not None and not validate(topic_id, payload):
        # The 8-bit checksum of a frame that lost bytes on the wire still matches 1 time in 256, and then its
        # length covers the next real frames. A payload that does not decode as its topic's message is taken
        # for such a frame: resync one byte on, so the frames inside it are still found.
        return 1, None, "invalid"
    return total, Frame(topic_id, payload), None


def _overlaps_frame(buf, start: int, total: int, end: int, max_payload: int) -> bool:
    """Whether a complete frame with both checksums right starts inside ``buf[start + 2:start + total]``
    (the bytes after the outer frame may complete it). Random payload bytes pass this 1 time in 2^32 per
    ``FF FE`` pair they hold."""
    p = start + 2
    stop = min(start + total + 1, end)  # a frame may start at this one's last (checksum) byte
    while True:
        p = buf.find(b"\xff\xfe", p, stop)
        if p < 0:
            return False
        consumed, frame, _ = _scan(buf, p, end, max_payload)
        if frame is not None:
            return True
        p += 1


def decode_frame(buf: bytes | bytearray, *, max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[int, Frame | None]:
    """Look for one frame at the start of ``buf``.

    Returns
    -------
    (consumed, frame)
        ``(0, None)``: need more bytes; ``(k > 0, None)``: drop ``k`` bytes (garbage or a corrupt
        frame) and call again; ``(k, Frame)``: a frame occupying the first ``k`` bytes. Never raises
        on the content of ``buf``.
    """
    consumed, frame, _ = _scan(buf, 0, len(buf), max_payload)
    return consumed, frame


@dataclasses.dataclass
class FrameStats:
    """Counters kept by :class:`FrameDecoder` (bytes and frames since creation)."""

    frames: int = 0
    bytes_in: int = 0
    dropped_bytes: int = 0
    errors: dict = dataclasses.field(default_factory=dict)  # reason -> number of resync events


class FrameDecoder:
    """Stateful rosserial deframer: feed it chunks as they arrive, get complete frames back.

    The internal buffer never holds more than one maximal frame plus the last chunk, whatever the
    input (bounded memory on garbage).

    Parameters
    ----------
    max_payload : int
        Payload lengths above this are treated as corruption (resync), default
        :data:`MAX_PAYLOAD_BYTES`.
    validate : callable, optional
        ``validate(topic_id, payload) -> bool``: a frame for which it is false is treated as corruption
        (resync one byte on, counted as ``invalid``), so a damaged frame whose checksum matched by chance
        cannot swallow the real frames inside its claimed length. The host driver accepts a frame when its
        payload decodes as the message of its topic.
    """

    def __init__(self, *, max_payload: int = MAX_PAYLOAD_BYTES, validate=None) -> None:
        self._buf = bytearray()
        self._max_payload = max_payload
        self._validate = validate
        self.stats = FrameStats()

    def feed(self, data: bytes) -> list[Frame]:
        """Append ``data`` and return every complete, valid frame now available, in order."""
        return list(self.feed_iter(data))

    def feed_iter(self, data: bytes):
        """As :meth:`feed`, but yield each frame as soon as it is found, before the next one is validated:
        a handler that changes what ``validate`` accepts (a topic announced in this chunk) applies to the
        frames after it. Consume the iterator to the end (its bytes are released when it finishes)."""
        buf = self._buf
        buf += data
        self.stats.bytes_in += len(data)
        pos = 0
        stats = self.stats
        try:
            while pos < len(buf):
                consumed, frame, reason = _scan(buf, pos, len(buf), self._max_payload, self._validate)
                if consumed == 0:
                    break
                pos += consumed
                if frame is not None:
                    stats.frames += 1
                    yield frame
                else:
                    stats.dropped_bytes += consumed
                    stats.errors[reason] = stats.errors.get(reason, 0) + 1
        finally:
            if pos:
                del buf[:pos]

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def clear(self) -> None:
        """Forget any partial frame (after a reconnect)."""
        self._buf.clear()
