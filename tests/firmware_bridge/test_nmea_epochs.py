"""One GPS reading per receiver epoch, decided as gpsd decides it (fault issue item 8), and the NMEA 0183
limits (82 characters, upper-case addresses). Every sentence here is built with its checksum computed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_bridge.nmea import NmeaDecoder, nmea_checksum
from firmware_bridge.readings import GpsFix


def s(body: str) -> str:
    """``GPGGA,...`` -> ``$GPGGA,...*hh`` with its checksum."""
    return f"${body}*{nmea_checksum(body):02X}"


def run(lines, **kwargs) -> tuple:
    """(readings of every line, the last epoch closed by finish(), the decoder)."""
    dec = NmeaDecoder(**kwargs)
    out = [r for i, ln in enumerate(lines) for r in dec.decode(ln, float(i))]
    return out + dec.finish(float(len(lines))), dec


def gga(t="123519.00", q=1, sats="08", lat="4807.038,N", lon="01131.000,E", hdop="0.9", talker="GP"):
    return s(f"{talker}GGA,{t},{lat},{lon},{q},{sats},{hdop},545.4,M,46.9,M,,")


def rmc(t="123519.00", status="A", mode="A", lat="4807.038,N", lon="01131.000,E"):
    return s(f"GPRMC,{t},{status},{lat},{lon},0.5,84.4,230394,003.1,W,{mode}")


def gsa(mode=3, prns=("04", "05", "09", "12"), talker="GP"):
    fields = list(prns) + [""] * (12 - len(prns))
    return s(f"{talker}GSA,A,{mode},{','.join(fields)},1.8,0.9,1.5")


def gns(t="123519.00", modes="AA", sats="08"):
    return s(f"GNGNS,{t},4807.038,N,01131.000,E,{modes},{sats},0.9,545.4,46.9,,")


def gll(t="123519.00", status="A", mode="A"):
    return s(f"GNGLL,4807.038,N,01131.000,E,{t},{status},{mode}")


def kinds(out):
    return [type(r).__name__ for r in out]


# -- GNS and GLL give fixes on their own; a once-a-minute GGA does not starve them --------------------
def test_gns_and_gll_every_second_with_gga_once_a_minute_give_a_fix_every_second():
    lines = []
    for sec in range(10, 16):
        t = f"1235{sec}.00"
        lines += [gns(t), gll(t)]
        if sec == 12:  # the once-a-minute GGA
            lines.append(gga(t))
    out, dec = run(lines)
    assert kinds(out) == ["GpsFix"] * 6
    assert [r.utc_time.second for r in out] == [10, 11, 12, 13, 14, 15]
    assert all(r.source == "GNS" for r in out)
    assert out[0].satellites == 8 and out[0].altitude_m == pytest.approx(545.4)
    # The epoch with the GGA was complete (GNS + GLL, as the cycle before) before the GGA came: it is
    # decided on its GLL and the GGA is late. One cycle late: the first epoch, and the one after the
    # receiver sent more than usual (until the cycle is learned again).
    assert dec.stats.late == 1 and dec.stats.waited == 2


def test_a_gll_only_stream_gives_fixes():
    out, _ = run([gll("123519.00"), gll("123520.00"), gll("123521.00", status="V")])
    assert kinds(out) == ["GpsFix", "GpsFix", "GpsNoFix"]
    assert out[0].source == "GLL" and out[0].talker == "GN" and out[0].latitude_deg == pytest.approx(48.1173)
    assert out[2].reason == "gll_void"


# -- satellites in use -------------------------------------------------------------------------------
def test_gga_quality_1_with_0_satellites_is_no_fix():
    out, _ = run([gga(sats="00")])
    assert kinds(out) == ["GpsNoFix"] and out[0].reason == "few_satellites" and out[0].satellites == 0
    out, _ = run([gga(sats="02"), rmc()])  # the RMC of the epoch does not count satellites
    assert kinds(out) == ["GpsNoFix"]
    out, _ = run([gga(sats="03")])
    assert kinds(out) == ["GpsFix"]


def test_a_gsa_fix_mode_or_a_larger_count_in_the_epoch_outweighs_a_gga_reporting_0_satellites():
    # Garmin Foretrex 201 / Furuno GT-88: 00 in GGA, the fix mode and the satellites in GSA (gpsd agrees)
    out, _ = run([gga(sats="00"), gsa(3)])
    assert kinds(out) == ["GpsFix"] and out[0].satellites == 0
    out, _ = run([gga(sats="00"), gns(modes="AN", sats="11")])
    assert kinds(out) == ["GpsFix"] and out[0].satellites == 11 and out[0].source == "GGA"


# -- dead reckoning / estimated ------------------------------------------------------------------------
@pytest.mark.parametrize("lines", [
    [gga(q=6)],
    [rmc(mode="E")],
    [gns(modes="EN")],
    [gll(mode="E")],
    [gga(q=1), rmc(mode="E")],  # one dead-reckoning sentence makes the epoch dead reckoning
])
def test_dead_reckoning_is_no_fix_unless_allowed(lines):
    out, _ = run(lines)
    assert kinds(out) == ["GpsNoFix"] and out[0].reason == "dead_reckoning"
    out, _ = run(lines, allow_dead_reckoning=True)
    assert kinds(out) == ["GpsFix"]
    assert out[0].quality == (1 if lines[0] == gga(q=1) else 6)


# -- 0 deg, 0 deg ---------------------------------------------------------------------------------------
def test_a_cold_start_gga_at_exactly_0_0_with_hdop_99_9_is_no_fix():
    line = gga(q=1, sats="04", lat="0000.0000,N", lon="00000.0000,E", hdop="99.9")
    assert line == "$GPGGA,123519.00,0000.0000,N,00000.0000,E,1,04,99.9,545.4,M,46.9,M,,*57"
    out, dec = run([line])
    assert kinds(out) == ["GpsNoFix"] and out[0].reason == "zero_position"
    assert dec.stats.bad_total == 0  # a valid sentence that says nothing: not a fault
    out, _ = run([rmc(lat="0000.000,N", lon="00000.000,E")])
    assert kinds(out) == ["GpsNoFix"] and out[0].reason == "zero_position"
    out, _ = run([gga(lat="0000.000,N", lon="00000.001,E")])  # near is not exactly 0/0
    assert kinds(out) == ["GpsFix"]


# -- a void sentence of the same epoch -------------------------------------------------------------------
@pytest.mark.parametrize("void, reason", [
    (gsa(1, prns=()), "gsa_no_fix"),
    (rmc(status="V", mode="N"), "rmc_void"),
    (rmc(mode="N"), "rmc_not_valid"),
    (gll(status="V", mode="N"), "gll_void"),
    (gns(modes="NN"), "gns_not_valid"),
])
def test_a_gga_fix_in_an_epoch_whose_other_sentence_says_no_fix_is_no_fix(void, reason):
    for lines in ([gga(), void], [void, gga()]):  # whatever the order within the epoch
        out, _ = run(lines)
        assert kinds(out) == ["GpsNoFix"] and out[0].reason == reason, lines
    # the next epoch, without the void sentence, is a fix again
    out, _ = run([gga(), void, gga("123520.00")])
    assert kinds(out) == ["GpsNoFix", "GpsFix"]


def test_one_gsa_per_constellation_voids_the_epoch_only_when_every_one_says_no_fix():
    out, _ = run([gga(), gsa(3, talker="GN"), gsa(1, prns=(), talker="GN")])  # one constellation unused
    assert kinds(out) == ["GpsFix"]
    out, _ = run([gga(), gsa(1, prns=(), talker="GN"), gsa(1, prns=(), talker="GN")])
    assert kinds(out) == ["GpsNoFix"]


# -- when readings are delivered --------------------------------------------------------------------------
def test_a_fix_is_delivered_on_the_last_sentence_of_the_learned_cycle_and_a_no_fix_at_once():
    dec = NmeaDecoder()

    def cycle(t, status="A"):
        return [rmc(t, status=status), gga(t, q=1 if status == "A" else 0), gsa(3), gsa(3, talker="GL")]

    first = cycle("123519.00")
    assert [dec.decode(ln, 1.0) for ln in first] == [[], [], [], []]  # the first epoch: cycle unknown
    second = cycle("123520.00")
    out = dec.decode(second[0], 2.0)  # the next epoch's first sentence closes the first epoch
    assert kinds(out) == ["GpsFix"] and out[0].utc_time.second == 19 and out[0].t_mono_s == 1.0
    assert [kinds(dec.decode(ln, 2.1)) for ln in second[1:]] == [[], [], ["GpsFix"]]  # its last sentence
    third = cycle("123521.00", status="V")
    assert kinds(dec.decode(third[0], 3.0)) == ["GpsNoFix"]  # the void RMC: no fix at once
    assert [dec.decode(ln, 3.1) for ln in third[1:]] == [[], [], []]
    assert dec.stats.fixes == 2 and dec.stats.no_fix == 1 and dec.stats.waited == 1


def test_time_less_sentences_that_start_the_cycle_belong_to_the_next_epoch():
    # a receiver whose cycle starts with GSA and ZDA (no time used) before the timed sentences: the next
    # cycle's void GSA must not void this epoch, nor this epoch's GSA the next one
    def cycle(t, mode):
        return [gsa(mode, prns=() if mode == 1 else ("04", "05", "09", "12")),
                s(f"GNZDA,{t},23,03,1994,00,00"), gga(t), rmc(t)]

    out, dec = run(cycle("123519.00", 3) + cycle("123520.00", 3) + cycle("123521.00", 1) + cycle("123522.00", 3))
    assert kinds(out) == ["GpsFix", "GpsFix", "GpsNoFix", "GpsFix"]
    assert [r.utc_time.second for r in out] == [19, 20, 21, 22] and out[2].reason == "gsa_no_fix"
    assert out[0].utc.isoformat() == "1994-03-23T12:35:19+00:00"


def test_a_reconnect_drops_the_open_epoch():
    dec = NmeaDecoder()
    assert dec.decode(gga("123519.00"), 0.0) == []
    dec.reset_stream()
    assert dec.finish(1.0) == []


def test_repeated_fix_sentences_without_a_time_are_separate_epochs():
    line = s("GPGGA,,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,")
    out, _ = run([line, line, line])
    assert kinds(out) == ["GpsFix"] * 3 and out[0].utc_time is None


# -- NMEA 0183 limits ------------------------------------------------------------------------------------
def test_sentences_longer_than_82_characters_are_counted_and_skipped():
    long_gga = s("GPGGA,123519.00,4807.03800,N,01131.00000,E,1,08,0.9,545.4,M,46.9,M,100.0,0000")
    assert len(long_gga) + 2 == 83  # with CR LF
    fits = s("GPGGA,123520.00,4807.03800,N,01131.00000,E,1,08,0.9,545.4,M,46.9,M,10.0,0000")
    assert len(fits) + 2 == 82
    dec = NmeaDecoder()
    out = dec.feed(f"{long_gga}\r\n{fits}\r\n".encode(), 0.0) + dec.finish(0.0)
    assert dec.stats.bad == {"too_long": 1}
    assert kinds(out) == ["GpsFix"] and out[0].utc_time.second == 20  # the next sentence of the chunk
    out, dec = run([long_gga], max_sentence_chars=130)  # for receivers configured past the standard
    assert kinds(out) == ["GpsFix"] and dec.stats.bad_total == 0


@pytest.mark.parametrize("body", [
    "gpGGA,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,",
    "gpgga,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,",
    "GPgga,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,",
    "GPRmc,123519.00,A,4807.038,N,01131.000,E,0.5,84.4,230394,003.1,W,A",
])
def test_lower_case_talkers_and_sentence_types_are_counted_and_skipped(body):
    dec = NmeaDecoder()
    out = dec.feed(f"{s(body)}\r\n{gga('123520.00')}\r\n".encode(), 0.0) + dec.finish(0.0)
    assert dec.stats.bad == {"lower_case": 1}
    assert kinds(out) == ["GpsFix"] and out[0].utc_time.second == 20


def test_lower_case_in_data_fields_is_not_an_address_error():
    out, dec = run([rmc(mode="a")])
    assert kinds(out) == ["GpsFix"] and dec.stats.bad_total == 0


def test_every_line_is_used_ignored_or_bad_and_nothing_raises():
    lines = [gga(), "$GPGSV,1,1,00*79", s("gpGGA,1"), "$" + "A" * 100, s("GPGGA,123520.00,4807.038,N"), "garbage",
             gll("123521.00"), s("PGRME,7.6,M,41.7,M,42.4,M")]
    out, dec = run(lines)
    st = dec.stats
    assert st.lines == len(lines) and st.used + st.ignored + st.bad_total == st.lines
    assert st.bad == {"lower_case": 1, "too_long": 1, "field": 1, "no_start": 1}
    assert kinds(out) == ["GpsFix", "GpsFix"]


# -- property: an epoch with a void fix sentence is never a fix, one without is exactly one ----------------
_GOOD = {"GGA": lambda t: gga(t), "RMC": lambda t: rmc(t), "GNS": lambda t: gns(t), "GLL": lambda t: gll(t)}
_VOID = {"GGA": lambda t: gga(t, q=0), "RMC": lambda t: rmc(t, status="V"), "GNS": lambda t: gns(t, modes="NN"),
         "GLL": lambda t: gll(t, status="V")}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(_GOOD)), min_size=1, max_size=4, unique=True),
       st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=12),
       st.randoms(use_true_random=False))
def test_any_order_and_mix_of_sentences_gives_one_decision_per_epoch(cycle, epochs, rnd):
    """A receiver with a fixed set of fix sentences per cycle (any of GGA, RMC, GNS, GLL), in any order,
    with 0-3 GSAs and 0-2 VTGs; in some epochs one fix sentence says no fix (GGA quality 0, RMC / GLL
    status V, GNS mode NN)."""
    lines, voided = [], set()
    for i, (void, n_gsa, n_vtg) in enumerate(epochs):
        t = f"1200{i:02d}.00"
        void = cycle[void] if void < len(cycle) else None
        ep = [(_VOID if k == void else _GOOD)[k](t) for k in cycle]
        ep += [gsa(3)] * n_gsa + [s("GPVTG,84.4,T,,M,0.5,N,0.9,K,A")] * n_vtg
        if void is not None:
            voided.add(i)
        rnd.shuffle(ep)
        lines += ep
    out, dec = run(lines)
    assert dec.stats.bad_total == 0
    assert [r.utc_time.second for r in out] == list(range(len(epochs)))  # one reading per epoch, in order
    assert {r.utc_time.second for r in out if isinstance(r, GpsFix)} == set(range(len(epochs))) - voided


def test_an_epoch_that_never_ends_keeps_memory_bounded():
    dec = NmeaDecoder()
    out = [r for _ in range(5000) for r in dec.decode(gga(), 0.0)]  # a receiver frozen on one time
    out += [r for _ in range(5000) for r in dec.decode(gsa(3), 0.0)]  # then only GSA, never a fix sentence
    assert kinds(out) == ["GpsFix"] and len(dec._cur.obs) <= 256
    assert dec.finish(0.0) == [] and dec.stats.used == 10000
