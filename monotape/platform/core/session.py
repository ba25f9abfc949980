"""One terminal's session: its requests judged and applied, its limits, its token's expiry.

Sans-I/O: ``Session.receive(message, now_ns)`` takes what the terminal sent and returns what to
answer and whether to close (``Received``); nothing here touches a socket or reads a clock. The
server's driver (server/endpoint.py) writes the answers in order (ERROR or REFUSED, then the
snapshot of ``hydrate``, then ACK) and closes when told.

The rules, in the order they apply:
- text messages are refused and close the connection (1003): the wire is binary;
- a per-connection token bucket (``requests_per_s``, ``request_burst``): over it, RATE_LIMITED;
  a terminal that ignores more than ``max_rate_violations`` of those is a flood (1008);
- a request that does not decode is answered with its error; more than ``max_bad_requests``
  and the terminal is a bug, not a desk (1008);
- a decoded request is judged key by key (wire/requests.judge) and applied to the subscription
  index: refused keys are named in REFUSED, the ACK gives the counts after the request.
Mistakes (errors and refusals) are counted per minute, not per lifetime: a desk open all week
must not be closed as a flood for mistakes spread over days.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from monotape.platform.core.disconnect import (
    BAD_REQUESTS,
    REQUEST_FLOOD,
    TEXT_FRAME,
    Close,
    Disconnect,
)
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import (
    RequestError,
    Subscribe,
    Unsubscribe,
    decode_request,
    judge,
)

__all__ = [
    "ERROR_WINDOW_NS",
    "MAX_BAD_REQUESTS",
    "MAX_RATE_VIOLATIONS",
    "Received",
    "Session",
    "SessionRules",
]

MAX_BAD_REQUESTS: Final = 50  # then closed with 1008: a client this broken is a bug
MAX_RATE_VIOLATIONS: Final = 200  # a subscribe flood that ignores RATE_LIMITED errors
ERROR_WINDOW_NS: Final = 60 * 1_000_000_000  # both limits count errors within one minute


@dataclass(frozen=True, slots=True)
class SessionRules:
    """What every session of a server shares: the dictionary and the limits (``server.*``), and
    the per-code error counter the node exports (``errors``, by ``ErrorCode`` name)."""

    ids: Mapping[str, int]  # key -> iid, the hello's dictionary
    max_subscriptions: int
    max_priority: int
    requests_per_s: float
    request_burst: int
    errors: Counter[str]
    max_bad_requests: int = MAX_BAD_REQUESTS
    max_rate_violations: int = MAX_RATE_VIOLATIONS
    error_window_ns: int = ERROR_WINDOW_NS


@dataclass(frozen=True, slots=True)
class Received:
    """The outcome of one message, in the order the terminal must get it: ``answer`` (an ERROR
    or REFUSED message), a snapshot of ``hydrate`` (iids, each once), ``ack``; then ``close``.
    Messages are wire payloads, not yet WebSocket-framed."""

    answer: bytes | None = None
    hydrate: tuple[int, ...] = ()
    ack: bytes | None = None
    close: Close | None = None


class Session:
    """One connection's request state; applies what it admits to the shared ``index``."""

    __slots__ = (
        "_bucket_ns",
        "_tokens",
        "conn_id",
        "expires_at_s",
        "index",
        "mistakes",
        "mistakes_since_ns",
        "rules",
    )

    def __init__(
        self,
        conn_id: int,
        rules: SessionRules,
        index: SubscriptionIndex,
        *,
        opened_ns: int,
        expires_at_s: float | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.rules = rules
        self.index = index
        self.expires_at_s = expires_at_s  # the token's ``exp`` (wall clock, s); None: no token
        self._tokens = float(rules.request_burst)
        self._bucket_ns = opened_ns
        self.mistakes = 0  # within the current error window
        self.mistakes_since_ns = opened_ns

    # -- the token -----------------------------------------------------------------------------
    def expires_in_s(self, wall_now_s: float) -> float | None:
        """Seconds until the token expires (0.0 once past); None for a session without one."""
        if self.expires_at_s is None:
            return None
        return max(0.0, self.expires_at_s - wall_now_s)

    def expire(self, wall_now_s: float) -> Close | None:
        """The close for an expired token (the terminal reconnects with a fresh one); None if
        the token is still good (a timer that fired early)."""
        left = self.expires_in_s(wall_now_s)
        if left is None or left > 0.0:
            return None
        return Disconnect.AUTH_EXPIRED.close()

    # -- requests ------------------------------------------------------------------------------
    def receive(self, message: str | bytes, now_ns: int) -> Received:
        rules = self.rules
        if isinstance(message, str):
            answer = self._error(ErrorCode.TEXT_NOT_ALLOWED, "binary messages only", 0, now_ns)
            return Received(answer=answer, close=TEXT_FRAME)
        if not self._rate_ok(now_ns):
            answer = self._error(ErrorCode.RATE_LIMITED, "too many requests: slow down", 0, now_ns)
            flood = self.mistakes > rules.max_rate_violations
            return Received(answer=answer, close=REQUEST_FLOOD if flood else None)
        try:
            request = decode_request(message)
        except RequestError as exc:
            answer = self._error(exc.code, exc.message, exc.req, now_ns)
            broken = self.mistakes > rules.max_bad_requests
            return Received(answer=answer, close=BAD_REQUESTS if broken else None)
        # Judged key by key: the keys that pass are applied, the others are named in REFUSED,
        # and the ACK that follows gives the counts after the request.
        cid = self.conn_id
        index = self.index
        ruling = judge(
            request,
            rules.ids,
            index.subscriptions(cid),
            index.priority(cid),
            max_subscriptions=rules.max_subscriptions,
            max_priority=rules.max_priority,
        )
        refused: bytes | None = None
        if ruling.refused:
            # Counted once per request and code: a request that refused some keys is one
            # mistake in the error window, however many keys it named.
            for code in {r.code for r in ruling.refused}:
                rules.errors[ErrorCode(code).name] += 1
            self._mistake(now_ns)
            refused = codec.encode_refused(request.req, ruling.refused)
        iids = ruling.iids  # each once: a snapshot never repeats a record
        hydrate: tuple[int, ...] = ()
        if not iids:
            pass  # everything refused: state as it was, and the ACK still closes the answer
        elif isinstance(request, Subscribe):
            # Every requested symbol is hydrated, held ones included: re-subscribing is how a
            # terminal that saw a gap asks for a fresh base (docs/wire.md).
            index.subscribe(cid, iids)
            hydrate = tuple(iids)
        elif isinstance(request, Unsubscribe):
            index.unsubscribe(cid, iids)
        else:
            index.set_priority(cid, iids, request.on)
        ack = codec.encode_ack(request.req, len(index.subscriptions(cid)), len(index.priority(cid)))
        return Received(answer=refused, hydrate=hydrate, ack=ack)

    def _rate_ok(self, now_ns: int) -> bool:
        rules = self.rules
        self._tokens = min(
            float(rules.request_burst),
            self._tokens + (now_ns - self._bucket_ns) * rules.requests_per_s / 1e9,
        )
        self._bucket_ns = now_ns
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _mistake(self, now_ns: int) -> None:
        if now_ns - self.mistakes_since_ns > self.rules.error_window_ns:
            self.mistakes_since_ns = now_ns
            self.mistakes = 0
        self.mistakes += 1

    def _error(self, code: ErrorCode, message: str, req: int, now_ns: int) -> bytes:
        self.rules.errors[code.name] += 1
        self._mistake(now_ns)
        return codec.encode_error(code, message, req)
