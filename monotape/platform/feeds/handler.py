"""A redundant feed handler: hears one venue, normalizes its updates into versioned ticks.

Two handlers per venue run active/active, drifting 6-9 ms apart (design: Workload). Each one
derives the version of an update only from the venue's own stream (``seq`` = update id, else the
venue timestamp) and from the group's epoch records (``epoch_for``, see ``epochs``), so both
stamp the same version on the same update and the sequencer's ``admit`` keeps exactly one copy.

The handler is a state machine with no I/O: ``on_venue`` feeds it what the venue published (its
columns, ``venue_wire``), ``drain_batches`` asks for what its (simulated) network and decode
delay has let through, as tick batches (``wire/batch.py``), normalized in bulk with no object per
tick (issue 35). The delay line is bounded (STYLE habit 7): an overflow drops the oldest updates
and counts them.

The handler is a door where ticks enter (``validate``): an update the wire cannot carry (a price
outside int64, an id, size or timestamp outside its range, an instrument that is not this venue's)
is refused there, counted in the node's ``TickGate`` and never reaches the sequencer.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from monotape.clock import Clock
from monotape.platform.core.admit_batch import VersionTable
from monotape.platform.feeds.epochs import RETAINED_RECORDS, EpochRecord, EpochStore
from monotape.platform.feeds.normalize import normalize
from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.feeds.validate import WIRE_IIDS, Refusal, TickGate, tick_problem
from monotape.platform.feeds.venue_wire import venue_batch
from monotape.platform.model import Tick
from monotape.platform.wire.batch import (
    HAS_UPDATE_ID,
    TickBatch,
    concat,
    pack_header,
    restamp,
    take,
)

__all__ = ["PUMP_INTERVAL_S", "FeedHandler", "make_handler_pair", "pair_lags"]

# Handlers' delay lines are drained at ~1 ms resolution: the one-process pump's step
# (node/pipeline.py) and the host venue process's simulator step (host/venue.py).
PUMP_INTERVAL_S = 0.001

_I64_MAX = (1 << 63) - 1


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
        # The newest version delivered per wire id, held as the sequencer holds its own
        # (``admit_run`` over two arrays): its regressions are this stream going backwards.
        self._newest = VersionTable(WIRE_IIDS)
        self._batch_seq = 0  # the batches this handler delivered: each one's batch_seq
        self._seq_from = "update_id" if update_ids else "venue_ts"  # the version's seq rule
        self._epochs = epochs
        self._clock = clock
        self._records: list[EpochRecord] = []
        # The venue's batches as they came (columns), each with its due time.
        self._pending: deque[tuple[int, TickBatch]] = deque()
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

    def _drop_pending(self) -> None:
        self._pending.clear()
        self._pending_count = 0

    def on_venue(self, updates: Sequence[VenueUpdate] | TickBatch) -> None:
        """Hear the venue: keep this venue's updates, due after this handler's lag. A
        ``TickBatch`` is the venue's columns as they arrived (``feeds/venue_wire.py``): kept as
        they are, no object per update. A list of ``VenueUpdate`` (the one-process simulator, a
        test) is turned into columns once."""
        if not self.up:
            return
        if isinstance(updates, TickBatch):
            batch: TickBatch | None = updates if updates.venue == self.venue else None
        else:
            batch = self._columns([u for u in updates if u.venue == self.venue])
        if batch is None or not batch.count:
            return
        if batch.count > self.max_pending:
            self.dropped += batch.count - self.max_pending
            batch = take(batch, np.arange(batch.count - self.max_pending, batch.count))
        overflow = self._pending_count + batch.count - self.max_pending
        while overflow > 0:
            due, oldest = self._pending[0]
            if oldest.count <= overflow:
                self._pending.popleft()
                cut = oldest.count
            else:
                self._pending[0] = (due, take(oldest, np.arange(overflow, oldest.count)))
                cut = overflow
            self._pending_count -= cut
            self.dropped += cut
            overflow -= cut
        self._pending.append((self._clock.now_ns() + self.lag_ns, batch))
        self._pending_count += batch.count

    def _columns(self, updates: list[VenueUpdate]) -> TickBatch | None:
        """``updates`` as columns; an update no column can hold (a price beyond int64, an id
        beyond uint64) is refused at the door, counted, and the rest kept."""
        if not updates:
            return None
        try:
            return venue_batch(self.venue, updates)
        except (OverflowError, TypeError, ValueError):
            kept = []
            for u in updates:
                seq = u.update_id if u.update_id is not None else u.venue_ts_ns
                probe = Tick(u.iid, self.venue, 0, seq, u.venue_ts_ns, u.bid, u.ask, u.last,
                             u.size, self.name)  # fmt: skip
                problem = tick_problem(probe, self._venue_of())
                if problem is None:
                    kept.append(u)
                else:
                    self._refuse(u.iid, *problem)
            return venue_batch(self.venue, kept) if kept else None

    def _venue_of(self) -> Sequence[str | None] | None:
        return self.gate.venue_of if self.gate is not None else None

    def drain_batches(self, now: int | None = None) -> list[TickBatch]:
        """Normalize every update whose due time has passed, in venue order, stamped decoded
        at ``now`` (default: the clock's now): one batch per epoch they fall in (almost always
        one). In bulk over the columns: the door's checks, the seq rule, the epoch of each
        update's fence, this handler's own-stream check (``admit_run`` over its newest
        versions: an update older than one it delivered counts in ``backwards`` and is
        delivered all the same, for the sequencer to refuse)."""
        pending = self._pending
        if not pending:
            return []
        if now is None:
            now = self._clock.now_ns()
        due: list[TickBatch] = []
        while pending and pending[0][0] <= now:
            _, batch = pending.popleft()
            self._pending_count -= batch.count
            due.append(batch)
        if not due:
            return []
        venue = concat(due) if len(due) > 1 else due[0]
        whole = self._normalize_whole(venue, now)
        if whole is not None:
            return [whole]
        has_id = (venue.flags & HAS_UPDATE_ID) != 0
        keep: npt.NDArray[np.bool_] | None = None
        if self.update_ids and not has_id.all():
            missing = ~has_id
            n_missing = int(missing.sum())
            self.malformed += n_missing
            first = int(np.flatnonzero(missing)[0])
            for _ in range(n_missing - 1):
                self._count_refusal()
            self._refuse(int(venue.iid[first]), Refusal.MISSING_UPDATE_ID, "no update id")
            keep = has_id
        seq = venue.update_id if self.update_ids else venue.venue_ts.astype(np.uint64)
        if self.gate is not None:  # the door: known instruments of this venue, sane stamps
            refused = self.gate.refused_mask(venue, self._where)
            if refused is not None:
                self.refused += int(refused.sum())
                keep = ~refused if keep is None else keep & ~refused
        else:
            bad = venue.venue_ts < 0
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                for _ in range(int(bad.sum())):
                    self._refuse(int(venue.iid[first]), Refusal.TIMESTAMP, "venue_ts < 0")
                keep = ~bad if keep is None else keep & ~bad
        if keep is not None:
            at = np.flatnonzero(keep)
            if not len(at):
                return []
            venue = take(venue, at)
            seq = seq[at]
        epochs = self._epochs_of(venue.venue_ts)
        if isinstance(epochs, int):  # the common case: one epoch, the venue's buffer patched
            runs: list[tuple[int, int, int]] = [(epochs, 0, venue.count)]
        else:
            runs = [(int(epochs[a]), a, b) for a, b in _runs(epochs)]
        out: list[TickBatch] = []
        for epoch, start, stop in runs:
            part = (
                venue if (start, stop) == (0, venue.count) else take(venue, np.arange(start, stop))
            )
            run_seq = seq if part is venue else np.ascontiguousarray(seq[start:stop])
            _, _, _, backwards = self._newest.admit(epoch, run_seq, part.iid)
            self.backwards += backwards
            out.append(restamp(part, self.name, epoch, self._batch_seq, now, self._seq_from))
            self._batch_seq += 1
            self.delivered += part.count
        return out

    def _normalize_whole(self, venue: TickBatch, now: int) -> TickBatch | None:
        """The drain's common case in one native pass (``feeds/normalize.py``): every update
        passes the door and lies past the newest fence. None (nothing changed) otherwise, and
        the numpy path below refuses, counts and splits."""
        gate = self.gate
        if gate is None or venue.epoch > _I64_MAX:
            return None
        records = self._records
        fence, epoch = (records[-1].fence_ts_ns, records[-1].epoch) if records else (0, 0)
        n = venue.count
        done = normalize(
            venue.buffer, n, gate.venue_code_of, gate.venue_code(self.venue), self.update_ids,
            fence, epoch, pack_header(n, epoch, self._batch_seq, self.venue, self.name), now,
            self._newest.epoch, self._newest.seq,
        )  # fmt: skip
        if done is None:
            return None
        buffer, backwards = done
        self.backwards += backwards
        out = TickBatch(buffer, self.venue, self.name, epoch, self._batch_seq, n)
        self._batch_seq += 1
        self.delivered += n
        return out

    def drain_due(self, now: int | None = None) -> list[Tick]:
        """``drain_batches`` as ``Tick`` objects (tests and tools; the pipeline moves batches)."""
        return [t for batch in self.drain_batches(now) for t in batch.ticks()]

    def _epochs_of(self, venue_ts: npt.NDArray[np.int64]) -> int | npt.NDArray[np.int64]:
        """Each update's epoch: that of the newest record whose fence is at or before its venue
        timestamp (0 before every fence): one ``searchsorted`` over the records' fences; one
        int when every update has the same (a live handler: past the newest fence)."""
        records = self._records
        if not records:
            return 0
        if int(venue_ts.min()) >= records[-1].fence_ts_ns:
            return records[-1].epoch
        fences = np.array([r.fence_ts_ns for r in records], dtype=np.int64)
        epochs = np.array([0] + [r.epoch for r in records], dtype=np.int64)
        found = epochs[np.searchsorted(fences, venue_ts, side="right")]
        return int(found[0]) if int(found.min()) == int(found.max()) else found

    def _count_refusal(self) -> None:
        self.refused += 1
        if self.gate is not None:
            self.gate.count(self.venue, Refusal.MISSING_UPDATE_ID)

    def _refuse(self, iid: int, reason: Refusal, detail: str) -> None:
        self.refused += 1
        if self.gate is not None:
            self.gate.refuse(self.venue, reason, self._where, f"iid {iid}: {detail}")


def _runs(values: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """The stretches of equal consecutive values, as (start, stop)."""
    n = len(values)
    if n == 0:
        return []
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *cuts.tolist(), n]
    return list(itertools.pairwise(bounds))


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
