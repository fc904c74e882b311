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
# TopicInfo, jackal_msgs Status/Feedback, nmea_msgs/Sentence and log lines are shorter (JACKAL_PROTOCOL.md
# "Topics"); 512 leaves room for longer frame ids and log lines. (rosserial_server's receive buffer is
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


def _scan(buf, start: int, end: int, max_payload: int):
    """Core of :func:`decode_frame` on ``buf[start:end]``: ``(consumed, frame | None, reason | None)``.

    ``reason`` names why bytes were dropped: ``garbage``, ``version``, ``length_checksum``,
    ``oversize`` or ``checksum``. ``consumed == 0`` means "need more bytes".
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
    return total, Frame(body[0] | (body[1] << 8), body[2:-1]), None


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
    """

    def __init__(self, *, max_payload: int = MAX_PAYLOAD_BYTES) -> None:
        self._buf = bytearray()
        self._max_payload = max_payload
        self.stats = FrameStats()

    def feed(self, data: bytes) -> list[Frame]:
        """Append ``data`` and return every complete, valid frame now available, in order."""
        buf = self._buf
        buf += data
        self.stats.bytes_in += len(data)
        out: list[Frame] = []
        pos, end = 0, len(buf)
        stats = self.stats
        while pos < end:
            consumed, frame, reason = _scan(buf, pos, end, self._max_payload)
            if consumed == 0:
                break
            pos += consumed
            if frame is not None:
                out.append(frame)
            else:
                stats.dropped_bytes += consumed
                stats.errors[reason] = stats.errors.get(reason, 0) + 1
        if pos:
            del buf[:pos]
        stats.frames += len(out)
        return out

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def clear(self) -> None:
        """Forget any partial frame (after a reconnect)."""
        self._buf.clear()
