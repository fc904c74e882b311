"""Agreement of :class:`~firmware_bridge.nmea.NmeaDecoder` with gpsd on gpsd's own regression logs.

gpsd's test suite (``test/daemon/`` in gpsd's sources, BSD-2-Clause) stores receiver captures ``X.log``
with the daemon's expected output ``X.log.chk``: JSON lines (TPV = time-position-velocity reports, SKY,
...) and, in current versions, each NMEA sentence echoed before the reports it caused. This module
replays each log through the decoder (``#`` comment lines skipped, as gpsd's harness does) and compares
fix epochs:

- a gpsd fix epoch: an epoch in which gpsd printed a TPV with ``mode`` >= 2 (2D or 3D). Epochs are
  keyed by UTC time of day: a TPV belongs to the epoch of the last GGA / GNS / RMC / GLL echoed before it
  in the ``.chk`` (gpsd keeps the previous fix's ``time`` in TPVs of a void sentence, so the TPV's own
  time would put a no-fix into the last fix's epoch); ``.chk`` files without echoed sentences use the
  TPV's ``time``. TPVs before the first timed fix sentence have no epoch and are not compared;
- ours: the :class:`~firmware_bridge.readings.GpsFix` readings, keyed by their ``utc_time``.

Per log: gpsd fix epochs, ours, matched (same time of day), ``extra`` (ours that gpsd does not report;
target 0), ``missed`` (gpsd's that we do not report, target 0) with our no-fix reason for each, apart
from ``missed_first`` (the first gpsd fix epoch of the stream: a capture may start in the middle of an
epoch) and ``cut_at_end`` (the capture ends before the receiver's cycle does: still open in our decoder,
which would report it as a fix when the next epoch begins; gpsd printed it on a sentence of its own), and the
largest horizontal distance between matched positions (metres, great circle on a sphere of the WGS-84
mean radius; gpsd's position is its epoch's first 2D/3D TPV). The decoder is not told that the log ended
(no :meth:`~firmware_bridge.nmea.NmeaDecoder.finish`): as on a live stream, and as gpsd, which reports at
the end of the receiver's cycle, an epoch cut short by the end of the capture is not reported.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from firmware_bridge.nmea import FIX_SENTENCES, NmeaDecoder
from firmware_bridge.readings import GpsFix, GpsNoFix

__all__ = ["LogComparison", "compare_log", "compare_dir", "gpsd_fix_epochs", "is_nmea_log", "read_log_lines"]

EARTH_MEAN_RADIUS_M = 6_371_008.8
_TIME_FIELD = {"GGA": 1, "GNS": 1, "RMC": 1, "GLL": 5}
_HHMMSS = re.compile(r"^(\d{2})(\d{2})(\d{2})(\.\d+)?$")


@dataclass
class LogComparison:
    """One log's figures (see the module docstring)."""

    name: str
    gpsd_epochs: int = 0
    ours: int = 0
    matched: int = 0
    extra: int = 0
    missed: int = 0
    missed_first: int = 0
    cut_at_end: int = 0
    max_distance_m: float | None = None
    missed_reasons: dict = field(default_factory=dict)
    extra_times: list = field(default_factory=list)
    missed_times: list = field(default_factory=list)
    bad: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"log": self.name, "gpsd_epochs": self.gpsd_epochs, "ours": self.ours, "matched": self.matched,
                "extra": self.extra, "missed": self.missed, "missed_first": self.missed_first,
                "cut_at_end": self.cut_at_end,
                "max_distance_m": self.max_distance_m, "missed_reasons": dict(self.missed_reasons),
                "extra_times": self.extra_times[:10], "missed_times": self.missed_times[:10],
                "bad_sentences": dict(self.bad)}


def _ms(h: int, m: int, s: int, frac: float) -> int:
    return ((h * 60 + m) * 60 + s) * 1000 + int(round(frac * 1000))


def _sentence_time(line: str) -> int | None:
    """Time of day (ms) of a GGA / GNS / RMC / GLL sentence, None for others or an unreadable time."""
    body = line.split("*", 1)[0].split(",")
    kind = body[0][-3:] if len(body[0]) >= 6 else ""
    i = _TIME_FIELD.get(kind)
    if i is None or i >= len(body):
        return None
    m = _HHMMSS.match(body[i].strip())
    if not m:
        return None
    return _ms(int(m.group(1)), int(m.group(2)), int(m.group(3)), float("0" + (m.group(4) or ".0")))


def _tpv_time(tpv: dict) -> int | None:
    m = re.match(r"^\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d)(\.\d+)?", str(tpv.get("time", "")))
    return _ms(int(m.group(1)), int(m.group(2)), int(m.group(3)), float("0" + (m.group(4) or ".0"))) if m else None


def _fmt(ms: int) -> str:
    s, milli = divmod(ms, 1000)
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{milli:03d}"


def gpsd_fix_epochs(chk_path: str | Path) -> dict:
    """``{time of day ms: (lat, lon) or None}`` of the epochs with at least one TPV of mode >= 2 in a
    ``.chk`` file, in stream order, with the position of the epoch's first such TPV (later ones may come
    from a proprietary sentence: the Ericsson GRU's ``$PERC,GPavp`` averaged position is 18 m away).

    "At least one" rather than "the last": gpsd prints TPVs per sentence in some logs and per cycle in
    others, and a TPV after a time-less sentence carries the previous epoch's time, so the last TPV
    keyed to an epoch is sometimes the next cycle's (a Quectel that loses its fix sends its next, no-fix
    cycle without times). An epoch in which gpsd printed a fix and took it back (myguide-3100: a GGA
    without quality, then RMC status V) therefore counts as a gpsd fix epoch.

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    lines = Path(chk_path).read_text(encoding="utf-8", errors="replace").splitlines()
    echoed = any(ln.startswith("$") for ln in lines)
    cur: int | None = None
    out: dict = {}
    for ln in lines:
        if ln.startswith("$"):
            t = _sentence_time(ln)
            if t is not None:
                cur = t
            continue
        if not ln.startswith("{"):
            continue
        try:
            rep = json.loads(ln)
        except ValueError:
            continue
        if not isinstance(rep, dict) or rep.get("class") != "TPV":
            continue
        key = cur if echoed else _tpv_time(rep)
        mode = rep.get("mode")
        if key is None or not isinstance(mode, int) or mode < 2:
            continue
        lat, lon = rep.get("lat"), rep.get("lon")
        pos = (float(lat), float(lon)) if isinstance(lat, (int, float)) and isinstance(lon, (int, float)) else None
        if out.get(key) is None:
            out[key] = pos
    return out


def read_log_lines(path: str | Path) -> list[bytes]:
    """A gpsd log's lines without line ends, ``#`` comment lines left out (gpsd's test harness)."""
    data = Path(path).read_bytes()
    return [ln.rstrip(b"\r") for ln in data.split(b"\n") if ln.strip() and not ln.lstrip().startswith(b"#")]


def is_nmea_log(path: str | Path) -> bool:
    """Whether a log is NMEA text (gpsd's binary-protocol logs, such as UBX or SiRF, are not) with at
    least one GGA / GNS / RMC / GLL sentence."""
    lines = read_log_lines(path)
    body = b"\n".join(lines)
    if not body:
        return False
    other = sum(1 for b in body if b > 126 or (b < 32 and b not in (9, 10, 13)))
    if other > 0.001 * len(body):
        return False
    return any(ln.lstrip()[:1] == b"$" and ln.lstrip()[3:6].decode("ascii", "replace") in FIX_SENTENCES
               for ln in lines)


def _distance_m(a: tuple, b: tuple) -> float:
    la1, lo1, la2, lo2 = map(math.radians, (a[0], a[1], b[0], b[1]))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return 2 * EARTH_MEAN_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def _key(t) -> int | None:
    if t is None:
        return None
    return _ms(t.hour, t.minute, t.second, t.microsecond / 1e6)


def compare_log(log_path: str | Path, chk_path: str | Path | None = None, **decoder_kwargs) -> LogComparison:
    """Replay ``log_path`` through a fresh :class:`NmeaDecoder` (``decoder_kwargs`` passed on) and compare
    its fix epochs with ``chk_path`` (default: ``log_path`` + ``.chk``).

    Raises
    ------
    OSError
        If a file cannot be read.
    """
    log_path = Path(log_path)
    chk = Path(chk_path) if chk_path is not None else log_path.with_name(log_path.name + ".chk")
    gpsd = gpsd_fix_epochs(chk)
    decoder_kwargs.setdefault("log_interval_s", 1e9)
    dec = NmeaDecoder(**decoder_kwargs)
    readings = []
    lines = read_log_lines(log_path)
    for i, line in enumerate(lines):  # one line per 0.01 s of host time (only the order matters)
        readings += dec.decode(line, i * 0.01)
    # Not finish(): as on a live stream (and as gpsd, which reports at the end of the receiver's cycle), a
    # last epoch cut short by the end of the capture is not reported; finish() tells what it would be.
    at_end = [_key(r.utc_time) for r in dec.finish(len(lines) * 0.01) if isinstance(r, GpsFix)]
    ours: dict = {}
    reasons: dict = {}
    n_ours = 0
    for r in readings:
        if isinstance(r, GpsFix):
            n_ours += 1
            k = _key(r.utc_time)
            if k is not None:
                ours.setdefault(k, (r.latitude_deg, r.longitude_deg))
        elif isinstance(r, GpsNoFix):
            k = _key(r.utc_time)
            if k is not None:
                reasons.setdefault(k, r.reason or r.source)
    res = LogComparison(log_path.name, gpsd_epochs=len(gpsd), ours=n_ours, bad=dict(dec.stats.bad))
    first = next(iter(gpsd), None)
    why: Counter = Counter()
    for k, pos in gpsd.items():
        if k in ours:
            res.matched += 1
            if pos is not None:
                d = _distance_m(pos, ours[k])
                res.max_distance_m = d if res.max_distance_m is None else max(res.max_distance_m, d)
        elif k == first:
            res.missed_first = 1
        elif k in at_end:
            res.cut_at_end = 1
        else:
            res.missed += 1
            res.missed_times.append(_fmt(k))
            why[reasons.get(k, "no reading")] += 1
    res.extra = n_ours - len([k for k in ours if k in gpsd])
    res.extra_times = [_fmt(k) for k in ours if k not in gpsd]
    res.missed_reasons = dict(why.most_common())
    return res


def compare_dir(logs_dir: str | Path, **decoder_kwargs) -> list[LogComparison]:
    """:func:`compare_log` for every NMEA ``*.log`` with a ``.chk`` in ``logs_dir`` (sorted by name;
    binary-protocol logs are skipped)."""
    out = []
    for p in sorted(Path(logs_dir).glob("*.log")):
        chk = p.with_name(p.name + ".chk")
        if chk.is_file() and is_nmea_log(p):
            out.append(compare_log(p, chk, **decoder_kwargs))
    return out
