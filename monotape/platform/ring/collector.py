"""The ring's plain-int counters at scrape time (prometheus_client custom collectors): the
producer's in the sequencer process, each reader's (``writer`` label) in the writer processes.
Names in ``metric_names`` (``RING_*``); docs/ring.md, Counters."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.metric_families import counter_family as _counter
from monotape.platform.ring.protocol import ProducerCounters, ReaderCounters

__all__ = ["RingProducerCollector", "RingReaderCollector"]


class RingProducerCollector(Collector):
    """``monotape_ring_{published,oversize,ages_dropped,bells_dropped,snapshots_refused}_total``."""

    def __init__(self, counters: Callable[[], ProducerCounters]) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        c = self._counters()
        yield _counter(m.RING_PUBLISHED, "Entries published on the frame ring.", c.published)
        yield _counter(
            m.RING_OVERSIZE,
            "Frames larger than a ring slot, published as a gap (every writer snapshots).",
            c.oversize,
        )
        yield _counter(
            m.RING_AGES_DROPPED,
            "Frames published without their tick ages (too large with them): no tick_to_write.",
            c.ages_dropped,
        )
        yield _counter(
            m.RING_BELLS_DROPPED,
            "Doorbell wake-ups dropped: the reader's queue was full (stopped or behind) or gone.",
            c.bells_dropped,
        )
        yield _counter(
            m.RING_SNAPSHOTS_REFUSED,
            "Snapshot-table puts refused: chunk too large or iid past the table.",
            c.snapshots_refused,
        )


class RingReaderCollector(Collector):
    """``monotape_ring_{laps,missed_entries,torn_reads,gaps}_total{writer}`` for the readers
    ``readers()`` returns (writer label -> counters)."""

    def __init__(self, readers: Callable[[], Mapping[str, ReaderCounters]]) -> None:
        self._readers = readers

    def collect(self) -> Iterator[Metric]:
        laps = CounterMetricFamily(
            m.counter_base(m.RING_LAPS), "Times a writer was lapped by the ring.", labels=["writer"]
        )
        missed = CounterMetricFamily(
            m.counter_base(m.RING_MISSED), "Ring entries lost to laps.", labels=["writer"]
        )
        torn = CounterMetricFamily(
            m.counter_base(m.RING_TORN_READS),
            "Laps found by the re-check after a copy (overwritten while read).",
            labels=["writer"],
        )
        gaps = CounterMetricFamily(
            m.counter_base(m.RING_GAPS),
            "Gap entries (oversize frames) and producer restarts a writer saw.",
            labels=["writer"],
        )
        for writer, c in sorted(self._readers().items()):
            laps.add_metric([writer], c.laps)
            missed.add_metric([writer], c.missed)
            torn.add_metric([writer], c.torn)
            gaps.add_metric([writer], c.gaps)
        yield laps
        yield missed
        yield torn
        yield gaps
