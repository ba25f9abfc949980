"""wire/messages.py: every server message round trips; malformed bytes only raise CodecError;
the bytes ratio against JSON."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.model import Instrument, Tick
from monotape.platform.wire import codec
from monotape.platform.wire.codec import (
    Ack,
    Close,
    CodecError,
    Error,
    ErrorCode,
    Frame,
    Heartbeat,
    Hello,
    PriorityUpdate,
    Snapshot,
    decode_message,
    decode_record,
    encode_delta_record,
    encode_full_record,
)
from tests.wire.strategies import T0, U64, assert_full, base_and_new, tick, ticks


@given(st.lists(st.tuples(st.booleans(), base_and_new()), max_size=20), U64)
def test_frame_and_snapshot_round_trip(items: list[tuple[bool, tuple[Tick, Tick]]], n: int) -> None:
    chunks, fulls = [], []
    for has_base, (base, new) in items:
        chunks.append(encode_delta_record(base if has_base else None, new))
        fulls.append(encode_full_record(new))
    frame = decode_message(codec.encode_frame(n, chunks))
    assert isinstance(frame, Frame) and frame.frame_no == n
    assert [decode_record(c) for c in chunks] == frame.records
    assert codec.frame_header(n, len(chunks)) + b"".join(chunks) == codec.encode_frame(n, chunks)
    snap = decode_message(codec.encode_snapshot(n, fulls))
    assert isinstance(snap, Snapshot) and snap.frame_no == n
    for rec, (_, (_, new)) in zip(snap.records, items, strict=True):
        assert_full(rec, new)


@given(ticks)
def test_priority_round_trip(t: Tick) -> None:
    msg = decode_message(codec.encode_priority(encode_full_record(t)))
    assert isinstance(msg, PriorityUpdate)
    assert_full(msg.record, t)


def test_priority_refuses_a_delta() -> None:
    base = tick(1, 1, 1, 1, 1, 1, 1)
    with pytest.raises(ValueError):
        codec.encode_priority(encode_delta_record(base, tick(1, 1, 2, 2, 2, 2, 2)))


TEXT = st.text(max_size=100)
U32 = st.integers(0, 2**32 - 1)


@given(st.integers(0, 2**63), st.integers(0, 2**63), st.sampled_from(ErrorCode), TEXT, U32)
def test_small_messages_round_trip(a: int, b: int, code: ErrorCode, text: str, req: int) -> None:
    assert decode_message(codec.encode_heartbeat(a, b)) == Heartbeat(a, b)
    assert decode_message(codec.encode_error(code, text, req)) == Error(int(code), text, req)
    assert decode_message(codec.encode_close(1001, req, text)) == Close(1001, req, text)
    assert decode_message(codec.encode_ack(req, req, 3)) == Ack(req, req, 3)


REFUSALS = st.lists(
    st.builds(
        codec.Refusal,
        st.text(max_size=codec.MAX_KEY_TEXT),
        st.sampled_from([int(c) for c in ErrorCode]),
        st.text(max_size=200),
    ),
    min_size=1,
    max_size=256,
)


@given(U32, REFUSALS)
def test_refused_round_trip(req: int, refusals: list[codec.Refusal]) -> None:
    assert decode_message(codec.encode_refused(req, refusals)) == codec.Refused(req, refusals)


def test_refused_carries_one_request_s_keys() -> None:
    one = codec.Refusal("A:B", int(ErrorCode.UNKNOWN_SYMBOL), "not in the dictionary")
    with pytest.raises(ValueError):
        codec.encode_refused(1, [])
    with pytest.raises(ValueError):
        codec.encode_refused(1, [one] * 257)


ARRAY_MESSAGES = [
    codec.encode_heartbeat(1234, 5),
    codec.encode_error(ErrorCode.UNKNOWN_SYMBOL, "x", 7),
    codec.encode_close(1001, 2500, "drain"),
    codec.encode_ack(7, 40, 2),
    codec.encode_refused(7, [codec.Refusal("A:B", 4, "not in the dictionary")]),
    codec.encode_stale(7, 0, [("XNAS", 5)]),
    codec.encode_hello(
        [Instrument(0, "XNAS:AAPL", "XNAS", "AAPL", 2, 1)],
        frame_ms=40,
        max_subscriptions=256,
        max_priority=16,
        server_id="a",
    ),
]


@pytest.mark.parametrize("data", ARRAY_MESSAGES, ids=lambda d: codec.Kind(d[0]).name)
@pytest.mark.parametrize("extra", [None, 0, "x", [1]])
def test_arrays_with_trailing_elements_are_refused(data: bytes, extra: object) -> None:
    """Each array holds exactly the fields docs/wire.md lists: one more is malformed, as a
    trailing byte is (a reader that takes the first N would accept anything after them)."""
    body = msgspec.msgpack.decode(data[1:])
    decode_message(data[:1] + msgspec.msgpack.encode(body))  # the re-encoding itself is valid
    with pytest.raises(CodecError, match="at most length"):
        decode_message(data[:1] + msgspec.msgpack.encode([*body, extra]))
    if data[0] in (codec.Kind.HELLO, codec.Kind.REFUSED, codec.Kind.STALE):  # nested rows too
        body[-1][0].append(extra)
        with pytest.raises(CodecError, match="at most length"):
            decode_message(data[:1] + msgspec.msgpack.encode(body))


VENUE = st.from_regex(r"^[A-Z0-9_.-]{1,16}$", fullmatch=True)


@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.lists(st.tuples(VENUE, st.integers(0, 2**64 - 1)), max_size=20),
)
def test_stale_round_trips(
    frame_no: int, grid_since_ms: int, venues: list[tuple[str, int]]
) -> None:
    got = decode_message(codec.encode_stale(frame_no, grid_since_ms, venues))
    assert isinstance(got, codec.Stale)
    assert (got.frame_no, got.grid_since_ms) == (frame_no, grid_since_ms)
    assert [(v.venue, v.since_ms) for v in got.venues] == venues


def test_stale_names_at_most_256_venues() -> None:
    codec.encode_stale(1, 0, [("V", 1)] * 256)
    with pytest.raises(ValueError):
        codec.encode_stale(1, 0, [("V", 1)] * 257)


@given(st.integers(11, 255), st.binary(max_size=50))
def test_unknown_kinds_are_skipped_not_malformed(kind: int, body: bytes) -> None:
    assert decode_message(bytes([kind]) + body) == codec.UnknownKind(kind)


def test_kind_zero_is_malformed() -> None:
    with pytest.raises(CodecError, match="kind 0"):
        decode_message(b"\x00")


def test_hello_round_trip() -> None:
    ins = [Instrument(i, f"XNAS:S{i}", "XNAS", f"S{i}", 2, 1) for i in range(2400)]
    ins.append(Instrument(2400, "EBS:EUR/USD", "EBS", "EUR/USD", 5, 5))
    data = codec.encode_hello(
        ins, frame_ms=40, max_subscriptions=256, max_priority=16, server_id="a"
    )
    assert decode_message(data) == Hello(codec.PROTOCOL_VERSION, "a", 40, 256, 16, ins)
    with pytest.raises(ValueError, match="VENUE:SYMBOL"):
        codec.encode_hello(
            [Instrument(1, "X:Y", "X", "Z", 2, 1)],
            frame_ms=40,
            max_subscriptions=1,
            max_priority=1,
            server_id="a",
        )


def _valid_messages() -> list[bytes]:
    base, new = tick(5, 3, T0, 100, 101, 100, 9), tick(5, 3, T0 + 40_000_000, 101, 102, 99, 8)
    return [
        codec.encode_frame(7, [encode_delta_record(base, new), encode_full_record(base)]),
        codec.encode_snapshot(7, [encode_full_record(new)]),
        codec.encode_priority(encode_full_record(new)),
        codec.encode_hello(
            [Instrument(5, "XNAS:AAPL", "XNAS", "AAPL", 2, 1)],
            frame_ms=40,
            max_subscriptions=256,
            max_priority=16,
            server_id="n",
        ),
        codec.encode_heartbeat(7, 1_760_000_000_000),
        codec.encode_error(ErrorCode.RATE_LIMITED, "slow down", 3),
        codec.encode_close(1001, 2500, "drain"),
        codec.encode_ack(3, 40, 1),
    ]


@pytest.mark.parametrize("data", _valid_messages())
def test_every_truncation_is_a_codec_error(data: bytes) -> None:
    decode_message(data)
    for n in range(len(data)):
        with pytest.raises(CodecError):
            decode_message(data[:n])


@settings(max_examples=1000)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.builds(lambda k, b: bytes([k]) + b, st.integers(1, 9), st.binary(max_size=200)),
    )
)
def test_arbitrary_bytes_only_raise_codec_error(data: bytes) -> None:
    try:
        decode_message(data)
    except CodecError as exc:
        assert str(exc)


def test_codec_error_is_chained_and_says_where() -> None:
    with pytest.raises(CodecError, match="HEARTBEAT") as info:
        decode_message(b"\x05\x92\xa1x\x01")
    assert isinstance(info.value.__cause__, msgspec.ValidationError)
    assert "$[0]" in str(info.value)


def realistic_frame() -> tuple[bytes, bytes]:
    """40 symbols, prices ~100.00 with 2 decimals, ns-timestamp seqs, small moves."""
    pairs = []
    for i in range(40):
        ts = T0 + i * 1_234_567
        base = tick(100 + i, 3, ts, 10_000 + i, 10_002 + i, 10_001 + i, 100 * (i % 7 + 1))
        new = tick(
            100 + i,
            3,
            ts + 17_000_000 + i * 311_003,
            10_000 + i + (i % 3 - 1),
            10_002 + i + (i % 5 - 2),
            10_001 + i + (i % 4 - 2),
            100 * (i % 9 + 1),
        )
        pairs.append((base, new))
    keys = {100 + i: f"XNAS:SYM{i:02d}" for i in range(40)}
    binary = codec.encode_frame(1234, [encode_delta_record(b, n) for b, n in pairs])
    return binary, codec.frame_as_json(1234, pairs, keys)


def test_bytes_ratio_vs_json() -> None:
    binary, js = realistic_frame()
    assert msgspec.json.decode(js)["updates"][0]["bid"] == 99.99
    # A property of the format (not timing): measured 0.20 on this frame.
    assert len(binary) <= 0.25 * len(js), (len(binary), len(js))
