"""Feed handlers: delay lines, identical versions from both twins, restarts behind a fence.

The hypothesis property is the product's promise: whatever the interleaving, lags, restarts and
epoch bumps, the sequencer's guard applies strictly increasing versions AND strictly increasing
venue timestamps per symbol (a price never moves backwards), and no symbol is ever frozen.
"""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.config import SimulatorConfig
from monotape.platform.core.admit import APPLIED, DUPLICATE, REGRESSION, VersionGuard
from monotape.platform.feeds.epochs import EpochRecord, MemoryEpochStore
from monotape.platform.feeds.handler import FeedHandler, make_handler_pair
from monotape.platform.feeds.simulator import (
    VenueSimulator,
    VenueUpdate,
    build_universe,
    venues_with_update_ids,
)
from monotape.platform.model import Tick

MS = 1_000_000


def update(iid: int, ts: int, uid: int | None = None, venue: str = "XNAS") -> VenueUpdate:
    return VenueUpdate(iid, venue, uid, ts, 100, 101, 100, 1)


def test_delay_line_delivers_after_lag_and_normalizes() -> None:
    clock = FakeClock()
    store = MemoryEpochStore()
    h = FeedHandler("XNAS", "A", 5 * MS, store, clock, update_ids=True, fence_ns=0)
    h.on_venue([update(1, clock.wall_ns(), 7)])  # down: ignored
    assert h.start() == EpochRecord(1, clock.wall_ns())
    ts = clock.wall_ns()
    h.on_venue([update(1, ts, 42), update(2, ts + 1, 43, venue="XNYS")])
    clock.advance_ms(4.999)
    assert h.drain_due() == []
    clock.advance_ms(0.001)
    (tick,) = h.drain_due()
    assert tick == Tick(1, "XNAS", 1, 42, ts, 100, 101, 100, 1, "A", clock.now_ns())
    assert h.delivered == 1 and h.pending == 0


def test_seq_is_venue_ts_without_update_ids() -> None:
    clock = FakeClock()
    h = FeedHandler("XNYS", "B", 0, MemoryEpochStore(), clock, update_ids=False)
    h.start()
    h.on_venue([update(3, 123_456, None, venue="XNYS")])
    (tick,) = h.drain_due()
    assert (tick.epoch, tick.seq) == (0, 123_456)  # before the 250 ms fence: epoch 0


def test_overflow_drops_oldest_and_counts() -> None:
    clock = FakeClock()
    h = FeedHandler("XNAS", "A", MS, MemoryEpochStore(), clock, update_ids=True, max_pending=5)
    h.start()
    h.on_venue([update(1, t, t) for t in range(1, 4)])
    h.on_venue([update(1, t, t) for t in range(4, 8)])
    assert (h.pending, h.dropped) == (5, 2)
    h.on_venue([update(1, t, t) for t in range(8, 16)])
    assert (h.pending, h.dropped) == (5, 10)
    clock.advance_ms(1)
    assert [t.seq for t in h.drain_due()] == [11, 12, 13, 14, 15]


def test_stop_drops_the_delay_line() -> None:
    clock = FakeClock()
    h = FeedHandler("XNAS", "A", MS, MemoryEpochStore(), clock, update_ids=True)
    h.start()
    h.on_venue([update(1, 1, 1)])
    h.stop()
    clock.advance_ms(2)
    assert h.drain_due() == [] and not h.up


def test_restart_takes_effect_at_the_fence_for_both_twins() -> None:
    clock = FakeClock()
    store = MemoryEpochStore()
    a = FeedHandler("XNAS", "A", 0, store, clock, update_ids=True, fence_ns=0)
    b = FeedHandler("XNAS", "B", 8 * MS, store, clock, update_ids=True, fence_ns=250 * MS)
    a.start()
    b.start()
    b.stop()
    clock.advance_ms(1)
    restarted_at = clock.wall_ns()
    record = b.start()
    assert record == EpochRecord(3, restarted_at + 250 * MS)
    assert a.records == b.records == store.records("XNAS")  # A adopted it synchronously
    before, after = restarted_at + 1, restarted_at + 250 * MS
    for h in (a, b):
        h.on_venue([update(1, before, 10), update(1, after, 11)])
    clock.advance_ms(8)
    ta, tb = a.drain_due(), b.drain_due()
    # The restarted handler's late copy keeps the old epoch (B's first start put epoch 2's fence
    # 250 ms out too): identical versions from both twins, no outranking.
    assert [(t.epoch, t.seq) for t in ta] == [(t.epoch, t.seq) for t in tb] == [(1, 10), (3, 11)]


def test_epoch_guards_against_venue_update_ids_restarting() -> None:
    clock = FakeClock()
    store = MemoryEpochStore()
    a, b = (FeedHandler("XNAS", n, 0, store, clock, update_ids=True) for n in "AB")
    a.start()
    b.start()
    guard = VersionGuard()
    a.on_venue([update(1, clock.wall_ns(), 9_000)])
    assert [guard.check(t.iid, (t.epoch, t.seq)) for t in a.drain_due()] == [APPLIED]
    a.stop()
    a.start()  # the venue's session restarts; its ids start again from 1
    clock.advance_ms(251)
    a.on_venue([update(1, clock.wall_ns(), 1)])
    assert [guard.check(t.iid, (t.epoch, t.seq)) for t in a.drain_due()] == [APPLIED]


def test_make_handler_pair_lags() -> None:
    rng = random.Random(1)
    for _ in range(50):
        a, b = make_handler_pair(
            "XNAS", MemoryEpochStore(), FakeClock(), 6.0, 9.0, rng, update_ids=True
        )
        assert (a.name, b.name) == ("A", "B")
        assert 0 <= a.lag_ns <= MS
        assert 6 * MS <= b.lag_ns - a.lag_ns <= 9 * MS
        assert not a.up and not b.up


def test_pair_on_the_simulator_delivers_everything_twice_with_identical_versions() -> None:
    universe = build_universe(instruments=240)
    with_ids = venues_with_update_ids(universe)
    clock = FakeClock()
    sim = VenueSimulator(universe, SimulatorConfig(rate=20_000), clock)
    store = MemoryEpochStore()
    rng = random.Random(5)
    pairs = {
        v: make_handler_pair(v, store, clock, 6.0, 9.0, rng, update_ids=v in with_ids)
        for v in sorted({i.venue for i in universe})
    }
    for a, b in pairs.values():
        a.start()
        b.start()
    guard = VersionGuard()
    emitted = 0
    seen: dict[str, dict[tuple[int, int], Tick]] = {"A": {}, "B": {}}
    applied: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    verdicts: dict[int, int] = defaultdict(int)
    for step in range(1_000):  # 0.5 s in 0.5 ms steps, then 20 ms to drain
        clock.advance_ms(0.5)
        if step < 960:
            updates = sim.step()
            emitted += len(updates)
            for a, b in pairs.values():
                a.on_venue(updates)
                b.on_venue(updates)
        for pair in pairs.values():
            for h in pair:
                for t in h.drain_due():
                    seen[h.name][(t.iid, t.venue_ts_ns)] = t
                    verdict = guard.check(t.iid, (t.epoch, t.seq))
                    verdicts[verdict] += 1
                    if verdict == APPLIED:
                        applied[t.iid].append((t.epoch, t.seq, t.venue_ts_ns))
    assert emitted > 5_000
    assert len(seen["A"]) == len(seen["B"]) == emitted
    for key, ta in seen["A"].items():
        tb = seen["B"][key]
        assert (ta.epoch, ta.seq) == (tb.epoch, tb.seq)
        lag_diff = pairs[ta.venue][1].lag_ns - pairs[ta.venue][0].lag_ns
        assert abs((tb.decoded_ns - ta.decoded_ns) - lag_diff) <= MS // 2  # drain granularity
        assert 5.5 * MS <= tb.decoded_ns - ta.decoded_ns <= 9.5 * MS
    for versions in applied.values():
        assert versions == sorted(versions) and len(set(versions)) == len(versions)
    # Every update is applied once; the twin's copy is a duplicate when nothing newer of that
    # symbol came in between, else a (harmless, counted) regression.
    assert verdicts[APPLIED] == emitted
    assert verdicts[DUPLICATE] + verdicts[REGRESSION] == emitted
    assert verdicts[DUPLICATE] > 0 and verdicts[REGRESSION] > 0


def test_pair_with_restarts_has_duplicates_and_regressions_but_never_goes_back() -> None:
    clock = FakeClock()
    store = MemoryEpochStore()
    a = FeedHandler("XNAS", "A", 0, store, clock, update_ids=True)
    b = FeedHandler("XNAS", "B", 8 * MS, store, clock, update_ids=True)
    a.start()
    b.start()
    guard = VersionGuard()
    verdicts: dict[int, int] = defaultdict(int)
    applied_ts: dict[int, list[int]] = defaultdict(list)
    for step in range(400):
        clock.advance_ms(1)
        uid = step + 1
        batch = [update(1, clock.wall_ns(), uid)]  # hot: the twin's copies are regressions
        if step % 20 == 0:
            batch.append(update(2, clock.wall_ns() + 1, uid))  # quiet: copies are duplicates
        for h in (a, b):
            h.on_venue(batch)
        if step == 100:
            a.stop()  # A dies: B's late copies are now first and get applied
        if step == 103:
            a.start()  # A is back, fresher than B: B's copies of A's gap-era updates arrive late
        for h in (a, b):
            for t in h.drain_due():
                v = guard.check(t.iid, (t.epoch, t.seq))
                verdicts[v] += 1
                if v == APPLIED:
                    applied_ts[t.iid].append(t.venue_ts_ns)
    for ts in applied_ts.values():
        assert ts == sorted(ts)
    assert verdicts[DUPLICATE] > 0 and verdicts[REGRESSION] > 0


# -- the property --------------------------------------------------------------------------------

FENCE_NS = 20 * MS  # > the largest lag difference drawn below (10 ms): the contract's premise

_action = st.one_of(
    st.tuples(st.just("venue"), st.integers(0, 2), st.integers(0, 3_000), st.booleans()),
    st.tuples(st.just("advance"), st.integers(0, 2), st.integers(0, 20_000), st.booleans()),
    st.tuples(st.just("stop"), st.integers(0, 1), st.integers(0, 0), st.booleans()),
    st.tuples(st.just("start"), st.integers(0, 1), st.integers(0, 0), st.booleans()),
    st.tuples(st.just("bump"), st.integers(0, 0), st.integers(0, 0), st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(
    actions=st.lists(_action, max_size=120),
    lags_us=st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
    update_ids=st.booleans(),
)
def test_applied_versions_and_prices_never_go_back_and_nothing_freezes(
    actions: list[tuple[str, int, int, bool]], lags_us: tuple[int, int], update_ids: bool
) -> None:
    clock = FakeClock()
    store = MemoryEpochStore()
    handlers = [
        FeedHandler(
            "XNAS", name, lag * 1_000, store, clock, update_ids=update_ids, fence_ns=FENCE_NS
        )
        for name, lag in zip("AB", lags_us, strict=True)
    ]
    for h in handlers:
        h.start()
    guard = VersionGuard()
    applied: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    newest_applied_ts: dict[int, int] = {}
    delivered_ts: set[int] = set()
    applied_ts: set[int] = set()
    next_id = [1_000, 1_000, 1_000]
    bumps = 2

    def drain(b_first: bool) -> None:
        for h in reversed(handlers) if b_first else handlers:
            for t in h.drain_due():
                delivered_ts.add(t.venue_ts_ns)
                newer = t.venue_ts_ns > newest_applied_ts.get(t.iid, 0)
                if guard.check(t.iid, (t.epoch, t.seq)) == APPLIED:
                    applied[t.iid].append((t.epoch, t.seq, t.venue_ts_ns))
                    newest_applied_ts[t.iid] = t.venue_ts_ns
                    applied_ts.add(t.venue_ts_ns)
                else:
                    # No freeze: an update newer than everything shown is never refused.
                    assert not newer, f"newer update refused: {t}"

    def emit(iid: int) -> None:
        # One venue clock: venue_ts is wall now (unique: the clock moves >= 1 ns per emit).
        clock.advance(1)
        next_id[iid] += 1
        u = VenueUpdate(iid, "XNAS", next_id[iid] if update_ids else None, clock.wall_ns(),
                        100, 101, 100, 1)  # fmt: skip
        for h in handlers:
            h.on_venue([u])

    for kind, arg, dt_us, b_first in actions:
        if kind == "venue":
            clock.advance(dt_us * 1_000)
            emit(arg)
        elif kind == "advance":
            clock.advance(dt_us * 1_000)
        elif kind == "stop":
            handlers[arg].stop()
        elif kind == "start" and bumps < 14:  # stays within RETAINED_RECORDS
            handlers[arg].start()
            bumps += 1
        elif kind == "bump" and bumps < 14:  # e.g. a third handler process of the group
            store.bump("XNAS", clock.wall_ns() + FENCE_NS)
            bumps += 1
        drain(b_first)
    # Tail: run past the last fence and keep the venue talking.
    last_fence = store.records("XNAS")[-1].fence_ts_ns
    for i in range(60):
        clock.advance(MS)
        emit(i % 3)
        drain(i % 2 == 0)
    clock.advance(20 * MS)
    drain(False)

    for versions in applied.values():
        assert [v[:2] for v in versions] == sorted({v[:2] for v in versions})  # strictly up
        ts = [v[2] for v in versions]
        assert ts == sorted(set(ts))  # no older venue update applied after a newer one
    # After the last restart/bump + fence, every update a live handler delivered was applied.
    post_fence = {ts for ts in delivered_ts if ts >= last_fence}
    assert post_fence <= applied_ts
    if any(h.up for h in handlers):
        assert post_fence  # the tail is not vacuous while a handler lives


def test_a_cold_start_takes_its_epoch_at_once() -> None:
    # A node restarting on its data dir: the group's records say epoch 2, fence 250 ms after the
    # previous start. The node's handlers start both twins themselves: the new epoch applies to
    # the very first update, even one stamped before "now" (past the old fence).
    clock = FakeClock()
    store = MemoryEpochStore()
    store.bump("XNAS", clock.wall_ns())
    previous = store.bump("XNAS", clock.wall_ns() + 250 * MS)
    clock.advance(5_000 * MS)
    a, b = (FeedHandler("XNAS", n, 0, store, clock, update_ids=True) for n in "AB")
    assert a.start(at_once=True) == EpochRecord(3, previous.fence_ts_ns)
    assert b.start(at_once=True) == EpochRecord(4, previous.fence_ts_ns)
    early = clock.wall_ns() - 10 * MS
    for h in (a, b):
        h.on_venue([update(1, early, 5)])
        (tick,) = h.drain_due()
        assert (tick.epoch, tick.seq) == (4, 5)  # above (2, anything) the last run showed
    # A restart beside a live twin still waits for the fence.
    a.stop()
    assert a.start() == EpochRecord(5, clock.wall_ns() + 250 * MS)
