"""The role kit: the instruments every process of monotape is built with, wired in one place.

A role (the one-process node, or a host's sequencer, writer, feed handlers and venue) takes a
``RoleKit`` and asks for what it measures: its clock and ``CollectorRegistry`` with the process
metrics (always), the GC pause monitor (``watch_gc``), the event-loop lag monitor
(``watch_loop``) and the stage histograms with their 10 s interval logs (``record_stages``).
Each instrument comes with its collector registered under the names of ``metric_names``, so
every process exports the same families the same way (docs/observability.md). ``loops`` are the
kit's own drivers to run; ``close`` is the one teardown of what it built.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.clock import Clock, SystemClock
from monotape.config import Config
from monotape.histograms import IntervalLogWriter, Recorders
from monotape.histograms.gc import GcMonitor
from monotape.log import log_event
from monotape.platform.core.stamps import StageStamps
from monotape.platform.role.collectors import (
    GcCollector,
    LoopLagCollector,
    StageDurationCollector,
    StageLatencyCollector,
)
from monotape.platform.role.process_metrics import register_process_metrics
from monotape.platform.role.rotation import HistogramRotation
from monotape.platform.role.supervisor import LoopFactory
from monotape.platform.server.looplag import LoopLagMonitor

__all__ = ["LOOP_LAG_INTERVAL_S", "RoleKit", "StageHistograms"]

LOOP_LAG_INTERVAL_S = 0.1  # the lag timer's period: ten samples a second, every process alike


@dataclass(frozen=True, slots=True)
class StageHistograms:
    """A role's stage histograms: the stamps that record them, the interval-log writer under
    ``<data-dir>/hdr`` and the rotation that closes an interval every ``hdr_interval_s``."""

    stamps: StageStamps
    hdr_dir: Path
    writer: IntervalLogWriter
    rotation: HistogramRotation


class RoleKit:
    """What one process measures itself with; ``name`` names its interval logs
    (``<name>-<pid>``)."""

    def __init__(self, cfg: Config, name: str, clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.name = name
        self.clock: Clock = clock or SystemClock()
        self.registry = CollectorRegistry()
        register_process_metrics(self.registry)  # RSS, CPU seconds, open fds, CPU wait
        self.gc_monitor: GcMonitor | None = None
        self.loop_lag: LoopLagMonitor | None = None
        self.histograms: StageHistograms | None = None
        self._frozen = False

    def register(self, *collectors: Collector) -> None:
        for collector in collectors:
            self.registry.register(collector)

    # -- the instruments -----------------------------------------------------------------------
    def watch_gc(self) -> GcMonitor:
        """GC pauses by generation and the frozen heap's size (installed by ``start``)."""
        if self.gc_monitor is None:
            self.gc_monitor = GcMonitor(clock=self.clock)
            self.register(GcCollector(self.gc_monitor, frozen_name=m.GC_FROZEN_OBJECTS))
        return self.gc_monitor

    def watch_loop(self) -> LoopLagMonitor:
        """How late the event loop wakes a timer; on the real clock whatever the kit's is (a
        fake clock would read no lag)."""
        if self.loop_lag is None:
            self.loop_lag = LoopLagMonitor(LOOP_LAG_INTERVAL_S)
            self.register(LoopLagCollector(self.loop_lag, max_name=m.EVENT_LOOP_LAG_MAX))
        return self.loop_lag

    def record_stages(self, *, before: Callable[[], object] = lambda: None) -> StageHistograms:
        """The stage histograms, exported as exact percentiles of the last closed interval and
        as buckets that add across processes; ``before`` runs at every rotation first
        (``HistogramRotation``: a server's priority writes since its last frame)."""
        if self.histograms is not None:
            return self.histograms
        srv = self.cfg.server
        stamps = StageStamps(Recorders(start_ms=self.clock.wall_ns() // 1_000_000))
        hdr_dir = Path(self.cfg.data_dir) / "hdr"
        writer = IntervalLogWriter(
            hdr_dir,
            proc=f"{self.name}-{os.getpid()}",
            host=socket.gethostname(),
            max_age_s=srv.hdr_max_age_s,
            max_bytes=srv.hdr_max_bytes,
        )
        rotation = HistogramRotation(
            stamps, writer, self.clock, interval_s=srv.hdr_interval_s, before=before
        )
        self.register(
            StageLatencyCollector(lambda: rotation.latest),
            StageDurationCollector(lambda: stamps.recorders),
        )
        self.histograms = StageHistograms(stamps, hdr_dir, writer, rotation)
        return self.histograms

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start recording GC pauses (before the role's own start: its warm-up counts too)."""
        if self.gc_monitor is not None:
            self.gc_monitor.install()

    def freeze(self) -> int:
        """After the warm-up, when ``server.gc_freeze`` says so: move the surviving heap to the
        permanent generation (docs/observability.md, "GC and the event loop"); how many
        objects, 0 when not frozen."""
        if self.gc_monitor is None or not self.cfg.server.gc_freeze:
            return 0
        objects = self.gc_monitor.freeze_after_warmup()
        self._frozen = True
        log_event("gc_frozen", objects=objects)
        return objects

    def loops(self) -> list[LoopFactory]:
        """The kit's drivers: the loop-lag timer and the 10 s rotation, as they were asked."""
        loops: list[LoopFactory] = []
        if self.loop_lag is not None:
            loops.append(self.loop_lag.run)
        if self.histograms is not None:
            loops.append(self.histograms.rotation.run)
        return loops

    def close(self) -> None:
        """The last partial interval written (every value lands), the logs closed, GC no
        longer watched and the heap unfrozen (a role inside a test process must not leave its
        objects frozen). After the role's own stop: a server's last priority writes first."""
        if self.loop_lag is not None:
            self.loop_lag.stop()
        if self.histograms is not None:
            try:
                self.histograms.rotation.rotate_now(final=True)
            except Exception as exc:  # a full disk must not stop the teardown
                log_event("rotation_failed", level="error", error=repr(exc))
            with contextlib.suppress(Exception):
                self.histograms.writer.close()
        if self.gc_monitor is not None:
            self.gc_monitor.uninstall()
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
