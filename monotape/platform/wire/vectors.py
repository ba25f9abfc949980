"""Wire test vectors (tests/vectors/*.json), built deterministically from named inputs.

``python -m monotape.platform.wire.vectors tests/vectors`` rewrites them; tests/wire/test_vectors.py
rebuilds them in memory and fails on any difference (STYLE 14). Each case holds its inputs,
the expected bytes as hex, and the expected decoded value, derived from the inputs here and
not from the decoder, so another team's codec can be checked against both directions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from monotape.platform.model import Instrument, Tick
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode, Refusal, wrap_int64
from monotape.platform.wire.requests import (
    MAX_REQUEST_BYTES,
    Request,
    SetPriority,
    Subscribe,
    Unsubscribe,
    encode_request,
)

__all__ = ["build", "main", "render"]

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


def _records() -> list[dict[str, Any]]:
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


def _messages() -> list[dict[str, Any]]:
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
            # A kind this protocol does not define (10-255): decoded as "skip me", not an error,
            # so later kinds never break a client (docs/wire.md, Message kinds).
            "name": "unknown_kind_is_skipped",
            "input": {"kind": 42},
            "hex": "2a93010203",
            "decoded": {"kind": 42},
        },
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
]


def _websocket() -> list[dict[str, Any]]:
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


def _requests() -> dict[str, Any]:
    good: list[tuple[str, Request]] = [
        ("subscribe", Subscribe(req=1, keys=["XNAS:AAPL", "EBS:EUR/USD"])),
        # decodes: keys are judged one by one after decoding (see "judged")
        ("subscribe_bad_keys", Subscribe(req=5, keys=["XNAS:AAPL", "xnas:aapl", "XNAS:NOPE"])),
        ("unsubscribe", Unsubscribe(req=2, keys=["XNAS:AAPL"])),
        ("priority_on", SetPriority(req=3, keys=["CME:ESZ5"])),
        ("priority_off", SetPriority(req=4, keys=["CME:ESZ5"], on=False)),
    ]
    enc = msgspec.msgpack.encode
    bad: list[tuple[str, bytes | str, ErrorCode, int, str]] = [
        ("text", '{"type":"subscribe"}', ErrorCode.TEXT_NOT_ALLOWED, 0, ""),
        ("too_large", b"\x00" * (MAX_REQUEST_BYTES + 1), ErrorCode.TOO_LARGE, 0, ""),
        ("garbage", b"\xc1", ErrorCode.BAD_MESSAGE, 0, ""),
        (
            "trailing",
            enc({"type": "subscribe", "req": 1, "keys": ["A:B"]}) + b"\x00",
            ErrorCode.BAD_MESSAGE,
            0,
            "",
        ),
        ("unknown_type", enc({"type": "buy", "req": 5}), ErrorCode.INVALID_REQUEST, 5, "$.type"),
        (
            "req_not_int",
            enc({"type": "subscribe", "req": "1", "keys": ["A:B"]}),
            ErrorCode.INVALID_REQUEST,
            0,
            "$.req",
        ),
        (
            "key_not_a_string",
            enc({"type": "subscribe", "req": 6, "keys": ["A:B", 7]}),
            ErrorCode.INVALID_REQUEST,
            6,
            "$.keys[1]",
        ),
        (
            "key_longer_than_128",
            enc({"type": "subscribe", "req": 6, "keys": ["A:" + "B" * 127]}),
            ErrorCode.INVALID_REQUEST,
            6,
            "$.keys[0]",
        ),
        (
            # {"type": "subscribe", "req": 1, "req": 2, "keys": ["A:B"]}: one request, two
            # meanings; a decoder that keeps the last copy must not be written
            "field_named_twice",
            b"\x84\xa4type\xa9subscribe\xa3req\x01\xa3req\x02\xa4keys\x91\xa3A:B",
            ErrorCode.INVALID_REQUEST,
            1,
            "`req`",
        ),
        (
            "no_keys",
            enc({"type": "unsubscribe", "req": 7, "keys": []}),
            ErrorCode.INVALID_REQUEST,
            7,
            "$.keys",
        ),
        (
            "too_many_priority",
            enc({"type": "priority", "req": 8, "keys": ["A:B"] * 17}),
            ErrorCode.INVALID_REQUEST,
            8,
            "$.keys",
        ),
        (
            "unknown_field",
            enc({"type": "subscribe", "req": 9, "keys": ["A:B"], "x": 1}),
            ErrorCode.INVALID_REQUEST,
            9,
            "`x`",
        ),
    ]
    return {
        "good": [
            {"name": n, "input": msgspec.to_builtins(r), "hex": encode_request(r).hex()}
            for n, r in good
        ],
        "judged": _judged(),
        "bad": [
            {
                "name": n,
                "text": d if isinstance(d, str) else None,
                "hex": None if isinstance(d, str) else (d.hex() if len(d) < 1024 else None),
                "repeat_zero_bytes": len(d) if isinstance(d, bytes) and len(d) >= 1024 else None,
                "error_code": int(code),
                "error_name": code.name,
                "req": req,
                "names": names,
            }
            for n, d, code, req, names in bad
        ],
    }


def _judged() -> list[dict[str, Any]]:
    """How a server answers a request that decodes: the request, what the connection held, the
    dictionary (``INSTRUMENTS``) and HELLO's limits in; the REFUSED (or none) and the ACK out.

    The expected refusals are written out here from the rules in docs/wire.md, not produced by
    the server's judge, so both can be checked against them."""
    dictionary = [i.key for i in INSTRUMENTS]  # iids 0, 1 and 517
    cases: list[tuple[str, Request, list[str], list[str], int, list[dict[str, Any]], int, int]] = [
        (
            "subscribe_good_malformed_unknown",
            Subscribe(req=5, keys=["XNAS:AAPL", "xnas:aapl", "XNAS:NOPE"]),
            [],
            [],
            256,
            REFUSED_KEYS,
            1,
            0,
        ),
        (
            "subscribe_256_copies_of_one_key",
            Subscribe(req=6, keys=["CME:ESZ5"] * 256),
            [],
            [],
            256,
            [],
            1,
            0,
        ),
        (
            "subscribe_over_the_limit",
            Subscribe(req=7, keys=["XNAS:AAPL", "CME:ESZ5", "EBS:EUR/USD"]),
            ["XNAS:AAPL"],
            [],
            2,
            [
                {
                    "key": "EBS:EUR/USD",
                    "code": int(ErrorCode.TOO_MANY_SUBSCRIPTIONS),
                    "reason": "over the limit of 2 subscriptions per connection",
                }
            ],
            2,
            0,
        ),
        (
            "priority_not_subscribed",
            SetPriority(req=8, keys=["XNAS:AAPL", "CME:ESZ5"]),
            ["XNAS:AAPL"],
            [],
            256,
            [
                {
                    "key": "CME:ESZ5",
                    "code": int(ErrorCode.NOT_SUBSCRIBED),
                    "reason": "subscribe before priority",
                }
            ],
            1,
            1,
        ),
    ]
    out = []
    for name, request, held, prio, max_subs, refused, n_subs, n_prio in cases:
        out.append(
            {
                "name": name,
                "dictionary": dictionary,
                "held": held,
                "priority": prio,
                "max_subscriptions": max_subs,
                "max_priority": 16,
                "request_hex": encode_request(request).hex(),
                "refused": refused,
                "refused_hex": (
                    codec.encode_refused(request.req, [Refusal(*r.values()) for r in refused]).hex()
                    if refused
                    else None
                ),
                "ack_hex": codec.encode_ack(request.req, n_subs, n_prio).hex(),
            }
        )
    return out


def build() -> dict[str, Any]:
    """File name -> JSON value."""
    return {
        "records.json": {"cases": _records()},
        "messages.json": {"cases": _messages()},
        "bad_messages.json": {"cases": [{"name": n, "hex": h} for n, h in BAD_MESSAGES]},
        "websocket.json": {"cases": _websocket()},
        "requests.json": _requests(),
    }


def render(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "tests/vectors")
    out.mkdir(parents=True, exist_ok=True)
    for name, value in build().items():
        (out / name).write_text(render(value), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
