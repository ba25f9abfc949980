"""Why a terminal left, and what it is told on the way out: one named reason per exit.

Every path out of a connection (a terminal's close, a reset, a write error, a request flood, a
control-frame flood, a slow consumer, a keepalive timeout, an expired token, a drain, shutdown)
ends in the server's one idempotent ``teardown`` with a ``Disconnect``. Its ``value`` is the
``reason`` label of ``monotape_disconnects_total`` (dashboards and alert rules select on these
strings: they never change). Where the server closes the connection itself, ``Close`` is the
whole decision: close code (RFC 6455 §7.4.1, from the wire's ``CloseCode``: one list of codes),
the reason text and the ``reconnect_after_ms`` hint the terminal gets in the wire's CLOSE message
and at the end of the close frame's reason (docs/wire.md).

Hint policy: a terminal that broke a rule (floods, bad requests, not reading) waits 5 s: coming
straight back would only repeat it; one that did nothing wrong (a late pong, shutdown) comes back
after 1 s. An expired token's hint is jittered, uniform in 0.5-5 s (``auth_expired``): tokens
minted together at the open expire together, and a fixed hint brought their terminals back
together, a storm on a timer. A drain spreads its own hints (core/drain.py).

An upgrade refused in-band (``in_band_refusal``) is not a disconnect: no connection existed. It
is the close a browser can read instead of an HTTP status it cannot (docs/wire.md, Browsers).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Final

from monotape.platform.core.budget import Overrun
from monotape.platform.wire.codes import CloseCode

__all__ = [
    "AUTH_EXPIRED_HINT_MS",
    "BAD_REQUESTS",
    "BAD_TOKEN_HINT_MS",
    "REQUEST_FLOOD",
    "RULE_BROKEN_HINT_MS",
    "TEXT_FRAME",
    "Close",
    "Disconnect",
    "InBandRefusal",
    "auth_expired",
    "in_band_refusal",
    "library_close_hint_ms",
]

RULE_BROKEN_HINT_MS: Final = 5000  # a client bug: reconnecting at once would only repeat it
_BLAMELESS_HINT_MS: Final = 1000
AUTH_EXPIRED_HINT_MS: Final = (500, 5000)  # uniform: terminals minted together leave apart
BAD_TOKEN_HINT_MS: Final = 30_000  # an in-band 401: the same bad token again is no use


class Disconnect(enum.Enum):
    """A teardown reason; ``value`` is the exported label (never rename one)."""

    CLOSED = "closed"  # the terminal closed cleanly
    CONNECTION_LOST = "connection_lost"  # reset, EOF without a close, or a library 1011
    PROTOCOL_ERROR = "protocol_error"  # broken frames (1002/1007), text, bad or flooded requests
    MESSAGE_TOO_BIG = "message_too_big"  # over server.max_message_bytes (websockets: 1009)
    WRITE_ERROR = "write_error"  # the socket refused bytes (the uvloop write-after-eof trap)
    SLOW_CONSUMER = "slow_consumer"  # in a gap for slow_consumer_kick_s, or answers not read
    CONTROL_FLOOD = Overrun.CONTROL_FLOOD.value  # pings/pongs over the control budget
    QUEUED_BYTES = Overrun.QUEUED_BYTES.value  # too many bytes queued for it
    KEEPALIVE_TIMEOUT = "keepalive_timeout"  # its pong is keepalive_timeout_s late
    AUTH_EXPIRED = "auth_expired"  # the session's token expired
    DRAIN = "drain"  # the node is leaving the rotation
    SERVER_SHUTDOWN = "server_shutdown"  # the node stopped

    def close(self, reconnect_after_ms: int | None = None) -> Close:
        """The close this reason is sent with when the server starts it (``_CLOSES``);
        ``reconnect_after_ms`` overrides the hint (a drain's staggered one)."""
        close = _CLOSES[self]
        if reconnect_after_ms is None:
            return close
        return Close(close.reason, close.code, close.text, reconnect_after_ms)

    @classmethod
    def of_overrun(cls, overrun: Overrun) -> Disconnect:
        return cls(overrun.value)

    @classmethod
    def of_library_close(cls, sent_code: int) -> Disconnect:
        """The reason for a close websockets started itself (the code of the close frame it
        sent; 0 when it sent none)."""
        if sent_code in _PROTOCOL_CODES:
            return cls.PROTOCOL_ERROR
        if sent_code == CloseCode.MESSAGE_TOO_BIG:
            return cls.MESSAGE_TOO_BIG
        return cls.CONNECTION_LOST


@dataclass(frozen=True, slots=True)
class Close:
    """A close the server starts: the teardown ``reason``, the close ``code`` and ``text`` the
    terminal reads, and when it may come back."""

    reason: Disconnect
    code: CloseCode
    text: str
    reconnect_after_ms: int


_PROTOCOL_CODES: Final = frozenset({int(CloseCode.PROTOCOL_ERROR), int(CloseCode.INVALID_DATA)})

_CLOSES: Final[dict[Disconnect, Close]] = {
    d: Close(d, code, text, hint)
    for d, code, text, hint in (
        (Disconnect.CLOSED, CloseCode.NORMAL, "closed", _BLAMELESS_HINT_MS),
        (
            Disconnect.CONNECTION_LOST,
            CloseCode.INTERNAL_ERROR,
            "connection lost",
            _BLAMELESS_HINT_MS,
        ),
        (
            Disconnect.PROTOCOL_ERROR,
            CloseCode.PROTOCOL_ERROR,
            "protocol error",
            RULE_BROKEN_HINT_MS,
        ),
        (
            Disconnect.MESSAGE_TOO_BIG,
            CloseCode.MESSAGE_TOO_BIG,
            "message too big",
            RULE_BROKEN_HINT_MS,
        ),
        (Disconnect.WRITE_ERROR, CloseCode.INTERNAL_ERROR, "write error", _BLAMELESS_HINT_MS),
        (
            Disconnect.SLOW_CONSUMER,
            CloseCode.POLICY_VIOLATION,
            "slow consumer: not reading",
            RULE_BROKEN_HINT_MS,
        ),
        (
            Disconnect.CONTROL_FLOOD,
            CloseCode.POLICY_VIOLATION,
            Overrun.CONTROL_FLOOD.close_reason,
            RULE_BROKEN_HINT_MS,
        ),
        (
            Disconnect.QUEUED_BYTES,
            CloseCode.POLICY_VIOLATION,
            Overrun.QUEUED_BYTES.close_reason,
            RULE_BROKEN_HINT_MS,
        ),
        # as websockets' own keepalive closes a connection whose pong is late; a terminal that
        # is only slow to answer still learns why and when to come back
        (
            Disconnect.KEEPALIVE_TIMEOUT,
            CloseCode.INTERNAL_ERROR,
            "keepalive timeout",
            _BLAMELESS_HINT_MS,
        ),
        # the default only: a session's expiry is jittered (``auth_expired``)
        (Disconnect.AUTH_EXPIRED, CloseCode.POLICY_VIOLATION, "token expired", _BLAMELESS_HINT_MS),
        (Disconnect.DRAIN, CloseCode.GOING_AWAY, "drain", _BLAMELESS_HINT_MS),
        (
            Disconnect.SERVER_SHUTDOWN,
            CloseCode.GOING_AWAY,
            "server_shutdown",
            _BLAMELESS_HINT_MS,
        ),
    )
}

# The closes a session starts (core/session.py): all counted as protocol errors, each with
# the code and text that tell the terminal's author what to fix.
TEXT_FRAME: Final = Close(
    Disconnect.PROTOCOL_ERROR,
    CloseCode.UNSUPPORTED_DATA,
    "binary messages only",
    RULE_BROKEN_HINT_MS,
)
REQUEST_FLOOD: Final = Close(
    Disconnect.PROTOCOL_ERROR, CloseCode.POLICY_VIOLATION, "request flood", RULE_BROKEN_HINT_MS
)
BAD_REQUESTS: Final = Close(
    Disconnect.PROTOCOL_ERROR,
    CloseCode.POLICY_VIOLATION,
    "too many bad requests",
    RULE_BROKEN_HINT_MS,
)

# The hint for a close websockets starts itself (TerminalProtocol.fail): broken, oversized or
# over-budget input is a client bug; an internal error (1011) is ours.
_LIBRARY_HINTS_MS: Final[dict[int, int]] = {
    int(CloseCode.PROTOCOL_ERROR): RULE_BROKEN_HINT_MS,
    int(CloseCode.INVALID_DATA): RULE_BROKEN_HINT_MS,  # a text frame that is not UTF-8
    int(CloseCode.POLICY_VIOLATION): RULE_BROKEN_HINT_MS,
    int(CloseCode.MESSAGE_TOO_BIG): RULE_BROKEN_HINT_MS,
    int(CloseCode.INTERNAL_ERROR): _BLAMELESS_HINT_MS,
}


def auth_expired(rng: random.Random) -> Close:
    """The close of a session whose token expired, with a jittered hint (``rng``: injected)."""
    lo, hi = AUTH_EXPIRED_HINT_MS
    return Disconnect.AUTH_EXPIRED.close(rng.randint(lo, hi))


@dataclass(frozen=True, slots=True)
class InBandRefusal:
    """An upgrade refused after the handshake: the CLOSE message and close frame a browser
    reads instead of the HTTP status (it sees only 1006 for a refused upgrade)."""

    code: CloseCode
    text: str
    reconnect_after_ms: int


def in_band_refusal(status: int, retry_after_s: int | None, reason: str) -> InBandRefusal:
    """The in-band form of an HTTP refusal of the upgrade: 503 and 429 are 1013 (Try Again
    Later, RFC 6455 §7.4.1 / IANA) with the Retry-After as the hint; 401 is 1008 with 30 s."""
    if status == 401:
        return InBandRefusal(CloseCode.POLICY_VIOLATION, reason, BAD_TOKEN_HINT_MS)
    hint_ms = 1000 * (retry_after_s if retry_after_s is not None else 1)
    return InBandRefusal(CloseCode.TRY_AGAIN_LATER, reason, hint_ms)


def library_close_hint_ms(code: int) -> int:
    """``reconnect_after_ms`` for a close websockets starts with ``code``."""
    return _LIBRARY_HINTS_MS.get(code, _BLAMELESS_HINT_MS)
