"""NMEA fixes only from epochs whose sentences carry one: GGA quality 1-5 (6, dead reckoning, only when
allowed), RMC / GNS modes other than N (not valid), M (manual) and S (simulator); GNS from GNSS-only
receivers (every talker); and no valid sentence lost after noise, at every split of the stream into
reads."""

from __future__ import annotations

import random

import pytest

from firmware_bridge.nmea import NmeaDecoder, nmea_checksum
from firmware_bridge.readings import GpsFix, GpsNoFix


def sentence(body: str) -> bytes:
    return f"${body}*{nmea_checksum(body):02X}\r\n".encode()


GGA = "GPGGA,123519.00,4807.038,N,01131.000,E,{q},08,0.9,545.4,M,46.9,M,,"
RMC = "GPRMC,123519.00,A,4807.038,N,01131.000,E,0.5,84.4,230394,003.1,W,{mode}"
GNS = "{talker}GNS,12351{s}.00,4807.038,N,01131.000,E,{modes},08,0.9,545.4,46.9,,"


def decode(*lines: bytes, **kwargs) -> list:
    """All readings, the last epoch closed by ``finish()``."""
    dec = NmeaDecoder(**kwargs)
    return [r for ln in lines for r in dec.feed(ln, 0.0)] + dec.finish(0.0)


@pytest.mark.parametrize("q, fix", [(1, True), (2, True), (4, True), (5, True), (6, False), (0, False), (7, False),
                                    (8, False), (9, False)])
def test_gga_quality_outside_1_to_5_gives_no_fix(q, fix):
    out = decode(sentence(GGA.format(q=q)))
    assert len(out) == 1 and isinstance(out[0], GpsFix if fix else GpsNoFix)
    if fix:
        assert out[0].quality == q and abs(out[0].latitude_deg - 48.1173) < 1e-4
    if q == 6:  # estimated / dead reckoning: a fix only when allowed
        assert out[0].reason == "dead_reckoning"
        (r,) = decode(sentence(GGA.format(q=q)), allow_dead_reckoning=True)
        assert isinstance(r, GpsFix) and r.quality == 6


@pytest.mark.parametrize("q", [-1, 10, 100000])
def test_gga_quality_out_of_range_is_a_bad_sentence(q):
    dec = NmeaDecoder()
    assert dec.feed(sentence(GGA.format(q=q)), 0.0) == [] and dec.stats.bad.get("field") == 1


@pytest.mark.parametrize("mode, fix", [("A", True), ("D", True), ("N", False), ("M", False), ("S", False)])
def test_rmc_mode_not_valid_gives_no_fix(mode, fix):
    out = decode(sentence(RMC.format(mode=mode)))  # an RMC-only epoch
    assert len(out) == 1 and isinstance(out[0], GpsFix if fix else GpsNoFix)


@pytest.mark.parametrize("talker", ["GN", "GP", "GL", "GA", "GB", "BD", "GQ"])
def test_gns_from_gnss_only_receivers_gives_fixes_for_every_talker(talker):
    out = decode(sentence(GNS.format(talker=talker, modes="AN", s=8)),
                 sentence(GNS.format(talker=talker, modes="RR", s=9)))
    assert [type(r) for r in out] == [GpsFix, GpsFix]
    assert out[0].quality == 1 and out[1].quality == 4 and out[0].source == "GNS" and out[0].talker == talker
    assert out[0].hdop == 0.9 and abs(out[0].longitude_deg - 11.516667) < 1e-5


def test_gns_without_a_valid_mode_gives_no_fix_and_a_gga_stream_gives_one_fix_per_epoch():
    assert isinstance(decode(sentence(GNS.format(talker="GN", modes="NN", s=9)))[0], GpsNoFix)
    assert isinstance(decode(sentence(GNS.format(talker="GN", modes="MS", s=9)))[0], GpsNoFix)
    out = decode(sentence(GGA.format(q=1)), sentence(GNS.format(talker="GN", modes="AA", s=9)))
    assert [(type(r), r.source) for r in out] == [(GpsFix, "GGA")]  # one epoch, the GGA's position


@pytest.mark.parametrize("noise_len", [200, 333, 1000])
def test_a_valid_sentence_after_noise_is_never_lost_whatever_the_read_boundaries(noise_len):
    rng = random.Random(noise_len)
    # printable noise without line ends, a few "$" in it, as a receiver's cold boot sends
    noise = bytes(rng.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.*$ ") for _ in range(noise_len))
    stream = noise + sentence(GGA.format(q=1)) + sentence(GGA.format(q=2).replace("123519", "123520"))
    for split in range(1, len(stream)):
        for second in (split + 1, split + 7, split + 90):
            dec = NmeaDecoder()
            out = (dec.feed(stream[:split], 0.0) + dec.feed(stream[split:second], 0.0) + dec.feed(stream[second:], 0.0)
                   + dec.finish(0.0))
            fixes = [r.quality for r in out if isinstance(r, GpsFix)]
            assert fixes == [1, 2], (noise_len, split, second, out)
