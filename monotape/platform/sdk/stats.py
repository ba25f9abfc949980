"""The terminal's counters: the screen's (``view.ViewStats``) plus its connections' and requests'.

One object, ``client.stats``, so a dashboard or a test reads every counter in one place
(docs/sdk.md, "Stats"). The view, the intent and the driver each write their own fields.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from monotape.platform.sdk.view import ViewStats

__all__ = ["HISTORY", "SdkStats"]

HISTORY: Final = 100  # per-attempt timings kept in the stats lists


@dataclass
class SdkStats(ViewStats):
    """The view's counters (rendering and ordering) plus the connection's (docs/sdk.md)."""

    errors: int = 0  # server ERRORs and undecodable messages
    refused_keys: int = 0  # keys of our requests the server refused (REFUSED), each with why
    dropped_updates: int = 0  # iterator queue overflow (the view stays exact)
    error_log: deque[str] = field(default_factory=lambda: deque(maxlen=32))
    # -- connection lifecycle (docs/sdk.md, "Stats") -----------------------------------------
    connects: int = 0  # connections that got a hello
    reconnects: int = 0  # of which after the first
    refused_503: int = 0  # upgrades refused with 503 (draining / over the admission rate)
    refused_401: int = 0  # upgrades refused with 401 (bad or expired token)
    connect_errors: int = 0  # any other failed attempt (refused socket, timeout, no hello)
    closes: int = 0  # connections that ended (not by our close())
    closes_with_hint: int = 0  # ... whose close carried reconnect_after_ms
    last_close_code: int | None = None
    last_close_hint_ms: int | None = None
    resubscribed: int = 0  # keys re-subscribed on reconnects
    # -- the session's own requests (docs/sdk.md, "Frequency, token refresh, glass report") --
    rate_refused: int = 0  # connections whose node refused max_hz (an older node: 25 Hz)
    refreshes: int = 0  # fresh tokens the node took on the open connection
    refresh_failures: int = 0  # refused (TOKEN_REJECTED), unanswered, or the callback failed
    glass_reports: int = 0  # glass reports the node accepted
    backoff_attempt: int = 0  # the backoff exponent of the next wait (0 after a stable connection)
    last_backoff_s: float = 0.0
    connect_seconds: float | None = None  # latest connection: attempt start -> hello
    first_frame_seconds: float | None = None  # latest connection: hello -> first FRAME
    connect_seconds_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    first_frame_seconds_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    # (attempt, delay_s, why) of each wait; why (a reconnect.WaitReason): close, 503, 401, error
    backoff_history: deque[tuple[int, float, str]] = field(
        default_factory=lambda: deque(maxlen=HISTORY)
    )
