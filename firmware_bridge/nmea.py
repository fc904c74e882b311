"""NMEA 0183 GPS decoding over pynmea2: bytes in, :class:`GpsFix` / :class:`GpsNoFix` out.

Pure (no I/O): the serial GPS driver, the MCU driver (NMEA carried in ``navsat/nmea_sentence``),
``robot-app gps decode`` and the GPS simulator's tests all use :class:`NmeaDecoder`.

What it survives (docs/protocols.md, "NMEA GPS"): reads that start mid-sentence, NUL bytes and garbage
after a cold boot, 6-digit ``hhmmss`` times, one-digit and ``*00`` checksums (the checksum is checked
here as an integer, not by pynmea2, whose ``check=False`` still raises on a wrong one), truncated
sentences with a valid checksum, all-empty no-sky sentences, and receivers that send a wrong checksum
on one sentence type (``ignore_checksum_for``). Field values are converted here with range checks
rather than trusting pynmea2's lenient properties (an empty latitude there reads as 0.0). Nothing
raises on input: every non-empty line is either decoded, ignored (valid but carrying no fix data, e.g.
GSV) or counted in :attr:`NmeaStats.bad` by reason and logged at a limited rate. Received numbers are
range-checked before any arithmetic (HDOP <= 99.99, GST sigmas <= 10,000 km, altitude, satellites; see the
constants below), so a sentence with a valid checksum and a value such as ``1e200`` is counted as bad,
never raised; the reason ``internal`` counts a failure of the decoder itself (a bug; the fuzz tests
require it to stay 0).

Fix assembly: a GGA with quality 1-6 is a fix (0 invalid, 7 manual input, 8 simulator and anything
else are not: NMEA 0183 v4.11 GGA quality field); a GNS (GNSS-only receivers) whose mode indicator has
a valid mode for some constellation is a fix on streams without GGA; RMC with status A and a valid mode
(not N not valid, M manual or S simulator) is a fix only on streams that carry neither GGA nor GNS (e.g.
the Jackal MCU's RMC-only topic), from the second RMC on (the first one cannot tell).
Speed/course (RMC, VTG), GST error estimates and HDT heading received within ``max_age_s`` are
attached to the next fix.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
import time
from dataclasses import dataclass, field

import pynmea2

from firmware_bridge.readings import GpsFix, GpsNoFix

log = logging.getLogger(__name__)

__all__ = ["NmeaStats", "NmeaDecoder", "LineSplitter", "nmea_checksum", "TALKERS"]

TALKERS = frozenset({"GP", "GN", "GL", "GA", "GB", "BD", "GQ"})
"""Talker ids accepted for position sentences (GPS, multi-GNSS, GLONASS, Galileo, BeiDou, QZSS)."""

KNOT_MPS = 1852.0 / 3600.0
MAX_LINE = 200  # NMEA 0183 allows 82 characters; some receivers exceed it, none by this much.

# Horizontal 1-sigma error per GGA quality, multiplied by HDOP when no GST is available
# (nmea_navsat_driver defaults: epe_quality1 = 4.0 m, 2 = 0.1 m, 4 = 0.02 m, 5 = 4.0 m, 9 = 3.0 m).
_EPE_BY_QUALITY = {1: 4.0, 2: 0.1, 3: 4.0, 4: 0.02, 5: 4.0, 6: 10.0, 9: 3.0}

#: GGA quality values that are a fix (NMEA 0183 v4.11: 1 GPS, 2 DGPS, 3 PPS, 4 RTK fixed, 5 RTK float,
#: 6 estimated / dead reckoning; 0 invalid, 7 manual input, 8 simulator are not)
GGA_FIX_QUALITIES = frozenset({1, 2, 3, 4, 5, 6})
#: RMC / GNS mode indicators that are not a fix (N not valid, M manual input, S simulator)
NOT_VALID_MODES = frozenset("NMS")
# GNS mode character -> the GGA quality it corresponds to (A autonomous, D differential, P precise,
# R RTK fixed, F RTK float, E estimated)
_GNS_QUALITY = {"A": 1, "D": 2, "P": 3, "R": 4, "F": 5, "E": 6}

_TIME_RE = re.compile(r"^(\d{2})(\d{2})(\d{2})(?:\.(\d{1,6}))?$")
_DATE_RE = re.compile(r"^(\d{2})(\d{2})(\d{2})$")


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
    """Counters of an :class:`NmeaDecoder`; ``bad`` maps a reason to a count."""

    lines: int = 0
    fixes: int = 0
    no_fix: int = 0
    ignored: int = 0
    bad: dict = field(default_factory=dict)

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())

    def as_dict(self) -> dict:
        return {"lines": self.lines, "fixes": self.fixes, "no_fix": self.no_fix, "ignored": self.ignored,
                "bad": self.bad_total, "bad_by_reason": dict(sorted(self.bad.items()))}


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
    """An optional motion field: None when empty, unreadable or outside ``[lo, hi]`` (the sentence's
    position is still used)."""
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


class NmeaDecoder:
    """Turn NMEA bytes or lines into GPS readings, counting what it cannot use.

    Parameters
    ----------
    ignore_checksum_for : iterable of str
        Sentence types (e.g. ``{"GGA"}``) whose wrong checksum is tolerated (firmware bugs).
    require_checksum : bool
        Reject sentences without ``*hh`` (default True: a missing checksum usually means a cut line).
    max_age_s : float
        How old (host monotonic seconds) RMC/VTG motion, GST errors and HDT heading may be to be
        attached to a fix.
    log_interval_s : float
        At most one warning about bad sentences per this many seconds.
    """

    def __init__(self, *, ignore_checksum_for=(), require_checksum: bool = True, max_age_s: float = 1.5,
                 log_interval_s: float = 10.0) -> None:
        self.stats = NmeaStats()
        self._ignore_cs = frozenset(s.upper() for s in ignore_checksum_for)
        self._require_cs = require_checksum
        self._max_age = max_age_s
        self._log_interval = log_interval_s
        self._splitter = LineSplitter()
        self._gga_seen = False
        self._gns_seen = False
        self._rmc_seen = False
        self._date: _dt.date | None = None
        self._date_time: _dt.time | None = None  # time of day of the sentence that gave the date
        self._motion: tuple | None = None   # (t_mono, speed_mps, course_deg)
        self._gst: tuple | None = None      # (t_mono, sd_lat_m, sd_lon_m, sd_alt_m)
        self._heading: tuple | None = None  # (t_mono, heading_deg)
        self._last_log = -math.inf
        self._unlogged = 0
        self._last_bad = ""

    # -- input -----------------------------------------------------------------------------------
    def feed(self, data: bytes, t_mono_s: float | None = None) -> list:
        """Decode every complete line in ``data`` (partial lines wait for the next call)."""
        t = time.monotonic() if t_mono_s is None else t_mono_s
        out = []
        for line in self._splitter.feed(data):
            r = self.decode_line(line, t)
            if r is not None:
                out.append(r)
        return out

    def reset_stream(self) -> None:
        """Forget an unfinished line (after a reconnect); counters and fix context are kept."""
        self._splitter.flush()

    def finish(self, t_mono_s: float | None = None) -> list:
        """Decode a last line that had no line end (end of a file)."""
        out = [self.decode_line(ln, t_mono_s) for ln in self._splitter.flush()]
        return [r for r in out if r is not None]

    def decode_line(self, line: bytes | str, t_mono_s: float | None = None):
        """Decode one sentence; returns a :class:`GpsFix`, a :class:`GpsNoFix` or None."""
        t = time.monotonic() if t_mono_s is None else t_mono_s
        if isinstance(line, str):
            line = line.encode("utf-8", "replace")
        line = line.replace(b"\x00", b"").strip()
        if not line:
            return None
        self.stats.lines += 1
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
        body, star, cs = text.partition("*")
        stype = body[3:6] if len(body) >= 6 else ""
        if star:
            if not (1 <= len(cs) <= 2) or any(c not in "0123456789abcdefABCDEF" for c in cs):
                return self._bad("checksum_format", line)
            if int(cs, 16) != nmea_checksum(body[1:]) and stype not in self._ignore_cs:
                return self._bad("checksum", line)
        elif self._require_cs:
            return self._bad("no_checksum", line)
        try:
            msg = pynmea2.parse(body, check=False)
        except pynmea2.SentenceTypeError:
            return self._bad("unsupported_type", line)
        except Exception:  # noqa: BLE001 - pynmea2's own failures on odd bodies (ParseError, ValueError, ...)
            return self._bad("parse", line)
        try:
            return self._dispatch(msg, t)
        except (_FieldError, IndexError, ValueError) as exc:
            return self._bad("field", line, str(exc))
        except Exception as exc:  # noqa: BLE001 - wire data never raises; "internal" is a decoder bug to fix
            return self._bad("internal", line, f"{type(exc).__name__}: {exc}")

    # -- per-sentence handling --------------------------------------------------------------------
    def _dispatch(self, msg, t: float):
        kind = getattr(msg, "sentence_type", "")
        talker = getattr(msg, "talker", None)
        handler = _HANDLERS.get(kind) if talker else None
        if handler is None:
            self.stats.ignored += 1
            return None
        if talker not in TALKERS:
            raise _FieldError(f"talker {talker!r}")
        return handler(self, msg, t)

    @staticmethod
    def _raw(msg, name: str) -> str:
        i = msg.name_to_idx.get(name)
        return msg.data[i].strip() if i is not None and i < len(msg.data) else ""

    def _gga(self, msg, t: float):
        r = self._raw
        self._gga_seen = True
        utc_time = _parse_time(r(msg, "timestamp")) if r(msg, "timestamp") else None
        if not r(msg, "gps_qual"):
            raise _FieldError("GGA truncated before the quality field")
        quality = int(_float(r(msg, "gps_qual"), "quality"))
        sats = _sats(r(msg, "num_sats"))
        if not 0 <= quality <= 9:
            raise _FieldError(f"GGA quality {quality} is not one of 0-9")
        if quality not in GGA_FIX_QUALITIES:  # 0 invalid, 7 manual input, 8 simulator, 9 (non-standard)
            self.stats.no_fix += 1
            return GpsNoFix(t, utc_time, "GGA", sats)
        if not r(msg, "lat") or not r(msg, "lon"):
            self.stats.no_fix += 1
            return GpsNoFix(t, utc_time, "GGA", sats)
        lat = _degrees(r(msg, "lat"), r(msg, "lat_dir"), lat=True)
        lon = _degrees(r(msg, "lon"), r(msg, "lon_dir"), lat=False)
        hdop = _opt_float(r(msg, "horizontal_dil"), "hdop", 0.0, HDOP_MAX)
        alt = _opt_float(r(msg, "altitude"), "altitude", *ALTITUDE_RANGE_M)
        return self._fix(t, lat, lon, alt, quality, sats, hdop, utc_time, "GGA", msg.talker)

    def _rmc(self, msg, t: float):
        r = self._raw
        utc_time = _parse_time(r(msg, "timestamp")) if r(msg, "timestamp") else None
        if r(msg, "datestamp"):
            self._set_date(_parse_date(r(msg, "datestamp")), utc_time)
        mode = r(msg, "mode_indicator")
        if r(msg, "status") != "A" or (mode and mode[0] in NOT_VALID_MODES):
            self.stats.no_fix += 1
            return GpsNoFix(t, utc_time, "RMC")
        speed = _lenient(r(msg, "spd_over_grnd"), "speed", 0.0, SPEED_MAX_KNOTS)
        course = _lenient(r(msg, "true_course"), "course", 0.0, 360.0)
        self._motion = (t, None if speed is None else speed * KNOT_MPS, course)
        rmc_only, self._rmc_seen = self._rmc_seen and not self._gga_seen and not self._gns_seen, True
        if not rmc_only:  # a GGA stream, or too early to tell (the GGA of this epoch may follow)
            self.stats.ignored += 1
            return None
        lat = _degrees(r(msg, "lat"), r(msg, "lat_dir"), lat=True)
        lon = _degrees(r(msg, "lon"), r(msg, "lon_dir"), lat=False)
        quality = 2 if r(msg, "mode_indicator") == "D" else 1
        return self._fix(t, lat, lon, None, quality, None, None, utc_time, "RMC", msg.talker)

    def _gns(self, msg, t: float):
        """GNS (NMEA 0183 v3+): the fix sentence of GNSS-only receivers; its mode indicator has one
        character per constellation (GPS, GLONASS, Galileo, BeiDou, ...)."""
        r = self._raw
        self._gns_seen = True
        utc_time = _parse_time(r(msg, "timestamp")) if r(msg, "timestamp") else None
        modes = r(msg, "mode_indicator").upper()
        sats = _sats(r(msg, "num_sats"))
        valid = [c for c in modes if c not in NOT_VALID_MODES]
        if self._gga_seen:  # the GGA of the epoch carries the fix: no second one
            self.stats.ignored += 1
            return None
        if not valid or not r(msg, "lat") or not r(msg, "lon"):
            self.stats.no_fix += 1
            return GpsNoFix(t, utc_time, "GNS", sats)
        quality = max(_GNS_QUALITY.get(c, 1) for c in valid)
        lat = _degrees(r(msg, "lat"), r(msg, "lat_dir"), lat=True)
        lon = _degrees(r(msg, "lon"), r(msg, "lon_dir"), lat=False)
        hdop = _opt_float(r(msg, "hdop"), "hdop", 0.0, HDOP_MAX)
        alt = _opt_float(r(msg, "altitude"), "altitude", *ALTITUDE_RANGE_M)
        return self._fix(t, lat, lon, alt, quality, sats, hdop, utc_time, "GNS", msg.talker)

    def _vtg(self, msg, t: float):
        r = self._raw
        kmh = _lenient(r(msg, "spd_over_grnd_kmph"), "speed", 0.0, SPEED_MAX_KNOTS * 1.852)
        course = _lenient(r(msg, "true_track"), "course", 0.0, 360.0)
        if kmh is not None:
            self._motion = (t, kmh / 3.6, course)
        self.stats.ignored += 1

    def _gst(self, msg, t: float):
        r = self._raw
        sds = [_opt_float(r(msg, k), k, 0.0, SIGMA_MAX_M)
               for k in ("std_dev_latitude", "std_dev_longitude", "std_dev_altitude")]
        if sds[0] is not None and sds[1] is not None:
            self._gst = (t, *sds)
        self.stats.ignored += 1

    def _hdt(self, msg, t: float):
        h = _opt_float(self._raw(msg, "heading"), "heading", 0.0, 360.0)
        if h is not None:
            self._heading = (t, h)
        self.stats.ignored += 1

    def _zda(self, msg, t: float):
        r = self._raw
        if r(msg, "day") and r(msg, "month") and r(msg, "year"):
            try:
                date = _dt.date(int(r(msg, "year")), int(r(msg, "month")), int(r(msg, "day")))
                if date.year < 1980:  # before the GPS epoch: a receiver without a date yet
                    raise ValueError("year before 1980")
            except (ValueError, OverflowError) as exc:
                raise _FieldError("ZDA date") from exc
            ts = r(msg, "timestamp")
            self._set_date(date, _parse_time(ts) if ts else None)
        self.stats.ignored += 1

    def _set_date(self, date: _dt.date, utc_time: _dt.time | None) -> None:
        self._date, self._date_time = date, utc_time

    def _utc(self, utc_time: _dt.time | None) -> _dt.datetime | None:
        """Receiver time of day + the last date seen; a time-of-day far below the one the date came
        with means midnight passed in between (GGA arriving before this epoch's RMC)."""
        if utc_time is None or self._date is None:
            return None
        date = self._date
        ref = self._date_time
        if ref is not None and (ref.hour * 3600 + ref.minute * 60 + ref.second) - \
                (utc_time.hour * 3600 + utc_time.minute * 60 + utc_time.second) > 12 * 3600:
            if date == _dt.date.max:
                return None
            date += _dt.timedelta(days=1)
        return _dt.datetime.combine(date, utc_time)

    def _fresh(self, item, t: float):
        return item if item is not None and t - item[0] <= self._max_age else None

    def _fix(self, t, lat, lon, alt, quality, sats, hdop, utc_time, source, talker) -> GpsFix:
        gst = self._fresh(self._gst, t)
        if gst is not None and gst[1] > 0 and gst[2] > 0:
            up = gst[3] if gst[3] is not None and gst[3] > 0 else 2.0 * max(gst[1], gst[2])
            cov, ctype = (gst[2] * gst[2], gst[1] * gst[1], up * up), 2  # sigmas <= SIGMA_MAX_M: finite
        else:
            h = (hdop if hdop is not None else 1.0) * _EPE_BY_QUALITY.get(quality, 4.0)
            cov, ctype = (h * h, h * h, 4.0 * h * h), 1
        motion = self._fresh(self._motion, t)
        heading = self._fresh(self._heading, t)
        utc = self._utc(utc_time)
        self.stats.fixes += 1
        return GpsFix(t, lat, lon, alt, quality, sats, hdop, cov, ctype, utc, utc_time,
                      speed_mps=motion[1] if motion else None, course_deg=motion[2] if motion else None,
                      heading_deg=heading[1] if heading else None, source=source, talker=talker)

    # -- bad input --------------------------------------------------------------------------------
    def _bad(self, reason: str, line: bytes, detail: str = ""):
        self.stats.bad[reason] = self.stats.bad.get(reason, 0) + 1
        self._unlogged += 1
        self._last_bad = f"{reason}{': ' + detail if detail else ''} in {line[:90]!r}"
        now = time.monotonic()
        if now - self._last_log >= self._log_interval:
            log.warning("%d bad NMEA sentence(s) since the last report; latest: %s", self._unlogged,
                        self._last_bad)
            self._last_log, self._unlogged = now, 0
        return None


_HANDLERS = {"GGA": NmeaDecoder._gga, "GNS": NmeaDecoder._gns, "RMC": NmeaDecoder._rmc, "VTG": NmeaDecoder._vtg,
             "GST": NmeaDecoder._gst, "HDT": NmeaDecoder._hdt, "ZDA": NmeaDecoder._zda}
