"""Per-terminal budgets for what a terminal makes the server write without asking for data.

A request (subscribe, unsubscribe, priority) is rate-limited where it is answered. Control frames
were not: websockets answers every ping with a pong written straight to the transport, outside the
outbox, so a terminal that floods pings and never reads grew the server's buffer for it without
bound (measured: 102 -> 681 MB RSS in 20 s, every other terminal down from 25 to 2-3 frames/s),
and escaped both the keepalive timeout (it answers) and the slow-consumer kick (which watched the
ring of data frames only). Two budgets close that hole:

- a rate: control frames received (pings and pongs), a token bucket per terminal;
- a bound on the bytes queued for the terminal: the transport's write buffer (pongs included)
  plus the frames waiting in its outbox.

A terminal over either is closed with 1008 and a named teardown reason (``Overrun``). Pure state
machines on an injected clock: the asyncio side (``monotape.platform.server.control``) feeds them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["ControlBudget", "ControlLimits", "Overrun"]


class Overrun(enum.Enum):
    """Why a terminal was closed for its budget: the value is the teardown reason (the label of
    ``monotape_disconnects_total``); ``close_reason`` the text the terminal gets with 1008."""

    CONTROL_FLOOD = "control_flood"
    QUEUED_BYTES = "queued_bytes"

    @property
    def close_reason(self) -> str:
        if self is Overrun.CONTROL_FLOOD:
            return "control frame flood (pings/pongs over budget)"
        return "too many bytes queued: the terminal is not reading"


@dataclass(frozen=True, slots=True)
class ControlLimits:
    """The budgets every terminal gets (``server.control_frames_per_s``,
    ``server.control_frames_burst``, ``server.max_queued_bytes``)."""

    frames_per_s: float
    burst: int
    max_queued_bytes: int

    def __post_init__(self) -> None:
        if not self.frames_per_s > 0 or self.burst < 1 or self.max_queued_bytes < 1:
            raise ValueError(
                "need control frames_per_s > 0, burst >= 1 and max_queued_bytes >= 1, got "
                f"{self.frames_per_s}, {self.burst}, {self.max_queued_bytes}"
            )

    def over_queued(self, queued_bytes: int) -> bool:
        return queued_bytes > self.max_queued_bytes


class ControlBudget:
    """One terminal's control-frame bucket: ``burst`` at once, ``frames_per_s`` sustained.

    A legitimate terminal sends a pong per keepalive ping (one per 20 s), one per glass ping
    (every 5 s, a sampled 0.5%) and its own library's keepalive pings (websockets: one per 20 s);
    the default budget (10/s, burst 50) is two orders of magnitude above that."""

    __slots__ = ("_tokens", "_ts", "limits", "spent")

    def __init__(self, limits: ControlLimits, now_ns: int) -> None:
        self.limits = limits
        self._tokens = float(limits.burst)
        self._ts = now_ns
        self.spent = 0  # control frames charged, total

    def take(self, now_ns: int) -> bool:
        """Charge one control frame; False when the bucket is empty (the terminal is over)."""
        limits = self.limits
        if now_ns > self._ts:
            self._tokens = min(
                float(limits.burst), self._tokens + (now_ns - self._ts) * limits.frames_per_s / 1e9
            )
            self._ts = now_ns
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        self.spent += 1
        return True

    @property
    def tokens(self) -> float:
        return self._tokens
