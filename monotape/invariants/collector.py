"""Scrape-time export of the latest invariant results (prometheus_client custom Collector).

Reads ``InvariantMonitor.results``; never runs a check itself, so a scrape costs nothing and a
burst of scrapes cannot turn the 30 s schedule into a hot loop.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.invariants.monitor import InvariantMonitor

__all__ = ["InvariantCollector"]


class InvariantCollector(Collector):
    def __init__(self, monitor: InvariantMonitor) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        violation = GaugeMetricFamily(
            m.INVARIANT_VIOLATION,
            "1 when the invariant failed at its latest check, 0 when it held",
            labels=["invariant"],
        )
        seconds = GaugeMetricFamily(
            m.INVARIANT_CHECK_SECONDS,
            "Duration of the invariant's latest check",
            labels=["invariant"],
        )
        for name, result in sorted(self._monitor.results.items()):
            violation.add_metric([name], 0.0 if result.ok else 1.0)
            seconds.add_metric([name], result.duration_us / 1e6)
        yield violation
        yield seconds
