"""Contained failures: counted, logged once in a while, never fatal to a stage loop.

One bad frame, symbol or batch must not take the tape down (issue 10: a single out-of-range
value killed the frame loop, disconnected every terminal and the node exited 1). A stage loop
catches what one iteration raised, hands it here and carries on. Counts are plain ints (read at
scrape time as ``monotape_stage_failures_total{stage}``); logs are throttled per key, because a
failure that repeats every 40 ms frame would otherwise write 25 lines a second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monotape.log import log_event

__all__ = ["LOG_EVERY_S", "StageFailures", "Throttle"]

LOG_EVERY_S = 10.0  # one line per key per 10 s, carrying how many were not logged since

LogFn = Callable[..., None]


class Throttle:
    """Lets one event per key through every ``every_ns``; counts the ones it held back.

    A state machine: the caller passes the (monotonic) time in."""

    def __init__(self, every_ns: int) -> None:
        if every_ns < 0:
            raise ValueError(f"every_ns must be >= 0, got {every_ns}")
        self.every_ns = every_ns
        self._last: dict[str, int] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str, now_ns: int) -> int | None:
        """None: hold this one back. Otherwise let it through; the int is how many events of
        ``key`` were held back since the last one let through."""
        last = self._last.get(key)
        if last is not None and now_ns - last < self.every_ns:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now_ns
        return self._held.pop(key, 0)


class StageFailures:
    """What each stage's contained failures came to: ``counts[stage]``, logged throttled."""

    def __init__(
        self,
        now_ns: Callable[[], int],
        *,
        every_s: float = LOG_EVERY_S,
        log: LogFn = log_event,
    ) -> None:
        self.counts: dict[str, int] = {}
        self._now_ns = now_ns
        self._throttle = Throttle(int(every_s * 1e9))
        self._log = log

    def record(self, stage: str, exc: BaseException, **context: Any) -> None:
        """Count one failure of ``stage``; log it unless one was logged recently."""
        self.counts[stage] = self.counts.get(stage, 0) + 1
        held = self._throttle.allow(stage, self._now_ns())
        if held is not None:
            self._log(
                "stage_failed",
                level="error",
                stage=stage,
                error=repr(exc),
                not_logged_since=held,
                total=self.counts[stage],
                **context,
            )
