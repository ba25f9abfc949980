"""When a terminal sends a fresh token on its open connection, Sans-I/O: the refresh schedule.

Without it a session closes when its token expires and the terminal reconnects and re-hydrates
every token lifetime; tokens minted together at the open expire together, a storm on a timer.
With a ``refresh_token`` callback the terminal asks for a fresh token at a jittered point
between 60% and 85% of the current token's remaining lifetime and sends it as ``refresh``
(docs/wire.md): the node verifies it and moves the session's expiry, the connection stays.

The token's ``exp`` is read from its payload *without verifying it*: the terminal holds no key
(the node verifies what it is sent), and only needs to know when to ask. A token without a
readable ``exp`` (not a JWT, or no expiry) schedules nothing.

The node refusing a fresh token (ERROR 11 TOKEN_REJECTED) or the callback failing is retried
once, ``RETRY_AFTER_NS`` later; then the token is let expire: the node closes the session with a
jittered reconnect hint and the reconnect brings a token (``client.py``). ``upkeep.py`` is the
asyncio driver: it sleeps until ``due_ns`` and reports back what happened.
"""

from __future__ import annotations

import math
from typing import Final

import jwt

from monotape.clock import Clock
from monotape.platform.sdk.reconnect import RandomSource

__all__ = ["EARLIEST", "LATEST", "RETRIES", "RETRY_AFTER_NS", "RefreshPlan", "token_expiry"]

# The share of the remaining lifetime at which the refresh is due, drawn uniformly per token:
# late enough not to churn tokens, early enough that a retry still lands before expiry.
EARLIEST: Final = 0.60
LATEST: Final = 0.85
RETRY_AFTER_NS: Final = 10_000_000_000  # a refused or failed refresh is tried once more, 10 s on
RETRIES: Final = 1


def token_expiry(token: str) -> float | None:
    """The token's ``exp`` (wall-clock seconds since the epoch), read WITHOUT verifying the
    signature (PyJWT, ``verify_signature`` off, which turns off every other check too); None
    when the token is not a JWT or carries no finite numeric ``exp``."""
    try:
        payload = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp = payload.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp):
        return None
    return float(exp)


class RefreshPlan:
    """The refresh of one terminal's token: when it is due, and what a success or a failure
    changes. Values in (a token, the answer), a deadline out (``due_ns``, monotonic); the clock
    and the random source are injected.

    ``start`` on each connection (with the token it opened with) and after each accepted
    refresh (with the new one); ``begin`` when the driver acts on the deadline; ``failed`` on a
    refusal or a callback failure; ``stop`` when the connection ends: nothing is due between
    connections, and an answer that arrives after the end schedules nothing.
    """

    def __init__(self, clock: Clock, rng: RandomSource) -> None:
        self.clock = clock
        self.rng = rng
        self.due_ns: int | None = None  # monotonic ns the next refresh is due; None: none is
        self.retries_left = RETRIES
        self.live = False  # a connection is open (between start and stop)

    def start(self, token: str) -> int | None:
        """``token`` is the session's now: the refresh is due at a jittered 60-85% of its
        remaining lifetime. None when nothing can be scheduled (no ``exp``, or already past:
        the node closes the session and the reconnect brings a token)."""
        self.live = True
        self.retries_left = RETRIES
        self.due_ns = None
        exp = token_expiry(token)
        if exp is None:
            return None
        left_ns = exp * 1e9 - self.clock.wall_ns()
        if left_ns <= 0:
            return None
        # A source may round past its bounds (random.uniform can return b): the window holds.
        share = min(max(self.rng.uniform(EARLIEST, LATEST), EARLIEST), LATEST)
        self.due_ns = self.clock.now_ns() + int(left_ns * share)
        return self.due_ns

    def begin(self) -> None:
        """The driver is asking for a fresh token now: nothing else is due until it answers."""
        self.due_ns = None

    def accepted(self, token: str) -> int | None:
        """The node took ``token``: the next refresh is scheduled from its lifetime."""
        if not self.live:
            return None
        return self.start(token)

    def failed(self) -> int | None:
        """The node refused the token (TOKEN_REJECTED), the answer never came, or the callback
        failed: one retry ``RETRY_AFTER_NS`` from now, then nothing (the token is let expire)."""
        self.due_ns = None
        if not self.live or self.retries_left <= 0:
            return None
        self.retries_left -= 1
        self.due_ns = self.clock.now_ns() + RETRY_AFTER_NS
        return self.due_ns

    def stop(self) -> None:
        """The connection ended (or the terminal closed): nothing is due, and a late answer
        schedules nothing."""
        self.live = False
        self.due_ns = None
