"""The monitor: runs every invariant on a schedule, keeps the latest results, logs transitions.

A Sans-I/O core (``run_once``: synchronous, no awaits) and a thin asyncio driver
(``run_forever``) that only sleeps between checks (STYLE: the websockets anchor). Checks run on
the event loop between frames, never per frame: at 6,000 connections x 20 subscriptions the
whole pass costs about a millisecond every 30 s (bench/micro/bench_invariants.py).

A trip is logged once, as one structured line, when an invariant goes from holding to failing
(``invariant_tripped``), and once more when it holds again (``invariant_recovered``): never one
line per check, so a 60-hour leak is one line in the log, not 7,200.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from monotape.clock import Clock, SystemClock
from monotape.invariants.checks import Invariant, InvariantResult
from monotape.log import log_event

__all__ = ["DEFAULT_INTERVAL_S", "InvariantMonitor"]

DEFAULT_INTERVAL_S = 30.0  # design (Observability): "Invariants, every 30 s"


class InvariantMonitor:
    """Runs ``invariants`` every ``interval_s``; ``results`` holds the latest result per name.

    ``on_trip`` is called with the failing result on every ok -> failing transition (a hook for
    the node, e.g. to dump the index; it must not raise, and if it does the error is logged).

    ``on_failure`` is told of every check that raised, and of a pass that raised outside a
    check, with the invariant's name (``"*"`` for the pass): the node counts them in
    ``monotape_stage_failures_total{stage="invariants"}`` and logs them rate-limited. A check
    that raised reads as failing (it cannot vouch for its invariant); the loop goes on.
    """

    def __init__(
        self,
        invariants: Iterable[Invariant],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Clock | None = None,
        on_trip: Callable[[InvariantResult], None] | None = None,
        on_failure: Callable[[str, Exception], None] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.invariants: list[Invariant] = list(invariants)
        names = [inv.name for inv in self.invariants]
        if len(set(names)) != len(names):
            raise ValueError(f"invariant names must be unique, got {names}")
        self.interval_s = interval_s
        self.clock: Clock = clock or SystemClock()
        self.on_trip = on_trip
        self.on_failure = on_failure
        self.results: dict[str, InvariantResult] = {}
        self.trips: dict[str, int] = dict.fromkeys(names, 0)
        self.runs = 0

    # -- the core ------------------------------------------------------------------------------
    def run_once(self) -> list[InvariantResult]:
        """Check every invariant now; update ``results``; log and report transitions."""
        out = [self._check(inv) for inv in self.invariants]
        for result in out:
            previous = self.results.get(result.name)
            self.results[result.name] = result
            was_ok = previous is None or previous.ok  # first check failing is a trip too
            if was_ok and not result.ok:
                self._tripped(result)
            elif not was_ok and result.ok:
                log_event(
                    "invariant_recovered",
                    invariant=result.name,
                    expected=result.expected,
                    actual=result.actual,
                )
        self.runs += 1
        return out

    def _check(self, inv: Invariant) -> InvariantResult:
        started = self.clock.now_ns()
        try:
            return inv.check()
        except Exception as exc:  # a check that cannot run is a failed check, not a dead loop
            self._failed(inv.name, exc)
            return InvariantResult(
                name=inv.name,
                ok=False,
                expected=0,
                actual=-1,
                offending=[f"check raised {exc!r}"[:200]],
                checked_at_ms=self.clock.wall_ns() // 1_000_000,
                duration_us=max(0, self.clock.now_ns() - started) // 1_000,
            )

    def _failed(self, name: str, exc: Exception) -> None:
        if self.on_failure is not None:
            try:
                self.on_failure(name, exc)
            except Exception as hook_exc:  # the hook must not take the checks down either
                log_event("invariant_on_failure_failed", level="error", error=repr(hook_exc))

    def _tripped(self, result: InvariantResult) -> None:
        self.trips[result.name] = self.trips.get(result.name, 0) + 1
        log_event(
            "invariant_tripped",
            level="error",
            invariant=result.name,
            expected=result.expected,
            actual=result.actual,
            offending=result.offending,
        )
        if self.on_trip is not None:
            try:
                self.on_trip(result)
            except Exception as exc:
                log_event("invariant_on_trip_failed", level="error", error=repr(exc))

    @property
    def ok(self) -> bool:
        """True when every invariant held at its latest check (and there has been one)."""
        return bool(self.results) and all(r.ok for r in self.results.values())

    def report(self) -> dict[str, Any]:
        """The JSON body of ``GET /admin/invariants``."""
        return {
            "ok": self.ok,
            "interval_s": self.interval_s,
            "runs": self.runs,
            "trips": dict(self.trips),
            "results": [msgspec.to_builtins(r) for r in self.results.values()],
        }

    # -- the driver ----------------------------------------------------------------------------
    async def run_forever(self) -> None:
        """Check at once (so the metric exists from start), then every ``interval_s``."""
        while True:
            try:
                self.run_once()
            except Exception as exc:  # outside any one check (a log sink, a hook): next pass
                self._failed("*", exc)
            await asyncio.sleep(self.interval_s)
