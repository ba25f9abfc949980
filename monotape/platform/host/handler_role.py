"""One venue's feed handler inside a feed process (issue 12): it hears its venue's socket,
normalizes with the one-process node's state machine and says what is due; ``FeedGroup``
(host/feed_group.py) drives the handlers of one process.

Epochs across processes: a handler that starts bumps its venue's epoch in the shared file store
(under ``flock``). The first handler of a venue to start in a host run bumps at once (no live
twin to race, as the node's cold start); every later start (its twin, or a restart after kill -9
or a crash) bumps with the 250 ms fence exactly as a restarted in-process handler does
(``first_of_venue`` says why), so versions never go back and the twins stamp the same ones. A
twin sees the other's bump by re-reading the store before it stamps, at most every
``EPOCH_CHECK_NS`` (10 ms, far inside the fence). A message on the feed that is lost (this
process down or slow) is a real feed's packet loss: the twin still carries the venue, the
version rule keeps one copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from monotape.clock import Clock, SystemClock
from monotape.config import Config
from monotape.log import log_event
from monotape.platform.bus.link import LinkCounters
from monotape.platform.bus.memory import TickBus
from monotape.platform.core.feed_liveness import BEAT_NS
from monotape.platform.feeds.epochs import FileEpochStore
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.sources import HandlerPlan, build_handler
from monotape.platform.feeds.validate import TickGate
from monotape.platform.host.spec import RoleSpec
from monotape.platform.wire.batch import COLUMNS, BatchError, TickBatch, batch_of, read_batch

__all__ = ["EPOCH_CHECK_NS", "HandlerRole", "feed_path", "first_of_venue", "process_gate"]

EPOCH_CHECK_NS = 10_000_000  # a twin's bump is seen within 10 ms (the fence is 250 ms)
_NO_TICKS: dict[str, list[int]] = {name: [] for name, _ in COLUMNS}


def process_gate(cfg: Config, clock: Clock) -> TickGate:
    """The tick gate of a feed process: one for all its handlers (the node's handlers share one
    too), so its counters are the process's ingest refusals, by venue."""
    sim = cfg.simulator
    return TickGate(build_universe(sim.venues, sim.instruments, sim.seed), clock.now_ns)


def feed_path(run_dir: str | Path, key: str) -> Path:
    """The socket a handler hears its venue on: ``run_dir/feed-XNAS-A.sock``."""
    return Path(run_dir) / f"feed-{key}.sock"


@contextlib.contextmanager
def first_of_venue(run_dir: str | Path, venue: str) -> Iterator[bool]:
    """True for the first handler of ``venue`` to start in this host run (``run_dir``), False
    for every later start (its twin, or itself restarted); held until the caller has bumped.

    The first one bumps at once, as the node's cold start does: nothing of this run to race,
    and its epoch is above anything an earlier run issued from the first update on. Every later
    start may have a live twin, so it bumps behind the 250 ms fence, as a restarted in-process
    handler does. Deciding by ``spec.restarts`` alone would not do: on the host's first start
    both twins have ``restarts == 0``, and a second at-once bump lets the later twin stamp its
    delay line's *older* updates above the first twin's newer ones (a price moving back on
    screen). The lock also orders the bumps: the at-once one is never behind a fenced one."""
    base = Path(run_dir)
    fd = os.open(base / f"start-{venue}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        marker = base / f"started-{venue}"
        first = not marker.exists()
        if first:
            marker.touch()
        yield first
    finally:
        os.close(fd)  # closing releases the lock


class HandlerRole:
    """One venue's handler in a role process; ``on_feed`` and ``pump`` are one step each (tests
    call them with a fake clock and an in-process bus). ``FeedGroup`` drives several."""

    def __init__(
        self,
        spec: RoleSpec,
        cfg: Config,
        plan: HandlerPlan,
        bus: TickBus,
        clock: Clock | None = None,
        gate: TickGate | None = None,
    ) -> None:
        self.spec = spec
        self.plan = plan
        self.clock: Clock = clock or SystemClock()
        self.gate = gate or process_gate(cfg, self.clock)  # the process's (``process_gate``)
        self.epochs = FileEpochStore(Path(cfg.data_dir) / "epochs")
        self.handler = build_handler(plan, cfg, self.epochs, self.clock, self.gate)
        self.bus = bus
        self.feed = LinkCounters(f"feed-{plan.key}")
        self.published = 0
        self.beats = 0  # header-only batches sent while the venue had nothing due
        self._beat_at = 0  # the last time this handler put anything on the bus (monotonic ns)
        # Called when an update lands in an empty delay line (the driver's timer may be for
        # later than this new head, or there may be none).
        self.on_head: Callable[[int], None] | None = None  # called with the new head's due time
        self._next_epoch_check = 0
        self._epoch_file: tuple[int, int, int] | None = None  # its (inode, mtime, size) read

    def start(self) -> int:
        """Go live: bump the venue's epoch, at once if this is the first handler of its venue
        to start in this host run, else behind the fence (``first_of_venue``); the new epoch."""
        with first_of_venue(self.spec.run_dir, self.plan.venue) as first:
            record = self.handler.start(at_once=first)
        self._next_epoch_check = self.clock.now_ns() + EPOCH_CHECK_NS
        log_event(
            "handler_started",
            venue=self.plan.venue,
            handler=self.plan.name,
            epoch=record.epoch,
            fence_ts_ns=record.fence_ts_ns,
            restarts=self.spec.restarts,
            at_once=first,
        )
        return record.epoch

    def on_feed(self, message: bytes) -> None:
        """One message from the venue: its columns (read in place, ``feeds/venue_wire.py``)
        enter the handler's delay line; a message that is not a batch is counted as malformed
        and by reason in the gate, never half-read."""
        try:
            updates = read_batch(message)
        except BatchError as exc:
            self.feed.malformed_messages += 1
            self.gate.refuse_batch(exc.reason, f"feed {self.plan.key}", str(exc))
            return
        self.feed.received_items += updates.count
        idle = self.handler.next_due_ns is None
        self.handler.on_venue(updates)
        head = self.handler.next_due_ns
        if idle and head is not None and self.on_head is not None:
            # The delay line was empty: tell the driver about the new head rather than wake
            # it to look (a loop pass and a pump for nothing, ~350 a second per handler at
            # the default rate).
            self.on_head(head)

    def due(self, now: int | None = None) -> list[TickBatch]:
        """What is due at ``now`` (default: the clock's now; not yet published); the twin's
        epoch bumps are picked up every 10 ms."""
        if now is None:
            now = self.clock.now_ns()
        if now >= self._next_epoch_check:
            self._next_epoch_check = now + EPOCH_CHECK_NS
            if self._epochs_changed():
                self.handler.refresh_epochs()
        batches = self.handler.drain_batches(now)
        if batches:
            self._beat_at = now
        elif self.handler.up and now - self._beat_at >= BEAT_NS:
            # nothing due: a header-only batch says this handler is alive (a quiet venue is
            # not a dead one; core/feed_liveness.py judges by these)
            batches = [self._beat(now)]
        self.published += sum(b.count for b in batches)
        return batches

    @property
    def next_beat_ns(self) -> int:
        """When this handler's next liveness beat is due, if nothing is published before."""
        return self._beat_at + BEAT_NS

    def _beat(self, now: int) -> TickBatch:
        self._beat_at = now
        self.beats += 1
        return batch_of(self.plan.venue, self.plan.name, 0, 0, _NO_TICKS)

    def pump(self) -> int:
        """What is due goes on the bus."""
        batches = self.due()
        self.bus.publish_many(batches)
        return sum(b.count for b in batches)

    def _epochs_changed(self) -> bool:
        """Whether the venue's epoch file changed since the last look: one ``stat`` every
        10 ms instead of an open, a read and a decode (a bump replaces the file: a new inode
        and mtime)."""
        try:
            st = os.stat(self.epochs.path(self.plan.venue))
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            seen = None  # none yet (or unreadable): reading it says which
        if seen is not None and seen == self._epoch_file:
            return False
        self._epoch_file = seen
        return True
