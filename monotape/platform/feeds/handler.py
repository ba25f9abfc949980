"""A redundant feed handler: hears one venue, normalizes its updates into versioned ticks.

Two handlers per venue run active/active, drifting 6-9 ms apart (design: Workload). Each one
derives the version of an update only from the venue's own stream (``seq`` = update id, else the
venue timestamp) and from the group's epoch records (``epoch_for``, see ``epochs``), so both
stamp the same version on the same update and the sequencer's ``admit`` keeps exactly one copy.

The handler is a state machine with no I/O: ``on_venue`` feeds it what the venue published,
``drain_due`` asks for what its (simulated) network and decode delay has let through. The delay
line is bounded (STYLE habit 7): an overflow drops the oldest updates and counts them.

The handler is a door where ticks enter (``validate``): an update the wire cannot carry (a price
outside int64, an id, size or timestamp outside its range, an instrument that is not this venue's)
is refused there, counted in the node's ``TickGate`` and never reaches the sequencer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from monotape.clock import Clock
from monotape.platform.feeds.epochs import RETAINED_RECORDS, EpochRecord, EpochStore
from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.feeds.validate import WIRE_IIDS, Refusal, TickGate, carried, tick_problem
from monotape.platform.model import Tick

__all__ = ["FeedHandler", "make_handler_pair", "pair_lags"]


class FeedHandler:
    """One handler of a venue's redundancy group (group name = venue)."""

    def __init__(
        self,
        venue: str,
        name: str,
        lag_ns: int,
        epochs: EpochStore,
        clock: Clock,
        *,
        update_ids: bool,
        fence_ns: int = 250_000_000,
        max_pending: int = 200_000,
        gate: TickGate | None = None,
    ) -> None:
        if lag_ns < 0 or fence_ns < 0 or max_pending < 1:
            raise ValueError("lag_ns and fence_ns must be >= 0, max_pending >= 1")
        self.venue = venue
        self.name = name
        self.lag_ns = lag_ns
        self.update_ids = update_ids
        self.fence_ns = fence_ns
        self.max_pending = max_pending
        self.up = False
        self.delivered = 0
        self.dropped = 0  # delay-line overflow (drop-oldest)
        self.malformed = 0  # an update without an id from a venue that has them
        self.refused = 0  # updates refused at the door (malformed ones included)
        self.restarts = 0
        self.gate = gate
        self._where = f"handler {venue}/{name}"
        # Updates older than one this handler already delivered for the same symbol: its own
        # stream went backwards (a venue or handler fault; monotape_feed_backwards_total). Not
        # the twins' normal race, which the sequencer counts as duplicates and regressions.
        self.backwards = 0
        # The newest version delivered per iid, as two flat lists indexed by iid (sized by the
        # universe, grown if the gate changes): two list reads per tick, and a tuple is
        # compared only when the epoch differs (a restart's fence), never built per tick.
        self._newest_epoch: list[int] = []  # -1: nothing delivered yet (epochs are >= 0)
        self._newest_seq: list[int] = []
        self._size_newest(len(gate.venue_of) if gate is not None else WIRE_IIDS)
        self._epochs = epochs
        self._clock = clock
        self._records: list[EpochRecord] = []
        # Batches, not single updates: one deque entry per ``on_venue`` call keeps the per-update
        # cost of the delay line at a list append.
        self._pending: deque[tuple[int, list[VenueUpdate]]] = deque()
        self._pending_count = 0
        # Registered once (a store has no unwatch); adopting while down is harmless because
        # ``start`` reloads the records anyway.
        epochs.watch(venue, self._adopt)

    @property
    def records(self) -> list[EpochRecord]:
        """The epoch records this handler stamps with (a copy)."""
        return list(self._records)

    @property
    def pending(self) -> int:
        return self._pending_count

    @property
    def next_due_ns(self) -> int | None:
        """When the oldest update of the delay line is due (None: nothing pending). A handler
        process sleeps until then instead of polling every millisecond (host/handler.py)."""
        return self._pending[0][0] if self._pending else None

    def start(self, *, at_once: bool = False) -> EpochRecord:
        """(Re)start: bump the group's epoch with a fence on the venue's stream, then go live.

        ``at_once``: a cold start of the whole group (a node starting both handlers of a pair).
        There is no live twin to race, so the new epoch takes effect at once: its fence is the
        group's last one (already past), and every update from now on compares above anything
        the group ever issued, whatever the venue's ids do. A fence in the future here is what
        made a restarted node stamp the previous epoch for 250 ms (issue 10: 394 records below
        what screens showed)."""
        self._drop_pending()
        fence = 0 if at_once else self._clock.wall_ns() + self.fence_ns
        record = self._epochs.bump(self.venue, fence)
        self._records = self._epochs.records(self.venue)
        self.up = True
        self.restarts += 1
        return record

    def stop(self) -> None:
        """A dead handler delivers nothing: what was still in its delay line is lost."""
        self.up = False
        self._drop_pending()

    def refresh_epochs(self) -> None:
        """Reload the group's records from the store: for stores whose ``watch`` cannot see
        another process's bumps; call it well within the fence (250 ms)."""
        self._records = self._epochs.records(self.venue)

    def _adopt(self, record: EpochRecord) -> None:
        if not self._records or record.epoch > self._records[-1].epoch:
            self._records.append(record)
            # Same trim as the store, so a live handler and a freshly started twin hold the same
            # records and therefore stamp the same epochs.
            del self._records[:-RETAINED_RECORDS]

    def _size_newest(self, n_iids: int) -> None:
        grow = n_iids - len(self._newest_seq)
        if grow > 0:
            self._newest_epoch.extend([-1] * grow)
            self._newest_seq.extend([0] * grow)

    def _drop_pending(self) -> None:
        self._pending.clear()
        self._pending_count = 0

    def on_venue(self, updates: Sequence[VenueUpdate]) -> None:
        """Hear the venue: keep this venue's updates, due after this handler's lag."""
        if not self.up:
            return
        venue = self.venue
        batch = [u for u in updates if u.venue == venue]
        if not batch:
            return
        if len(batch) > self.max_pending:
            self.dropped += len(batch) - self.max_pending
            batch = batch[-self.max_pending :]
        overflow = self._pending_count + len(batch) - self.max_pending
        while overflow > 0:
            due, oldest = self._pending[0]
            if len(oldest) <= overflow:
                self._pending.popleft()
                cut = len(oldest)
            else:
                self._pending[0] = (due, oldest[overflow:])
                cut = overflow
            self._pending_count -= cut
            self.dropped += cut
            overflow -= cut
        self._pending.append((self._clock.now_ns() + self.lag_ns, batch))
        self._pending_count += len(batch)

    def drain_due(self, now: int | None = None) -> list[Tick]:
        """Normalize every update whose due time has passed, in venue order, stamped decoded
        at ``now`` (default: the clock's now). A feed process drains all its handlers at one
        ``now``, so its bus batch carries one stamp and the sequencer records it as one run
        (core/stamps.py), not a run per tick."""
        pending = self._pending
        if not pending:
            return []
        if now is None:
            now = self._clock.now_ns()
        out: list[Tick] = []
        records = self._records
        newest_fence = records[-1].fence_ts_ns if records else 0
        newest_epoch = records[-1].epoch if records else 0
        name = self.name
        venue = self.venue
        update_ids = self.update_ids
        gate = self.gate
        venue_of = gate.venue_of if gate is not None else None
        if venue_of is not None and len(venue_of) > len(self._newest_seq):
            self._size_newest(len(venue_of))
        newest_epochs = self._newest_epoch
        newest_seqs = self._newest_seq
        backwards = 0
        while pending and pending[0][0] <= now:
            _, batch = pending.popleft()
            self._pending_count -= len(batch)
            for u in batch:
                iid = u.iid
                ts = u.venue_ts_ns
                bid = u.bid
                ask = u.ask
                last = u.last
                size = u.size
                if update_ids:
                    if u.update_id is None:
                        self.malformed += 1
                        self._refuse(u, Refusal.MISSING_UPDATE_ID, "no update id")
                        continue
                    seq = u.update_id
                else:
                    seq = ts
                # The door (``validate.carried``); a negative price (legal, rare) fails the fast
                # test and takes the careful path.
                if not carried(iid, venue, bid | ask | last | ts, seq | size, venue_of) and (
                    not self._admissible(u, seq, now)
                ):
                    continue
                # Fast path: a live handler's updates are past the newest fence.
                if ts >= newest_fence:
                    epoch = newest_epoch
                else:
                    epoch = 0
                    for r in reversed(records):
                        if r.fence_ts_ns <= ts:
                            epoch = r.epoch
                            break
                held_epoch = newest_epochs[iid]
                if epoch == held_epoch:
                    if seq < newest_seqs[iid]:
                        backwards += 1  # delivered all the same: the sequencer refuses it
                    else:
                        newest_seqs[iid] = seq
                elif epoch < held_epoch:
                    backwards += 1
                else:  # a newer epoch (or the symbol's first update): above anything held
                    newest_epochs[iid] = epoch
                    newest_seqs[iid] = seq
                out.append(Tick(iid, venue, epoch, seq, ts, bid, ask, last, size, name, now))
        self.delivered += len(out)
        self.backwards += backwards
        return out

    def _admissible(self, u: VenueUpdate, seq: int, now: int) -> bool:
        """The careful look at an update the fast test did not pass: refuse it (counted, and
        logged now and then) unless it is fine after all (a negative price)."""
        venue_of = self.gate.venue_of if self.gate is not None else None
        probe = Tick(u.iid, self.venue, 0, seq, u.venue_ts_ns, u.bid, u.ask, u.last, u.size,
                     self.name, now)  # fmt: skip
        problem = tick_problem(probe, venue_of)
        if problem is None:
            return True
        self._refuse(u, *problem)
        return False

    def _refuse(self, u: VenueUpdate, reason: Refusal, detail: str) -> None:
        self.refused += 1
        if self.gate is not None:
            self.gate.refuse(self.venue, reason, self._where, f"iid {u.iid}: {detail}")


class _Uniform(Protocol):
    def uniform(self, a: float, b: float, /) -> float: ...


def pair_lags(rng: _Uniform, lag_min_ms: float, lag_max_ms: float) -> tuple[int, int]:
    """The lags (ns) of handlers "A" and "B" of one pair, two draws from ``rng``: the node and
    the host's handler processes draw them in the same order, so they get the same lags."""
    if not 0 <= lag_min_ms <= lag_max_ms:
        raise ValueError(f"need 0 <= lag_min_ms <= lag_max_ms, got {lag_min_ms}, {lag_max_ms}")
    lag_a = int(rng.uniform(0.0, 1.0) * 1_000_000)
    return lag_a, lag_a + int(rng.uniform(lag_min_ms, lag_max_ms) * 1_000_000)


def make_handler_pair(
    venue: str,
    epochs: EpochStore,
    clock: Clock,
    lag_min_ms: float,
    lag_max_ms: float,
    rng: _Uniform,
    **kw: Any,
) -> tuple[FeedHandler, FeedHandler]:
    """Handlers "A" (lags the venue by 0-1 ms) and "B" (lags A by ``lag_min_ms``-``lag_max_ms``,
    FeedConfig: 6-9 ms). ``kw`` goes to both (``update_ids=``, ``fence_ns=``, ``max_pending=``).
    Neither is started."""
    lag_a, lag_b = pair_lags(rng, lag_min_ms, lag_max_ms)
    return (
        FeedHandler(venue, "A", lag_a, epochs, clock, **kw),
        FeedHandler(venue, "B", lag_b, epochs, clock, **kw),
    )
