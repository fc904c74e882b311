"""NMEA 0183 GPS decoding over pynmea2: bytes in, one :class:`GpsFix` / :class:`GpsNoFix` per epoch out.

Pure (no I/O): the serial GPS driver, the MCU driver (NMEA carried in ``navsat/nmea_sentence``),
``robot-app gps decode``, ``robot-app bench gpsd`` and the GPS simulator's tests all use
:class:`NmeaDecoder`.

What it survives (docs/protocols.md, "NMEA GPS"): reads that start mid-sentence, NUL bytes and garbage
after a cold boot, 6-digit ``hhmmss`` times, one-digit and ``*00`` checksums (the checksum is checked
here as an integer, not by pynmea2, whose ``check=False`` still raises on a wrong one), truncated
sentences with a valid checksum, all-empty no-sky sentences, and receivers that send a wrong checksum
on one sentence type (``ignore_checksum_for``). Field values are converted here with range checks
rather than trusting pynmea2's lenient properties (an empty latitude there reads as 0.0). Nothing
raises on input: every non-empty line is either used, ignored (valid but carrying no fix data, e.g.
GSV) or counted in :attr:`NmeaStats.bad` by reason (through :class:`~firmware_bridge.faults.InputFaults`,
logged at a limited rate) and skipped; the next line is handled as usual. Received numbers are
range-checked before any arithmetic (HDOP <= 99.99, GST sigmas <= 10,000 km, altitude, satellites; see
the constants below), so a sentence with a valid checksum and a value such as ``1e200`` is counted as
bad, never raised; the reason ``internal`` counts a failure of the decoder itself (a bug; the fuzz tests
require it to stay 0).

NMEA 0183 limits (v4.10 sec. 5.3): a sentence is at most 82 characters from ``$`` through CR LF
(``too_long`` otherwise; ``max_sentence_chars`` raises the limit for receivers configured past the
standard, e.g. u-blox high-precision NMEA), and its address field (talker + sentence formatter, or a
proprietary ``P...`` address) is upper-case letters and digits (``lower_case`` otherwise).

Epochs (how gpsd's ``driver_nmea0183.c`` assembles a fix, restated): a receiver prints one burst of
sentences per navigation solution. Sentences carrying the same UTC time of day (GGA, GNS, RMC, GLL) and
the time-less ones between them (GSA, VTG, GST, HDT, ZDA: their own time fields are not used to cut
epochs, receivers stamp them differently) form one epoch, and each epoch gives exactly one reading:

- no fix (:class:`GpsNoFix`, ``reason`` says why) when any sentence of the epoch says so: GGA quality
  0 (invalid), 7 (manual input), 8 (simulator) or above 8 (NMEA 0183 v4.10 GGA); RMC or GLL status V;
  an RMC / GLL mode indicator N (not valid), M (manual) or S (simulator); a GNS whose mode characters
  (one per constellation) are all N, M or S; a fix sentence without a position or at exactly 0 deg,
  0 deg (receivers print that before their first fix, pynmea2 reads an empty field as 0.0);
- no fix for dead reckoning / estimated positions (GGA quality 6, mode indicator E) unless
  ``allow_dead_reckoning``;
- no fix when every GSA of the epoch says fix mode 1 (one GSA per constellation: one constellation
  without satellites does not void the others);
- no fix when the epoch reports its satellites in use (GGA or GNS field, or the PRNs the GSAs list),
  the largest of these counts is below 3 and no GSA of the epoch reports a 2D / 3D fix (gpsd: a GGA
  with fewer than 3 satellites is no fix, but the GSA that receivers send after it sets the mode again;
  the Garmin Foretrex 201 and Furuno GT-88 print 00 satellites in GGA on valid fixes);
- otherwise a fix, its position from GGA, else GNS, else RMC, else GLL (GGA/GNS carry altitude,
  satellites and HDOP). A GNS whose navigation status (NMEA 4.10 field 13) is U (unsafe) or V (not
  valid) contributes no position, as in gpsd; RMC's navigation status is not read (u-blox and Unicore
  print V there on valid fixes).

When the reading is delivered (latency): a no-fix at once, on the first sentence that voids the epoch
(later sentences cannot turn it into a fix). A fix as soon as the epoch is complete: the decoder learns
the receiver's cycle from the previous epoch (how many sentences of each talker and type it sent) and
decides on the sentence that completes that pattern, i.e. on the last sentence the decoder reads in the
receiver's cycle, without waiting for the next cycle. Otherwise the epoch is decided on the first fix
sentence of the next epoch, at most one cycle (1 s at 1 Hz) late: the first epoch of a stream, and the
epoch after one in which the receiver sent more than the cycle before (e.g. the epoch after a
once-a-minute GGA) until the cycle is learned again. ``NmeaStats.waited`` counts these (about 2 % of
the epochs on gpsd's recent logs, 8 % on all of gpsd 3.27.5's NMEA logs). :meth:`NmeaDecoder.finish`
closes the last epoch of a file; a reconnect (:meth:`reset_stream`) drops an open epoch. A fix's
``t_mono_s`` is when its position sentence was received, not when the epoch was decided.

Sentences that arrive for an epoch already decided change nothing. Within the learned cycle that is
safe: what follows a void is irrelevant, and after completion the receiver repeats little but GSA (one
per constellation), and another GSA or satellite count could only turn a no fix into a fix. Sentences
beyond the learned cycle are counted in ``late`` and not used: a once-a-minute GGA sent after the usual
GNS and GLL of its epoch leaves that epoch decided on the GNS and GLL (the limit of deciding without
waiting for the next cycle; gpsd, which reports at the end of the cycle it has learned, has the same).
Time-less sentences that come before the epoch's fix sentences in the receiver's cycle (a ZDA or GSA
that starts it: one of the same talker and type came before a fix sentence of the open epoch) start the
next epoch; a fix sentence without a time that repeats one of the open epoch (Quectel modules print GGA
and RMC without time while they have no fix) starts the next epoch as well.

Speed/course (RMC, VTG), GST error estimates and HDT heading come from the epoch, else from the latest
ones received within ``max_age_s``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
import time
from dataclasses import dataclass, field

import pynmea2

from firmware_bridge.faults import InputFaults
from firmware_bridge.readings import GpsFix, GpsNoFix

log = logging.getLogger(__name__)

__all__ = ["NmeaStats", "NmeaDecoder", "LineSplitter", "nmea_checksum", "TALKERS", "MAX_SENTENCE_CHARS",
           "MIN_SATELLITES"]

TALKERS = frozenset({"GP", "GN", "GL", "GA", "GB", "BD", "GQ"})
"""Talker ids accepted for position sentences (GPS, multi-GNSS, GLONASS, Galileo, BeiDou, QZSS)."""

KNOT_MPS = 1852.0 / 3600.0
MAX_LINE = 200  # the line splitter's bound on an unterminated tail (noise); far above any sentence
MAX_SENTENCE_CHARS = 82  # NMEA 0183 v4.10 sec. 5.3: "$" through CR LF
MIN_SATELLITES = 3  # fewer satellites in use is no fix (gpsd driver_nmea0183.c, GGA)
MAX_EPOCH_SENTENCES = 256  # an epoch is decided at this many sentences (a 10 Hz cycle has about 10-40)

# Horizontal 1-sigma error per GGA quality, multiplied by HDOP when no GST is available
# (nmea_navsat_driver defaults: epe_quality1 = 4.0 m, 2 = 0.1 m, 4 = 0.02 m, 5 = 4.0 m, 9 = 3.0 m).
_EPE_BY_QUALITY = {1: 4.0, 2: 0.1, 3: 4.0, 4: 0.02, 5: 4.0, 6: 10.0, 9: 3.0}

#: GGA quality values that are a position (NMEA 0183 v4.10: 1 GPS, 2 DGPS, 3 PPS, 4 RTK fixed, 5 RTK
#: float, 6 estimated / dead reckoning; 6 counts as a fix only with ``allow_dead_reckoning``)
GGA_FIX_QUALITIES = frozenset({1, 2, 3, 4, 5, 6})
#: mode indicators that are not a fix (N not valid, M manual input, S simulator)
NOT_VALID_MODES = frozenset("NMS")
# FAA mode character (RMC, GNS, GLL, VTG; NMEA 0183 v2.3+) -> the GGA quality it corresponds to
# (A autonomous, D differential, P precise, R RTK fixed, F RTK float, E estimated / dead reckoning)
_MODE_QUALITY = {"A": 1, "D": 2, "P": 3, "R": 4, "F": 5, "E": 6}
_GGA_VOID = {0: "invalid", 7: "manual_input", 8: "simulator"}
_MODE_VOID = {"N": "not_valid", "M": "manual_input", "S": "simulator"}
#: sentences that carry a position and a UTC time of day; they delimit epochs
FIX_SENTENCES = frozenset({"GGA", "GNS", "RMC", "GLL"})
_POSITION_PRIORITY = {"GGA": 0, "GNS": 1, "RMC": 2, "GLL": 3}

_TIME_RE = re.compile(r"^(\d{2})(\d{2})(\d{2})(?:\.(\d{1,6}))?$")
_DATE_RE = re.compile(r"^(\d{2})(\d{2})(\d{2})$")
_ADDRESS_RE = re.compile(r"^[A-Z0-9]+$")


class _FieldError(ValueError):
    pass


def nmea_checksum(body: str) -> int:
    """XOR of the characters between ``$`` (exclusive) and ``*`` (NMEA 0183 sec. 5.3)."""
    cs = 0
    for ch in body.encode("ascii"):
        cs ^= ch
    return cs


@dataclass
class NmeaStats:
    """Counters of an :class:`NmeaDecoder`.

    Per line: ``lines`` = ``used`` (went into an epoch) + ``ignored`` (valid, no fix data) + ``bad``
    (rejected; ``bad`` maps a reason to a count). ``late`` (a part of ``used``): sentences that arrived
    for an epoch after it had completed the receiver's learned cycle (more of one type than the cycle
    before). Per epoch: ``fixes`` and ``no_fix`` (one of them per epoch that had a fix sentence);
    ``waited``: of these, the readings delivered only when the next epoch began (or by ``finish()``),
    not on the sentence that completed the receiver's cycle or voided the epoch.
    """

    lines: int = 0
    used: int = 0
    ignored: int = 0
    late: int = 0
    fixes: int = 0
    no_fix: int = 0
    waited: int = 0
    bad: dict = field(default_factory=dict)

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())

    def as_dict(self) -> dict:
        return {"lines": self.lines, "used": self.used, "ignored": self.ignored, "late": self.late,
                "fixes": self.fixes, "no_fix": self.no_fix, "waited": self.waited, "bad": self.bad_total,
                "bad_by_reason": dict(sorted(self.bad.items()))}


class LineSplitter:
    """Split a byte stream into lines (LF, CR LF or CR), keeping the unfinished tail between calls.

    A tail longer than ``max_line`` bytes without a line end is cut to its last ``$`` (the start of the
    sentence that may follow the noise, whatever the read boundaries) or dropped (counted in
    ``overlong``), so a stream of garbage cannot grow the buffer without bound.
    """

    def __init__(self, *, max_line: int = MAX_LINE) -> None:
        self._tail = b""
        self._max = max_line
        self.overlong = 0

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._tail + data
        parts = re.split(rb"\r\n|\r|\n", buf)
        self._tail = parts.pop()
        if len(self._tail) > self._max:
            # keep what may be the start of a sentence (from its last "$"), wherever the read ended
            start = self._tail.rfind(b"$")
            self._tail = self._tail[start:] if start >= 0 and len(self._tail) - start <= self._max else b""
            self.overlong += 1
        return [p for p in parts if p]

    def flush(self) -> list[bytes]:
        tail, self._tail = self._tail, b""
        return [tail] if tail else []


def _parse_time(s: str) -> _dt.time:
    m = _TIME_RE.match(s)
    if not m:
        raise _FieldError(f"time {s!r}")
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    frac = m.group(4) or "0"
    if h > 23 or mi > 59 or sec > 60:
        raise _FieldError(f"time {s!r}")
    return _dt.time(h, mi, min(sec, 59), int(frac.ljust(6, "0")[:6]), tzinfo=_dt.timezone.utc)


def _parse_date(s: str) -> _dt.date:
    m = _DATE_RE.match(s)
    if not m:
        raise _FieldError(f"date {s!r}")
    try:
        return _dt.date(2000 + int(m.group(3)), int(m.group(2)), int(m.group(1)))
    except ValueError as exc:
        raise _FieldError(f"date {s!r}") from exc


# Plausible ranges of received numbers. A value outside its range makes the sentence bad (or, for the
# motion fields of RMC / VTG, is dropped while the position is kept): no arithmetic on received numbers
# can overflow or raise, and no absurd covariance reaches the state estimator.
HDOP_MAX = 99.99          # NMEA 0183 DOP fields are x.x; receivers write 99.9 or 99.99 for "unknown"
SIGMA_MAX_M = 1.0e7       # GST standard deviations (m): a cold-start u-blox reports 305 km
ALTITUDE_RANGE_M = (-2.0e4, 1.0e6)  # antenna altitude above mean sea level (m)
SPEED_MAX_KNOTS = 2.0e4   # RMC / VTG speed over ground (a ground robot; far above any receiver's limit)
SATS_MAX = 255


def _float(s: str, what: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    try:
        v = float(s)
    except (TypeError, ValueError, OverflowError):
        raise _FieldError(f"{what} {s!r}") from None
    if not math.isfinite(v) or not lo <= v <= hi:
        raise _FieldError(f"{what} {s!r}" + (f" outside [{lo:g}, {hi:g}]" if math.isfinite(v) else ""))
    return v


def _opt_float(s: str | None, what: str, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    return None if not s else _float(s, what, lo, hi)


def _lenient(s: str | None, what: str, lo: float, hi: float) -> float | None:
    """An optional field: None when empty, unreadable or outside ``[lo, hi]`` (the sentence's position
    is still used)."""
    try:
        return _opt_float(s, what, lo, hi)
    except _FieldError:
        return None


def _sats(s: str) -> int | None:
    return int(_float(s, "satellites", 0, SATS_MAX)) if s else None


def _degrees(value: str, hemi: str, *, lat: bool) -> float:
    """``ddmm.mmmm`` / ``dddmm.mmmm`` plus hemisphere -> signed decimal degrees (NMEA 0183)."""
    v = _float(value, "latitude" if lat else "longitude")
    deg = int(v // 100)
    minutes = v - 100 * deg
    limit = 90 if lat else 180
    ok_hemi = ("N", "S") if lat else ("E", "W")
    if v < 0 or minutes >= 60 or deg > limit or hemi not in ok_hemi:
        raise _FieldError(f"{'latitude' if lat else 'longitude'} {value!r} {hemi!r}")
    out = deg + minutes / 60.0
    if out > limit:
        raise _FieldError(f"{'latitude' if lat else 'longitude'} {value!r}")
    return -out if hemi in ("S", "W") else out


def _combine(date: _dt.date | None, ref: _dt.time | None, utc_time: _dt.time | None) -> _dt.datetime | None:
    """Receiver time of day + a date seen with time of day ``ref``; a time of day far below ``ref``
    means midnight passed in between (a GGA after midnight, the date from before it)."""
    if utc_time is None or date is None:
        return None
    if ref is not None and (ref.hour * 3600 + ref.minute * 60 + ref.second) - \
            (utc_time.hour * 3600 + utc_time.minute * 60 + utc_time.second) > 12 * 3600:
        if date == _dt.date.max:
            return None
        date += _dt.timedelta(days=1)
    return _dt.datetime.combine(date, utc_time)


@dataclass
class _Obs:
    """What one accepted sentence says, in SI units and degrees (WGS-84), before the epoch decides."""

    kind: str
    talker: str
    t: float                            # host monotonic receive time (s)
    time: _dt.time | None = None        # UTC time of day of a fix sentence (cuts epochs)
    pos: tuple | None = None            # (latitude, longitude) degrees
    void: str | None = None             # why this sentence says there is no fix
    dr: bool = False                    # dead reckoning / estimated
    quality: int | None = None          # GGA quality (or the one a mode indicator corresponds to)
    sats: int | None = None             # satellites in use (GGA, GNS)
    hdop: float | None = None
    alt: float | None = None            # altitude above mean sea level (m)
    utc: _dt.datetime | None = None     # time of day + the date known when the sentence arrived
    date: tuple | None = None           # (date, time of day) from RMC / ZDA
    gsa_mode: int | None = None         # GSA fix mode 1 (none), 2 (2D), 3 (3D)
    gsa_prns: tuple = ()                # GSA: (system id, PRN) of the satellites used
    motion: tuple | None = None         # (speed m/s or None, course deg true or None)
    gst: tuple | None = None            # (sd_lat_m, sd_lon_m, sd_alt_m or None)
    heading: float | None = None        # HDT true heading (deg)


@dataclass
class _Epoch:
    time: _dt.time | None = None
    obs: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # (talker, kind) -> sentences
    first: dict = field(default_factory=dict)   # (talker, kind) -> index of its first sentence in obs
    last_fix: int = -1                          # index of the latest fix sentence in obs
    decided: bool = False
    complete: bool = False


class NmeaDecoder:
    """Turn NMEA bytes or lines into one GPS reading per receiver epoch, counting what it cannot use.

    Parameters
    ----------
    ignore_checksum_for : iterable of str
        Sentence types (e.g. ``{"GGA"}``) whose wrong checksum is tolerated (firmware bugs).
    require_checksum : bool
        Reject sentences without ``*hh`` (default True: a missing checksum usually means a cut line).
    max_age_s : float
        How old (host monotonic seconds) RMC/VTG motion, GST errors and HDT heading from earlier epochs
        may be to be attached to a fix whose epoch has none.
    log_interval_s : float
        At most one warning per kind of bad sentence per this many seconds.
    allow_dead_reckoning : bool
        Report dead-reckoning / estimated positions (GGA quality 6, mode E) as fixes (quality 6).
        Default False: gpsd reports them with status "DR", but they are no satellite fix.
    max_sentence_chars : int
        Longest sentence accepted, ``$`` through CR LF (default 82, NMEA 0183).
    """

    def __init__(self, *, ignore_checksum_for=(), require_checksum: bool = True, max_age_s: float = 1.5,
                 log_interval_s: float = 10.0, allow_dead_reckoning: bool = False,
                 max_sentence_chars: int = MAX_SENTENCE_CHARS) -> None:
        self.stats = NmeaStats()
        self.faults = InputFaults("nmea", log, interval_s=log_interval_s, counts=self.stats.bad)
        self._ignore_cs = frozenset(s.upper() for s in ignore_checksum_for)
        self._require_cs = require_checksum
        self._max_age = max_age_s
        self._allow_dr = bool(allow_dead_reckoning)
        self._max_chars = int(max_sentence_chars)
        self._splitter = LineSplitter(max_line=max(MAX_LINE, self._max_chars))
        self._date: _dt.date | None = None
        self._date_time: _dt.time | None = None  # time of day of the sentence that gave the date
        self._motion: tuple | None = None   # (t_mono, speed_mps, course_deg)
        self._gst: tuple | None = None      # (t_mono, sd_lat_m, sd_lon_m, sd_alt_m)
        self._heading: tuple | None = None  # (t_mono, heading_deg)
        self._cur: _Epoch | None = None     # the open epoch
        self._pending: list = []            # time-less sentences that start the next cycle
        self._pattern: dict | None = None   # (talker, kind) -> count of the last closed epoch

    # -- input -----------------------------------------------------------------------------------
    def feed(self, data: bytes, t_mono_s: float | None = None) -> list:
        """Decode every complete line in ``data`` (partial lines wait for the next call); returns the
        readings of the epochs that were decided, in order."""
        t = time.monotonic() if t_mono_s is None else t_mono_s
        out = []
        for line in self._splitter.feed(data):
            out.extend(self.decode(line, t))
        return out

    def reset_stream(self) -> None:
        """Forget an unfinished line and the open epoch (after a reconnect: both may be cut); counters,
        the learned cycle and the fix context are kept."""
        self._splitter.flush()
        self._cur, self._pending = None, []

    def finish(self, t_mono_s: float | None = None) -> list:
        """Decode a last line that had no line end and close the open epoch (end of a file)."""
        t = time.monotonic() if t_mono_s is None else t_mono_s
        out = []
        for ln in self._splitter.flush():
            out.extend(self.decode(ln, t))
        out.extend(self._close())
        self._pending = []  # time-less leftovers without a fix sentence: no reading
        return out

    def decode_line(self, line: bytes | str, t_mono_s: float | None = None):
        """Decode one sentence; returns the newest reading it produced (:class:`GpsFix`,
        :class:`GpsNoFix`) or None. A sentence that closes one epoch and completes the next produces two:
        use :meth:`decode` to get both."""
        out = self.decode(line, t_mono_s)
        return out[-1] if out else None

    def decode(self, line: bytes | str, t_mono_s: float | None = None) -> list:
        """Decode one sentence (no line end needed); returns the readings of the epochs it decided
        (usually none or one). Never raises on input."""
        t = time.monotonic() if t_mono_s is None else t_mono_s
        if isinstance(line, str):
            line = line.encode("utf-8", "replace")
        line = line.replace(b"\x00", b"").strip()
        if not line:
            return []
        self.stats.lines += 1
        obs = self._sentence(line, t)
        if obs is None:
            return []
        self.stats.used += 1
        try:
            return self._add(obs)
        except Exception as exc:  # noqa: BLE001 - wire data never raises; "internal" is a decoder bug to fix
            self.stats.used -= 1
            self._bad("internal", line, f"{type(exc).__name__}: {exc}")
            return []

    # -- one sentence -------------------------------------------------------------------------------
    def _sentence(self, line: bytes, t: float) -> _Obs | None:
        start = line.rfind(b"$")
        if start < 0:
            return self._bad("no_start", line)
        line = line[start:]
        try:
            text = line.decode("ascii")
        except UnicodeDecodeError:
            return self._bad("not_ascii", line)
        if not text.isprintable():
            return self._bad("not_ascii", line)
        if len(text) + 2 > self._max_chars:  # + CR LF
            return self._bad("too_long", line, f"{len(text) + 2} > {self._max_chars} characters")
        body, star, cs = text.partition("*")
        stype = body[3:6] if len(body) >= 6 else ""
        if star:
            if not (1 <= len(cs) <= 2) or any(c not in "0123456789abcdefABCDEF" for c in cs):
                return self._bad("checksum_format", line)
            if int(cs, 16) != nmea_checksum(body[1:]) and stype.upper() not in self._ignore_cs:
                return self._bad("checksum", line)
        elif self._require_cs:
            return self._bad("no_checksum", line)
        address = body[1:].split(",", 1)[0]
        if not _ADDRESS_RE.match(address):
            # NMEA 0183 sec. 5.3: the address field is upper-case letters and digits (pynmea2 would
            # read "$gpgga" as GPGGA)
            return self._bad("lower_case" if address.upper() != address else "address", line)
        try:
            msg = pynmea2.parse(body, check=False)
        except pynmea2.SentenceTypeError:
            return self._bad("unsupported_type", line)
        except Exception:  # noqa: BLE001 - pynmea2's own failures on odd bodies (ParseError, ValueError, ...)
            return self._bad("parse", line)
        try:
            obs = self._dispatch(msg, t)
        except (_FieldError, IndexError, ValueError) as exc:
            return self._bad("field", line, str(exc))
        except Exception as exc:  # noqa: BLE001 - wire data never raises; "internal" is a decoder bug to fix
            return self._bad("internal", line, f"{type(exc).__name__}: {exc}")
        if obs is None:
            self.stats.ignored += 1
        return obs

    def _dispatch(self, msg, t: float) -> _Obs | None:
        kind = getattr(msg, "sentence_type", "")
        talker = getattr(msg, "talker", None)
        handler = _HANDLERS.get(kind) if talker else None
        if handler is None:
            return None
        if talker not in TALKERS:
            raise _FieldError(f"talker {talker!r}")
        return handler(self, msg, t)

    @staticmethod
    def _raw(msg, name: str) -> str:
        i = msg.name_to_idx.get(name)
        return msg.data[i].strip() if i is not None and i < len(msg.data) else ""

    @staticmethod
    def _at(msg, i: int) -> str:
        return msg.data[i].strip() if i < len(msg.data) else ""

    def _position(self, obs: _Obs, msg, names=("lat", "lat_dir", "lon", "lon_dir")) -> None:
        """Set ``obs.pos``, or ``obs.void`` when the fields are empty or exactly 0 deg, 0 deg."""
        r = self._raw
        if not r(msg, names[0]) or not r(msg, names[2]):
            obs.void = obs.void or "no_position"
            return
        lat = _degrees(r(msg, names[0]), r(msg, names[1]), lat=True)
        lon = _degrees(r(msg, names[2]), r(msg, names[3]), lat=False)
        if lat == 0.0 and lon == 0.0:  # cold-start placeholder, never a real fix
            obs.void = obs.void or "zero_position"
            return
        obs.pos = (lat, lon)

    def _time(self, msg, name: str = "timestamp") -> _dt.time | None:
        s = self._raw(msg, name)
        return _parse_time(s) if s else None

    def _gga(self, msg, t: float) -> _Obs:
        """GGA (NMEA 0183 v4.10): time, position, quality 0-8, satellites in use, HDOP, altitude MSL."""
        r = self._raw
        obs = _Obs("GGA", msg.talker, t, self._time(msg))
        if not r(msg, "gps_qual"):
            raise _FieldError("GGA truncated before the quality field")
        quality = int(_float(r(msg, "gps_qual"), "quality"))
        if not 0 <= quality <= 9:
            raise _FieldError(f"GGA quality {quality} is not one of 0-9")
        obs.sats = _sats(r(msg, "num_sats"))
        obs.quality = quality
        if quality not in GGA_FIX_QUALITIES:  # 0 invalid, 7 manual input, 8 simulator, 9 (non-standard)
            obs.void = f"gga_{_GGA_VOID.get(quality, f'quality_{quality}')}"
            return obs
        obs.dr = quality == 6
        self._position(obs, msg)
        if obs.pos is not None:
            obs.hdop = _opt_float(r(msg, "horizontal_dil"), "hdop", 0.0, HDOP_MAX)
            obs.alt = _opt_float(r(msg, "altitude"), "altitude", *ALTITUDE_RANGE_M)
            obs.utc = self._utc(obs.time)
        return obs

    def _mode(self, obs: _Obs, mode: str, what: str) -> None:
        """A single FAA mode indicator (RMC, GLL): N / M / S void the epoch, E is dead reckoning."""
        if not mode:
            obs.quality = 1  # receivers before NMEA 2.3 send none
        elif mode in NOT_VALID_MODES:
            obs.void = f"{what}_{_MODE_VOID[mode]}"
        else:
            obs.quality = _MODE_QUALITY.get(mode, 1)
            obs.dr = mode == "E"

    def _rmc(self, msg, t: float) -> _Obs:
        """RMC: time, status A (valid) / V (void), position, speed (knots), course (deg true), date,
        mode indicator (v2.3+). The navigation status (v4.10 field 13) is not read."""
        r = self._raw
        obs = _Obs("RMC", msg.talker, t, self._time(msg))
        if r(msg, "datestamp"):
            obs.date = (_parse_date(r(msg, "datestamp")), obs.time)
            self._date, self._date_time = obs.date
        if r(msg, "status") != "A":
            obs.void = "rmc_void"
            return obs
        self._mode(obs, r(msg, "mode_indicator")[:1].upper(), "rmc")
        if obs.void:
            return obs
        self._position(obs, msg)
        if obs.pos is None:
            return obs
        speed = _lenient(r(msg, "spd_over_grnd"), "speed", 0.0, SPEED_MAX_KNOTS)
        course = _lenient(r(msg, "true_course"), "course", 0.0, 360.0)
        obs.motion = (None if speed is None else speed * KNOT_MPS, course)
        self._motion = (t, *obs.motion)
        obs.utc = self._utc(obs.time)
        return obs

    def _gll(self, msg, t: float) -> _Obs:
        """GLL: position, time, status A / V, mode indicator (v2.3+)."""
        r = self._raw
        obs = _Obs("GLL", msg.talker, t, self._time(msg))
        if r(msg, "status") != "A":
            obs.void = "gll_void"
            return obs
        self._mode(obs, r(msg, "faa_mode")[:1].upper(), "gll")
        if obs.void:
            return obs
        self._position(obs, msg)
        if obs.pos is not None:
            obs.utc = self._utc(obs.time)
        return obs

    def _gns(self, msg, t: float) -> _Obs:
        """GNS (NMEA 0183 v3+): the fix sentence of GNSS receivers; its mode indicator has one character
        per constellation (GPS, GLONASS, Galileo, BeiDou, QZSS, NavIC), N where that one is not used."""
        r = self._raw
        obs = _Obs("GNS", msg.talker, t, self._time(msg))
        modes = r(msg, "mode_indicator").upper()
        obs.sats = _sats(r(msg, "num_sats"))
        real = [c for c in modes if c in _MODE_QUALITY and c != "E"]
        if real:
            obs.quality = max(_MODE_QUALITY[c] for c in real)
        elif "E" in modes:
            obs.quality, obs.dr = 6, True
        else:  # every constellation N (or M / S): no fix
            bad = [c for c in modes if c in ("M", "S")]
            obs.void = f"gns_{_MODE_VOID[bad[0]]}" if bad else "gns_not_valid"
            return obs
        if self._at(msg, 12).upper() in ("U", "V"):  # navigation status unsafe / not valid: no position
            obs.dr = False
            return obs
        self._position(obs, msg)
        if obs.pos is not None:
            obs.hdop = _opt_float(r(msg, "hdop"), "hdop", 0.0, HDOP_MAX)
            obs.alt = _opt_float(r(msg, "altitude"), "altitude", *ALTITUDE_RANGE_M)
            obs.utc = self._utc(obs.time)
        return obs

    def _gsa(self, msg, t: float) -> _Obs:
        """GSA: fix mode (1 none, 2 2D, 3 3D), up to 12 PRNs used, PDOP / HDOP / VDOP, and (v4.10) the
        GNSS system id in field 18."""
        obs = _Obs("GSA", msg.talker, t)
        mode = self._at(msg, 1)
        obs.gsa_mode = int(mode) if mode in ("1", "2", "3") else None
        system = self._at(msg, 17) if len(msg.data) > 17 else msg.talker
        obs.gsa_prns = tuple((system, p) for p in (self._at(msg, i) for i in range(2, 14)) if p)
        obs.hdop = _lenient(self._at(msg, 15), "hdop", 0.0, HDOP_MAX)
        return obs

    def _vtg(self, msg, t: float) -> _Obs:
        r = self._raw
        obs = _Obs("VTG", msg.talker, t)
        kmh = _lenient(r(msg, "spd_over_grnd_kmph"), "speed", 0.0, SPEED_MAX_KNOTS * 1.852)
        course = _lenient(r(msg, "true_track"), "course", 0.0, 360.0)
        if kmh is not None:
            obs.motion = (kmh / 3.6, course)
            self._motion = (t, *obs.motion)
        return obs

    def _gst(self, msg, t: float) -> _Obs:
        r = self._raw
        obs = _Obs("GST", msg.talker, t)
        sds = [_opt_float(r(msg, k), k, 0.0, SIGMA_MAX_M)
               for k in ("std_dev_latitude", "std_dev_longitude", "std_dev_altitude")]
        if sds[0] is not None and sds[1] is not None:
            obs.gst = tuple(sds)
            self._gst = (t, *sds)
        return obs

    def _hdt(self, msg, t: float) -> _Obs:
        obs = _Obs("HDT", msg.talker, t)
        obs.heading = _opt_float(self._raw(msg, "heading"), "heading", 0.0, 360.0)
        if obs.heading is not None:
            self._heading = (t, obs.heading)
        return obs

    def _zda(self, msg, t: float) -> _Obs:
        r = self._raw
        obs = _Obs("ZDA", msg.talker, t)
        if r(msg, "day") and r(msg, "month") and r(msg, "year"):
            try:
                date = _dt.date(int(r(msg, "year")), int(r(msg, "month")), int(r(msg, "day")))
                if date.year < 1980:  # before the GPS epoch: a receiver without a date yet
                    raise ValueError("year before 1980")
            except (ValueError, OverflowError) as exc:
                raise _FieldError("ZDA date") from exc
            ts = r(msg, "timestamp")
            obs.date = (date, _parse_time(ts) if ts else None)
            self._date, self._date_time = obs.date
        return obs

    def _utc(self, utc_time: _dt.time | None) -> _dt.datetime | None:
        """Receiver time of day + the last date seen."""
        return _combine(self._date, self._date_time, utc_time)

    # -- epochs -------------------------------------------------------------------------------------
    def _new_epoch(self) -> _Epoch:
        self._cur = _Epoch()
        return self._cur

    def _add(self, obs: _Obs) -> list:
        """Put one sentence into its epoch; returns the readings decided meanwhile."""
        out: list = []
        cur = self._cur
        if obs.kind in FIX_SENTENCES:
            key = (obs.talker, obs.kind)
            if cur is not None:
                if obs.time is not None and cur.time is not None:
                    new = obs.time != cur.time
                else:  # no time to tell: one fix sentence per talker and type per cycle
                    new = key in cur.counts
                if new:
                    out += self._close()
                    cur = None
            if cur is None:
                cur = self._new_epoch()
                pending, self._pending = self._pending, []
                for p in pending:
                    out += self._join(cur, p)
            elif self._pending:  # time-less sentences taken for the next cycle's: this epoch's after all
                pending, self._pending = self._pending, []
                for p in pending:
                    out += self._join(cur, p)
            out += self._join(cur, obs)
        elif cur is not None and (self._pending or cur.first.get((obs.talker, obs.kind), 1 << 30) < cur.last_fix):
            # The first sentences of the next cycle: this time-less sentence came before a fix sentence of
            # the epoch already (a ZDA or GSA that starts the receiver's cycle), or follows one that did.
            # If the next fix sentence turns out to have the same time, they join this epoch after all.
            self._pending.append(obs)
            if len(self._pending) > 64:  # a receiver sending no fix sentences at all: bound the list
                self._pending.pop(0)
        else:
            out += self._join(cur if cur is not None else self._new_epoch(), obs)
        return out

    def _join(self, ep: _Epoch, obs: _Obs) -> list:
        if len(ep.obs) >= MAX_EPOCH_SENTENCES:
            # a receiver repeating one time (or sending no fix sentence) for ever: decide on what came, keep
            # no more (memory stays bounded)
            self.stats.late += 1
            return [] if ep.decided else self._deliver(ep)
        key = (obs.talker, obs.kind)
        ep.first.setdefault(key, len(ep.obs))
        if obs.kind in FIX_SENTENCES:
            ep.last_fix = len(ep.obs)
        ep.obs.append(obs)
        ep.counts[key] = ep.counts.get(key, 0) + 1
        if ep.time is None and obs.time is not None:
            ep.time = obs.time
        if ep.complete:  # beyond the learned cycle
            self.stats.late += 1
        pattern = self._pattern
        if pattern and all(ep.counts.get(k, 0) >= n for k, n in pattern.items()):
            ep.complete = True
        if ep.decided:
            return []
        decisive = obs.void is not None or (obs.dr and not self._allow_dr)
        if decisive or ep.complete:
            return self._deliver(ep)
        return []

    def _close(self) -> list:
        """Close the open epoch: decide it if still open, and learn the receiver's cycle from it."""
        ep, self._cur = self._cur, None
        if ep is None:
            return []
        out = [] if ep.decided else self._deliver(ep)
        self.stats.waited += len(out)
        if any(k in FIX_SENTENCES for _, k in ep.counts):
            self._pattern = dict(ep.counts)
        return out

    def _deliver(self, ep: _Epoch) -> list:
        ep.decided = True
        r = self._decide(ep)
        if r is None:
            return []
        if isinstance(r, GpsFix):
            self.stats.fixes += 1
        else:
            self.stats.no_fix += 1
        return [r]

    def _decide(self, ep: _Epoch):
        """The epoch's one reading (see the module docstring for the rules); None without fix sentences."""
        fix_obs = [o for o in ep.obs if o.kind in FIX_SENTENCES]
        if not fix_obs:
            return None
        sats_obs = [o.sats for o in fix_obs if o.kind in ("GGA", "GNS") and o.sats is not None]
        in_use = max(sats_obs) if sats_obs else None  # GGA / GNS satellites in use

        def no_fix(o: _Obs, reason: str) -> GpsNoFix:
            return GpsNoFix(o.t, ep.time, o.kind, in_use, reason)

        void = next((o for o in ep.obs if o.void), None)
        if void is not None:
            return no_fix(void, void.void)
        dr = next((o for o in ep.obs if o.dr), None)
        if dr is not None and not self._allow_dr:
            return no_fix(dr, "dead_reckoning")
        gsas = [o for o in ep.obs if o.kind == "GSA" and o.gsa_mode is not None]
        if gsas and all(o.gsa_mode == 1 for o in gsas):
            return no_fix(gsas[-1], "gsa_no_fix")
        gsa_used = len({p for o in gsas for p in o.gsa_prns})
        counts = sats_obs + ([gsa_used] if gsa_used else [])
        if counts and max(counts) < MIN_SATELLITES and not any(o.gsa_mode in (2, 3) for o in gsas):
            return no_fix(fix_obs[0], "few_satellites")
        with_pos = [o for o in fix_obs if o.pos is not None]
        if not with_pos:
            return no_fix(fix_obs[0], "no_position")
        p = min(with_pos, key=lambda o: _POSITION_PRIORITY[o.kind])
        sats = in_use if in_use is not None else (gsa_used or None)
        hdop = next((o.hdop for o in [p] + fix_obs + gsas if o.hdop is not None), None)
        alt = next((o.alt for o in [p] + fix_obs if o.alt is not None), None)
        dated = next((o.date for o in ep.obs if o.date is not None and o.date[0] is not None), None)
        utc = _combine(dated[0], dated[1], p.time) if dated is not None else p.utc
        quality = p.quality if p.quality is not None else 1
        motion = next((o.motion for o in reversed(ep.obs) if o.motion is not None), None)
        gst = next((o.gst for o in reversed(ep.obs) if o.gst is not None), None)
        heading = next((o.heading for o in reversed(ep.obs) if o.heading is not None), None)
        return self._fix(p, quality, sats, hdop, alt, utc, motion, gst, heading)

    def _fresh(self, item, t: float):
        return item[1:] if item is not None and t - item[0] <= self._max_age else None

    def _fix(self, p: _Obs, quality, sats, hdop, alt, utc, motion, gst, heading) -> GpsFix:
        t = p.t
        gst = gst if gst is not None else self._fresh(self._gst, t)
        if gst is not None and gst[0] > 0 and gst[1] > 0:
            up = gst[2] if gst[2] is not None and gst[2] > 0 else 2.0 * max(gst[0], gst[1])
            cov, ctype = (gst[1] * gst[1], gst[0] * gst[0], up * up), 2  # sigmas <= SIGMA_MAX_M: finite
        else:
            h = (hdop if hdop is not None else 1.0) * _EPE_BY_QUALITY.get(quality, 4.0)
            cov, ctype = (h * h, h * h, 4.0 * h * h), 1
        motion = motion if motion is not None else self._fresh(self._motion, t)
        if heading is None:
            fresh = self._fresh(self._heading, t)
            heading = fresh[0] if fresh else None
        lat, lon = p.pos
        return GpsFix(t, lat, lon, alt, quality, sats, hdop, cov, ctype, utc, p.time,
                      speed_mps=motion[0] if motion else None, course_deg=motion[1] if motion else None,
                      heading_deg=heading, source=p.kind, talker=p.talker)

    # -- bad input --------------------------------------------------------------------------------
    def _bad(self, reason: str, line: bytes, detail: str = ""):
        self.faults.record(reason, f"{detail + ' in ' if detail else ''}{line[:90]!r}")
        return None


_HANDLERS = {"GGA": NmeaDecoder._gga, "GNS": NmeaDecoder._gns, "RMC": NmeaDecoder._rmc, "GLL": NmeaDecoder._gll,
             "GSA": NmeaDecoder._gsa, "VTG": NmeaDecoder._vtg, "GST": NmeaDecoder._gst, "HDT": NmeaDecoder._hdt,
             "ZDA": NmeaDecoder._zda}
