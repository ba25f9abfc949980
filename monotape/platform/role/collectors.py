"""Every Prometheus collector of the node, in one place (prometheus_client custom Collectors).

The hot path counts in plain ints (``Counter.inc`` ~0.5 µs, ``Histogram.observe`` ~0.7 µs are
too slow per tick, measured); these turn the counts into metric families only when /metrics is
read. The pieces they read (sequencer, histograms, invariants, loop-lag monitor) import no
prometheus_client: exporting is the node's business, so core stays Sans-I/O.

They run on the scrape's thread, not the event loop's: a role of the host serves /metrics from
a thread (host/telemetry.py) while its loop adds and removes connections and counts. So none of
them walks a container the loop owns: each takes one C-level copy (``list(d.values())``,
``dict(d)``), which no other thread can cut into under the GIL, and walks the copy. A writer's
scrape walking the live connections answered 500 in a connection storm ("dictionary changed size
during iteration"). ``sorted(d.items())`` is no such copy on 3.11: each item is a new tuple, an
allocation can start a collection, and a gc callback (GcMonitor's) or a finalizer runs Python
code, where the loop's thread can take over (so: ``sorted(dict(d).items())``).

Size: past ~400 lines on purpose: one collector per piece of state, each a few lines, and one
place to find every name the node exports (the names themselves live in metric_names).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.histograms.gc import GENERATIONS
from monotape.metric_families import counter_family as _counter

if TYPE_CHECKING:
    from monotape.histograms import Percentiles, StageBuckets
    from monotape.histograms.gc import GcMonitor
    from monotape.invariants import InvariantMonitor
    from monotape.platform.auth import TokenVerifier
    from monotape.platform.core.sequencer import Sequencer
    from monotape.platform.feeds.handler import FeedHandler
    from monotape.platform.feeds.validate import TickGate
    from monotape.platform.role.failures import StageFailures
    from monotape.platform.role.grid import GridCounts
    from monotape.platform.server.endpoint import FanoutServer
    from monotape.platform.server.looplag import LoopLagMonitor

__all__ = [
    "AuthCollector",
    "FanoutCollector",
    "FeedCollector",
    "FrameGridCollector",
    "GcCollector",
    "IngestCollector",
    "InvariantCollector",
    "LoopLagCollector",
    "RuntimeCollector",
    "SequencerCollector",
    "StageDurationCollector",
    "StageLatencyCollector",
]


def _labelled_counter(
    name: str, doc: str, label: str, values: Mapping[str, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(m.counter_base(name), doc, labels=[label])
    for key, value in sorted(dict(values).items()):  # a copy first (module docstring)
        family.add_metric([key], value)
    return family


def _stale_families(s: FanoutServer) -> Iterator[Metric]:
    """STALE as an SRE reads it (docs/runbooks.md, Stale prices)."""
    stale = s.stale
    state, watch = stale.state, stale.watch  # one read: the state is a frozen value
    yield GaugeMetricFamily(
        m.STALE_TERMINALS,
        "Terminals whose screen holds a symbol marked stale now (grid stalled or venue down).",
        value=stale.stale_terminals(),
    )
    yield GaugeMetricFamily(
        m.STALE_VENUES,
        "Venues whose feed handlers are all down, as this writer was told.",
        value=len(state.venues),
    )
    per_venue = GaugeMetricFamily(
        m.STALE_VENUE, "1 while the venue's symbols are marked stale.", labels=["venue"]
    )
    for venue, _since in state.venues:
        per_venue.add_metric([venue], 1)
    yield per_venue
    yield GaugeMetricFamily(
        m.FRAME_GRID_STALLED,
        "1 while this writer has had no frame for more than two frame intervals.",
        value=int(bool(state.grid_since_ms)),
    )
    yield _labelled_counter(
        m.STALE_EPISODES,
        "Times terminals were told STALE: the grid stalled, a venue found down.",
        "cause",
        {"grid": watch.stalls, "venue": watch.venue_episodes},
    )


class FanoutCollector(Collector):
    def __init__(self, server: FanoutServer) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        s = self._server
        st = s.stats
        frames, sent = s.sent_totals()  # each walks a copy of the registry (docstring)
        conns = list(s.connections.values())
        yield GaugeMetricFamily(m.CONNECTIONS, "Open terminal connections.", value=len(conns))
        yield _counter(m.FRAMES_SENT, "Messages written to terminal connections.", frames)
        yield _counter(m.BYTES_SENT, "Bytes written to terminal connections.", sent)
        yield GaugeMetricFamily(
            m.FRAME_PAYLOADS, "Distinct payloads built for the last frame.", value=st.payloads_last
        )
        yield _counter(m.PRIORITY_UPDATES_SENT, "Priority updates written.", st.priority_sent)
        yield GaugeMetricFamily(
            m.NATIVE_WRITER,
            "1 when frames are written by the native send loop, 0 on the pure-Python path.",
            value=int(s.writer.native),
        )
        yield _counter(
            m.NATIVE_UNATTACHED,
            "Terminals served on the transport path alone: their socket could not be "
            "duplicated for the native writer's table (out of file descriptors).",
            st.native_unattached,
        )
        yield _counter(
            m.SLOW_CONSUMER_DROPS,
            "Frames dropped from full outbound rings.",
            s.slow_consumer_drops(),
        )
        entries = GaugeMetricFamily(
            m.INDEX_ENTRIES, "Entries in each subscription index.", labels=["index"]
        )
        for name, size in s.index.sizes().items():
            entries.add_metric([name], size)
        yield entries
        queued = [len(c.outbox) for c in conns]
        yield GaugeMetricFamily(
            m.OUTBOX_FRAMES, "Frames waiting in outbound rings, all connections.", value=sum(queued)
        )
        yield GaugeMetricFamily(
            m.OUTBOX_FRAMES_MAX,
            "Frames waiting in the fullest outbound ring (bounded by server.outbox_frames).",
            value=max(queued, default=0),
        )
        yield _labelled_counter(
            m.ADMISSION_REJECTED,
            "Upgrades refused with 503, by reason (rate, draining).",
            "reason",
            s.gate.rejected,
        )
        yield _counter(
            m.UPGRADES_THROTTLED,
            "Upgrades refused with 429: their source address failed too many upgrades.",
            s.gate.failures.throttled,
        )
        yield _counter(m.GAP_SNAPSHOTS, "Snapshots sent to resolve a gap.", st.gap_snapshots)
        yield from _stale_families(s)
        pacer = s.terminals.pacer
        yield _counter(
            m.MAX_HZ_RETRIED,
            "Full records a max_hz boundary owed that the snapshots lacked: sent at the next one.",
            pacer.retried if pacer is not None else 0,
        )
        glass = s.glass  # what terminals reported (capped at 100 each per connection)
        yield _counter(
            m.GLASS_REGRESSIONS,
            "Records terminals' own guards dropped as regressions (must stay 0).",
            glass.regressions,
        )
        yield _counter(
            m.GLASS_GAPS, "Deltas terminals reported on a base they did not hold.", glass.gaps
        )
        yield _counter(
            m.GLASS_REGRESSING_TERMINALS,
            "Distinct terminal connections that reported a regression.",
            glass.terminals,
        )
        yield _counter(
            m.UPGRADES, "Upgrades admitted as terminal connections.", st.connections_total
        )
        yield _labelled_counter(
            m.DISCONNECTS, "Connections torn down, by reason.", "reason", st.disconnects
        )
        yield _labelled_counter(
            m.REQUEST_ERRORS, "Client requests refused, by error code.", "code", st.request_errors
        )


class FeedCollector(Collector):
    def __init__(self, handlers: Callable[[], list[FeedHandler]]) -> None:
        self._handlers = handlers

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            m.FEED_HANDLER_UP, "1 while a feed handler is up.", labels=["venue", "handler"]
        )
        received = CounterMetricFamily(
            m.counter_base(m.TICKS_RECEIVED),
            "Ticks delivered by feed handlers (both of a pair: duplicates included).",
            labels=["venue", "handler"],
        )
        backwards = CounterMetricFamily(
            m.counter_base(m.FEED_BACKWARDS),
            "Updates older than one the same handler already delivered for the symbol: its own "
            "stream went backwards (an anomaly; the twins' race is duplicates and regressions).",
            labels=["venue", "handler"],
        )
        epoch = GaugeMetricFamily(
            m.FEED_EPOCH,
            "The newest epoch a feed handler stamps with.",
            labels=["venue", "handler"],
        )
        lag = GaugeMetricFamily(
            m.FEED_LAG, "A feed handler's delay behind its venue.", labels=["venue", "handler"]
        )
        for h in self._handlers():
            up.add_metric([h.venue, h.name], 1.0 if h.up else 0.0)
            received.add_metric([h.venue, h.name], h.delivered)
            backwards.add_metric([h.venue, h.name], h.backwards)
            records = h.records
            epoch.add_metric([h.venue, h.name], records[-1].epoch if records else 0)
            lag.add_metric([h.venue, h.name], h.lag_ns / 1e9)
        yield up
        yield received
        yield backwards
        yield epoch
        yield lag


class IngestCollector(Collector):
    """Ticks refused where they enter (by venue and reason) and contained stage failures (by
    stage): a node that keeps serving through poison says so here."""

    def __init__(self, gate: Callable[[], TickGate], failures: StageFailures) -> None:
        self._gate = gate
        self._failures = failures

    def collect(self) -> Iterator[Metric]:
        rejected = CounterMetricFamily(
            m.counter_base(m.TICKS_REJECTED),
            "Ticks refused where they enter (replay, NATS, feed handler): out of the wire's range.",
            labels=["venue", "reason"],
        )
        gate = self._gate()
        for (venue, reason), n in sorted(dict(gate.rejected).items()):
            rejected.add_metric([venue, reason], n)
        yield rejected
        # every reason from 0 (known label values: rate() and absent-series alerts read right)
        yield _labelled_counter(
            m.BATCHES_REFUSED,
            "Buffers refused whole where batches enter (bus, NATS, a venue feed): not a tick "
            "batch of this format (unknown version, torn, short, count and length disagree).",
            "reason",
            dict(gate.batches_refused),
        )
        yield _labelled_counter(
            m.STAGE_FAILURES,
            "Frames, symbols or batches whose processing raised: contained, logged, skipped.",
            "stage",
            self._failures.counts,
        )


class StageLatencyCollector(Collector):
    """``monotape_stage_latency_seconds{stage,quantile}`` from the latest closed 10 s interval
    of each stage (exact HDR percentiles; merge the interval logs for any other window).

    Typed ``summary`` (quantile samples only), not ``gauge``: the series, labels and values are
    the same either way, but a ``quantile`` label on a gauge fails ``promtool check metrics``.
    It has no ``_sum``/``_count``: these are one interval's quantiles, not cumulative; the
    summable form is ``monotape_stage_duration_seconds`` (histograms/buckets.py)."""

    def __init__(self, latest: Callable[[], Mapping[str, Percentiles]]) -> None:
        self._latest = latest

    def collect(self) -> Iterator[Metric]:
        family = Metric(
            m.STAGE_LATENCY,
            "Stage latency quantiles over the latest 10 s interval "
            "(stage glass is RTT/2 of timed pings: an upper bound).",
            "summary",
        )
        for stage, p in sorted(self._latest().items()):
            for quantile, seconds in p.seconds().items():
                family.add_sample(m.STAGE_LATENCY, {"stage": stage, "quantile": quantile}, seconds)
        yield family


class RuntimeCollector(Collector):
    """The event loop's task count: a leak of per-connection tasks shows here first (process
    RSS, CPU, open fds and the CPU wait come from ``process_metrics`` beside it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            m.ASYNCIO_TASKS,
            "Tasks alive in the node's event loop.",
            value=len(asyncio.all_tasks(self._loop)),
        )


class AuthCollector(Collector):
    """Token verification: the cache is what keeps a reconnect storm off the CPU (the seed saw
    ~97% hits), refusals by reason say why terminals are turned away."""

    def __init__(self, verifier: TokenVerifier) -> None:
        self._verifier = verifier

    def collect(self) -> Iterator[Metric]:
        v = self._verifier
        yield _counter(
            m.AUTH_CACHE_HITS, "Tokens answered from the verified-claims cache.", v.cache_hits
        )
        yield _counter(
            m.AUTH_CACHE_MISSES, "Tokens fully verified (signature checked).", v.cache_misses
        )
        yield _labelled_counter(m.AUTH_REFUSED, "Tokens refused, by reason.", "reason", v.refused)
        yield _counter(
            m.AUTH_VERIFY_SECONDS,
            "Seconds spent in full token verifications (signature checked).",
            v.verify_seconds_total,
        )


_SEQUENCER_HELP = {
    m.TICKS_ADMITTED: "Ticks applied by the sequencer (version above the symbol's current one).",
    m.DUPLICATE_TICKS: "Ticks discarded as exact repeats of the current version (redundant twin).",
    m.SEQUENCE_REGRESSIONS: "Ticks discarded because their version is below the current one.",
}


class SequencerCollector(Collector):
    """Exports the sequencer's plain-int counts at scrape time (STYLE: client_python custom
    collector; measured: ``Counter.inc`` ~0.5 µs is too slow per tick)."""

    def __init__(self, sequencer: Sequencer) -> None:
        self._sequencer = sequencer

    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                m.counter_base(m.TICKS_ADMITTED),
                _SEQUENCER_HELP[m.TICKS_ADMITTED],
                labels=["venue"],
            ),
            CounterMetricFamily(
                m.counter_base(m.DUPLICATE_TICKS),
                _SEQUENCER_HELP[m.DUPLICATE_TICKS],
                labels=["venue"],
            ),
            CounterMetricFamily(
                m.counter_base(m.SEQUENCE_REGRESSIONS),
                _SEQUENCER_HELP[m.SEQUENCE_REGRESSIONS],
                labels=["venue"],
            ),
        )

    def describe(self) -> Iterator[CounterMetricFamily]:
        # Lets a registry detect name clashes without running a scrape.
        yield from self._families()

    def collect(self) -> Iterator[CounterMetricFamily]:
        admitted, duplicates, regressions = self._families()
        for venue, c in sorted(self._sequencer.counters().items()):
            admitted.add_metric([venue], c.admitted)
            duplicates.add_metric([venue], c.duplicates)
            regressions.add_metric([venue], c.regressions)
        yield admitted
        yield duplicates
        yield regressions


class GcCollector(Collector):
    """``monotape_gc_pause_seconds{generation}`` (histogram), built at scrape time.

    Pass ``frozen_name`` (a name from ``metric_names``) to also export the permanent
    generation's size as a gauge.
    """

    def __init__(self, monitor: GcMonitor, *, frozen_name: str | None = None) -> None:
        self._monitor = monitor
        self._frozen_name = frozen_name

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            m.GC_PAUSE, "CPython garbage-collection pauses, by generation.", labels=["generation"]
        )
        for g in GENERATIONS:
            buckets, total_s, _ = self._monitor.histogram(g)
            family.add_metric([str(g)], buckets, sum_value=total_s)
        yield family
        if self._frozen_name:
            yield GaugeMetricFamily(
                self._frozen_name,
                "Objects in CPython's permanent generation (gc.freeze), never collected.",
                value=self._monitor.frozen_now,
            )
        refreezes = CounterMetricFamily(
            m.GC_REFREEZES,
            "gc.freeze() calls after new connections settled (gc_policy).",
        )
        refreezes.add_metric([], self._monitor.freezes)
        yield refreezes
        reclaims = CounterMetricFamily(
            m.GC_RECLAIMS,
            "Full collections that reclaimed the cycles of closed frozen connections (gc_policy).",
        )
        reclaims.add_metric([], self._monitor.reclaims)
        yield reclaims


class FrameGridCollector(Collector):
    """The frame loop's boundaries, taken and skipped (role/grid.py ``GridCounts``): the tape's
    own frame rate, which a late loop lowers without an error anywhere else."""

    def __init__(self, counts: GridCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        c = self._counts
        yield _counter(m.FRAME_BOUNDARIES, "40 ms frame boundaries the frame loop took.", c.taken)
        yield _counter(
            m.FRAME_BOUNDARIES_SKIPPED,
            "Grid boundaries the frame loop passed over because it was late; their ticks went "
            "into the next frame (terminals saw fewer than 25 frames a second).",
            c.skipped,
        )


class StageDurationCollector(Collector):
    """``monotape_stage_duration_seconds{stage}`` for every recorder ``recorders()`` yields.

    A recorder's values reach its buckets when they reach its HDR histogram (a flush: when a
    batch fills, at least at every 10 s rotation), so the histogram never runs ahead of the
    interval logs it mirrors."""

    def __init__(self, recorders: Callable[[], Iterable[StageBuckets]]) -> None:
        self._recorders = recorders

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            m.STAGE_DURATION,
            "Stage latency as bucket counts that add across processes and hosts "
            "(histogram_quantile over sum by (le, stage)); stage glass is an upper bound.",
            labels=["stage"],
        )
        for recorder in self._recorders():
            b = recorder.buckets
            family.add_metric([recorder.stage], b.cumulative(), sum_value=b.sum_us / 1e6)
        yield family


class LoopLagCollector(Collector):
    """``monotape_event_loop_lag_seconds`` (gauge: the latest sample); with ``max_name`` a gauge
    of the largest lag since the previous scrape; with ``histogram_name`` every sample as a
    histogram. Names come from ``metric_names``."""

    def __init__(
        self,
        monitor: LoopLagMonitor,
        *,
        max_name: str | None = None,
        histogram_name: str | None = None,
    ) -> None:
        self._monitor = monitor
        self._max_name = max_name
        self._histogram_name = histogram_name

    def collect(self) -> Iterator[Metric]:
        mon = self._monitor
        yield GaugeMetricFamily(
            m.EVENT_LOOP_LAG,
            "How late the event loop woke a timer, latest sample.",
            value=mon.last_ns / 1e9,
        )
        if self._max_name:
            yield GaugeMetricFamily(
                self._max_name,
                "Largest event-loop lag since the previous scrape.",
                value=mon.take_max() / 1e9,
            )
        if self._histogram_name:
            buckets, total_s, _ = mon.histogram()
            family = HistogramMetricFamily(
                self._histogram_name, "Event-loop lag, every sample.", labels=[]
            )
            family.add_metric([], buckets, sum_value=total_s)
            yield family


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
        for name, result in sorted(dict(self._monitor.results).items()):
            violation.add_metric([name], 0.0 if result.ok else 1.0)
            seconds.add_metric([name], result.duration_us / 1e6)
        yield violation
        yield seconds
