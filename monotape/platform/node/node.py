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
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from prometheus_client import CollectorRegistry, ProcessCollector

from monotape import metric_names as m
from monotape.clock import Clock, SystemClock
from monotape.config import Config
from monotape.dashboards.panels import sampled_names
from monotape.dashboards.sampler import SampleRing, sample_registry
from monotape.histograms import (
    Interval,
    IntervalLogWriter,
    Percentiles,
    Recorders,
    StageDurationCollector,
    summarize,
)
from monotape.histograms.gc import GcCollector, GcMonitor
from monotape.invariants import (
    InvariantCollector,
    InvariantMonitor,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.log import log_event
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.bus.memory import InProcessBus, TickBus
from monotape.platform.bus.nats_bus import NatsBusCollector, NatsTickBus
from monotape.platform.core.conflation import due_boundary
from monotape.platform.core.gc_policy import FreezeAction, FreezePolicy
from monotape.platform.core.sequencer import Sequencer, SequencerCollector
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.handler import FeedHandler, make_handler_pair
from monotape.platform.feeds.replay import ReplayAdapter
from monotape.platform.feeds.simulator import (
    VenueSimulator,
    VenueUpdate,
    build_universe,
    venues_with_update_ids,
)
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Instrument, Tick
from monotape.platform.node.admin import build_admin_app
from monotape.platform.node.collectors import (
    AuthCollector,
    FanoutCollector,
    FeedCollector,
    IngestCollector,
    RuntimeCollector,
    StageLatencyCollector,
)
from monotape.platform.node.endpoints import (
    Endpoints,
    ListenError,
    endpoints_for,
    remove_endpoints,
    write_endpoints,
)
from monotape.platform.node.failures import StageFailures
from monotape.platform.server.fanout_server import FanoutServer
from monotape.platform.server.looplag import LoopLagCollector, LoopLagMonitor

__all__ = ["Node"]

PUMP_INTERVAL_S = 0.001  # handlers' delay lines are drained at ~1 ms resolution
MAX_RESTARTS = 5  # a loop that died is started again at most this often per minute...
RESTART_WINDOW_NS = 60 * 1_000_000_000  # ...after that the node exits non-zero, saying why


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
            self.gate = self._replay_gate(self.replay)
        else:
            sim = cfg.simulator
            self.universe = build_universe(sim.venues, sim.instruments, sim.seed)
            # The doors where ticks enter (handlers, NATS) share one gate: refused ticks are
            # counted per venue and reason, and logged with where they came from.
            self.gate = TickGate(self.universe, self.clock.now_ns)
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
                    gate=self.gate,
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
        self.server.failures = self.server.snapshots.failures = self.failures
        self.bus.subscribe(self._on_ticks)
        self.registry = CollectorRegistry()
        if self.nats_bus is not None:
            self.registry.register(NatsBusCollector(self.nats_bus))
        self.registry.register(SequencerCollector(self.sequencer))
        self.registry.register(FanoutCollector(self.server))
        self.registry.register(FeedCollector(lambda: self.handlers))
        self.registry.register(IngestCollector(lambda: self.gate, self.failures))
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
            on_failure=lambda name, exc: self.failures.record("invariants", exc, invariant=name),
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
        # The same values as bucket counts, which add across processes and hosts
        self.registry.register(StageDurationCollector(lambda: self.stamps.recorders))
        # The embedded dashboards' history: the panels' metrics, sampled every second.
        self.dashboard_ring = SampleRing(sampled_names())
        self.ws_port = 0
        self.admin_port = 0
        self.ready = False
        self.failed = False
        self.failure_reason = ""
        self._restarts: dict[str, list[int]] = {}  # task name -> monotonic times restarted
        self._tasks: list[asyncio.Task[None]] = []
        self._admin: uvicorn.Server | None = None
        self._stopped = asyncio.Event()
        self._hurry = asyncio.Event()
        self.endpoints: Endpoints | None = None

    def _overloaded(self) -> bool:
        return self.loop_lag.last_ns > self.cfg.server.admission_max_lag_ms * 1e6

    # -- data movement -------------------------------------------------------------------------
    def _replay_gate(self, replay: ReplayAdapter) -> TickGate:
        """The replay's door: lines refused at load are counted and logged with their line."""
        gate = TickGate(replay.universe, self.clock.now_ns)
        for r in replay.refused:
            gate.refuse(r.venue, r.reason, f"{replay.path} line {r.lineno}", r.detail)
        for lineno, gap_ms in replay.long_gaps[:3]:
            log_event(
                "replay_pause",
                level="warning",
                where=f"{replay.path} line {lineno}",
                pause_s=round(gap_ms / 1e3, 1),
                speed=self.cfg.feeds.replay_speed,
                long_pauses=len(replay.long_gaps),
            )
        return gate

    def _on_ticks(self, ticks: Sequence[Tick]) -> None:
        try:
            applied = self.sequencer.on_ticks(ticks, self.clock.now_ns())
            if applied:
                self.stamps.admitted(applied)
                self.server.publish_priority(applied)
        except Exception as exc:  # one batch; the next one is admitted as usual
            self.failures.record("sequence", exc, ticks=len(ticks))

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
            try:
                self.pump()
            except Exception as exc:  # contained: the next millisecond pumps as usual
                self.failures.record("pump", exc)
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
            try:
                self.frame(boundary)
            except Exception as exc:
                # One frame is lost, not the tape: terminals whose chain it broke see a gap on
                # the next frame and get a snapshot (docs/wire.md), everyone else carries on.
                self.failures.record("frame", exc, boundary_ns=boundary)

    def frame(self, boundary: int) -> None:
        """One frame: pump what is due, take the frame at ``boundary``, encode it, fan it out."""
        self.pump()
        published = self.server.publish_frame(self.sequencer.take_frame(boundary))
        offset = self.clock.wall_ns() - self.clock.now_ns()
        self.framed_ticks += self.stamps.framed(boundary, published, offset)
        self.stamps.written(
            np.asarray(self.server.write_latencies_ns, dtype=np.int64), self.server.written_iids
        )
        self.server.flush_priority()  # the priority writes since the last frame

    def _opened_closed(self) -> tuple[int, int]:
        stats = self.server.stats
        return stats.connections_total, sum(stats.disconnects.values())

    async def _gc_policy_loop(self) -> None:
        """Freeze new connections once they settle; reclaim closed ones' cycles now and then
        (monotape/platform/core/gc_policy.py says why)."""
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
            # A node that starts has no live twin to race: its epochs take effect at once, above
            # everything the data dir says it ever issued (FeedHandler.start).
            record = handler.start(at_once=True)
            log_event(
                "handler_started", venue=handler.venue, handler=handler.name, epoch=record.epoch
            )
        self.registry.register(RuntimeCollector(asyncio.get_running_loop()))
        ProcessCollector(registry=self.registry)  # process RSS, CPU seconds, open fds
        await self._listen()
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
            sample_registry(self.dashboard_ring, self.registry, self.clock, self.loop_lag),
        ]
        if self.cfg.server.glass_share > 0:
            loop_tasks.append(self.server.glass_loop())
        if self.cfg.server.keepalive_interval_s > 0:
            loop_tasks.append(self.server.keepalive_loop())
        if self.cfg.server.gc_freeze and self.cfg.server.gc_refreeze:
            loop_tasks.append(self._gc_policy_loop())
        if self.cfg.feeds.restart_every_s > 0 and self.handlers:
            loop_tasks.append(self._chaos_loop())
        # Named by the coroutine's qualname ("Node._frame_loop"): how the supervisor knows it.
        self._tasks = [
            asyncio.create_task(t, name=getattr(t, "__qualname__", None)) for t in loop_tasks
        ]
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

    def _restartable(self) -> dict[str, Callable[[], Coroutine[Any, Any, None]]]:
        """The loops the supervisor may start again, by task name (the coroutine's qualname)."""
        loops: list[Callable[[], Coroutine[Any, Any, None]]] = [
            self._pump_loop,
            self._frame_loop,
            self._heartbeat_loop,
            self._rotation_loop,
            self._gc_policy_loop,
            self._chaos_loop,
            self.server.glass_loop,
            self.server.keepalive_loop,
            self.invariants.run_forever,
        ]
        return {loop.__qualname__: loop for loop in loops}

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopped.is_set():
            return
        exc = task.exception()
        if exc is None:
            return
        # Each loop contains its own per-iteration failures; one that still died is counted
        # and started again, unless it keeps dying (then restarting is not helping).
        name = task.get_name()
        self.failures.record("supervisor", exc, task=name)
        factory = self._restartable().get(name)
        now = self.clock.now_ns()
        recent = [t for t in self._restarts.get(name, []) if now - t < RESTART_WINDOW_NS]
        if factory is not None and len(recent) < MAX_RESTARTS:
            self._restarts[name] = [*recent, now]
            log_event("task_restarted", level="error", task=name, error=repr(exc))
            if task in self._tasks:
                self._tasks.remove(task)
            again = asyncio.get_running_loop().create_task(factory(), name=name)
            again.add_done_callback(self._task_done)
            self._tasks.append(again)
            return
        # Cannot restart it: stop, and exit non-zero with the reason so a supervisor sees it.
        why = "not restartable" if factory is None else f"died {MAX_RESTARTS + 1} times in 60 s"
        log_event("task_failed", level="error", task=name, error=repr(exc), reason=why)
        self.failed = True
        self.failure_reason = f"{name} {why}: {exc!r}"
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
            await self._start_admin()
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

    async def _start_admin(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.cfg.server.host, self.cfg.server.admin_port))
        except OSError:
            sock.close()
            raise
        self.admin_port = sock.getsockname()[1]
        # log_config=None: uvicorn's records go through the process's one log handler
        # (monotape.log), not through a second format of its own.
        config = uvicorn.Config(
            build_admin_app(self),
            log_level="warning",
            lifespan="off",
            access_log=False,
            log_config=None,
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

    def hurry(self) -> None:
        """Cut a stop's drain short (a second Ctrl-C): the rest are closed at once."""
        self._hurry.set()

    async def stop(self) -> None:
        self.ready = False
        if self.endpoints is not None:
            remove_endpoints(self.data_dir, self.endpoints.pid)  # no client dials a leaving node
        if self.cfg.server.drain_on_stop and self.server.connections and not self._hurry.is_set():
            # SIGTERM drains like POST /admin/drain: terminals leave staggered, not as a storm.
            self.server.start_drain()
            drained = asyncio.ensure_future(
                self.server.wait_drained(self.cfg.server.drain_timeout_s)
            )
            hurried = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait({drained, hurried}, return_when=asyncio.FIRST_COMPLETED)
            for fut in (drained, hurried):
                fut.cancel()
            if self._hurry.is_set():
                log_event("drain_cut_short", remaining=len(self.server.connections))
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
