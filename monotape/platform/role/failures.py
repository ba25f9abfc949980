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

from monotape.log import LOG_EVERY_S, LogFn, Throttle, log_event

__all__ = ["StageFailures"]


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
