"""What a terminal holds, fed the node's answers directly: refused keys are not held, refused
marks are undone, a request refused whole is undone whole, a reconnect restores the rest."""

from __future__ import annotations

from monotape.platform.model import Instrument
from monotape.platform.sdk.answers import Answer, KeysRefused, ServerError
from monotape.platform.sdk.intent import Intent
from monotape.platform.sdk.stats import SdkStats
from monotape.platform.sdk.view import TerminalView
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import MAX_KEYS, SetPriority, Subscribe

KEYS = [f"XT:S{i}" for i in range(300)]


def intent(keys: list[str] = KEYS) -> Intent:
    stats = SdkStats()
    view = TerminalView(stats=stats)
    view.receive(
        codec.Hello(
            2, "t", 40, 256, 16, [Instrument(i, k, "XT", k[3:], 2, 1) for i, k in enumerate(keys)]
        )
    )
    return Intent(view, stats)


def refusal(key: str, code: ErrorCode = ErrorCode.UNKNOWN_SYMBOL) -> codec.Refusal:
    return codec.Refusal(key, code, "why")


def test_refused_keys_are_not_held_and_the_answer_names_the_rest() -> None:
    it = intent()
    req = it.subscribe(["XT:S0", "XT:NOPE", "XT:S1", "XT:S0"])
    assert isinstance(req, Subscribe) and it.screen.watchlist == dict.fromkeys(
        ["XT:S0", "XT:NOPE", "XT:S1"]
    )
    it.refused(codec.Refused(req.req, [refusal("XT:NOPE")]))
    answer = it.acked(codec.Ack(req.req, 2, 0))
    assert answer == Answer(req.req, 2, 0, ["XT:S0", "XT:S1"], [refusal("XT:NOPE")])
    assert list(it.screen.watchlist) == ["XT:S0", "XT:S1"]
    assert (
        it.stats.refused_keys == 1 and "refused XT:NOPE: why (UNKNOWN_SYMBOL)" in it.stats.error_log
    )
    assert it.acked(codec.Ack(req.req, 2, 0)) is None  # answered once; a resync's ACK is no one's


def test_every_key_refused_is_keys_refused_and_nothing_is_held() -> None:
    it = intent()
    req = it.subscribe(["XT:NOPE", "bad"])
    it.refused(
        codec.Refused(req.req, [refusal("XT:NOPE"), refusal("bad", ErrorCode.MALFORMED_KEY)])
    )
    outcome = it.acked(codec.Ack(req.req, 0, 0))
    assert isinstance(outcome, KeysRefused) and outcome.code == ErrorCode.UNKNOWN_SYMBOL
    assert it.screen.watchlist == {}


def test_a_request_refused_whole_is_undone_whole() -> None:
    it = intent()
    it.acked(codec.Ack(it.subscribe(["XT:S0"]).req, 1, 0))
    req = it.subscribe(["XT:S0", "XT:S1"])
    outcome = it.errored(codec.Error(ErrorCode.RATE_LIMITED, "slow down", req.req))
    assert isinstance(outcome, ServerError) and not isinstance(outcome, KeysRefused)
    assert list(it.screen.watchlist) == ["XT:S0"]  # what it added is gone, what was held stays
    it.acked(codec.Ack(it.set_priority(["XT:S0"], True).req, 1, 1))
    unmark = it.set_priority(["XT:S0"], False)
    assert it.priority == {}
    it.errored(codec.Error(ErrorCode.RATE_LIMITED, "slow down", unmark.req))
    assert list(it.priority) == ["XT:S0"]  # the unmark was refused: the mark stands
    assert it.errored(codec.Error(ErrorCode.RATE_LIMITED, "no request", 0)) is None


def test_a_refused_mark_is_undone_but_one_held_before_stays() -> None:
    it = intent()
    it.acked(codec.Ack(it.set_priority(["XT:S0"], True).req, 0, 1))
    req = it.set_priority(["XT:S0", "XT:S1", "XT:S2"], True)
    it.refused(codec.Refused(req.req, [refusal("XT:S0"), refusal("XT:S1")]))
    answer = it.acked(codec.Ack(req.req, 0, 2))
    assert isinstance(answer, Answer) and answer.applied == ["XT:S2"]
    assert list(it.priority) == ["XT:S0", "XT:S2"]


def test_between_connections_the_intent_stands_and_a_reconnect_restores_it() -> None:
    it = intent()
    for k in KEYS[:260]:  # more than one request's worth
        it.abandon(it.subscribe([k]).req)  # sent into a dead connection: no answer will come
    it.abandon(it.set_priority(KEYS[:2], True).req)
    it.screen.hold(["XT:GONE"])
    assert it.restore_watchlist() == [KEYS[:MAX_KEYS], KEYS[MAX_KEYS:260]]
    assert "XT:GONE" not in it.screen.watchlist  # the new dictionary does not know it
    first = it.resubscribe(KEYS[:MAX_KEYS])
    it.refused(codec.Refused(first.req, [refusal("XT:S1", ErrorCode.TOO_MANY_SUBSCRIPTIONS)]))
    it.acked(codec.Ack(first.req, 255, 0))
    assert it.stats.resubscribed == 255 and "XT:S1" not in it.screen.watchlist
    assert it.restore_marks() == [["XT:S0"]]  # XT:S1 lost its subscription, so its mark
    remark = it.remark(["XT:S0"])
    assert remark == SetPriority(req=remark.req, keys=["XT:S0"])
    failed = it.resubscribe(KEYS[MAX_KEYS:260])
    it.errored(codec.Error(ErrorCode.RATE_LIMITED, "slow down", failed.req))
    assert KEYS[MAX_KEYS] in it.screen.watchlist  # a restore refused whole keeps the intent
    assert any(e.startswith("re-subscribe refused") for e in it.stats.error_log)


def test_request_numbers_are_one_sequence() -> None:
    it = intent()
    reqs = [it.subscribe(["XT:S0"]).req, it.next_req(), it.unsubscribe(["XT:S0"]).req]
    assert reqs == sorted(set(reqs))
