"""The composition root: build every stage from one Config, start it, stop it.

Everything of the embedded default runs in one event loop: the venue simulator (or a replay),
two feed handlers per venue, the in-process bus, the sequencer lanes, the 40 ms frame clock, the
WebSocket fan-out and the admin API. Each piece is a state machine; this module wires them and
runs their drivers: ticks' sources (feeds/sources.py), the pipeline's loops (pipeline.py) and
the fan-out's upkeep (role/fanout_upkeep.py: heartbeats, invariants, GC upkeep, as a writer
process runs them) under a supervisor (role/supervisor.py), STALE for down venues
(venue_watch.py), the collectors (role/collectors.py) and the admin app (admin/app.py,
admin/server.py); the instruments every role is built with (registry, GC and loop-lag monitors,
stage histograms and their rotation) come from the role kit (role/kit.py).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from monotape.clock import Clock
from monotape.config import Config
from monotape.dashboards.panels import sampled_names
from monotape.dashboards.sampler import SampleRing, sample_registry
from monotape.histograms import Percentiles
from monotape.log import log_event
from monotape.platform.admin.app import build_admin_app
from monotape.platform.admin.server import AdminServer
from monotape.platform.admin.watchlist import watchlist_site
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.bus.memory import InProcessBus, TickBus
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.handler import FeedHandler
from monotape.platform.feeds.replay import ReplayAdapter
from monotape.platform.feeds.simulator import VenueSimulator
from monotape.platform.feeds.sources import build_sources
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Instrument
from monotape.platform.node.pipeline import Pipeline
from monotape.platform.node.venue_watch import down_venues
from monotape.platform.role.collectors import (
    AuthCollector,
    FeedCollector,
    FrameGridCollector,
    IngestCollector,
    RuntimeCollector,
    SequencerCollector,
)
from monotape.platform.role.datadir_lock import DataDirLock, lock_data_dir
from monotape.platform.role.endpoints import (
    Endpoints,
    ListenError,
    endpoints_for,
    remove_endpoints,
    write_endpoints,
)
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.fanout_upkeep import FanoutUpkeep
from monotape.platform.role.kit import RoleKit
from monotape.platform.role.supervisor import LoopFactory, Supervisor
from monotape.platform.server.endpoint import FanoutServer

__all__ = ["Node"]


class Node:
    def __init__(self, cfg: Config, clock: Clock | None = None) -> None:
        self.cfg = cfg
        # The role kit (kit.py): clock, registry, GC and loop-lag monitors, stage histograms.
        self.kit = RoleKit(cfg, "node", clock)
        self.clock: Clock = self.kit.clock
        self.registry = self.kit.registry
        self.data_dir = Path(cfg.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock: DataDirLock | None = None  # taken in start (datadir_lock.py)
        self.epochs = FileEpochStore(self.data_dir / "epochs")
        sources = build_sources(cfg, self.clock, self.epochs)
        self.universe: list[Instrument] = sources.universe
        self.gate: TickGate = sources.gate
        self.simulator: VenueSimulator | None = sources.simulator
        self.replay: ReplayAdapter | None = sources.replay
        self.handlers: list[FeedHandler] = sources.handlers
        self.frame_ns = int(cfg.server.frame_ms * 1e6)
        self.nats_bus: NatsTickBus | None = None
        self.bus: TickBus
        if cfg.bus == "nats":
            # Cross-host: handlers publish venue batches to NATS, this sequencer subscribes.
            self.nats_bus = NatsTickBus(
                scheme=cfg.nats.subjects,
                symbols={i.iid: i.symbol for i in self.universe},
                max_pending_batches=cfg.nats.max_pending_batches,
                name=f"monotape-{socket.gethostname()}-{os.getpid()}",
                gate=self.gate,
            )
            self.bus = self.nats_bus
        else:
            self.bus = InProcessBus()
        self.sequencer = Sequencer(cfg.server.lanes, self.frame_ns)
        # Contained failures of the stage loops: counted, logged now and then, never fatal.
        self.failures = StageFailures(self.clock.now_ns)
        # The key object is built once, here (design: Auth); a bad key file fails the start.
        self.verifier: TokenVerifier | None = (
            build_verifier(cfg.auth, cfg.data_dir, clock=self.clock) if cfg.auth.enabled else None
        )
        # Stage histograms: every value enters through its stage recorder's buffer (the server's
        # hydrate and glass samples, its priority writes, and the tick stages via the stamps),
        # rotated every 10 s into interval logs, the priority writes since the last frame first.
        self.histograms = self.kit.record_stages(before=lambda: self.server.flush_priority())
        self.stamps = self.histograms.stamps
        self.hdr_dir = self.histograms.hdr_dir  # what /admin/latency reads (AdminView)
        self.loop_lag = self.kit.watch_loop()
        self.server = FanoutServer(
            cfg.server,
            self.universe,
            self.sequencer,
            self.clock,
            verifier=self.verifier,
            hydrate=self.stamps.recorders["hydrate"],
            glass=self.stamps.recorders["glass"] if cfg.server.glass_share > 0 else None,
            overloaded=self._overloaded if cfg.server.admission_max_lag_ms > 0 else None,
            priority=self.stamps.prioritized,
        )
        self.server.failures = self.failures  # the writer's and the snapshot cache's
        self.server.stale.venues = lambda: down_venues(self.handlers)  # STALE of down venues
        self.pipeline = Pipeline(
            clock=self.clock,
            feeds=cfg.feeds,
            frame_ns=self.frame_ns,
            simulator=self.simulator,
            replay=self.replay,
            handlers=self.handlers,
            bus=self.bus,
            sequencer=self.sequencer,
            server=self.server,
            stamps=self.stamps,
            failures=self.failures,
        )
        # GC pauses and event-loop lag, overlaid on the latency timeline; what keeps the
        # terminals beside the frames (heartbeats, invariants, GC upkeep: fanout_upkeep.py).
        self.gc_monitor = self.kit.watch_gc()
        self.upkeep = FanoutUpkeep(
            cfg.server, self.server, self.gc_monitor, self.clock, self.failures
        )
        self.invariants = self.upkeep.invariants  # what /admin/invariants reads (AdminView)
        self._register_collectors()
        # The embedded dashboards' history: the panels' metrics, sampled every second.
        self.dashboard_ring = SampleRing(sampled_names())
        self.ws_port = 0
        self.admin_port = 0
        self.ready = False
        self.failed = False
        self.failure_reason = ""
        self._stopped = asyncio.Event()
        self._hurry = asyncio.Event()
        self.supervisor = Supervisor(
            self.failures, self.clock.now_ns, stopped=self._stopped.is_set, on_give_up=self._fail
        )
        # the watchlist page reads the terminals' port once listening (0 until then)
        site = watchlist_site(cfg, lambda: self.ws_port)
        self._admin = AdminServer(build_admin_app(self, site))
        self.endpoints: Endpoints | None = None

    # -- building ------------------------------------------------------------------------------
    def _register_collectors(self) -> None:
        """The node's stages' collectors, beside the kit's (GC, loop lag, stage histograms,
        process)."""
        reg = self.registry
        if self.nats_bus is not None:
            reg.register(NatsBusCollector(self.nats_bus))
        reg.register(SequencerCollector(self.sequencer))
        reg.register(FrameGridCollector(self.pipeline.grid))
        reg.register(FeedCollector(lambda: self.handlers))
        reg.register(IngestCollector(lambda: self.gate, self.failures))
        if self.verifier is not None:
            reg.register(AuthCollector(self.verifier))
        self.kit.register(*self.upkeep.collectors())

    # -- what the admin API and the tests read (AdminView) -------------------------------------
    @property
    def source(self) -> str:
        return "replay" if self.replay else "simulator"

    @property
    def fault_injection(self) -> bool:
        return self.cfg.server.fault_injection

    @property
    def latest_latency(self) -> dict[str, Percentiles]:
        """Percentiles per stage of the last closed 10 s interval."""
        return self.histograms.rotation.latest

    def rotate_histograms(self, *, final: bool = False) -> None:
        """Rotate on the loop, write in place: for a stop (``final``) and for tests."""
        self.histograms.rotation.rotate_now(final=final)

    def _overloaded(self) -> bool:
        return self.loop_lag.last_ns > self.cfg.server.admission_max_lag_ms * 1e6

    # -- lifecycle -----------------------------------------------------------------------------
    def _restartable(self) -> dict[str, LoopFactory]:
        """The loops the supervisor may start again, by task name (the coroutine's qualname)."""
        loops: list[LoopFactory] = [
            self.pipeline.pump_loop,
            self.pipeline.frame_loop,
            self.pipeline.chaos_loop,
            self.histograms.rotation.run,
            *self.upkeep.restartable(),
        ]
        return {loop.__qualname__: loop for loop in loops}

    async def start(self) -> None:
        """Take the data dir (one ``monotape run`` per data dir: ``DataDirInUse`` otherwise),
        then start every stage; a start that fails gives the data dir back."""
        self._dir_lock = lock_data_dir(self.data_dir)
        try:
            await self._start()
        except BaseException:
            self._dir_lock.release()
            raise

    async def _start(self) -> None:
        self.kit.start()
        if self.nats_bus is not None:
            servers = [u.strip() for u in self.cfg.nats.servers.split(",") if u.strip()]
            await self.nats_bus.connect(servers, timeout_s=self.cfg.nats.connect_timeout_s)
        for handler in self.handlers:
            # A node that starts has no live twin to race: its epochs take effect at once, above
            # everything the data dir says it ever issued (FeedHandler.start).
            record = handler.start(at_once=True)
            log_event(
                "handler_started", venue=handler.venue, handler=handler.name, epoch=record.epoch
            )
        self.registry.register(RuntimeCollector(asyncio.get_running_loop()))
        await self._listen()
        srv = self.cfg.server
        self.kit.freeze()  # when server.gc_freeze says so, after the warm-up
        self.upkeep.start()
        loops = [
            *(loop() for loop in self.kit.loops()),
            self.pipeline.pump_loop(),
            self.pipeline.frame_loop(),
            *(loop() for loop in self.upkeep.loops()),
            sample_registry(self.dashboard_ring, self.registry, self.clock, self.loop_lag),
        ]
        if self.cfg.feeds.restart_every_s > 0 and self.handlers:
            loops.append(self.pipeline.chaos_loop())
        self.supervisor.start(loops, self._restartable().values())
        self.ready = True
        log_event(
            "listening",
            ws=f"ws://{srv.host}:{self.ws_port}/",
            admin=f"http://{srv.host}:{self.admin_port}/",
            instruments=len(self.universe),
            source=self.source,
        )

    def _fail(self, reason: str) -> None:
        """A loop the supervisor cannot restart: stop, and exit non-zero with the reason."""
        self.failed = True
        self.failure_reason = reason
        self._stopped.set()

    async def _listen(self) -> None:
        """Bind both ports (a port in use is a ListenError naming it, and nothing stays bound),
        then record them in the data dir for the clients beside this node."""
        srv = self.cfg.server
        try:
            self.ws_port = await self.server.start()
        except OSError as exc:
            raise ListenError("terminals", "--ws-port", srv.host, srv.ws_port, exc) from exc
        try:
            self.admin_port = await self._admin.start(srv.host, srv.admin_port)
        except OSError as exc:
            await self.server.stop()
            raise ListenError(
                "the admin API", "--admin-port", srv.host, srv.admin_port, exc
            ) from exc
        started_ms = self.clock.wall_ns() // 1_000_000
        self.endpoints = endpoints_for(
            srv.host, self.ws_port, self.admin_port, self.data_dir, started_ms
        )
        try:
            write_endpoints(self.data_dir, self.endpoints)
        except OSError as exc:  # clients then need explicit URLs; market data is unaffected
            log_event("endpoints_not_written", level="warning", error=repr(exc))

    async def wait(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    def hurry(self) -> None:
        """Cut a stop's drain short (a second Ctrl-C): the rest are closed at once."""
        self._hurry.set()

    async def stop(self) -> None:
        self.ready = False
        if self.endpoints is not None:
            remove_endpoints(self.data_dir, self.endpoints.pid)  # no client dials a leaving node
        # SIGTERM drains like POST /admin/drain: terminals leave staggered, not as a storm.
        await self.server.drainer.before_stop(self._hurry)
        self.loop_lag.stop()
        await self.histograms.rotation.settle(10)
        await self.server.stop()
        await self.supervisor.cancel_all()
        if self.nats_bus is not None:
            await self.nats_bus.close()
        await self._admin.stop()
        for handler in self.handlers:
            handler.stop()
        self.kit.close()  # the last partial interval too: every value lands; GC unfrozen
        if self.verifier is not None:
            self.verifier.close()
        if self._dir_lock is not None:
            self._dir_lock.release()  # last: the data dir is free once its files are written
        # The node's own accounting, next to which the interval logs must add up exactly.
        log_event(
            "stopped",
            disconnects=dict(self.server.stats.disconnects),
            ticks_decoded=self.pipeline.decoded_ticks,
            ticks_admitted=self.sequencer.admitted_total,
            ticks_framed=self.pipeline.framed_ticks,
            frame_writes=self.server.stats.frame_writes,
            priority_writes=self.server.stats.priority_writes,
        )
