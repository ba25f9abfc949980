"""monotape.platform.wire.requests: strict decoding, per-key judging, fuzzing (docs/wire.md)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.config import ServerConfig
from monotape.platform.model import KEY_PATTERN, key_problem
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.messages import MAX_KEY_TEXT, Refusal
from monotape.platform.wire.requests import (
    MAX_KEYS,
    MAX_REQUEST_BYTES,
    KeyRequest,
    Request,
    RequestError,
    SetPriority,
    Subscribe,
    Unsubscribe,
    decode_request,
    encode_request,
    judge,
)

good_key = st.from_regex(r"\A[A-Z0-9_.-]{1,16}:[A-Za-z0-9_./-]{1,40}\Z")
any_key = st.one_of(good_key, st.text(max_size=MAX_KEY_TEXT))
keys = st.lists(any_key, min_size=1, max_size=40)
req_ids = st.integers(0, 2**32 - 1)
requests = st.one_of(
    st.builds(Subscribe, req=req_ids, keys=keys),
    st.builds(Unsubscribe, req=req_ids, keys=keys),
    st.builds(SetPriority, req=req_ids, keys=keys.map(lambda k: k[:16]), on=st.booleans()),
)


@given(requests)
def test_round_trip(req: Request) -> None:
    assert decode_request(encode_request(req)) == req


def refused(data: bytes | str) -> RequestError:
    with pytest.raises(RequestError) as info:
        decode_request(data)
    return info.value


enc = msgspec.msgpack.encode


def test_text_is_not_allowed() -> None:
    assert refused('{"type": "subscribe"}').code is ErrorCode.TEXT_NOT_ALLOWED


def test_too_large() -> None:
    assert refused(b"\x00" * (MAX_REQUEST_BYTES + 1)).code is ErrorCode.TOO_LARGE


def test_too_large_can_be_sent_and_the_largest_request_fits() -> None:
    """TOO_LARGE is answered only if the WebSocket layer lets the message through: the request
    limit sits under the server's message limit (above it websockets closes with 1009), and
    256 keys of the grammar's longest still fit the request limit."""
    assert ServerConfig().max_message_bytes > MAX_REQUEST_BYTES
    longest = [f"{'V' * 16}:{i:040d}" for i in range(MAX_KEYS)]
    assert all(key_problem(k) is None for k in longest)
    data = encode_request(Subscribe(req=2**32 - 1, keys=longest))
    assert len(data) <= MAX_REQUEST_BYTES
    assert decode_request(data) == Subscribe(req=2**32 - 1, keys=longest)


@pytest.mark.parametrize(
    "data", [b"", b"\xc1", enc({"type": "subscribe", "req": 1, "keys": ["A:B"]}) + b"\x00"]
)
def test_undecodable_is_bad_message(data: bytes) -> None:
    err = refused(data)
    assert err.code is ErrorCode.BAD_MESSAGE and err.req == 0
    assert isinstance(err.__cause__, msgspec.DecodeError)


@pytest.mark.parametrize(
    ("obj", "field", "req"),
    [
        ({"type": "subscribe", "req": "1", "keys": ["A:B"]}, "$.req", 0),
        ({"type": "subscribe", "req": -1, "keys": ["A:B"]}, "$.req", 0),
        ({"type": "subscribe", "req": 2**32, "keys": ["A:B"]}, "$.req", 0),
        ({"type": "subscribe", "req": 4, "keys": ["A:B", 7]}, "$.keys[1]", 4),
        ({"type": "subscribe", "req": 4, "keys": ["A:" + "b" * MAX_KEY_TEXT]}, "$.keys[0]", 4),
        ({"type": "subscribe", "req": 4, "keys": [b"A:B"]}, "$.keys[0]", 4),
        ({"type": "subscribe", "req": 5, "keys": []}, "$.keys", 5),
        ({"type": "subscribe", "req": 5, "keys": ["A:B"] * 257}, "$.keys", 5),
        ({"type": "priority", "req": 6, "keys": ["A:B"] * 17}, "$.keys", 6),
        ({"type": "priority", "req": 6, "keys": ["A:B"], "on": 1}, "$.on", 6),
        ({"type": "buy", "req": 7}, "$.type", 7),
        ({"req": 7}, "`type`", 7),
        ({"type": "unsubscribe", "req": 8, "keys": ["A:B"], "extra": 1}, "`extra`", 8),
        ({"type": "unsubscribe", "req": 8}, "`keys`", 8),
        ({1: "subscribe"}, "str", 0),
        ([1, 2], "object", 0),
    ],
)
def test_schema_violations_name_the_field(obj: object, field: str, req: int) -> None:
    err = refused(enc(obj))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert field in err.message and err.req == req
    assert isinstance(err.__cause__, msgspec.ValidationError)


def test_malformed_keys_are_not_a_decode_error() -> None:
    """The grammar is judged per key (``judge``), so a bad key cannot sink the request."""
    data = enc(
        {"type": "subscribe", "req": 4, "keys": ["XNAS:AAPL", "xnas:aapl", "", "A:" + "b" * 41]}
    )
    request = decode_request(data)
    assert isinstance(request, Subscribe)
    assert request.keys == ["XNAS:AAPL", "xnas:aapl", "", "A:" + "b" * 41]


@pytest.mark.parametrize(
    ("raw", "field", "req"),
    [
        (b"\x84\xa4type\xa9subscribe\xa3req\x01\xa3req\x02\xa4keys\x91\xa3A:B", "`req`", 1),
        (
            b"\x84\xa4type\xa9subscribe\xa4type\xabunsubscribe\xa3req\x03\xa4keys\x91\xa3A:B",
            "`type`",
            0,
        ),
        (
            b"\x84\xa4type\xa9subscribe\xa3req\x04\xa4keys\x91\xa3A:B\xa4keys\x91\xa3C:D",
            "`keys`",
            4,
        ),
    ],
)
def test_a_field_named_twice_is_refused(raw: bytes, field: str, req: int) -> None:
    # msgspec (like a dict) would keep the last copy silently: one request, two meanings.
    err = refused(raw)
    assert err.code is ErrorCode.INVALID_REQUEST
    assert field in err.message and "more than once" in err.message and err.req == req


@given(
    st.sampled_from(["subscribe", "unsubscribe", "priority"]),
    st.sampled_from(["type", "req", "keys"]),
    st.data(),
)
def test_any_repeated_field_is_refused(kind: str, dup: str, data: st.DataObject) -> None:
    fields = {
        "type": kind,
        "req": data.draw(req_ids),
        "keys": data.draw(st.lists(good_key, min_size=1, max_size=3)),
    }
    body = b"".join(enc(k) + enc(v) for k, v in fields.items()) + enc(dup) + enc(fields[dup])
    for raw in (bytes((0x84,)) + body, b"\xde\x00\x04" + body, b"\xdf\x00\x00\x00\x04" + body):
        err = refused(raw)
        assert err.code is ErrorCode.INVALID_REQUEST and f"`{dup}`" in err.message


def test_deep_nesting_is_refused_not_crashed() -> None:
    assert refused(b"\x81\xa3req" + b"\x91" * 10_000 + b"\x01").code is ErrorCode.BAD_MESSAGE


def test_error_codes_cover_server_side_checks() -> None:
    for name in (
        "UNKNOWN_SYMBOL",
        "TOO_MANY_SUBSCRIPTIONS",
        "RATE_LIMITED",
        "TOO_MANY_PRIORITY",
        "NOT_SUBSCRIBED",
        "MALFORMED_KEY",
    ):
        assert name in ErrorCode.__members__


@settings(max_examples=1000)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=50)))
def test_arbitrary_input_only_raises_request_error(data: bytes | str) -> None:
    try:
        decode_request(data)
    except RequestError as err:
        assert isinstance(err.code, ErrorCode) and err.message


@given(
    st.dictionaries(
        st.sampled_from(["type", "req", "keys", "on", "x"]),
        st.one_of(
            st.sampled_from(["subscribe", "priority"]),
            st.integers(-(2**63), 2**64 - 1),
            st.lists(st.text(max_size=20), max_size=3),
            st.booleans(),
        ),
    )
)
def test_structured_fuzz_only_raises_request_error(obj: dict[str, object]) -> None:
    try:
        decode_request(enc(obj))
    except RequestError as err:
        assert err.code in (ErrorCode.INVALID_REQUEST, ErrorCode.BAD_MESSAGE)


# -- judge -------------------------------------------------------------------------------------

IDS = {"XNAS:AAPL": 0, "XNAS:MSFT": 1, "CME:ESZ5": 2, "EBS:EUR/USD": 3, "XNYS:IBM": 4}


def codes(ruling_refused: Sequence[Refusal]) -> list[tuple[str, str]]:
    return [(r.key, ErrorCode(r.code).name) for r in ruling_refused]


def test_subscribe_good_malformed_unknown() -> None:
    r = judge(
        Subscribe(req=1, keys=["XNAS:AAPL", "xnas:aapl", "XNAS:NOPE", "EBS/LDN:EURUSD"]),
        IDS,
        frozenset(),
        frozenset(),
        max_subscriptions=256,
        max_priority=8,
    )
    assert r.iids == [0]
    assert codes(r.refused) == [
        ("xnas:aapl", "MALFORMED_KEY"),
        ("XNAS:NOPE", "UNKNOWN_SYMBOL"),
        ("EBS/LDN:EURUSD", "MALFORMED_KEY"),
    ]
    assert "venue" in r.refused[0].reason and "dictionary" in r.refused[1].reason


def test_256_copies_of_one_key_are_one_subscription() -> None:
    r = judge(
        Subscribe(req=1, keys=["XNAS:AAPL"] * 256),
        IDS,
        frozenset(),
        frozenset(),
        max_subscriptions=256,
        max_priority=8,
    )
    assert r.iids == [0] and r.refused == []


def test_over_the_limit_refuses_the_keys_past_it_and_held_keys_still_pass() -> None:
    r = judge(
        Subscribe(req=1, keys=["XNAS:MSFT", "XNAS:AAPL", "CME:ESZ5", "EBS:EUR/USD"]),
        IDS,
        frozenset({0, 4}),
        frozenset(),
        max_subscriptions=3,
        max_priority=8,
    )
    assert r.iids == [1, 0]  # one free slot: MSFT; AAPL is held (a fresh snapshot)
    assert codes(r.refused) == [
        ("CME:ESZ5", "TOO_MANY_SUBSCRIPTIONS"),
        ("EBS:EUR/USD", "TOO_MANY_SUBSCRIPTIONS"),
    ]
    assert "3 subscriptions" in r.refused[0].reason


def test_priority_needs_a_subscription_and_has_a_limit() -> None:
    r = judge(
        SetPriority(req=1, keys=["XNAS:AAPL", "XNAS:MSFT", "CME:ESZ5", "XNYS:IBM"]),
        IDS,
        frozenset({0, 2, 4}),
        frozenset({4}),
        max_subscriptions=256,
        max_priority=2,
    )
    assert r.iids == [0, 4]  # IBM already marked: no new slot needed
    assert codes(r.refused) == [
        ("XNAS:MSFT", "NOT_SUBSCRIBED"),
        ("CME:ESZ5", "TOO_MANY_PRIORITY"),
    ]
    off = judge(
        SetPriority(req=2, keys=["XNAS:MSFT", "bad"], on=False),
        IDS,
        frozenset(),
        frozenset(),
        max_subscriptions=256,
        max_priority=2,
    )
    assert off.iids == [1] and codes(off.refused) == [("bad", "MALFORMED_KEY")]


def test_unsubscribing_what_is_not_held_is_a_no_op_not_a_refusal() -> None:
    r = judge(
        Unsubscribe(req=1, keys=["XNAS:MSFT", "XNAS:NOPE"]),
        IDS,
        frozenset(),
        frozenset(),
        max_subscriptions=256,
        max_priority=8,
    )
    assert r.iids == [1] and codes(r.refused) == [("XNAS:NOPE", "UNKNOWN_SYMBOL")]


# Short keys keep generation cheap; the grammar's edges are key_problem's own tests.
short_key = st.from_regex(r"\A[A-Z0-9_.-]{1,3}:[A-Za-z0-9_./-]{1,3}\Z")


@st.composite
def judged(
    draw: st.DrawFn,
) -> tuple[KeyRequest, dict[str, int], frozenset[int], frozenset[int], int, int]:
    names = draw(st.lists(short_key, max_size=12, unique=True))
    ids = {k: i for i, k in enumerate(names)}  # one iid per key, as in a dictionary
    known = st.sampled_from(sorted(ids)) if ids else short_key
    key = st.one_of(
        known,
        known,
        short_key,
        st.text(max_size=24),
        st.sampled_from(["xnas:aapl", "EBS/LDN:EURUSD", "XNAS:AAPL\n", ""]),
    )
    ks = draw(st.lists(key, min_size=1, max_size=48))  # limits come from max_subs below
    iids = sorted(ids.values())
    subs = frozenset(draw(st.lists(st.sampled_from(iids), max_size=20)) if iids else [])
    prio = frozenset(draw(st.lists(st.sampled_from(sorted(subs)), max_size=5)) if subs else [])
    kind = draw(st.sampled_from(["sub", "unsub", "on", "off"]))
    request: KeyRequest
    if kind == "sub":
        request = Subscribe(req=1, keys=ks)
    elif kind == "unsub":
        request = Unsubscribe(req=1, keys=ks)
    else:
        request = SetPriority(req=1, keys=ks[:16], on=kind == "on")
    return request, ids, subs, prio, draw(st.integers(0, 40)), draw(st.integers(0, 10))


@settings(max_examples=150)
@given(judged())
def test_judge_every_key_once_applied_or_refused_with_its_reason(
    case: tuple[KeyRequest, dict[str, int], frozenset[int], frozenset[int], int, int],
) -> None:
    request, ids, subs, prio, max_subs, max_prio = case
    r = judge(request, ids, subs, prio, max_subscriptions=max_subs, max_priority=max_prio)
    distinct = list(dict.fromkeys(request.keys))
    key_of = {i: k for k, i in ids.items()}
    applied = [key_of[i] for i in r.iids]
    refused = [x.key for x in r.refused]
    # each distinct key exactly once, applied or refused, in the request's order
    assert len(set(r.iids)) == len(r.iids)
    assert sorted(applied + refused) == sorted(distinct)
    assert [k for k in distinct if k in set(applied)] == applied
    assert [k for k in distinct if k in set(refused)] == refused
    for x in r.refused:
        code = ErrorCode(x.code)
        assert x.reason
        if key_problem(x.key) is not None:
            assert code is ErrorCode.MALFORMED_KEY
        elif x.key not in ids:
            assert code is ErrorCode.UNKNOWN_SYMBOL
        else:
            assert code in (
                ErrorCode.TOO_MANY_SUBSCRIPTIONS,
                ErrorCode.NOT_SUBSCRIBED,
                ErrorCode.TOO_MANY_PRIORITY,
            )
    for k in applied:
        assert key_problem(k) is None and k in ids
    if isinstance(request, Subscribe):
        after = subs | set(r.iids)
        assert len(after) <= max(max_subs, len(subs))
        if any(ErrorCode(x.code) is ErrorCode.TOO_MANY_SUBSCRIPTIONS for x in r.refused):
            assert len(after) == max(max_subs, len(subs))  # refused only once full
    if isinstance(request, SetPriority) and request.on:
        assert set(r.iids) <= subs
        assert len(prio | set(r.iids)) <= max(max_prio, len(prio))


def test_key_grammar_is_the_model_s() -> None:
    # One grammar: the decoder no longer carries a pattern of its own, judge uses key_problem.
    assert KEY_PATTERN == r"^[A-Z0-9_.-]{1,16}:[A-Za-z0-9_./-]{1,40}$"
    assert key_problem("XNAS:AAPL\n") is not None  # "$" alone would let it through
