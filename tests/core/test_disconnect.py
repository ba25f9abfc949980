"""Disconnect reasons: the exported labels, the close each is sent with, the library's closes."""

from __future__ import annotations

import pytest

from monotape.platform.core.budget import Overrun
from monotape.platform.core.disconnect import (
    BAD_REQUESTS,
    BAD_TOKEN_HINT_MS,
    REQUEST_FLOOD,
    RULE_BROKEN_HINT_MS,
    TEXT_FRAME,
    Disconnect,
    in_band_refusal,
    library_close_hint_ms,
)
from monotape.platform.server.control import close_reason_with_hint
from monotape.platform.wire.codes import CloseCode


def test_labels_are_the_strings_dashboards_and_alerts_select_on() -> None:
    assert {d.value for d in Disconnect} == {
        "closed",
        "connection_lost",
        "protocol_error",
        "message_too_big",
        "write_error",
        "slow_consumer",
        "control_flood",
        "queued_bytes",
        "keepalive_timeout",
        "auth_expired",
        "drain",
        "server_shutdown",
    }


@pytest.mark.parametrize("reason", list(Disconnect))
def test_every_reason_has_a_close_that_fits_a_close_frame(reason: Disconnect) -> None:
    close = reason.close()
    assert close.reason is reason
    assert isinstance(close.code, CloseCode)
    assert close.text
    framed = close_reason_with_hint(close.text, close.reconnect_after_ms)
    assert framed == f"{close.text}; reconnect_after_ms={close.reconnect_after_ms}"  # no cut


@pytest.mark.parametrize(
    ("reason", "code", "hint"),
    [
        (Disconnect.SLOW_CONSUMER, CloseCode.POLICY_VIOLATION, 5000),
        (Disconnect.CONTROL_FLOOD, CloseCode.POLICY_VIOLATION, 5000),
        (Disconnect.QUEUED_BYTES, CloseCode.POLICY_VIOLATION, 5000),
        (Disconnect.KEEPALIVE_TIMEOUT, CloseCode.INTERNAL_ERROR, 1000),
        (Disconnect.AUTH_EXPIRED, CloseCode.POLICY_VIOLATION, 1000),
        (Disconnect.DRAIN, CloseCode.GOING_AWAY, 1000),
        (Disconnect.SERVER_SHUTDOWN, CloseCode.GOING_AWAY, 1000),
    ],
)
def test_the_closes_the_server_starts(reason: Disconnect, code: CloseCode, hint: int) -> None:
    close = reason.close()
    assert (close.code, close.reconnect_after_ms) == (code, hint)


def test_a_drain_spreads_its_own_hints() -> None:
    close = Disconnect.DRAIN.close(reconnect_after_ms=1234)
    assert close.reconnect_after_ms == 1234
    assert (close.reason, close.code, close.text) == (
        Disconnect.DRAIN,
        CloseCode.GOING_AWAY,
        "drain",
    )


def test_budget_overruns_keep_their_label_and_text() -> None:
    for overrun in Overrun:
        reason = Disconnect.of_overrun(overrun)
        assert reason.value == overrun.value
        assert reason.close().text == overrun.close_reason


def test_session_closes_count_as_protocol_errors_with_their_own_codes() -> None:
    assert TEXT_FRAME.code == CloseCode.UNSUPPORTED_DATA
    assert REQUEST_FLOOD.code == BAD_REQUESTS.code == CloseCode.POLICY_VIOLATION
    for close in (TEXT_FRAME, REQUEST_FLOOD, BAD_REQUESTS):
        assert close.reason is Disconnect.PROTOCOL_ERROR
        assert close.reconnect_after_ms == RULE_BROKEN_HINT_MS


@pytest.mark.parametrize(
    ("sent", "reason", "hint"),
    [
        (CloseCode.PROTOCOL_ERROR, Disconnect.PROTOCOL_ERROR, 5000),
        (CloseCode.INVALID_DATA, Disconnect.PROTOCOL_ERROR, 5000),
        (CloseCode.MESSAGE_TOO_BIG, Disconnect.MESSAGE_TOO_BIG, 5000),
        (CloseCode.POLICY_VIOLATION, Disconnect.CONNECTION_LOST, 5000),
        (CloseCode.INTERNAL_ERROR, Disconnect.CONNECTION_LOST, 1000),
        (0, Disconnect.CONNECTION_LOST, 1000),  # no close frame sent: the network broke
        (1006, Disconnect.CONNECTION_LOST, 1000),
    ],
)
def test_closes_websockets_starts(sent: int, reason: Disconnect, hint: int) -> None:
    assert Disconnect.of_library_close(int(sent)) is reason
    assert library_close_hint_ms(int(sent)) == hint


def test_an_upgrade_refused_in_band_says_when_to_come_back() -> None:
    """What a browser reads instead of the HTTP status it cannot see (docs/wire.md, Browsers)."""
    drain = in_band_refusal(503, 4, "draining: reconnect elsewhere")
    assert (drain.code, drain.reconnect_after_ms) == (CloseCode.TRY_AGAIN_LATER, 4000)
    assert drain.text == "draining: reconnect elsewhere"
    flood = in_band_refusal(429, 30, "too many failed upgrades from this address")
    assert (int(flood.code), flood.reconnect_after_ms) == (1013, 30_000)
    bad = in_band_refusal(401, None, "unauthorized: bad signature")
    assert (bad.code, bad.reconnect_after_ms) == (CloseCode.POLICY_VIOLATION, BAD_TOKEN_HINT_MS)
    assert BAD_TOKEN_HINT_MS == 30_000
