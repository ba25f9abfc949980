"""The session, fed with no socket: request rules, rate limit, limits, mistakes, token expiry."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.disconnect import BAD_REQUESTS, REQUEST_FLOOD, TEXT_FRAME, Disconnect
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.session import ERROR_WINDOW_NS, Received, Session, SessionRules
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.codes import CloseCode
from monotape.platform.wire.requests import SetPriority, Subscribe, Unsubscribe, encode_request

S = 1_000_000_000
IDS = {f"XNAS:S{i}": i for i in range(1, 11)}


def _session(
    *,
    burst: int = 100,
    per_s: float = 20.0,
    max_subs: int = 5,
    max_prio: int = 2,
    max_bad: int = 50,
    max_rate: int = 200,
    expires_at_s: float | None = None,
) -> tuple[Session, SubscriptionIndex, Counter[str]]:
    errors: Counter[str] = Counter()
    rules = SessionRules(
        ids=IDS,
        max_subscriptions=max_subs,
        max_priority=max_prio,
        requests_per_s=per_s,
        request_burst=burst,
        errors=errors,
        max_bad_requests=max_bad,
        max_rate_violations=max_rate,
    )
    index = SubscriptionIndex()
    index.add_connection(7)
    return Session(7, rules, index, opened_ns=0, expires_at_s=expires_at_s), index, errors


def _sub(req: int, *keys: str) -> bytes:
    return encode_request(Subscribe(req=req, keys=list(keys)))


def test_subscribe_applies_hydrates_and_acks() -> None:
    session, index, errors = _session()
    got = session.receive(_sub(1, "XNAS:S1", "XNAS:S3", "XNAS:S1"), 0)
    assert got.answer is None and got.close is None
    assert got.hydrate == (1, 3)  # each once, in the request's order
    assert index.subscriptions(7) == {1, 3}
    assert got.ack is not None
    assert codec.decode_message(got.ack) == codec.Ack(req=1, subscribed=2, priority=0)
    assert not errors and session.mistakes == 0


def test_refused_keys_are_named_before_the_ack_and_counted_once_per_code() -> None:
    session, index, errors = _session(max_subs=2)
    got = session.receive(_sub(4, "XNAS:S1", "NOPE:X", "NOPE:Y", "XNAS:S2", "XNAS:S3"), 0)
    assert got.answer is not None
    refused = codec.decode_message(got.answer)
    assert isinstance(refused, codec.Refused) and refused.req == 4
    assert [(r.key, r.code) for r in refused.keys] == [
        ("NOPE:X", ErrorCode.UNKNOWN_SYMBOL),
        ("NOPE:Y", ErrorCode.UNKNOWN_SYMBOL),
        ("XNAS:S3", ErrorCode.TOO_MANY_SUBSCRIPTIONS),
    ]
    assert errors == {"UNKNOWN_SYMBOL": 1, "TOO_MANY_SUBSCRIPTIONS": 1}
    assert session.mistakes == 1  # one request, one mistake
    assert got.hydrate == (1, 2) and index.subscriptions(7) == {1, 2}
    assert codec.decode_message(got.ack or b"") == codec.Ack(req=4, subscribed=2, priority=0)


def test_everything_refused_changes_nothing_and_still_acks() -> None:
    session, index, _ = _session()
    got = session.receive(_sub(2, "NOPE:X"), 0)
    assert got.answer is not None and got.hydrate == () and got.ack is not None
    assert index.subscriptions(7) == frozenset()


def test_unsubscribe_and_priority() -> None:
    session, index, errors = _session()
    session.receive(_sub(1, "XNAS:S1", "XNAS:S2"), 0)
    got = session.receive(encode_request(SetPriority(req=2, keys=["XNAS:S2"], on=True)), 0)
    assert got.hydrate == () and index.priority(7) == {2}
    assert codec.decode_message(got.ack or b"") == codec.Ack(req=2, subscribed=2, priority=1)
    got = session.receive(encode_request(SetPriority(req=3, keys=["XNAS:S3"], on=True)), 0)
    assert got.answer is not None and errors["NOT_SUBSCRIBED"] == 1
    got = session.receive(encode_request(Unsubscribe(req=4, keys=["XNAS:S2"])), 0)
    assert index.subscriptions(7) == {1} and index.priority(7) == frozenset()
    assert codec.decode_message(got.ack or b"") == codec.Ack(req=4, subscribed=1, priority=0)


def test_text_is_refused_and_closes_with_1003() -> None:
    session, _, errors = _session()
    got = session.receive("subscribe", 0)
    assert got.close is TEXT_FRAME
    assert got.close.code == CloseCode.UNSUPPORTED_DATA
    assert got.close.reason is Disconnect.PROTOCOL_ERROR
    err = codec.decode_message(got.answer or b"")
    assert isinstance(err, codec.Error) and err.code == ErrorCode.TEXT_NOT_ALLOWED
    assert errors == {"TEXT_NOT_ALLOWED": 1}


def test_rate_limit_refills_on_the_injected_clock() -> None:
    session, _, errors = _session(burst=3, per_s=2.0)
    for req in range(3):
        assert session.receive(_sub(req, "XNAS:S1"), 0).ack is not None
    limited = session.receive(_sub(9, "XNAS:S1"), 0)
    assert limited.ack is None and limited.close is None
    err = codec.decode_message(limited.answer or b"")
    assert isinstance(err, codec.Error) and err.code == ErrorCode.RATE_LIMITED
    assert session.receive(_sub(10, "XNAS:S1"), S // 4).ack is None  # half a token: not yet
    assert session.receive(_sub(11, "XNAS:S1"), S // 2).ack is not None  # one token back
    assert errors == {"RATE_LIMITED": 2}


def test_a_flood_that_ignores_rate_limits_is_closed() -> None:
    session, _, _ = _session(burst=1, per_s=1.0, max_rate=5)
    session.receive(_sub(0, "XNAS:S1"), 0)
    outcomes = [session.receive(_sub(1, "XNAS:S1"), 0) for _ in range(6)]
    assert [o.close for o in outcomes] == [None] * 5 + [REQUEST_FLOOD]
    assert REQUEST_FLOOD.code == CloseCode.POLICY_VIOLATION


def test_too_many_bad_requests_close_but_mistakes_expire_after_a_minute() -> None:
    session, _, errors = _session(max_bad=3)
    for _ in range(3):
        assert session.receive(b"\x00garbage", 0).close is None
    # a minute later the window starts again: three more are still tolerated
    later = ERROR_WINDOW_NS + 1
    for _ in range(3):
        assert session.receive(b"\x00garbage", later).close is None
    assert session.receive(b"\x00garbage", later).close is BAD_REQUESTS
    assert sum(errors.values()) == 7


def test_token_expiry_is_decided_on_the_wall_time_given() -> None:
    session, _, _ = _session(expires_at_s=1_000.0)
    assert session.expires_in_s(990.0) == 10.0
    assert session.expire(999.9) is None  # a timer that fired early: not yet
    close = session.expire(1_000.0)
    assert close is not None and close.reason is Disconnect.AUTH_EXPIRED
    assert close.code == CloseCode.POLICY_VIOLATION and close.reconnect_after_ms == 1000
    assert session.expires_in_s(2_000.0) == 0.0
    tokenless, _, _ = _session()
    assert tokenless.expires_in_s(0.0) is None and tokenless.expire(1e12) is None


_keys = st.sampled_from([*IDS, "NOPE:X", "bad key", "XNAS:S1"])
_requests = st.one_of(
    st.builds(lambda r, k: _sub(r, *k), st.integers(0, 9), st.lists(_keys, min_size=1, max_size=8)),
    st.builds(
        lambda r, k: encode_request(Unsubscribe(req=r, keys=k)),
        st.integers(0, 9),
        st.lists(_keys, min_size=1, max_size=8),
    ),
    st.builds(
        lambda r, k, on: encode_request(SetPriority(req=r, keys=k, on=on)),
        st.integers(0, 9),
        st.lists(_keys, min_size=1, max_size=3),
        st.booleans(),
    ),
    st.binary(max_size=40),
    st.text(max_size=5),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_requests, st.integers(0, S // 10)), max_size=40))
def test_any_message_sequence_keeps_the_limits_and_a_well_formed_answer(
    messages: list[tuple[bytes | str, int]],
) -> None:
    session, index, _ = _session(burst=10, per_s=5.0, max_subs=4, max_prio=2, max_bad=5)
    now = 0
    for message, step in messages:
        now += step
        got = session.receive(message, now)
        assert isinstance(got, Received)
        for payload in (got.answer, got.ack):
            if payload is not None:
                codec.decode_message(payload)  # every answer is a valid server message
        assert set(got.hydrate) <= index.subscriptions(7)
        assert len(index.subscriptions(7)) <= 4
        assert len(index.priority(7)) <= 2 and index.priority(7) <= index.subscriptions(7)
        if got.close is not None:
            assert got.close.reason is Disconnect.PROTOCOL_ERROR
            break
