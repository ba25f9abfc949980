"""The writer role: one WebSocket endpoint of the host, fed by the frame ring.

``python -m monotape.platform.host writer SPEC_JSON`` runs ``main(spec)``: N of these share the
terminals' port (SO_REUSEPORT: the kernel spreads upgrades over them) and each owns its terminals
from upgrade to teardown (auth, its share of the admission budget, sessions, writes, keepalive,
drain). It encodes nothing: frames arrive as the sequencer's encoded records (ring reader
``spec.index``, host/ring_feed.py plans and writes them), and hydration joins the ring's shared
snapshot table. Its terminals' order-ticket marks go to its row of the priority interest
(host/interest.py), which the sequencer reads.

Lifecycle (the host's contract): the role exits by itself when the host is gone (the kernel's
parent-death signal, and a look at the parent pid once a second); SIGTERM or SIGINT drains its
terminals (staggered closes with reconnect hints: they reconnect to the other writers, since
this one has stopped listening) and stops within 2 s of the drain's end; a second signal, or a
host that is gone, skips the drain. Every log line carries ``process=writer-N``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable, Iterator

import msgspec
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.clock import Clock
from monotape.config import Config, ServerConfig
from monotape.log import log_event
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.feeds.sources import universe_of
from monotape.platform.host.interest import PriorityInterest
from monotape.platform.host.lifeline import host_gone, run_role, watch_host
from monotape.platform.host.ring_feed import RingFeed, RingSnapshots
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.state import RoleView, writer_state
from monotape.platform.host.telemetry import RoleState, serve_metrics
from monotape.platform.ring import ReaderCounters, RingFollower, RingRead, ShmReader
from monotape.platform.ring.venues import VenueBits
from monotape.platform.role.collectors import (
    AuthCollector,
    RuntimeCollector,
)
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.fanout_upkeep import FanoutUpkeep
from monotape.platform.role.kit import RoleKit
from monotape.platform.role.supervisor import LoopFactory, Supervisor
from monotape.platform.server.endpoint import FanoutServer

__all__ = ["STOP_AFTER_DRAIN_S", "RingReaderCollector", "WriterRole", "main", "share_of"]

STOP_AFTER_DRAIN_S = 2.0  # the host's contract: stopped within 2 s of the drain's end


def share_of(srv: ServerConfig, writers: int) -> ServerConfig:
    """This writer's share of the host's admission budget (design: 1,200 upgrades/s sustained,
    burst 2,500 per host, split across writer processes)."""
    n = max(1, writers)
    return msgspec.structs.replace(
        srv,
        admission_rate_per_s=srv.admission_rate_per_s / n,
        admission_burst=max(1, srv.admission_burst // n),
    )


class RingReaderCollector(Collector):
    """The ring reader's plain-int counters as ``monotape_ring_*_total{writer}``."""

    def __init__(self, counters: ReaderCounters, writer: str) -> None:
        self._counters = counters
        self._writer = writer

    def collect(self) -> Iterator[Metric]:
        c = self._counters
        for name, doc, value in (
            (m.RING_LAPS, "Times this writer fell a whole ring behind.", c.laps),
            (m.RING_MISSED, "Ring entries this writer lost to laps.", c.missed),
            (m.RING_TORN_READS, "Ring copies overwritten while taken (laps).", c.torn),
            (m.RING_GAPS, "Oversize gap entries and producer restarts read.", c.gaps),
            (
                m.RING_SNAPSHOTS_AHEAD,
                "Symbols left out of a snapshot: the table only newer than the frames read.",
                c.snapshot_ahead,
            ),
            (
                m.RING_SNAPSHOTS_BUSY,
                "Reads of a newest snapshot record that met a put in progress for 0.1 s: absent.",
                c.snapshot_busy,
            ),
        ):
            family = CounterMetricFamily(m.counter_base(name), doc, labels=["writer"])
            family.add_metric([self._writer], value)
            yield family


class WriterRole:
    """One writer process, built from its spec and the host's config; ``run`` until stopped."""

    def __init__(self, spec: RoleSpec, cfg: Config, clock: Clock | None = None) -> None:
        self.spec = spec
        self.cfg = cfg
        self.name = spec.name or f"writer-{spec.index}"
        # The role kit (role/kit.py): clock, registry, GC and loop-lag monitors, and the stage
        # histograms, this writer's priority writes since its last ring read first.
        self.kit = RoleKit(cfg, self.name, clock)
        self.clock: Clock = self.kit.clock
        self.registry = self.kit.registry
        self.histograms = self.kit.record_stages(before=lambda: self.server.flush_priority())
        self.stamps = self.histograms.stamps
        self.gc_monitor = self.kit.watch_gc()
        self.loop_lag = self.kit.watch_loop()
        self.reader = ShmReader.attach(spec.ring, spec.index)
        self.interest = PriorityInterest.attach(spec.interest) if spec.interest else None
        if self.interest is not None:
            self.interest.clear_row(spec.index)  # a restarted writer has no terminals yet
        self.failures = StageFailures(self.clock.now_ns)
        self.verifier: TokenVerifier | None = (
            build_verifier(cfg.auth, cfg.data_dir, clock=self.clock) if cfg.auth.enabled else None
        )
        rec = self.stamps.recorders
        srv = share_of(cfg.server, spec.writers)
        self.server = FanoutServer(
            srv,
            universe_of(cfg),
            None,
            self.clock,
            server_id=self.name,  # the hello tells a terminal (and an SRE) which writer
            verifier=self.verifier,
            hydrate=rec["hydrate"],
            glass=rec["glass"] if srv.glass_share > 0 else None,
            overloaded=self._overloaded if srv.admission_max_lag_ms > 0 else None,
            priority=self.stamps.prioritized,
            snapshots=RingSnapshots(self.reader),
            reuse_port=True,
            marks=self._marks,
        )
        self.server.failures = self.failures
        self.feed = RingFeed(
            self.server.writer,
            self.server.index,
            self.server.terminals.pacer,
            self.stamps,
            stale=(self.server.stale, VenueBits.of(i.venue for i in universe_of(cfg))),
        )
        # the node's upkeep of its terminals: heartbeats, invariants, GC (role/fanout_upkeep.py)
        self.upkeep = FanoutUpkeep(srv, self.server, self.gc_monitor, self.clock, self.failures)
        self.invariants = self.upkeep.invariants
        self.gc_upkeep = self.upkeep.gc
        self.kit.register(
            *self.upkeep.collectors(),
            RingReaderCollector(self.reader.counters, str(spec.index)),
        )
        if self.verifier is not None:
            self.registry.register(AuthCollector(self.verifier))
        self.ws_port = 0
        self.metrics_port = 0
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self.supervisor = Supervisor(
            self.failures, self.clock.now_ns, stopped=self._stop.is_set, on_give_up=self._give_up
        )
        self.failed = ""

    def role_view(self) -> RoleView:
        """What the node's admin handlers read of this writer (host/state.py)."""
        return RoleView(
            self.clock,
            universe=universe_of(self.cfg),
            server=self.server,
            invariants=self.invariants,
            gc_monitor=self.gc_monitor,
            loop_lag=self.loop_lag,
            hdr_dir=self.histograms.hdr_dir,
        )

    # -- what the server and the ring tell it ------------------------------------------------
    def _overloaded(self) -> bool:
        return self.loop_lag.last_ns > self.cfg.server.admission_max_lag_ms * 1e6

    def _marks(self, iids: Iterable[int]) -> None:
        """Terminals marked or unmarked these iids: this writer's row says whether any of its
        terminals still holds each (the index counts them)."""
        if self.interest is None:
            return
        has_priority = self.server.index.has_priority
        for iid in iids:
            self.interest.set(self.spec.index, iid, has_priority(iid))

    def _on_read(self, read: RingRead) -> None:
        try:
            self.feed.on_read(read)
        except Exception as exc:  # one entry; the next one is read as usual
            self.failures.record("ring", exc)
        self.server.flush_priority()  # the priority writes of this read, into the histogram

    def _give_up(self, reason: str) -> None:
        self.failed = reason
        self.request_stop(hurry=True)

    def request_stop(self, *, hurry: bool = False) -> None:
        """A second request (or ``hurry``) skips the drain."""
        if hurry or self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        gone = host_gone(self.spec.host_pid)  # the parent-death signal: no drain
        log_event("role_signal", signal=sig.name, host_gone=gone)
        self.request_stop(hurry=gone)

    # -- the loops -----------------------------------------------------------------------------
    async def host_watch(self) -> None:
        """The parent-death signal's net (lifeline.watch_host): the host gone means stop now,
        without a drain."""
        await watch_host(self.spec.host_pid, asyncio.Event())  # returns only once it is gone
        log_event("host_gone", level="warning", host_pid=self.spec.host_pid)
        self.request_stop(hurry=True)

    def _loops(self) -> list[LoopFactory]:
        # the loop-lag timer and the 10 s rotation; heartbeats, invariants, STALE, glass,
        # keepalive and GC upkeep as the config runs them
        return [*self.kit.loops(), self.host_watch, *self.upkeep.loops()]

    # -- lifecycle -----------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.kit.start()
        self.registry.register(RuntimeCollector(loop))
        self.ws_port = await self.server.start()
        follower = RingFollower(self.reader, self._on_read, loop)
        follower.start()
        self.kit.freeze()  # when server.gc_freeze says so, after the warm-up
        self.upkeep.start()
        loops = self._loops()
        self.supervisor.start([f() for f in loops], loops)
        # The port file last: the host reads it as "this writer is up". The same port answers
        # the host's admin API about this writer's terminals (host/state.py, loopback only).
        state = writer_state(RoleState(loop), self.role_view())
        self.metrics_port = serve_metrics(self.registry, self.spec.run_dir, self.name, state)
        log_event(
            "listening",
            ws=f"ws://{self.cfg.server.host}:{self.ws_port}/",
            metrics_port=self.metrics_port,
            ring=self.spec.ring,
            reader=self.spec.index,
            restarts=self.spec.restarts,
        )
        await self._stop.wait()
        # Staggered closes with reconnect hints while frames keep flowing (server/drain.py);
        # new terminals go to the other writers: this one stops listening first.
        self.server.stop_listening()
        await self.server.drainer.before_stop(self._hurry)
        follower.stop()
        await self._shut()
        return 1 if self.failed else 0

    async def _shut(self) -> None:
        self.loop_lag.stop()
        try:
            await asyncio.wait_for(self.server.stop(), STOP_AFTER_DRAIN_S)
        except TimeoutError:
            log_event("stop_timeout", level="warning", remaining=len(self.server.connections))
        await self.supervisor.cancel_all()
        self.kit.close()  # the last partial interval, if it can be written
        if self.verifier is not None:
            self.verifier.close()
        if self.interest is not None:
            self.interest.clear_row(self.spec.index)  # its terminals are gone
            self.interest.close()
        counters = self.reader.counters
        self.reader.close()
        log_event(
            "role_stopped",
            role="writer",
            disconnects=dict(self.server.stats.disconnects),
            frames=self.feed.counters.frames,
            laps=counters.laps,
            gaps=self.feed.counters.gaps,
            failed=self.failed or None,
        )


def main(spec: RoleSpec) -> int:
    return run_role(spec, f"writer-{spec.index}", lambda cfg: WriterRole(spec, cfg).run())
