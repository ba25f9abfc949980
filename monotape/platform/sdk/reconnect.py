"""When a terminal tries again, Sans-I/O: the reconnect policy, with an injected random source.

design (Connections): close frames carry ``reconnect_after_ms``; a drain closes 2% of
connections every 250 ms with staggered hints; SDKs back off with full jitter and honour
Retry-After and ``reconnect_after_ms``. Thousands of terminals reconnect inside 1-2 s at the
open: without jitter they would all come back in the same instant and be refused together.

``next_delay`` is the decision for one wait (the load generator's terminals use it too);
``ReconnectPolicy`` keeps the attempt count between waits and names why each wait happened.
``client.py`` only sleeps for what it answers.
"""

from __future__ import annotations

import email.utils
import re
import time
from enum import StrEnum
from typing import Final, Protocol

import msgspec

__all__ = [
    "MAX_HINT_S",
    "RandomSource",
    "ReconnectPolicy",
    "Wait",
    "WaitReason",
    "hint_from_reason",
    "next_delay",
    "parse_retry_after",
]

MAX_HINT_S: Final = 600.0  # a server hint (or Retry-After) longer than this is clamped
_MAX_EXP: Final = 62  # 2**attempt beyond this is past any cap; avoids float overflow
_HINT_RE: Final = re.compile(r"reconnect_after_ms=(\d+)")


class RandomSource(Protocol):
    """Where the jitter comes from (``random.Random`` is one): seed it for reproducible tests."""

    def uniform(self, a: float, b: float) -> float: ...


def next_delay(
    attempt: int,
    hint_ms: int | None,
    retry_after_s: float | None,
    base: float,
    cap: float,
    rng: RandomSource,
    *,
    unauthorized: bool = False,
) -> float:
    """Seconds to wait before connection attempt ``attempt + 1``.

    The longest of: the server's ``reconnect_after_ms`` hint, an HTTP 503's Retry-After, and a
    full-jitter exponential backoff ``uniform(0, min(cap, base * 2**attempt))``. Hints are
    honoured above the cap (the server knows its own load) but clamped to ``MAX_HINT_S``.
    ``unauthorized`` (HTTP 401): retrying soon cannot help, so wait at the cap
    (``uniform(cap / 2, cap)``: still jittered, so expired desks do not come back in lockstep).
    """
    attempt = min(max(0, attempt), _MAX_EXP)
    base = max(0.0, base)
    cap = max(0.0, cap)
    floor = 0.0
    if hint_ms is not None and hint_ms > 0:
        floor = min(hint_ms / 1000.0, MAX_HINT_S)
    if retry_after_s is not None and retry_after_s > 0:
        floor = max(floor, min(float(retry_after_s), MAX_HINT_S))
    if unauthorized:
        backoff = rng.uniform(cap / 2, cap)
    else:
        backoff = rng.uniform(0.0, min(cap, base * 2.0**attempt))
    # A source may round past its bounds (random.uniform can return b): the cap is a promise.
    return max(floor, min(max(0.0, backoff), cap))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, against ``now`` (Unix
    seconds; the wall clock if None); None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def hint_from_reason(reason: str | None) -> int | None:
    """The ``reconnect_after_ms=N`` the server puts in its WebSocket close reason."""
    if not reason:
        return None
    m = _HINT_RE.search(reason)
    return int(m.group(1)) if m else None


class WaitReason(StrEnum):
    """Why the terminal waits before its next attempt (docs/sdk.md, ``backoff_history``)."""

    CLOSE = "close"  # a connection that got its hello ended (drain, restart, reset, kick)
    REFUSED = "503"  # the upgrade was refused with 503: draining, or over the admission rate
    UNAUTHORIZED = "401"  # the token was refused: bad or expired
    ERROR = "error"  # anything else: refused socket, timeout, no hello, another HTTP status


class Wait(msgspec.Struct, frozen=True, gc=False):
    """One wait: the attempt it was computed for, how long, and why."""

    attempt: int
    delay_s: float
    why: WaitReason


class ReconnectPolicy:
    """The attempt count between waits, and the wait after each way an attempt can end.

    ``attempt`` counts consecutive waits and goes back to 0 after a connection that got a hello
    and stayed up ``stable_after_s``: a terminal drained after an hour comes back after its
    hint alone, while one refused again and again spreads out (0.25, 0.5, 1, 2, 4 s ... up to
    the cap, each fully jittered).
    """

    def __init__(
        self,
        *,
        base_s: float = 0.25,
        cap_s: float = 15.0,
        stable_after_s: float = 1.0,
        rng: RandomSource,
    ) -> None:
        if base_s < 0 or cap_s < 0:
            raise ValueError("backoff_base_s and backoff_cap_s must be >= 0")
        self.base_s = base_s
        self.cap_s = cap_s
        self.stable_after_s = stable_after_s
        self.attempt = 0  # the backoff exponent of the next wait
        self._rng = rng

    def refused(self, status: int, retry_after_s: float | None) -> Wait:
        """The upgrade was answered with HTTP ``status`` (and maybe a Retry-After)."""
        if status == 503:
            why = WaitReason.REFUSED
        elif status == 401:
            why = WaitReason.UNAUTHORIZED
        else:
            why = WaitReason.ERROR
        return self._wait(why, None, retry_after_s)

    def failed(self) -> Wait:
        """No connection: a refused socket, a timeout, a failed handshake."""
        return self._wait(WaitReason.ERROR, None, None)

    def ended(self, up_s: float | None, hint_ms: int | None) -> Wait:
        """A connection ended, not by the terminal: ``up_s`` seconds after its hello (None:
        it never got one), with the close's ``reconnect_after_ms`` hint if it carried one."""
        if up_s is None:
            return self._wait(WaitReason.ERROR, hint_ms, None)
        if up_s >= self.stable_after_s:
            self.attempt = 0
        return self._wait(WaitReason.CLOSE, hint_ms, None)

    def _wait(self, why: WaitReason, hint_ms: int | None, retry_after_s: float | None) -> Wait:
        delay = next_delay(
            self.attempt,
            hint_ms,
            retry_after_s,
            self.base_s,
            self.cap_s,
            self._rng,
            unauthorized=why is WaitReason.UNAUTHORIZED,
        )
        wait = Wait(self.attempt, delay, why)
        self.attempt += 1
        return wait
