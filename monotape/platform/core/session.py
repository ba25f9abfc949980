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
  index: refused keys are named in REFUSED, the ACK gives the counts after the request;
- ``refresh``: the token is handed back to the driver (``Received.refresh``) to be verified off
  the event loop by the upgrade's verifier and cache; ``refreshed`` then judges the claims (same
  subject, no wider claims, a later ``exp``) and moves the session's expiry, or answers ERROR 11;
- ``report`` (the glass audit, core/glass.py): cumulative counts turned into increases, capped
  per connection, one accepted every 5 s;
- ``rate``: the terminal's max_hz, kept in the index's rate groups (core/fanout.py).
The token's expiry is judged on the wall clock (its ``exp``) and bounded on the monotonic one
(``EXPIRY_SLACK_NS``): the driver arms a timer where ``expiry_timer_s`` says and asks ``expire``.
Mistakes (errors and refusals) are counted per minute, not per lifetime: a desk open all week
must not be closed as a flood for mistakes spread over days.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from monotape.platform.core.disconnect import (
    BAD_REQUESTS,
    REQUEST_FLOOD,
    TEXT_FRAME,
    Close,
    auth_expired,
)
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.glass import (
    REPORT_CAP,
    REPORT_INTERVAL_NS,
    GlassLedger,
    GlassOffender,
)
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import (
    Rate,
    Refresh,
    Report,
    RequestError,
    Subscribe,
    Unsubscribe,
    decode_request,
    judge,
)

__all__ = [
    "ERROR_WINDOW_NS",
    "EXPIRY_RECHECK_S",
    "EXPIRY_SLACK_NS",
    "MAX_BAD_REQUESTS",
    "MAX_RATE_VIOLATIONS",
    "Grant",
    "Received",
    "Session",
    "SessionRules",
]

MAX_BAD_REQUESTS: Final = 50  # then closed with 1008: a client this broken is a bug
MAX_RATE_VIOLATIONS: Final = 200  # a subscribe flood that ignores RATE_LIMITED errors
ERROR_WINDOW_NS: Final = 60 * 1_000_000_000  # both limits count errors within one minute
# A token's ``exp`` is judged on the wall clock, which may be stepped back (NTP, an operator).
# So the session also keeps the monotonic time the wall clock said ``exp`` would come when the
# token was taken, and closes once the monotonic clock is this far past it, whatever the wall
# clock says: a wall clock stepped back again and again cannot keep a session alive forever.
EXPIRY_SLACK_NS: Final = 30 * 1_000_000_000
# A timer that fired before the wall clock reached ``exp`` looks again no sooner than this: a
# wall clock creeping back cannot turn the expiry timer into a busy loop (at most
# EXPIRY_SLACK_NS / EXPIRY_RECHECK_S re-arms; ``exp`` is in whole seconds anyway).
EXPIRY_RECHECK_S: Final = 1.0


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
    glass: GlassLedger = field(default_factory=GlassLedger)  # what terminals report
    rng: random.Random = field(default_factory=random.Random)  # the expired token's jitter


class Grant(Protocol):
    """What a verified token grants (``auth.Claims`` has these): all a refresh is judged on."""

    @property
    def sub(self) -> str: ...
    @property
    def exp(self) -> int: ...
    @property
    def admin(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Received:
    """The outcome of one message, in the order the terminal must get it: ``answer`` (an ERROR
    or REFUSED message), a snapshot of ``hydrate`` (iids, each once), ``ack``; then ``close``.
    Messages are wire payloads, not yet WebSocket-framed. ``refresh``: a token for the driver
    to verify off the loop, then hand to ``Session.refreshed`` (whose answer follows)."""

    answer: bytes | None = None
    hydrate: tuple[int, ...] = ()
    ack: bytes | None = None
    close: Close | None = None
    refresh: Refresh | None = None


class Session:
    """One connection's request state; applies what it admits to the shared ``index``."""

    __slots__ = (
        "_bucket_ns",
        "_counted",
        "_deadline_ns",
        "_regressing",
        "_reported",
        "_reported_ns",
        "_tokens",
        "admin",
        "conn_id",
        "expires_at_s",
        "index",
        "mistakes",
        "mistakes_since_ns",
        "rules",
        "subject",
    )

    def __init__(
        self,
        conn_id: int,
        rules: SessionRules,
        index: SubscriptionIndex,
        *,
        opened_ns: int,
        opened_wall_s: float | None = None,
        expires_at_s: float | None = None,
        subject: str | None = None,
        admin: bool = False,
    ) -> None:
        self.conn_id = conn_id
        self.rules = rules
        self.index = index
        self.expires_at_s = expires_at_s  # the token's ``exp`` (wall clock, s); None: no token
        # when the wall clock said ``exp`` would come, on the monotonic clock (EXPIRY_SLACK_NS)
        self._deadline_ns: int | None = None
        if expires_at_s is not None:
            if opened_wall_s is None:
                raise ValueError("a session with a token needs the wall clock at its open")
            self._deadline_ns = _deadline_ns(expires_at_s, opened_wall_s, opened_ns)
        self.subject = subject  # the token's ``sub``: a refresh must name the same one
        self.admin = admin  # a refresh must not widen it
        self._tokens = float(rules.request_burst)
        self._bucket_ns = opened_ns
        self.mistakes = 0  # within the current error window
        self.mistakes_since_ns = opened_ns
        # the glass audit: the last accepted report's cumulative counts, what was counted from
        # them (capped), when, and whether this terminal is already counted as regressing
        self._reported = (0, 0)
        self._counted = (0, 0)
        self._reported_ns: int | None = None
        self._regressing = False

    # -- the token -----------------------------------------------------------------------------
    def expires_in_s(self, wall_now_s: float) -> float | None:
        """Seconds until the token expires (0.0 once past); None for a session without one."""
        if self.expires_at_s is None:
            return None
        return max(0.0, self.expires_at_s - wall_now_s)

    def expiry_timer_s(
        self, wall_now_s: float, now_ns: int, *, early: bool = False
    ) -> float | None:
        """When the driver's expiry timer should fire: when the wall clock reaches ``exp``, or
        when the monotonic clock reaches the slack past the token's deadline, whichever comes
        first. ``early``: the timer fired before the wall clock reached ``exp`` (stepped back),
        so no sooner than EXPIRY_RECHECK_S. None for a session without a token."""
        left = self.expires_in_s(wall_now_s)
        if left is None or self._deadline_ns is None:
            return None
        bound = max(0.0, (self._deadline_ns + EXPIRY_SLACK_NS - now_ns) / 1e9)
        soonest = min(left, bound)
        return max(soonest, EXPIRY_RECHECK_S) if early else soonest

    def expire(self, wall_now_s: float, now_ns: int) -> Close | None:
        """The close for an expired token (the terminal reconnects with a fresh one, after a
        jittered hint): the wall clock has reached ``exp``, or the monotonic clock is
        EXPIRY_SLACK_NS past when the wall clock said it would. None if the token is still good
        (a timer that fired early, or a refresh moved the expiry)."""
        left = self.expires_in_s(wall_now_s)
        if left is None or self._deadline_ns is None:
            return None
        if left > 0.0 and now_ns - self._deadline_ns < EXPIRY_SLACK_NS:
            return None
        return auth_expired(self.rules.rng)

    def refreshed(self, req: int, grant: Grant | str, wall_now_s: float, now_ns: int) -> Received:
        """The answer to ``refresh`` once its token is verified: ``grant`` the verified claims,
        or the verifier's refusal reason. Taken (same subject, no wider claims, ``exp`` later
        than now): the expiry moves (the driver re-arms its timer) and the answer is ACK; else
        ERROR 11 TOKEN_REJECTED and the session keeps its current token."""
        if isinstance(grant, str):
            reason = grant
        elif self.subject is None:
            reason = "no token on this session"
        elif grant.sub != self.subject:
            reason = "another subject"
        elif grant.admin and not self.admin:
            reason = "wider claims"
        elif grant.exp <= wall_now_s:
            reason = "expired"
        else:
            self.expires_at_s = float(grant.exp)
            self._deadline_ns = _deadline_ns(grant.exp, wall_now_s, now_ns)
            return Received(ack=self._ack(req))
        error = self._error(ErrorCode.TOKEN_REJECTED, f"token rejected: {reason}", req, now_ns)
        return Received(answer=error)

    # -- requests ------------------------------------------------------------------------------
    def receive(self, message: str | bytes, now_ns: int, *, wall_s: float = 0.0) -> Received:
        """One message from the terminal; ``wall_s`` (the wall clock) only dates a report."""
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
        if isinstance(request, Refresh):
            if self.subject is None:  # nothing to verify it against: no work for the pool
                return self.refreshed(request.req, "no token on this session", wall_s, now_ns)
            return Received(refresh=request)
        if isinstance(request, Report):
            return self._report(request, now_ns, wall_s)
        if isinstance(request, Rate):
            return self._rate(request)
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
        return Received(answer=refused, hydrate=hydrate, ack=self._ack(request.req))

    def _ack(self, req: int) -> bytes:
        index, cid = self.index, self.conn_id
        return codec.encode_ack(req, len(index.subscriptions(cid)), len(index.priority(cid)))

    def _rate(self, request: Rate) -> Received:
        """Move the terminal to its rate group. Back to 25 Hz from a slower rate, the deltas
        that follow name the bases of the last frame, which it may have skipped: a snapshot of
        its subscriptions first gives it those bases (as a re-subscribe would)."""
        before = self.index.set_rate(self.conn_id, request.k)
        hydrate: tuple[int, ...] = ()
        if request.k == 1 and before != 1:
            hydrate = tuple(sorted(self.index.subscriptions(self.conn_id)))
        return Received(hydrate=hydrate, ack=self._ack(request.req))

    def _report(self, request: Report, now_ns: int, wall_s: float) -> Received:
        """The glass audit: the increase over the previous accepted report, capped at
        ``REPORT_CAP`` per connection's lifetime; a report going backwards is ignored (ACK, no
        count); one sooner than 5 s after the previous accepted one is RATE_LIMITED."""
        since = self._reported_ns
        if since is not None and now_ns - since < REPORT_INTERVAL_NS:
            answer = self._error(
                ErrorCode.RATE_LIMITED, "one report every 5 s", request.req, now_ns
            )
            return Received(answer=answer)
        self._reported_ns = now_ns
        glass = self.rules.glass
        glass.reports += 1
        regressions, gaps = request.regressions, request.gaps
        (held_r, held_g), (counted_r, counted_g) = self._reported, self._counted
        if regressions < held_r or gaps < held_g:
            return Received(ack=self._ack(request.req))  # backwards: a bug, or a lie
        self._reported = (regressions, gaps)
        add_r = min(regressions - held_r, REPORT_CAP - counted_r)
        add_g = min(gaps - held_g, REPORT_CAP - counted_g)
        self._counted = (counted_r + add_r, counted_g + add_g)
        glass.regressions += add_r
        glass.gaps += add_g
        if regressions > 0 and not self._regressing:
            self._regressing = True
            glass.terminals += 1
        if regressions > held_r:
            last = request.last
            glass.last = GlassOffender(
                conn_id=self.conn_id,
                subject=self.subject,
                key=last[0] if last is not None else None,
                held=(last[1], last[2]) if last is not None else None,
                got=(last[3], last[4]) if last is not None else None,
                regressions=regressions,
                wall_s=wall_s,
            )
        return Received(ack=self._ack(request.req))

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


def _deadline_ns(exp_s: float, wall_now_s: float, now_ns: int) -> int:
    """The monotonic time the wall clock (read at ``now_ns``) says ``exp_s`` comes."""
    return now_ns + round((exp_s - wall_now_s) * 1e9)
