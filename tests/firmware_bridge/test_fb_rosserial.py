"""rosserial framer on plain bytes: golden frames, every split point, bit flips, garbage, fuzz."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_bridge import ros1
from firmware_bridge.rosserial import (
    MAX_PAYLOAD_BYTES,
    REQUEST_TOPICS,
    TX_STOP,
    Frame,
    FrameDecoder,
    decode_frame,
    encode_frame,
)


def test_reserved_frames_match_protocol_document():
    assert REQUEST_TOPICS == bytes.fromhex("FFFE0000FF0000FF")
    assert TX_STOP == bytes.fromhex("FFFE0000FF0B00F4")


def test_encode_decode_roundtrip_and_checksums():
    payload = ros1.Drive(0, 1.0, 2.0).serialize()
    wire = encode_frame(120, payload)
    assert wire[:2] == b"\xff\xfe" and wire[2:4] == (9).to_bytes(2, "little")
    assert (wire[2] + wire[3] + wire[4]) % 256 == 255
    assert sum(wire[5:]) % 256 == 255
    assert decode_frame(wire) == (len(wire), Frame(120, payload))
    assert decode_frame(wire + b"xyz") == (len(wire), Frame(120, payload))


def test_encode_rejects_bad_arguments():
    with pytest.raises(ValueError, match="uint16"):
        encode_frame(70000, b"")
    with pytest.raises(ValueError, match="too long"):
        encode_frame(100, bytes(70000))


def _stream():
    frames = [Frame(0, b""), Frame(100, ros1.Feedback().serialize()), Frame(10, ros1.Time(1, 2).serialize()),
              Frame(101, ros1.Sentence(sentence="$GPGGA,,,,,,0,,,,,,,,*66").serialize()), Frame(0xFFFF, b"\xff" * 40)]
    return frames, b"".join(encode_frame(*f) for f in frames)


def test_every_split_point_gives_the_same_frames():
    frames, wire = _stream()
    for cut in range(len(wire) + 1):
        dec = FrameDecoder()
        assert dec.feed(wire[:cut]) + dec.feed(wire[cut:]) == frames, cut
        assert dec.buffered == 0


def test_byte_at_a_time():
    frames, wire = _stream()
    dec = FrameDecoder()
    got = []
    for b in wire:
        got += dec.feed(bytes([b]))
    assert got == frames


def test_need_more_bytes_consumes_nothing():
    _, wire = _stream()
    for cut in range(1, 8 + 0):
        assert decode_frame(wire[:cut]) == (0, None)


def test_every_single_bit_flip_loses_at_most_the_hit_frame():
    frames, wire = _stream()
    for i in range(len(wire)):
        for bit in range(8):
            bad = bytearray(wire)
            bad[i] ^= 1 << bit
            dec = FrameDecoder()
            got = dec.feed(bytes(bad)) + dec.feed(encode_frame(5, b"end"))
            # The frames that did not contain the flipped byte survive (a flip in a length field may
            # swallow the frames it now spans, but the stream resynchronises before the end marker).
            assert got[-1] == Frame(5, b"end"), (i, bit)
            assert all(f in frames or f == Frame(5, b"end") for f in got), (i, bit)
            assert len(got) >= 2


def test_garbage_between_frames_resyncs_and_is_counted():
    frames, wire = _stream()
    rng = random.Random(1)
    noisy = bytearray()
    chunks = [encode_frame(*f) for f in frames]
    for c in chunks:
        noisy += bytes(rng.choice([0x00, 0x55, 0xFE, 0x12, 0x80]) for _ in range(rng.randint(1, 20)))
        noisy += c
    dec = FrameDecoder()
    assert dec.feed(bytes(noisy)) == frames
    assert dec.stats.dropped_bytes == len(noisy) - len(wire)
    assert dec.stats.errors.get("garbage", 0) > 0


def test_pre_hydro_version_and_bad_length_checksum_are_skipped():
    good = encode_frame(100, b"abc")
    old = b"\xff\xff" + good[2:]
    badlen = good[:4] + bytes([good[4] ^ 1]) + good[5:]
    dec = FrameDecoder()
    assert dec.feed(old + badlen + good) == [Frame(100, b"abc")]
    assert dec.stats.errors.get("version") == 1
    assert dec.stats.errors.get("length_checksum", 0) >= 1


def test_oversize_length_is_rejected_without_waiting():
    n = MAX_PAYLOAD_BYTES + 1
    lo, hi = n & 0xFF, n >> 8
    fake = bytes([0xFF, 0xFE, lo, hi, 255 - ((lo + hi) % 256)])
    dec = FrameDecoder()
    assert dec.feed(fake + encode_frame(100, b"x")) == [Frame(100, b"x")]
    assert dec.stats.errors["oversize"] == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_fuzz_never_raises_and_buffer_stays_bounded(chunks):
    dec = FrameDecoder()
    for c in chunks:
        for f in dec.feed(c):
            assert isinstance(f, Frame)
        assert dec.buffered <= 8 + MAX_PAYLOAD_BYTES + len(c)
    # The decoder is still in sync afterwards: a valid frame after a gap of non-sync bytes decodes.
    tail = dec.feed(b"\x00" * (MAX_PAYLOAD_BYTES + 8) + encode_frame(100, b"ok"))
    assert tail[-1:] == [Frame(100, b"ok")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0xFFFF), st.binary(max_size=200)), max_size=10),
       st.integers(1, 50))
def test_fuzz_roundtrip_any_chunking(frames, chunk):
    wire = b"".join(encode_frame(t, p) for t, p in frames)
    dec = FrameDecoder()
    got = []
    for i in range(0, len(wire), chunk):
        got += dec.feed(wire[i:i + chunk])
    assert got == [Frame(t, p) for t, p in frames]


def test_a_false_header_claiming_4000_bytes_does_not_hold_the_link():
    """A corrupt header whose length (with a valid length checksum) claims 4000 bytes, then a real frame:
    the real frame decodes from the bytes already read, with nothing more on the wire."""
    n = 4000
    lo, hi = n & 0xFF, n >> 8
    false_header = bytes((0xFF, 0xFE, lo, hi, 255 - ((lo + hi) % 256), 0x64, 0x00))
    dec = FrameDecoder()
    out = dec.feed(false_header + encode_frame(101, b"feedback"))
    assert [(f.topic_id, f.payload) for f in out] == [(101, b"feedback")]
    assert dec.stats.errors["oversize"] == 1 and dec.buffered == 0
    assert MAX_PAYLOAD_BYTES >= 320  # the largest Jackal message (sensor_msgs/Imu) still fits
