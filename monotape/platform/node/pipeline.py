"""The pipeline driver: the loops that move data between the stages on time.

venue (simulator or replay) -> both feed handlers of the venue -> (after their lag) the bus ->
the sequencer's lanes (admit) -> the 40 ms frame -> the fan-out. Each stage is a state machine;
the loops here only move values between them, stamp them for the stage histograms and contain
what one iteration raised (``StageFailures``), so one bad batch or frame never takes the tape
down. The supervisor (``supervisor.py``) starts these loops again if one dies anyway. What runs
beside the frames to keep the terminals (heartbeats, invariants, GC upkeep) is the fan-out's
upkeep (fanout_upkeep.py), a writer process's too.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from monotape.clock import Clock
from monotape.config import FeedConfig
from monotape.log import log_event
from monotape.platform.bus.memory import TickBus
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.handler import PUMP_INTERVAL_S, FeedHandler
from monotape.platform.feeds.replay import ReplayAdapter
from monotape.platform.feeds.simulator import VenueSimulator
from monotape.platform.feeds.venue_wire import per_venue, venue_batch
from monotape.platform.role.failures import StageFailures
from monotape.platform.role.grid import GridCounts, run_frame_grid
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire.batch import TickBatch, batch_from_ticks

__all__ = ["Pipeline"]


class Pipeline:
    """One event loop's pipeline: ``pump`` and ``frame`` do one step each (tests call them
    directly); the ``*_loop`` coroutines run them on time."""

    def __init__(
        self,
        *,
        clock: Clock,
        feeds: FeedConfig,
        frame_ns: int,
        simulator: VenueSimulator | None,
        replay: ReplayAdapter | None,
        handlers: Sequence[FeedHandler],
        bus: TickBus,
        sequencer: Sequencer,
        server: FanoutServer,
        stamps: StageStamps,
        failures: StageFailures,
    ) -> None:
        self.clock = clock
        self.feeds = feeds
        self.frame_ns = frame_ns
        self.simulator = simulator
        self.replay = replay
        self.handlers = handlers
        self.by_venue: Mapping[str, list[FeedHandler]] = _by_venue(handlers)
        self.bus = bus
        self.sequencer = sequencer
        self.server = server
        self.stamps = stamps
        self.failures = failures
        self.grid = GridCounts()  # the frame loop's boundaries, taken and skipped
        self.decoded_ticks = 0  # what the stage histograms must add up to
        self.framed_ticks = 0
        self._priority_among = server.terminals.index.priority_among
        bus.subscribe(self.on_batch)

    # -- one step each -------------------------------------------------------------------------
    def on_batch(self, batch: TickBatch) -> None:
        """A bus batch (by reference: the handler's own buffer): admit it, stamp what was
        applied, send the latest applied tick of each order-ticket symbol now."""
        try:
            admission = self.sequencer.on_batch(batch, self.clock.now_ns())
            if admission.count:
                self.stamps.admitted_batch(admission)
                wanted = self._priority_among(admission.iids)
                if wanted:
                    self.server.publish_priority(self.sequencer.latest(wanted))
        except Exception as exc:  # one batch; the next one is admitted as usual
            self.failures.record("sequence", exc, ticks=batch.count)

    def pump(self) -> None:
        """Move everything that is due: venue -> both handlers -> (after their lag) the bus."""
        if self.simulator is not None:
            updates = self.simulator.step()
            if updates:
                # each venue's updates as columns once, heard by both of its handlers
                for venue, heard in per_venue(updates).items():
                    handlers = self.by_venue.get(venue, ())
                    if handlers:
                        columns = venue_batch(venue, heard)
                        for handler in handlers:
                            handler.on_venue(columns)
        if self.replay is not None:
            ticks = self.replay.step()
            if ticks:
                for replayed in batch_from_ticks(ticks):
                    self._deliver(replayed)
        # Every handler drained at one time: a batch per handler and epoch, stamped, published
        # and admitted whole (issue 35: columns end to end, no object per tick).
        now = self.clock.now_ns()
        for handler in self.handlers:
            try:
                drained = handler.drain_batches(now)
            except Exception as exc:  # one handler's bug: the others' ticks still go out
                self.failures.record("pump", exc, venue=handler.venue)
                continue
            for batch in drained:
                self._deliver(batch)

    def _deliver(self, batch: TickBatch) -> None:
        """One decoded batch: its decode stamps, then the bus (by reference)."""
        self.decoded_ticks += batch.count
        self.stamps.decoded_batch(batch)
        self.bus.publish(batch)

    def frame(self, boundary: int) -> None:
        """One frame: pump what is due, take the frame at ``boundary``, encode it, fan it out."""
        self.pump()
        frame = self.sequencer.take_frame(boundary)
        published = self.server.publish_frame(frame)
        offset = self.clock.wall_ns() - self.clock.now_ns()
        self.framed_ticks += self.stamps.framed(boundary, published, offset, frame.count)
        # the frame's direct writes, then late ones out of slow terminals' rings (writer.py)
        self.stamps.written(
            np.asarray(self.server.write_latencies_ns, dtype=np.int64),
            self.server.written_iids,
            direct=self.server.writer.direct_writes,
        )
        self.server.flush_priority()  # the priority writes since the last frame

    # -- the loops -----------------------------------------------------------------------------
    async def pump_loop(self) -> None:
        while True:
            try:
                self.pump()
            except Exception as exc:  # contained: the next millisecond pumps as usual
                self.failures.record("pump", exc)
            await asyncio.sleep(PUMP_INTERVAL_S)

    async def frame_loop(self) -> None:
        # role/grid.py: on the monotonic clock's 40 ms grid, an overdue boundary at once, never
        # twice, never early; a frame that raises is one frame lost, not the tape.
        await run_frame_grid(self.clock.now_ns, self.frame_ns, self.frame, self.failures, self.grid)

    async def chaos_loop(self) -> None:
        """Restart one handler of every venue on a schedule: proves a restart never yields a
        regression or a frozen symbol."""
        every = self.feeds.restart_every_s
        which = 0
        while True:
            await asyncio.sleep(every)
            victims = [hs[which % len(hs)] for hs in self.by_venue.values() if hs]
            which += 1
            for h in victims:
                h.stop()
                log_event("handler_stopped", venue=h.venue, handler=h.name)
            await asyncio.sleep(self.feeds.restart_down_s)
            for h in victims:
                record = h.start()
                log_event(
                    "handler_restarted",
                    venue=h.venue,
                    handler=h.name,
                    epoch=record.epoch,
                    fence_ts_ns=record.fence_ts_ns,
                )


def _by_venue(handlers: Sequence[FeedHandler]) -> dict[str, list[FeedHandler]]:
    out: dict[str, list[FeedHandler]] = defaultdict(list)
    for h in handlers:
        out[h.venue].append(h)
    return dict(out)
