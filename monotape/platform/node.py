"""The composition root: build every stage from one Config, start it, stop it.

Everything of the embedded default runs in one event loop: the venue simulator (or a replay
file), two feed handlers per venue, the in-process bus, the sequencer lanes, the 40 ms frame
clock, the WebSocket fan-out and the admin API. Each piece is a state machine; the tasks here
only move data between them on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import uvicorn
from prometheus_client import CollectorRegistry, ProcessCollector

from monotape import metric_names as m
from monotape.clock import Clock, SystemClock
from monotape.config import Config
from monotape.histograms import Interval, IntervalLogWriter, Percentiles, Recorders, summarize
from monotape.histograms.gc import GcCollector, GcMonitor
from monotape.invariants import (
    InvariantCollector,
    InvariantMonitor,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.log import log_event
from monotape.platform.admin import build_admin_app
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.bus import InProcessBus, TickBus
from monotape.platform.bus_nats import NatsBusCollector, NatsTickBus
from monotape.platform.conflation import due_boundary
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.handler import FeedHandler, make_handler_pair
from monotape.platform.feeds.replay import ReplayAdapter
from monotape.platform.feeds.simulator import (
    VenueSimulator,
    VenueUpdate,
    build_universe,
    venues_with_update_ids,
)
from monotape.platform.gc_policy import FreezeAction, FreezePolicy
from monotape.platform.looplag import LoopLagCollector, LoopLagMonitor
from monotape.platform.metrics import (
    AuthCollector,
    FanoutCollector,
    FeedCollector,
    RuntimeCollector,
    StageLatencyCollector,
)
from monotape.platform.model import Instrument, Tick
from monotape.platform.sequencer import Sequencer, SequencerCollector
from monotape.platform.server import FanoutServer
from monotape.platform.stamps import StageStamps

__all__ = ["Node"]

PUMP_INTERVAL_S = 0.001  # handlers' delay lines are drained at ~1 ms resolution


async def _sleep_until(clock: Callable[[], int], deadline_ns: int) -> None:
    """Sleep until ``clock()`` reaches ``deadline_ns``, however early the timer fires."""
    while (now := clock()) < deadline_ns:
        await asyncio.sleep((deadline_ns - now) / 1e9)


class Node:
    def __init__(self, cfg: Config, clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.clock: Clock = clock or SystemClock()
        self.data_dir = Path(cfg.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.epochs = FileEpochStore(self.data_dir / "epochs")
        self.replay: ReplayAdapter | None = None
        self.simulator: VenueSimulator | None = None
        self.handlers: list[FeedHandler] = []
        self._by_venue: dict[str, list[FeedHandler]] = defaultdict(list)
        if cfg.feeds.replay:
            self.replay = ReplayAdapter(
                cfg.feeds.replay,
                self.clock,
                speed=cfg.feeds.replay_speed,
                start_delay_ns=int(cfg.feeds.replay_start_delay_s * 1e9),
            )
            self.universe: list[Instrument] = list(self.replay.universe)
        else:
            sim = cfg.simulator
            self.universe = build_universe(sim.venues, sim.instruments, sim.seed)
            self.simulator = VenueSimulator(self.universe, sim, self.clock)
            with_ids = venues_with_update_ids(self.universe)
            rng = random.Random(sim.seed)
            for venue in sorted({i.venue for i in self.universe}):
                pair = make_handler_pair(
                    venue,
                    self.epochs,
                    self.clock,
                    cfg.feeds.lag_min_ms,
                    cfg.feeds.lag_max_ms,
                    rng,
                    update_ids=venue in with_ids,
                    fence_ns=int(cfg.feeds.epoch_fence_ms * 1e6),
                )
                self.handlers.extend(pair)
                self._by_venue[venue].extend(pair)
        self.frame_ns = int(cfg.server.frame_ms * 1e6)
        self.nats_bus: NatsTickBus | None = None
        self.bus: TickBus
        if cfg.bus == "nats":
            # Cross-host: handlers publish venue batches to NATS, this sequencer subscribes.
            self.nats_bus = NatsTickBus(
                scheme=cfg.nats.subjects,
                symbols={i.iid: i.symbol for i in self.universe},
                array_like=cfg.nats.array_like,
                max_pending_batches=cfg.nats.max_pending_batches,
                name=f"monotape-{socket.gethostname()}-{os.getpid()}",
            )
            self.bus = self.nats_bus
        else:
            self.bus = InProcessBus()
        self.sequencer = Sequencer(cfg.server.lanes, self.frame_ns)
        # The key object is built once, here (DESIGN: Auth); a bad key file fails the start.
        self.verifier: TokenVerifier | None = (
            build_verifier(cfg.auth, cfg.data_dir, clock=self.clock) if cfg.auth.enabled else None
        )
        # Stage histograms: recorded per batch, rotated every 10 s into interval logs.
        self.stamps = StageStamps(Recorders(start_ms=self.clock.wall_ns() // 1_000_000))
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
        self.bus.subscribe(self._on_ticks)
        self.registry = CollectorRegistry()
        if self.nats_bus is not None:
            self.registry.register(NatsBusCollector(self.nats_bus))
        self.registry.register(SequencerCollector(self.sequencer))
        self.registry.register(FanoutCollector(self.server))
        self.registry.register(FeedCollector(lambda: self.handlers))
        if self.verifier is not None:
            self.registry.register(AuthCollector(self.verifier))
        self.invariants = InvariantMonitor(
            [
                SubscriptionCardinality(self.server.index, clock=self.clock),
                NoDanglingEntries(
                    self.server.index, lambda: self.server.connections, clock=self.clock
                ),
            ],
            interval_s=cfg.server.invariant_interval_s,
            clock=self.clock,
        )
        self.registry.register(InvariantCollector(self.invariants))
        self.hdr_dir = self.data_dir / "hdr"
        self.hdr_writer = IntervalLogWriter(
            self.hdr_dir,
            proc=f"node-{os.getpid()}",
            host=socket.gethostname(),
            max_age_s=cfg.server.hdr_max_age_s,
            max_bytes=cfg.server.hdr_max_bytes,
        )
        # GC pauses and event-loop lag, overlaid on the latency timeline.
        self.gc_monitor = GcMonitor(clock=self.clock)
        srv = cfg.server
        self.gc_policy = FreezePolicy(
            settle_s=srv.gc_refreeze_settle_s,
            reclaim_closed=srv.gc_reclaim_closed,
        )
        self.registry.register(GcCollector(self.gc_monitor, frozen_name=m.GC_FROZEN_OBJECTS))
        self.loop_lag = LoopLagMonitor(0.1)  # the real clock: a fake one would read no lag
        self.registry.register(LoopLagCollector(self.loop_lag, max_name=m.EVENT_LOOP_LAG_MAX))
        self.latest_latency: dict[str, Percentiles] = {}
        self._persist_lock = threading.Lock()
        self._rotating: asyncio.Future[dict[str, Percentiles]] | None = None
        self.decoded_ticks = 0  # what the stage histograms must add up to
        self.framed_ticks = 0
        self.registry.register(StageLatencyCollector(lambda: self.latest_latency))
        self.ws_port = 0
        self.admin_port = 0
        self.ready = False
        self.failed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._admin: uvicorn.Server | None = None
        self._stopped = asyncio.Event()

    def _overloaded(self) -> bool:
        return self.loop_lag.last_ns > self.cfg.server.admission_max_lag_ms * 1e6

    # -- data movement -------------------------------------------------------------------------
    def _on_ticks(self, ticks: Sequence[Tick]) -> None:
        applied = self.sequencer.on_ticks(ticks, self.clock.now_ns())
        if applied:
            self.stamps.admitted(applied)
            self.server.publish_priority(applied)

    def pump(self) -> None:
        """Move everything that is due: venue -> both handlers -> (after their lag) the bus."""
        if self.simulator is not None:
            updates = self.simulator.step()
            if updates:
                per_venue: dict[str, list[VenueUpdate]] = defaultdict(list)
                for u in updates:
                    per_venue[u.venue].append(u)
                for venue, batch in per_venue.items():
                    for handler in self._by_venue[venue]:
                        handler.on_venue(batch)
        if self.replay is not None:
            ticks = self.replay.step()
            if ticks:
                self.decoded_ticks += len(ticks)
                self.stamps.decoded(ticks)
                self.bus.publish(ticks)
        for handler in self.handlers:
            ticks = handler.drain_due()
            if ticks:
                self.decoded_ticks += len(ticks)
                self.stamps.decoded(ticks)
                self.bus.publish(ticks)

    async def _pump_loop(self) -> None:
        while True:
            self.pump()
            await asyncio.sleep(PUMP_INTERVAL_S)

    async def _frame_loop(self) -> None:
        # Boundaries sit on a fixed grid of the monotonic clock. An overdue one (the last frame
        # overran its 40 ms, or the loop woke late) is published at once, after one pass of the
        # loop for pending I/O (due_boundary says why); lateness never accumulates. An early
        # wake-up (uvloop's timers fire up to ~1 ms early) waits out the rest: a frame is never
        # taken before its boundary, and never twice for one boundary.
        last = 0
        while True:
            boundary = due_boundary(self.clock.now_ns(), last, self.frame_ns)
            if boundary > self.clock.now_ns():
                await _sleep_until(self.clock.now_ns, boundary)
                # woken late: the newest passed boundary, not this one and then the next at once
                boundary = due_boundary(self.clock.now_ns(), last, self.frame_ns)
            else:
                await asyncio.sleep(0)
            last = boundary
            self.pump()
            published = self.server.publish_frame(self.sequencer.take_frame(boundary))
            offset = self.clock.wall_ns() - self.clock.now_ns()
            self.framed_ticks += self.stamps.framed(boundary, published, offset)
            self.stamps.written(np.asarray(self.server.write_latencies_ns, dtype=np.int64))
            self.server.flush_priority()  # the priority writes since the last frame

    def _opened_closed(self) -> tuple[int, int]:
        stats = self.server.stats
        return stats.connections_total, sum(stats.disconnects.values())

    async def _gc_policy_loop(self) -> None:
        """Freeze new connections once they settle; reclaim closed ones' cycles now and then
        (monotape/platform/gc_policy.py says why)."""
        while True:
            await asyncio.sleep(1.0)
            action = self.gc_policy.decide(self.clock.now_ns() / 1e9, *self._opened_closed())
            if action is FreezeAction.FREEZE:
                frozen = self.gc_monitor.refreeze()
                log_event("gc_refrozen", frozen_objects=frozen)
            elif action is FreezeAction.RECLAIM:
                t0 = time.perf_counter()
                freed = self.gc_monitor.reclaim()
                log_event(
                    "gc_reclaimed",
                    freed=freed,
                    pause_ms=round((time.perf_counter() - t0) * 1e3, 2),
                    frozen_objects=gc.get_freeze_count(),
                )

    async def _rotate_off_loop(self) -> None:
        """The 10 s rotation: swapping the histograms is quick and stays on the loop; encoding
        and writing the intervals (a few ms) runs in a thread, so it never delays a frame or a
        priority update. The spares are recycled once the write is done."""
        self.server.flush_priority()  # priority writes since the last frame: this interval's
        wall = self.clock.wall_ns()
        intervals = self.stamps.rotate(wall // 1_000_000, wall - self.clock.now_ns())
        self._rotating = asyncio.ensure_future(
            asyncio.to_thread(self._persist, intervals, wall // 1_000_000)
        )
        # Shielded: a stop must not recycle histograms the thread is still encoding (stop()
        # waits for this write before it cancels the loop).
        summaries = await asyncio.shield(self._rotating)
        self.stamps.recorders.recycle_all(intervals)
        self.latest_latency = summaries

    def _persist(self, intervals: list[Interval], now_ms: int) -> dict[str, Percentiles]:
        # One writer at a time: a stop's final rotation may start while a cancelled rotation's
        # thread is still writing.
        with self._persist_lock:
            self.hdr_writer.write(intervals)
            self.hdr_writer.apply_retention(now_ms)
        return {
            iv.stage: summarize(
                iv.histogram,
                stage=iv.stage,
                window_start_ms=iv.start_ms,
                window_end_ms=iv.end_ms,
                intervals=1,
            )
            for iv in intervals
        }

    def rotate_histograms(self, *, final: bool = False) -> None:
        """Rotate on the loop, write in place: for a stop (``final``) and for tests."""
        self.server.flush_priority()
        wall = self.clock.wall_ns()
        intervals = self.stamps.rotate(wall // 1_000_000, wall - self.clock.now_ns(), final=final)
        try:
            self.latest_latency = self._persist(intervals, wall // 1_000_000)
        finally:
            self.stamps.recorders.recycle_all(intervals)

    async def _rotation_loop(self) -> None:
        # Rotations sit on the wall clock's 10 s grid, so intervals of every process and host
        # line up and merge window by window.
        step_ns = int(self.cfg.server.hdr_interval_s * 1e9)
        while True:
            wall = self.clock.wall_ns()
            await _sleep_until(self.clock.wall_ns, wall - wall % step_ns + step_ns)
            try:
                await self._rotate_off_loop()
            except Exception as exc:  # a full disk must not stop market data
                log_event("rotation_failed", level="error", error=repr(exc))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.server.heartbeat_s)
            self.server.publish_heartbeat(self.clock.wall_ns() // 1_000_000)

    async def _chaos_loop(self) -> None:
        """Restart one handler of every venue on a schedule: proves a restart never yields a
        regression or a frozen symbol."""
        every = self.cfg.feeds.restart_every_s
        which = 0
        while True:
            await asyncio.sleep(every)
            victims = [hs[which % len(hs)] for hs in self._by_venue.values() if hs]
            which += 1
            for h in victims:
                h.stop()
                log_event("handler_stopped", venue=h.venue, handler=h.name)
            await asyncio.sleep(self.cfg.feeds.restart_down_s)
            for h in victims:
                record = h.start()
                log_event(
                    "handler_restarted",
                    venue=h.venue,
                    handler=h.name,
                    epoch=record.epoch,
                    fence_ts_ns=record.fence_ts_ns,
                )

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self.gc_monitor.install()
        if self.nats_bus is not None:
            servers = [u.strip() for u in self.cfg.nats.servers.split(",") if u.strip()]
            await self.nats_bus.connect(servers, timeout_s=self.cfg.nats.connect_timeout_s)
        for handler in self.handlers:
            record = handler.start()
            log_event(
                "handler_started", venue=handler.venue, handler=handler.name, epoch=record.epoch
            )
        self.registry.register(RuntimeCollector(asyncio.get_running_loop()))
        ProcessCollector(registry=self.registry)  # process RSS, CPU seconds, open fds
        self.ws_port = await self.server.start()
        await self._start_admin()
        if self.cfg.server.gc_freeze:
            log_event("gc_frozen", objects=self.gc_monitor.freeze_after_warmup())
            self.gc_policy.start(*self._opened_closed())
        loop_tasks = [
            self.loop_lag.run(),
            self._pump_loop(),
            self._frame_loop(),
            self._heartbeat_loop(),
            self.invariants.run_forever(),
            self._rotation_loop(),
        ]
        if self.cfg.server.glass_share > 0:
            loop_tasks.append(self.server.glass_loop())
        if self.cfg.server.keepalive_interval_s > 0:
            loop_tasks.append(self.server.keepalive_loop())
        if self.cfg.server.gc_freeze and self.cfg.server.gc_refreeze:
            loop_tasks.append(self._gc_policy_loop())
        if self.cfg.feeds.restart_every_s > 0 and self.handlers:
            loop_tasks.append(self._chaos_loop())
        self._tasks = [asyncio.create_task(t) for t in loop_tasks]
        for task in self._tasks:
            task.add_done_callback(self._task_done)
        self.ready = True
        log_event(
            "listening",
            ws=f"ws://{self.cfg.server.host}:{self.ws_port}/",
            admin=f"http://{self.cfg.server.host}:{self.admin_port}/",
            instruments=len(self.universe),
            source="replay" if self.replay else "simulator",
        )

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # The data path itself failed: stop, and exit non-zero so a supervisor restarts us.
            log_event("task_failed", level="error", task=task.get_name(), error=repr(exc))
            self.failed = True
            self._stopped.set()

    async def _start_admin(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.cfg.server.host, self.cfg.server.admin_port))
        self.admin_port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_admin_app(self), log_level="warning", lifespan="off", access_log=False
        )
        self._admin = uvicorn.Server(config)
        config.load()
        self._admin.lifespan = config.lifespan_class(config)
        # startup()/shutdown() rather than serve(): serve() would take over SIGINT/SIGTERM,
        # which belong to the node (graceful stop of everything, terminals first).
        await self._admin.startup(sockets=[sock])
        self._admin_sock = sock

    async def wait(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    async def stop(self) -> None:
        self.ready = False
        if self.cfg.server.drain_on_stop and self.server.connections:
            # SIGTERM drains like POST /admin/drain: terminals leave staggered, not as a storm.
            self.server.start_drain()
            await self.server.wait_drained(self.cfg.server.drain_timeout_s)
        self.loop_lag.stop()
        if self._rotating is not None and not self._rotating.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._rotating), 10)
        await self.server.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.nats_bus is not None:
            await self.nats_bus.close()
        if self._admin is not None:
            self._admin.should_exit = True
            await self._admin.shutdown(sockets=[self._admin_sock])
            self._admin_sock.close()
        for handler in self.handlers:
            handler.stop()
        self.rotate_histograms(final=True)  # the last partial interval too: every value lands
        self.hdr_writer.close()
        if self.verifier is not None:
            self.verifier.close()
        self.gc_monitor.uninstall()
        if self.cfg.server.gc_freeze:
            gc.unfreeze()  # a node inside a test process must not leave its objects frozen
        # The node's own accounting, next to which the interval logs must add up exactly.
        log_event(
            "stopped",
            disconnects=dict(self.server.stats.disconnects),
            ticks_decoded=self.decoded_ticks,
            ticks_admitted=self.sequencer.admitted_total,
            ticks_framed=self.framed_ticks,
            frame_writes=self.server.stats.frame_writes,
            priority_writes=self.server.stats.priority_writes,
        )
