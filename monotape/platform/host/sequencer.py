"""The sequencer role: lanes, conflation, encode once, the frame ring's producer (issue 12).

``python -m monotape.platform.host sequencer SPEC_JSON`` runs ``main(spec)``: the one process of
a host that admits ticks and publishes frames. Ticks arrive on the host's IPC bus (``bus/ipc.py``,
``run_dir/bus.sock``: this end binds it) or on NATS when ``cfg.bus == "nats"`` (as the one-process
node subscribes); every batch is admitted by the lanes (``Sequencer.on_ticks``) and the applied
ticks of symbols some writer's terminal holds in an order ticket go out at once as a PRIORITY
entry. On the 40 ms grid of the monotonic clock (``role/grid.py``: the one loop the one-process
node's ``Pipeline.frame_loop`` runs too) the frame is taken, encoded once and published on the ring
(``publisher.FramePublisher``); the writer processes read it from there.

The host creates the ring and the interest segments and owns their unlink; this role attaches
(``ShmRing.reopen``: the ring's generation moves, so every writer snapshots its terminals) and,
on every start, seeds its admit state from the ring's snapshot table, so a restarted sequencer
never publishes a version at or below one terminals were shown (``publisher.seed``).

Telemetry: its own registry (sequencer counts, refused ticks and contained failures, the stage
histograms it records: ``decode`` (stamped per bus batch: ticks carry ``decoded_ns`` on the
monotonic clock every process of the host shares), ``sequence``, ``conflate``, ``encode``; the
ring producer's counters, the bus's, GC pauses, loop lag, process), served on loopback for the
host to scrape (``telemetry.serve_metrics``); interval logs under ``<data-dir>/hdr`` as every
process writes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from monotape.clock import Clock
from monotape.config import Config
from monotape.log import log_event
from monotape.platform.bus.ipc_collector import LinkCollector
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.core.feed_liveness import FeedLiveness
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.sources import universe_of
from monotape.platform.feeds.validate import TickGate
from monotape.platform.host.buses import role_bus
from monotape.platform.host.interest import PriorityInterest
from monotape.platform.host.lifeline import ROLE_STOP_S, run_role, stop_on_signals, watch_host
from monotape.platform.host.publisher import FramePublisher, seed
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.state import RoleView, sequencer_state
from monotape.platform.host.telemetry import RoleState, serve_metrics
from monotape.platform.ring.collector import RingProducerCollector
from monotape.platform.ring.shm import ShmRing
from monotape.platform.ring.venues import VenueBits
from monotape.platform.role.collectors import (
    FrameGridCollector,
    IngestCollector,
    SequencerCollector,
)
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.grid import GridCounts, run_frame_grid
from monotape.platform.role.kit import RoleKit
from monotape.platform.wire.batch import TickBatch

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from monotape.platform.bus.ipc import IpcTickBus

__all__ = ["SequencerRole", "main"]


class SequencerRole:
    """The role's pieces, built from the config and the spec; ``run`` drives them."""

    def __init__(self, spec: RoleSpec, cfg: Config, clock: Clock | None = None) -> None:
        self.spec = spec
        self.cfg = cfg
        self.name = spec.name or "sequencer"
        # The role kit (role/kit.py): clock, registry, GC and loop-lag monitors, and the stage
        # histograms (no priority writes here to flush first: the writers record them).
        self.kit = RoleKit(cfg, self.name, clock)
        self.clock: Clock = self.kit.clock
        self.histograms = self.kit.record_stages()
        self.stamps = self.histograms.stamps
        self.gc_monitor = self.kit.watch_gc()
        self.loop_lag = self.kit.watch_loop()
        self.universe = universe_of(cfg)
        self.gate = TickGate(self.universe, self.clock.now_ns)
        self.failures = StageFailures(self.clock.now_ns)
        self.frame_ns = int(cfg.server.frame_ms * 1e6)
        self.grid = GridCounts()  # the frame loop's boundaries, taken and skipped
        self.sequencer = Sequencer(cfg.server.lanes, self.frame_ns)
        self.ring = ShmRing.reopen(spec.ring)
        self.interest = _attach_interest(spec.interest)
        self.publisher = FramePublisher(
            self.ring, self.clock.now_ns, interest=self.interest, failures=self.failures
        )
        # Every start seeds from the ring: empty on the host's first start, the dead
        # sequencer's last published versions (framed, and priority since) after a restart.
        venue_of = {i.iid: i.venue for i in self.universe}
        self.seeded = seed(self.sequencer, self.ring, venue_of)
        # which venues' handlers have all gone silent (their beats stopped): STALE at terminals
        self.liveness = FeedLiveness(self.clock.now_ns())
        self.venue_bits = VenueBits.of(i.venue for i in self.universe)
        self.down_venues: frozenset[str] = frozenset()
        self.decoded_ticks = 0  # ticks whose decode this process recorded
        self.framed_ticks = 0
        self.nats_bus: NatsTickBus | None = None
        self.ipc_bus: IpcTickBus | None = None
        self.registry = self.kit.registry
        self.kit.register(
            SequencerCollector(self.sequencer),
            FrameGridCollector(self.grid),
            IngestCollector(lambda: self.gate, self.failures),
            RingProducerCollector(lambda: self.ring.counters),
            self._build_bus(),
        )

    def _build_bus(self) -> Collector:
        """The bus this end subscribes to (host/buses.py) and its collector."""
        bus = role_bus(
            self.cfg, self.spec.run_dir, self.name, self.universe, self.clock.now_ns, gate=self.gate
        )
        bus.subscribe(self.on_batch)
        bus.on_heard(self.heard)
        if isinstance(bus, NatsTickBus):
            self.nats_bus = bus
            return NatsBusCollector(bus)
        ipc = self.ipc_bus = bus
        return LinkCollector(lambda: [ipc.counters])

    # -- one step each (tests call them directly) ----------------------------------------------
    def on_batch(self, batch: TickBatch) -> None:
        """A bus batch (read in place): stamp its decode, admit it, stamp what was applied,
        publish the wanted ones now. ``decode`` is recorded here, not in the handler processes:
        a batch is one handler drain, and its ``recv_ts`` (CLOCK_MONOTONIC) means the same in
        every process of the host, so the venue-to-decode figure is the node's
        (Pipeline._deliver)."""
        try:
            self.decoded_ticks += batch.count
            self.stamps.decoded_batch(batch)
            now = self.clock.now_ns()
            admission = self.sequencer.on_batch(batch, now)
            if admission.count:
                self.stamps.admitted_batch(admission)
                wanted = self.publisher.wanted(admission.iids)
                if wanted:
                    self.publisher.publish_priority(self.sequencer.latest(wanted), now)
        except Exception as exc:  # one batch; the next one is admitted as usual
            self.failures.record("sequence", exc, ticks=batch.count)

    def heard(self, venue: str, handler: str) -> None:
        """A batch (or a handler's beat) arrived from ``handler`` of ``venue``."""
        self.liveness.seen(venue, handler, self.clock.now_ns())

    def judge_venues(self, now: int) -> None:
        """Say in the next FRAME entry which venues' handlers are all silent; log each change."""
        down = self.liveness.down(now)
        if down == self.down_venues:
            return
        for venue in sorted(down - self.down_venues):
            log_event(
                "venue_stale",
                level="warning",
                venue=venue,
                silent_ms=self.liveness.limit_ns // 1_000_000,
            )
        for venue in sorted(self.down_venues - down):
            log_event("venue_fresh", venue=venue)
        self.down_venues = down
        self.publisher.set_down_venues(self.venue_bits.mask(down))

    def frame(self, boundary: int) -> None:
        """One boundary: take the frame, encode it once, put its snapshots, publish it."""
        self.judge_venues(self.clock.now_ns())
        frame = self.sequencer.take_frame(boundary)
        # the ages of the ticks it carries, for the writers' tick_to_write (taken before
        # framed() below hands them to this process's conflate and encode stages)
        _, published = self.publisher.publish_frame(frame, self.stamps.frame_ticks())
        offset = self.clock.wall_ns() - self.clock.now_ns()
        self.framed_ticks += self.stamps.framed(boundary, published, offset)

    async def frame_loop(self) -> None:
        # The one-process node's grid (role/grid.py): an overdue boundary at once, never twice,
        # never early; a frame that raises is one frame lost (writers see a gap), not the tape.
        await run_frame_grid(self.clock.now_ns, self.frame_ns, self.frame, self.failures, self.grid)

    # -- lifecycle -----------------------------------------------------------------------------
    async def run(self) -> int:
        stop = asyncio.Event()
        stop_on_signals(stop)
        self.kit.start()
        tasks: list[asyncio.Task[None]] = []
        try:
            if self.nats_bus is not None:  # subscribed before the first frame
                nats = self.cfg.nats
                servers = [u.strip() for u in nats.servers.split(",") if u.strip()]
                connect = self.nats_bus.connect(servers, timeout_s=nats.connect_timeout_s)
                if not await _unless_stopped(connect, stop):
                    return 0  # stopped while NATS was still out of reach
            if self.ipc_bus is not None:
                self.ipc_bus.listen()  # binds run_dir/bus.sock: the handlers connect to it
            # The same loopback port answers the host's admin API: prices, GC (host/state.py).
            view = RoleView(self.clock, gc_monitor=self.gc_monitor, loop_lag=self.loop_lag)
            state = RoleState(asyncio.get_running_loop())
            sequencer_state(state, view, self.universe, self.sequencer)
            serve_metrics(self.registry, self.spec.run_dir, self.name, state)
            self.kit.freeze()  # when server.gc_freeze says so, after the warm-up
            for coro in (
                self.frame_loop(),
                *(loop() for loop in self.kit.loops()),
                watch_host(self.spec.host_pid, stop),
            ):
                tasks.append(asyncio.ensure_future(coro))
            log_event(
                "role_started",
                role="sequencer",
                bus="nats" if self.nats_bus is not None else "ipc",
                ring=self.ring.name,
                lanes=self.cfg.server.lanes,
                restarts=self.spec.restarts,
                seeded=self.seeded.seeded,
                undecodable=self.seeded.undecodable,
                table_puts=self.seeded.table_puts,
            )
            await stop.wait()
        finally:
            await self._stop(tasks)
        return 0

    async def _stop(self, tasks: list[asyncio.Task[None]]) -> None:
        self.loop_lag.stop()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):
            if self.nats_bus is not None:
                await asyncio.wait_for(self.nats_bus.close(timeout=0.5), ROLE_STOP_S / 2)
            if self.ipc_bus is not None:
                self.ipc_bus.close()
        await self.histograms.rotation.settle(ROLE_STOP_S / 4)
        self.kit.close()  # the last partial interval: every value lands
        self.ring.close(unlink=False)  # the host owns the segment
        if self.interest is not None:
            self.interest.close()
        log_event(
            "role_stopped",
            role="sequencer",
            ticks_decoded=self.decoded_ticks,
            ticks_admitted=self.sequencer.admitted_total,
            ticks_framed=self.framed_ticks,
            frames=self.publisher.frames,
            priority_entries=self.publisher.priority_entries,
        )


def _attach_interest(name: str) -> PriorityInterest | None:
    """The host's priority-interest segment, or None (no segment: no priority path)."""
    return PriorityInterest.attach(name) if name else None


async def _unless_stopped(step: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``step`` unless ``stop`` is set first (then cancel it): a SIGTERM during a long
    connect still stops the role within its deadline. False when stopped; raises what the
    step raised."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return False
    task.result()
    return True


def main(spec: RoleSpec) -> int:
    # a standby builds the universe before its takeover (lifeline.stand_by)
    return run_role(spec, "sequencer", lambda cfg: SequencerRole(spec, cfg).run(), warm=universe_of)
