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
    Rate,
    Refresh,
    Report,
    Request,
    SetPriority,
    Subscribe,
    Unsubscribe,
    encode_request,
)

# A JWT's shape (three base64url parts); its signature is not checked by a codec
_TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJkZXNrLTcifQ.c2ln"

__all__ = ["request_cases"]


def request_cases() -> dict[str, Any]:
    good: list[tuple[str, Request]] = [
        ("subscribe", Subscribe(req=1, keys=["XNAS:AAPL", "EBS:EUR/USD"])),
        # decodes: keys are judged one by one after decoding (see "judged")
        ("subscribe_bad_keys", Subscribe(req=5, keys=["XNAS:AAPL", "xnas:aapl", "XNAS:NOPE"])),
        ("unsubscribe", Unsubscribe(req=2, keys=["XNAS:AAPL"])),
        ("priority_on", SetPriority(req=3, keys=["CME:ESZ5"])),
        ("priority_off", SetPriority(req=4, keys=["CME:ESZ5"], on=False)),
        ("refresh", Refresh(req=10, token=_TOKEN)),
        ("report", Report(req=11, regressions=0, gaps=2)),
        (
            "report_with_last",
            Report(req=12, regressions=3, gaps=0, last=("XNAS:AAPL", 7, 1001, 7, 998)),
        ),
        ("rate_float", Rate(req=13, max_hz=12.5)),
        ("rate_float_whole", Rate(req=14, max_hz=5.0)),
    ]
    enc = msgspec.msgpack.encode
    # Written by hand: max_hz as a msgpack int (a JavaScript encoder writes 5 as one), and a
    # report's counts past 2**53 (uint64 on the wire: BigInt in JavaScript)
    raw_good: list[tuple[str, dict[str, Any]]] = [
        ("rate_int", {"type": "rate", "req": 15, "max_hz": 5}),
        ("rate_one", {"type": "rate", "req": 16, "max_hz": 1}),
        ("report_u64", {"type": "report", "req": 17, "regressions": 2**64 - 1, "gaps": 2**53 + 1}),
    ]
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
        (
            "refresh_no_token",
            enc({"type": "refresh", "req": 20}),
            ErrorCode.INVALID_REQUEST,
            20,
            "`token`",
        ),
        (
            "refresh_empty_token",
            enc({"type": "refresh", "req": 21, "token": ""}),
            ErrorCode.INVALID_REQUEST,
            21,
            "$.token",
        ),
        (
            "refresh_token_not_a_string",
            enc({"type": "refresh", "req": 22, "token": 7}),
            ErrorCode.INVALID_REQUEST,
            22,
            "$.token",
        ),
        (
            "report_negative",
            enc({"type": "report", "req": 23, "regressions": -1, "gaps": 0}),
            ErrorCode.INVALID_REQUEST,
            23,
            "$.regressions",
        ),
        (
            "report_no_gaps",
            enc({"type": "report", "req": 24, "regressions": 1}),
            ErrorCode.INVALID_REQUEST,
            24,
            "`gaps`",
        ),
        (
            "report_last_too_short",
            enc({"type": "report", "req": 25, "regressions": 1, "gaps": 0, "last": ["A:B", 1]}),
            ErrorCode.INVALID_REQUEST,
            25,
            "$.last",
        ),
        (
            "report_unknown_field",
            enc({"type": "report", "req": 26, "regressions": 1, "gaps": 0, "x": 1}),
            ErrorCode.INVALID_REQUEST,
            26,
            "`x`",
        ),
        (
            "rate_not_offered",
            enc({"type": "rate", "req": 27, "max_hz": 4}),
            ErrorCode.INVALID_REQUEST,
            27,
            "$.max_hz",
        ),
        (
            "rate_zero",
            enc({"type": "rate", "req": 28, "max_hz": 0.0}),
            ErrorCode.INVALID_REQUEST,
            28,
            "$.max_hz",
        ),
        (
            "rate_as_string",
            enc({"type": "rate", "req": 29, "max_hz": "5"}),
            ErrorCode.INVALID_REQUEST,
            29,
            "$.max_hz",
        ),
    ]
    return {
        "good": [
            {"name": n, "input": msgspec.to_builtins(r), "hex": encode_request(r).hex()}
            for n, r in good
        ]
        + [{"name": n, "input": d, "hex": enc(d).hex()} for n, d in raw_good],
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
