"""Wire test vectors of the client's side: requests that decode, are judged, or are refused.

The expected refusals and answers are written out from the rules in docs/wire.md (Requests),
not produced by the server's judge, so both can be checked against them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from monotape.platform.wire import codec
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.message_vectors import INSTRUMENTS, REFUSED_KEYS
from monotape.platform.wire.messages import Refusal
from monotape.platform.wire.requests import (
    MAX_REQUEST_BYTES,
    Request,
    SetPriority,
    Subscribe,
    Unsubscribe,
    encode_request,
)

__all__ = ["request_cases"]


def request_cases() -> dict[str, Any]:
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
