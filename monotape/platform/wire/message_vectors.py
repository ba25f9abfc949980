"""Wire test vectors of the server's side: records, messages, malformed messages, framing.

Built deterministically from named inputs; the expected decoded values are derived from the
inputs and the rules of docs/wire.md here, not from the decoder (``vectors`` writes the files).
"""

from __future__ import annotations

from typing import Any

import msgspec

from monotape.platform.model import Instrument, Tick
from monotape.platform.wire import codec
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.messages import Refusal
from monotape.platform.wire.varints import wrap_int64

__all__ = [
    "BAD_MESSAGES",
    "INSTRUMENTS",
    "RECORD_CASES",
    "REFUSED_KEYS",
    "STALE_VENUES",
    "message_cases",
    "record_cases",
    "websocket_cases",
]

T0 = 1_760_000_000_123_456_789  # a venue ns timestamp used as seq
I64_MIN, I64_MAX, U64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
TICK_FIELDS = ("iid", "epoch", "seq", "bid", "ask", "last", "size")


def _tick(iid: int, epoch: int, seq: int, bid: int, ask: int, last: int, size: int) -> Tick:
    return Tick(iid, "XNAS", epoch, seq, 0, bid, ask, last, size)


def _fields(t: Tick) -> dict[str, int]:
    return {f: getattr(t, f) for f in TICK_FIELDS}


def _expected_record(base: Tick | None, new: Tick) -> dict[str, Any]:
    """What a decoder must produce, from the rule in docs/wire.md (not from the decoder)."""
    if base is None:
        return {
            "iid": new.iid,
            "epoch": new.epoch,
            "seq": new.seq,
            "has_base": False,
            "base_epoch": 0,
            "base_seq": 0,
            "bid": new.bid,
            "ask": new.ask,
            "last": new.last,
            "size": new.size,
        }
    return {
        "iid": new.iid,
        "epoch": new.epoch,
        "seq": new.seq,
        "has_base": True,
        "base_epoch": base.epoch,
        "base_seq": base.seq,
        "bid": wrap_int64(new.bid - base.bid),
        "ask": wrap_int64(new.ask - base.ask),
        "last": wrap_int64(new.last - base.last),
        "size": new.size,
    }


RECORD_CASES: list[tuple[str, Tick | None, Tick]] = [
    ("full_small", None, _tick(7, 1, 42, 10001, 10002, 10001, 300)),
    ("full_ns_seq", None, _tick(517, 3, T0, 10001, 10002, 10001, 300)),
    ("full_negative_prices", None, _tick(9, 0, 5, -250, -1, 0, 0)),
    ("full_extremes", None, _tick(65535, U64_MAX, U64_MAX, I64_MIN, I64_MAX, -1, U64_MAX)),
    ("full_big_epoch_ns_seq", None, _tick(1, 300, T0, 1, 2, 3, 4)),
    (
        "delta_same_epoch_ns_seq",
        _tick(517, 3, T0, 10001, 10002, 10001, 300),
        _tick(517, 3, T0 + 38_000_000, 10002, 10003, 10002, 500),
    ),
    (
        "delta_small_seq",
        _tick(7, 1, 42, 10001, 10002, 10001, 300),
        _tick(7, 1, 45, 9999, 10001, 10000, 100),
    ),
    ("delta_unchanged_prices", _tick(7, 1, 42, 5, 6, 5, 1), _tick(7, 1, 42, 5, 6, 5, 1)),
    (
        "delta_new_epoch",
        _tick(517, 3, T0, 10001, 10002, 10001, 300),
        _tick(517, 4, T0 + 9_000_000, 10000, 10002, 10001, 200),
    ),
    (
        "delta_wraps_int64",
        _tick(2, 1, 1, I64_MAX, I64_MIN, 0, 1),
        _tick(2, 1, 2, I64_MIN, I64_MAX, I64_MAX, 1),
    ),
]


def record_cases() -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "base": None if base is None else _fields(base),
            "new": _fields(new),
            "hex": codec.encode_delta_record(base, new).hex(),
            "decoded": _expected_record(base, new),
        }
        for name, base, new in RECORD_CASES
    ]


INSTRUMENTS = [
    Instrument(0, "XNAS:AAPL", "XNAS", "AAPL", 2, 1),
    Instrument(1, "CME:ESZ5", "CME", "ESZ5", 2, 25),
    Instrument(517, "EBS:EUR/USD", "EBS", "EUR/USD", 5, 1),
]


def message_cases() -> list[dict[str, Any]]:
    by = {name: (base, new) for name, base, new in RECORD_CASES}
    frame_cases = ["delta_same_epoch_ns_seq", "full_small", "delta_new_epoch"]
    snap_cases = ["full_small", "full_ns_seq"]
    frame_chunks = [codec.encode_delta_record(*by[n]) for n in frame_cases]
    snap_chunks = [codec.encode_delta_record(*by[n]) for n in snap_cases]
    prio_base, prio_new = by["full_ns_seq"]
    hello_in = {"frame_ms": 40, "max_subscriptions": 256, "max_priority": 16, "server_id": "node-a"}
    return [
        {
            "name": "frame",
            "input": {"frame_no": 1234, "records": frame_cases},
            "hex": codec.encode_frame(1234, frame_chunks).hex(),
            "decoded": {
                "frame_no": 1234,
                "records": [_expected_record(*by[n]) for n in frame_cases],
            },
        },
        {
            "name": "frame_empty",
            "input": {"frame_no": 0, "records": []},
            "hex": codec.encode_frame(0, []).hex(),
            "decoded": {"frame_no": 0, "records": []},
        },
        {
            "name": "snapshot",
            "input": {"frame_no": 99, "records": snap_cases},
            "hex": codec.encode_snapshot(99, snap_chunks).hex(),
            "decoded": {"frame_no": 99, "records": [_expected_record(*by[n]) for n in snap_cases]},
        },
        {
            "name": "priority",
            "input": {"record": "full_ns_seq"},
            "hex": codec.encode_priority(codec.encode_full_record(prio_new)).hex(),
            "decoded": {"record": _expected_record(prio_base, prio_new)},
        },
        {
            "name": "hello",
            "input": {**hello_in, "instruments": msgspec.to_builtins(INSTRUMENTS)},
            "hex": codec.encode_hello(INSTRUMENTS, **hello_in).hex(),  # type: ignore[arg-type]
            "decoded": {
                "protocol": codec.PROTOCOL_VERSION,
                **hello_in,
                "instruments": msgspec.to_builtins(INSTRUMENTS),
            },
        },
        {
            "name": "heartbeat",
            "input": {"frame_no": 1234, "server_wall_ms": 1_760_000_000_123},
            "hex": codec.encode_heartbeat(1234, 1_760_000_000_123).hex(),
            "decoded": {"frame_no": 1234, "server_wall_ms": 1_760_000_000_123},
        },
        {
            "name": "error",
            "input": {"code": 4, "message": "unknown symbol XNAS:NOPE", "req": 7},
            "hex": codec.encode_error(
                ErrorCode.UNKNOWN_SYMBOL, "unknown symbol XNAS:NOPE", 7
            ).hex(),
            "decoded": {"code": 4, "message": "unknown symbol XNAS:NOPE", "req": 7},
        },
        {
            "name": "close",
            "input": {"code": 1001, "reconnect_after_ms": 2500, "reason": "drain"},
            "hex": codec.encode_close(1001, 2500, "drain").hex(),
            "decoded": {"code": 1001, "reconnect_after_ms": 2500, "reason": "drain"},
        },
        {
            "name": "ack",
            "input": {"req": 7, "subscribed": 40, "priority": 2},
            "hex": codec.encode_ack(7, 40, 2).hex(),
            "decoded": {"req": 7, "subscribed": 40, "priority": 2},
        },
        {
            "name": "refused",
            "input": {"req": 7, "keys": REFUSED_KEYS},
            "hex": codec.encode_refused(7, [Refusal(*r.values()) for r in REFUSED_KEYS]).hex(),
            "decoded": {"req": 7, "keys": REFUSED_KEYS},
        },
        {
            # The frame grid stalled at this writer: every symbol is stale since its last frame.
            "name": "stale_grid",
            "input": {"frame_no": 1234, "grid_since_ms": 1_760_000_000_123, "venues": []},
            "hex": codec.encode_stale(1234, 1_760_000_000_123, []).hex(),
            "decoded": {"frame_no": 1234, "grid_since_ms": 1_760_000_000_123, "venues": []},
        },
        {
            # Frames flow, but both handlers of two venues are down: their symbols are stale.
            "name": "stale_venues",
            "input": {"frame_no": 1235, "grid_since_ms": 0, "venues": STALE_VENUES},
            "hex": codec.encode_stale(
                1235, 0, [(v["venue"], v["since_ms"]) for v in STALE_VENUES]
            ).hex(),
            "decoded": {"frame_no": 1235, "grid_since_ms": 0, "venues": STALE_VENUES},
        },
        {
            # Nothing is stale any more: clears every venue (the grid part clears with a FRAME).
            "name": "stale_cleared",
            "input": {"frame_no": 1236, "grid_since_ms": 0, "venues": []},
            "hex": codec.encode_stale(1236, 0, []).hex(),
            "decoded": {"frame_no": 1236, "grid_since_ms": 0, "venues": []},
        },
        {
            # A kind this protocol does not define (11-255): decoded as "skip me", not an error,
            # so later kinds never break a client (docs/wire.md, Message kinds).
            "name": "unknown_kind_is_skipped",
            "input": {"kind": 42},
            "hex": "2a93010203",
            "decoded": {"kind": 42},
        },
    ]


STALE_VENUES: list[dict[str, Any]] = [
    {"venue": "XNAS", "since_ms": 1_760_000_000_000},
    {"venue": "EBS", "since_ms": 1_760_000_000_250},
]

REFUSED_KEYS: list[dict[str, Any]] = [
    {
        "key": "xnas:aapl",
        "code": int(ErrorCode.MALFORMED_KEY),
        "reason": "the venue is 1-16 of A-Z 0-9 _ . - (upper case), not 'xnas'",
    },
    {"key": "XNAS:NOPE", "code": int(ErrorCode.UNKNOWN_SYMBOL), "reason": "not in the dictionary"},
]


# Server messages every decoder must refuse (CodecError in Python).
BAD_MESSAGES: list[tuple[str, str]] = [
    ("empty", ""),
    ("kind_zero", "00"),
    ("frame_truncated_header", "03"),
    ("frame_count_exceeds_bytes", "030105"),
    ("frame_trailing_bytes", "0301000700010001020101010100"),
    ("record_unknown_flag", "030101070008012a00000000"),
    ("record_new_epoch_without_base", "030101070002012a00000000"),
    ("varint_non_canonical", "030101070000018000000000"),
    ("varint_too_long", "030101070000" + "ff" * 10 + "01000000000000"),
    ("seq64_below_2_56", "03010107000401" + "2a00000000000000" + "00000000"),
    ("snapshot_with_delta", "020101070001012a0000000000"),
    ("priority_with_delta", "04070001012a0000000000"),
    ("heartbeat_wrong_type", "0592a1780a"),
    ("hello_garbage", "01c1"),
    # msgpack arrays hold exactly the fields the spec lists: a trailing element is refused
    ("ack_trailing_element", "0894072802c0"),
    ("heartbeat_trailing_element", "0593cd04d20000"),
    ("error_trailing_element", "069404a0070a"),
    ("close_trailing_element", "0794cd03e900a000"),
    ("hello_trailing_element", "019702a000000090c0"),
    ("hello_instrument_trailing_element", "019602a0000000919500a3413a42000101"),
    ("refused_trailing_element", "0993079193a3413a4204a000"),
    ("refusal_trailing_element", "0992079194a3413a420aa000"),
    ("refused_no_keys", "09920790"),
    ("refused_empty", "09"),
    ("stale_empty", "0a"),
    ("stale_trailing_element", "0a94010090c0"),
    ("stale_missing_venues", "0a920100"),
    ("stale_venue_trailing_element", "0a9301009193a341424301c0"),
    ("stale_venue_empty_name", "0a9301009192a000"),
    ("stale_venue_name_too_long", "0a9301009192b1" + "41" * 17 + "00"),
]


def websocket_cases() -> list[dict[str, Any]]:
    out = []
    for n in (0, 125, 126, 65535, 65536):
        payload = bytes(i % 251 for i in range(n))
        framed = codec.ws_binary_frame(payload)
        out.append(
            {
                "name": f"binary_{n}",
                "payload_len": n,
                "payload": "bytes(i % 251)",
                "header_hex": framed[: len(framed) - n].hex(),
            }
        )
    return out
