"""The embedded dashboards' memory: the node's own metrics, sampled once a second into a
bounded ring (no Prometheus needed on a laptop).

``SampleRing`` is a pure store (values in, arrays out, the time passed in); ``run_sampler`` is
its thin asyncio driver. Only the sample names the panels read are kept, and the number of
series is capped (``max_series``; what falls off is counted in ``dropped_series`` and logged
once as ``dashboard_series_capped``), so the ring is fixed memory: one float64 column per
series, ``capacity`` rows (an hour at 1 s, ~29 KB a series). numpy arrays are untracked by the
garbage collector: the ring adds nothing to walk.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

import numpy as np
from prometheus_client.registry import CollectorRegistry

from monotape.clock import Clock
from monotape.log import log_event
from monotape.metric_names import EVENT_LOOP_LAG_MAX

__all__ = [
    "HISTORY_S",
    "MAX_SERIES",
    "SAMPLE_PERIOD_S",
    "LoopLag",
    "SampleRing",
    "SeriesKey",
    "collect_samples",
    "run_sampler",
    "sample_registry",
]


class LoopLag(Protocol):
    """What the sampler needs of the node's loop-lag monitor (``server/looplag.py``): the
    scrape's running maximum, and a second maximum only the sampler resets. A protocol, so the
    dashboards never import the server they observe."""

    max_ns: int

    def take_sample_max(self) -> int: ...


SAMPLE_PERIOD_S = 1.0
HISTORY_S = 3600  # the widest window the page offers
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # sample name, sorted labels
# A default node (6 venues, 2 handlers each) fills 262 series: 135 stage-duration buckets
# (9 stages x 15 bounds), 36 stage quantiles, 48 feed series (4 per handler), the rest a few
# each. 512 leaves room for rejected-tick reasons, failure stages and a few more venues, and
# bounds the ring at 512 x 3,600 rows x 8 B = ~15 MB.
MAX_SERIES = 512


class SampleRing:
    def __init__(
        self, names: Iterable[str], *, capacity: int = HISTORY_S, max_series: int = MAX_SERIES
    ) -> None:
        if capacity < 2 or max_series < 1:
            raise ValueError("capacity must be >= 2 and max_series >= 1")
        self.names = frozenset(names)
        self.capacity = capacity
        self.max_series = max_series
        self.dropped_series = 0  # samples of series refused at the cap, every scrape
        self._t = np.full(capacity, np.nan)
        self._cols: dict[SeriesKey, np.ndarray] = {}
        self._n = 0  # samples recorded since start

    def __len__(self) -> int:
        return min(self._n, self.capacity)

    def record(self, t_s: float, samples: Iterable[tuple[str, Mapping[str, str], float]]) -> None:
        """One scrape at wall time ``t_s``: series absent from it read NaN at that row."""
        i = self._n % self.capacity
        self._t[i] = t_s
        for col in self._cols.values():
            col[i] = np.nan
        for name, labels, value in samples:
            if name not in self.names:
                continue
            key: SeriesKey = (name, tuple(sorted(labels.items())))
            if key not in self._cols:
                if len(self._cols) >= self.max_series:
                    if not self.dropped_series:  # the first time: one line, not one a second
                        log_event(
                            "dashboard_series_capped",
                            level="warning",
                            max_series=self.max_series,
                            first_dropped=name,
                        )
                    self.dropped_series += 1
                    continue
                self._cols[key] = np.full(self.capacity, np.nan)
            self._cols[key][i] = value
        self._n += 1

    def window(
        self, start_s: float, end_s: float, names: Collection[str] | None = None
    ) -> tuple[np.ndarray, dict[SeriesKey, np.ndarray]]:
        """Rows with ``start_s <= t <= end_s``, oldest first: their times and every series (or
        only the series of sample ``names``: a dashboard copies what it draws, no more)."""
        n = len(self)
        order = (
            np.arange(n)
            if self._n <= self.capacity
            else np.roll(np.arange(self.capacity), -(self._n % self.capacity))
        )
        t = self._t[order]
        keep = order[(t >= start_s) & (t <= end_s)]
        cols = self._cols.items()
        if names is not None:
            return self._t[keep], {k: col[keep] for k, col in cols if k[0] in names}
        return self._t[keep], {k: col[keep] for k, col in cols}

    @property
    def last_t(self) -> float:
        return float(self._t[(self._n - 1) % self.capacity]) if self._n else math.nan


def collect_samples(
    registry: CollectorRegistry, loop_lag: LoopLag | None = None
) -> list[tuple[str, Mapping[str, str], float]]:
    """Every sample of ``registry``, read without stealing from the /metrics scrape: the
    event-loop lag's "max since the previous scrape" is handed back to the monitor (a
    Prometheus scrape still sees the largest lag since its own previous scrape), and the ring
    gets the largest lag since the previous sample from the monitor's second reader."""
    held = loop_lag.max_ns if loop_lag is not None else 0
    out: list[tuple[str, Mapping[str, str], float]] = [
        (s.name, s.labels, s.value) for family in registry.collect() for s in family.samples
    ]
    if loop_lag is not None:
        loop_lag.max_ns = max(loop_lag.max_ns, held)
        own = loop_lag.take_sample_max() / 1e9
        out = [(n, lb, own if n == EVENT_LOOP_LAG_MAX else v) for n, lb, v in out]
    return out


async def run_sampler(
    ring: SampleRing,
    sample: Callable[[], Iterable[tuple[str, Mapping[str, str], float]]],
    wall_s: Callable[[], float],
    period_s: float = SAMPLE_PERIOD_S,
) -> None:
    """Record a sample every ``period_s`` until cancelled (a failed scrape is skipped: the
    dashboards must never take the node down)."""
    failures = 0
    while True:
        try:
            ring.record(wall_s(), sample())
        except Exception as exc:  # a collector raising must not end the history
            failures += 1
            if failures == 1 or failures % 600 == 0:  # once, then every ~10 minutes
                log_event("dashboard_sample_failed", failures=failures, error=repr(exc))
        await asyncio.sleep(period_s)


async def sample_registry(
    ring: SampleRing,
    registry: CollectorRegistry,
    clock: Clock,
    loop_lag: LoopLag | None = None,
    period_s: float = SAMPLE_PERIOD_S,
) -> None:
    """The node's sampler task: ``registry`` into ``ring`` every ``period_s``, dated by the
    wall clock (the GC pauses drawn over the panels are dated by the same clock)."""
    await run_sampler(
        ring,
        lambda: collect_samples(registry, loop_lag),
        lambda: clock.wall_ns() / 1e9,
        period_s,
    )
