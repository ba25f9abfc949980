"""The session, fed with no socket: request rules, rate limit, limits, mistakes, token expiry,
refresh, the glass report and the rate (max_hz)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.disconnect import BAD_REQUESTS, REQUEST_FLOOD, TEXT_FRAME, Disconnect
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.glass import REPORT_CAP, REPORT_INTERVAL_NS, GlassLedger
from monotape.platform.core.session import (
    ERROR_WINDOW_NS,
    EXPIRY_RECHECK_S,
    EXPIRY_SLACK_NS,
    Received,
    Session,
    SessionRules,
)
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.codes import CloseCode
from monotape.platform.wire.requests import (
    Rate,
    Refresh,
    Report,
    SetPriority,
    Subscribe,
    Unsubscribe,
    encode_request,
)

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
    subject: str | None = None,
    admin: bool = False,
    glass: GlassLedger | None = None,
    conn_id: int = 7,
    index: SubscriptionIndex | None = None,
    seed: int = 1,
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
        glass=glass if glass is not None else GlassLedger(),
        rng=random.Random(seed),
    )
    index = index if index is not None else SubscriptionIndex()
    index.add_connection(conn_id)
    session = Session(
        conn_id,
        rules,
        index,
        opened_ns=0,
        opened_wall_s=0.0,  # wall s * S = monotonic ns: both clocks start together
        expires_at_s=expires_at_s,
        subject=subject,
        admin=admin,
    )
    return session, index, errors


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
    assert session.expire(999.9, 999 * S) is None  # a timer that fired early: not yet
    close = session.expire(1_000.0, 1_000 * S)
    assert close is not None and close.reason is Disconnect.AUTH_EXPIRED
    assert close.code == CloseCode.POLICY_VIOLATION
    assert 500 <= close.reconnect_after_ms <= 5000  # jittered (issue 15), never a fixed 1000
    assert session.expires_in_s(2_000.0) == 0.0
    tokenless, _, _ = _session()
    assert tokenless.expires_in_s(0.0) is None and tokenless.expire(1e12, 10**21) is None
    assert tokenless.expiry_timer_s(0.0, 0) is None


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


# -- expiry: a jittered hint -------------------------------------------------------------------


def test_expired_sessions_get_jittered_hints_in_half_a_second_to_five() -> None:
    """Tokens minted together expire together: their terminals must not come back together."""
    hints = []
    for seed in range(40):
        session, _, _ = _session(expires_at_s=1_000.0, seed=seed)
        close = session.expire(1_000.0, 1_000 * S)
        assert close is not None and close.reason is Disconnect.AUTH_EXPIRED
        hints.append(close.reconnect_after_ms)
    assert all(500 <= h <= 5000 for h in hints)
    assert len(set(hints)) > 30, "hints bunch together"
    assert max(hints) - min(hints) > 3000, "hints do not spread over the window"


def test_a_wall_clock_stepped_back_keeps_a_session_only_the_slack_past_its_deadline() -> None:
    session, _, _ = _session(expires_at_s=1_000.0)  # opened at wall 0 s, monotonic 0
    deadline = 1_000 * S  # when the wall clock said exp would come, on the monotonic clock
    assert session.expiry_timer_s(0.0, 0) == 1_000.0
    # the wall clock was stepped back an hour just before exp: by the wall, an hour to go
    assert session.expire(1_000.0 - 3_600, deadline) is None
    assert session.expiry_timer_s(1_000.0 - 3_600, deadline) == EXPIRY_SLACK_NS / S
    assert session.expire(1_000.0 - 3_600, deadline + EXPIRY_SLACK_NS - 1) is None
    close = session.expire(1_000.0 - 3_600, deadline + EXPIRY_SLACK_NS)
    assert close is not None and close.reason is Disconnect.AUTH_EXPIRED
    # a timer that fired early looks again no sooner than the recheck, however close exp is
    assert session.expiry_timer_s(999.99, deadline, early=True) == EXPIRY_RECHECK_S
    due = session.expiry_timer_s(999.99, deadline)
    assert due is not None and due < EXPIRY_RECHECK_S


def test_a_refresh_moves_the_monotonic_deadline_too() -> None:
    session, _, _ = _session(expires_at_s=1_000.0, subject="desk-7")
    assert session.refreshed(1, _Grant("desk-7", 1_900), 990.0, 990 * S).ack is not None
    # past the old deadline and its slack, the wall clock stepped back: the new token holds
    assert session.expire(1_000.0, 1_000 * S + EXPIRY_SLACK_NS) is None
    assert session.expire(1_000.0, 1_900 * S + EXPIRY_SLACK_NS) is not None


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1.0, 100_000.0),
    st.lists(st.floats(-3_600.0, 3_600.0), max_size=200),
)
def test_any_wall_clock_steps_end_the_session_by_the_bound_with_few_rearms(
    ttl_s: float, steps: list[float]
) -> None:
    """The driver's loop on fake clocks: arm, fire when told, step the wall clock between
    firings (back or forward), re-arm when told. It always ends, within the bound."""
    session, _, _ = _session(expires_at_s=ttl_s)
    now_ns, wall_s = 0, 0.0  # both clocks start together
    deadline = round(ttl_s * S)
    left = session.expiry_timer_s(wall_s, now_ns)
    rearms = 0
    while True:
        assert left is not None and left >= 0.0
        now_ns += round(left * S)  # the timer fires
        wall_s += left + (steps[rearms] if rearms < len(steps) else 0.0)
        close = session.expire(wall_s, now_ns)
        if close is not None:
            break
        assert wall_s < ttl_s  # never kept open once the wall clock says exp has come
        left = session.expiry_timer_s(wall_s, now_ns, early=True)
        rearms += 1
        assert rearms <= EXPIRY_SLACK_NS / S / EXPIRY_RECHECK_S + 2
    assert now_ns <= deadline + EXPIRY_SLACK_NS + EXPIRY_RECHECK_S * S
    # closed before the slack only because the wall clock said exp had come
    assert wall_s >= ttl_s or now_ns >= deadline + EXPIRY_SLACK_NS


# -- refresh -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Grant:
    sub: str
    exp: int
    admin: bool = False


def _refresh(req: int, token: str = "a.b.c") -> bytes:
    return encode_request(Refresh(req=req, token=token))


def _error(got: Received) -> codec.Error:
    msg = codec.decode_message(got.answer or b"")
    assert isinstance(msg, codec.Error), msg
    return msg


def test_refresh_hands_the_token_to_the_driver_then_moves_the_expiry() -> None:
    session, _, errors = _session(expires_at_s=1_000.0, subject="desk-7")
    got = session.receive(_refresh(3, "x.y.z"), 0)
    assert got.refresh == Refresh(req=3, token="x.y.z")  # to verify off the loop
    assert got.answer is None and got.ack is None and got.close is None
    taken = session.refreshed(3, _Grant("desk-7", 1_900), 990.0, 0)
    assert taken.answer is None
    assert codec.decode_message(taken.ack or b"") == codec.Ack(req=3, subscribed=0, priority=0)
    assert session.expires_at_s == 1_900.0
    assert session.expire(1_000.0, 10 * S) is None  # the old expiry no longer closes it
    assert session.expires_in_s(1_000.0) == 900.0
    assert not errors


def test_refresh_is_rejected_for_another_subject_wider_claims_or_an_old_exp() -> None:
    cases: list[tuple[_Grant | str, str]] = [
        (_Grant("desk-8", 1_900), "another subject"),
        (_Grant("desk-7", 1_900, admin=True), "wider claims"),
        (_Grant("desk-7", 990), "expired"),
        ("bad signature", "bad signature"),  # the verifier's own refusal
    ]
    for grant, reason in cases:
        session, _, errors = _session(expires_at_s=1_000.0, subject="desk-7")
        got = session.refreshed(4, grant, 995.0, 0)
        error = _error(got)
        assert error.code == ErrorCode.TOKEN_REJECTED and error.req == 4
        assert reason in error.message
        assert got.close is None  # the connection stays open on its current token
        assert session.expires_at_s == 1_000.0
        assert errors == {"TOKEN_REJECTED": 1}


def test_an_admin_session_may_refresh_with_an_admin_or_a_narrower_token() -> None:
    for admin in (True, False):
        session, _, _ = _session(expires_at_s=1_000.0, subject="ops", admin=True)
        got = session.refreshed(1, _Grant("ops", 2_000, admin=admin), 10.0, 0)
        assert got.ack is not None and session.expires_at_s == 2_000.0


def test_refresh_on_a_session_without_a_token_is_rejected_without_verifying() -> None:
    session, _, _ = _session()
    got = session.receive(_refresh(5), 0)
    assert got.refresh is None  # nothing for the verifier's pool to do
    assert _error(got).code == ErrorCode.TOKEN_REJECTED


# -- report: the glass audit -------------------------------------------------------------------


def _report(
    req: int, regressions: int, gaps: int = 0, last: tuple[str, int, int, int, int] | None = None
) -> bytes:
    return encode_request(Report(req=req, regressions=regressions, gaps=gaps, last=last))


def test_reports_add_the_increase_of_cumulative_counts() -> None:
    glass = GlassLedger()
    session, _, _ = _session(glass=glass, subject="desk-7")
    assert session.receive(_report(1, 0, 2), 0).ack is not None
    assert (glass.regressions, glass.gaps, glass.terminals) == (0, 2, 0)
    last = ("XNAS:S1", 7, 1001, 7, 998)
    got = session.receive(_report(2, 3, 2, last), REPORT_INTERVAL_NS, wall_s=1234.5)
    assert codec.decode_message(got.ack or b"") == codec.Ack(req=2, subscribed=0, priority=0)
    assert (glass.regressions, glass.gaps, glass.terminals) == (3, 2, 1)
    assert glass.last is not None
    assert glass.last.as_dict() == {
        "conn_id": 7,
        "subject": "desk-7",
        "key": "XNAS:S1",
        "held": [7, 1001],
        "got": [7, 998],
        "regressions": 3,
        "wall_s": 1234.5,
    }
    session.receive(_report(3, 5, 4), 2 * REPORT_INTERVAL_NS)
    # one terminal is one terminal, however many reports it sends
    assert (glass.regressions, glass.gaps, glass.terminals) == (5, 4, 1)


def test_a_report_sooner_than_five_seconds_is_rate_limited_and_not_counted() -> None:
    glass = GlassLedger()
    session, _, errors = _session(glass=glass)
    session.receive(_report(1, 1), 0)
    got = session.receive(_report(2, 9), REPORT_INTERVAL_NS - 1)
    error = _error(got)
    assert error.code == ErrorCode.RATE_LIMITED and error.req == 2
    assert got.ack is None and got.close is None
    assert glass.regressions == 1 and errors == {"RATE_LIMITED": 1}
    # five seconds after the last *accepted* one it counts again, from the last accepted counts
    session.receive(_report(3, 9), REPORT_INTERVAL_NS)
    assert glass.regressions == 9


def test_a_hostile_terminal_is_capped_and_counts_as_one_terminal() -> None:
    glass = GlassLedger()
    session, _, _ = _session(glass=glass)
    session.receive(_report(1, 2**64 - 1, 2**64 - 1), 0)
    assert (glass.regressions, glass.gaps, glass.terminals) == (REPORT_CAP, REPORT_CAP, 1)
    session.receive(_report(2, 2**64 - 1, 2**64 - 1), REPORT_INTERVAL_NS)
    assert (glass.regressions, glass.gaps, glass.terminals) == (REPORT_CAP, REPORT_CAP, 1)
    # a second connection is a second terminal, with a cap of its own
    other, _, _ = _session(glass=glass, conn_id=8)
    other.receive(_report(1, 1), 0)
    assert (glass.regressions, glass.terminals) == (REPORT_CAP + 1, 2)


def test_a_report_going_backwards_is_ignored() -> None:
    glass = GlassLedger()
    session, _, _ = _session(glass=glass)
    session.receive(_report(1, 5, 5), 0)
    got = session.receive(_report(2, 4, 9), REPORT_INTERVAL_NS)
    assert got.ack is not None and got.answer is None
    assert (glass.regressions, glass.gaps) == (5, 5)
    session.receive(_report(3, 6, 6), 2 * REPORT_INTERVAL_NS)  # measured from 5 and 5
    assert (glass.regressions, glass.gaps) == (6, 6)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), min_size=1, max_size=12))
def test_reports_never_count_more_than_the_cap_or_the_highest_claim(
    counts: list[tuple[int, int]],
) -> None:
    glass = GlassLedger()
    session, _, _ = _session(glass=glass)
    for i, (r, g) in enumerate(counts):
        session.receive(_report(i, r, g), i * REPORT_INTERVAL_NS)
    assert glass.regressions <= min(REPORT_CAP, max(r for r, _ in counts))
    assert glass.gaps <= min(REPORT_CAP, max(g for _, g in counts))
    # one terminal, counted once, when an accepted (not backwards) report first had regressions
    assert glass.terminals == (1 if glass.regressions else 0)


# -- rate (max_hz) -----------------------------------------------------------------------------


def test_rate_moves_the_terminal_to_its_rate_group_and_back_with_a_snapshot() -> None:
    session, index, _ = _session()
    session.receive(_sub(1, "XNAS:S1", "XNAS:S2"), 0)
    got = session.receive(encode_request(Rate(req=2, max_hz=5)), 0)
    assert got.hydrate == () and got.ack is not None
    assert index.rate(7) == 5 and index.rates() == {5}
    sig = index.signature(7)
    assert sig is not None and index.paced_connections(sig) == set()
    assert index.rated_groups(5) == [(sig, {7})]
    # back to 25 Hz: the deltas that follow name bases it skipped, so a snapshot comes first
    back = session.receive(encode_request(Rate(req=3, max_hz=25)), 0)
    assert back.hydrate == (1, 2) and back.ack is not None
    assert index.rate(7) == 1 and index.rates() == frozenset()
    assert index.paced_connections(sig) == {7}
    # 25 Hz again: nothing skipped, nothing to hydrate
    assert session.receive(encode_request(Rate(req=4, max_hz=25)), 0).hydrate == ()


def test_a_rate_that_is_not_offered_is_an_invalid_request() -> None:
    session, index, _ = _session()
    got = session.receive(
        b"\x83\xa4type\xa4rate\xa3req\x09\xa6max_hz\x04",
        0,  # {"type":"rate","req":9,"max_hz":4}
    )
    error = _error(got)
    assert error.code == ErrorCode.INVALID_REQUEST and error.req == 9
    assert "max_hz" in error.message and index.rate(7) == 1
