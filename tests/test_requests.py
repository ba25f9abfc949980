"""monotape.platform.requests: strict validation, one ErrorCode per failure path, fuzzing."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.codec import ErrorCode
from monotape.platform.requests import (
    MAX_REQUEST_BYTES,
    Request,
    RequestError,
    SetPriority,
    Subscribe,
    Unsubscribe,
    decode_request,
    encode_request,
)

keys = st.lists(st.from_regex(r"\A[A-Z0-9_.-]{1,16}:[A-Za-z0-9_./-]{1,40}\Z"), min_size=1)
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
        ({"type": "subscribe", "req": 4, "keys": ["A:B", "a:b"]}, "$.keys[1]", 4),
        ({"type": "subscribe", "req": 4, "keys": ["A:" + "b" * 41]}, "$.keys[0]", 4),
        ({"type": "subscribe", "req": 5, "keys": []}, "$.keys", 5),
        ({"type": "subscribe", "req": 5, "keys": ["A:B"] * 257}, "$.keys", 5),
        ({"type": "priority", "req": 6, "keys": ["A:B"] * 17}, "$.keys", 6),
        ({"type": "priority", "req": 6, "keys": ["A:B"], "on": 1}, "$.on", 6),
        ({"type": "buy", "req": 7}, "$.type", 7),
        ({"req": 7}, "`type`", 7),
        ({"type": "unsubscribe", "req": 8, "keys": ["A:B"], "extra": 1}, "`extra`", 8),
        ({"type": "unsubscribe", "req": 8}, "`keys`", 8),
        ([1, 2], "object", 0),
    ],
)
def test_schema_violations_name_the_field(obj: object, field: str, req: int) -> None:
    err = refused(enc(obj))
    assert err.code is ErrorCode.INVALID_REQUEST
    assert field in err.message and err.req == req
    assert isinstance(err.__cause__, msgspec.ValidationError)


def test_deep_nesting_is_refused_not_crashed() -> None:
    assert refused(b"\x81\xa3req" + b"\x91" * 10_000 + b"\x01").code is ErrorCode.BAD_MESSAGE


def test_error_codes_cover_server_side_checks() -> None:
    for name in (
        "UNKNOWN_SYMBOL",
        "TOO_MANY_SUBSCRIPTIONS",
        "RATE_LIMITED",
        "TOO_MANY_PRIORITY",
        "NOT_SUBSCRIBED",
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
