"""One exception tree for the whole package (docs/design.md, "Conventions"; after python-can).

Everything a driver raises to its caller derives from :class:`BridgeError`, so an app can catch the
package's failures with one ``except``. Bytes from the wire never raise: codecs count and skip them.
"""

from __future__ import annotations

__all__ = [
    "BridgeError",
    "DeviceNotFound",
    "LinkLost",
    "FrameError",
    "ProtocolMismatch",
    "BridgeTimeout",
    "EStopLatched",
]


class BridgeError(Exception):
    """Base class of every error raised by :mod:`firmware_bridge`."""


class DeviceNotFound(BridgeError):
    """The serial port does not exist or cannot be opened (path and OS reason in the message)."""


class LinkLost(BridgeError):
    """The port vanished or the device stopped answering while a driver was using it."""


class FrameError(BridgeError):
    """A message payload does not decode as its declared type (raised by message codecs only;
    drivers catch it, count it and go on)."""


class ProtocolMismatch(BridgeError):
    """The device speaks another protocol version, or announced a topic with an unexpected message
    type or md5 sum (the message names the topic)."""


class BridgeTimeout(BridgeError, TimeoutError):
    """An operation did not complete within its deadline (a :class:`TimeoutError`, so
    ``except TimeoutError`` works too)."""


class EStopLatched(BridgeError):
    """A drive command was refused because the e-stop latch is set; only an explicit reset clears it."""
