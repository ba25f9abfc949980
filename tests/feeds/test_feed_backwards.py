"""monotape_feed_backwards_total: a handler whose own stream went backwards is an anomaly; the
twins' race (duplicates, regressions at the sequencer) is not, and never counts here."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import FeedHandler, make_handler_pair
from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.role.collectors import FeedCollector

MS = 1_000_000


def update(iid: int, ts: int, uid: int | None) -> VenueUpdate:
    return VenueUpdate(iid, "XNAS", uid, ts, 100, 101, 100, 1)


def handler(clock: FakeClock, *, update_ids: bool = True) -> FeedHandler:
    h = FeedHandler("XNAS", "A", 0, MemoryEpochStore(), clock, update_ids=update_ids, fence_ns=0)
    h.start()
    return h


def test_an_update_older_than_one_the_handler_delivered_is_counted_and_still_delivered() -> None:
    clock = FakeClock()
    h = handler(clock)
    ts = clock.wall_ns()
    h.on_venue([update(1, ts, 10), update(2, ts, 5), update(1, ts + 1, 11)])
    assert len(h.drain_due()) == 3 and h.backwards == 0
    # the venue re-issues id 9 for symbol 1 (below 11): backwards; symbol 2 moves on: not
    h.on_venue([update(1, ts + 2, 9), update(2, ts + 2, 6)])
    ticks = h.drain_due()
    assert [t.seq for t in ticks] == [9, 6]  # the guard, not the handler, refuses it
    assert h.backwards == 1


def test_the_same_version_again_is_a_duplicate_not_backwards() -> None:
    clock = FakeClock()
    h = handler(clock)
    ts = clock.wall_ns()
    h.on_venue([update(1, ts, 10), update(1, ts, 10)])
    h.drain_due()
    assert h.backwards == 0


def test_a_newer_epoch_is_never_backwards_even_when_the_venue_ids_restart() -> None:
    clock = FakeClock()
    store = MemoryEpochStore()
    h = FeedHandler("XNAS", "A", 0, store, clock, update_ids=True, fence_ns=0)
    h.start()
    h.on_venue([update(1, clock.wall_ns(), 1_000)])
    h.drain_due()
    clock.advance_ms(1)
    h.start()  # a restart bumps the epoch at once (fence 0): ids starting over are above it
    h.on_venue([update(1, clock.wall_ns(), 1)])
    (tick,) = h.drain_due()
    assert tick.epoch == 2 and h.backwards == 0


def test_the_twins_race_counts_nothing_while_a_backwards_twin_does() -> None:
    """Both handlers of a pair hear the same venue, B 6-9 ms behind A: the sequencer sees
    duplicates and regressions, but neither handler's own stream ever goes back."""
    clock = FakeClock()
    store = MemoryEpochStore()
    a, b = make_handler_pair("XNAS", store, clock, 6.0, 9.0, random.Random(1), update_ids=True)
    a.start()
    b.start()
    uid = 0
    for _ in range(200):
        batch = []
        for iid in range(5):
            uid += 1
            batch.append(update(iid, clock.wall_ns(), uid))
        a.on_venue(batch)
        b.on_venue(batch)
        clock.advance_ms(1)
        a.drain_due()
        b.drain_due()
    assert a.delivered > 0 and b.delivered > 0
    assert a.backwards == b.backwards == 0
    b.on_venue([update(0, clock.wall_ns(), 1)])  # B replays an old id for symbol 0
    clock.advance_ms(20)
    b.drain_due()
    assert (a.backwards, b.backwards) == (0, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 50)), min_size=1, max_size=80))
def test_backwards_counts_exactly_the_updates_below_the_symbols_newest(
    stream: list[tuple[int, int]],
) -> None:
    clock = FakeClock()
    h = handler(clock)
    h.on_venue([update(iid, clock.wall_ns(), uid) for iid, uid in stream])
    h.drain_due()
    newest: dict[int, int] = {}
    expected = 0
    for iid, uid in stream:
        if iid in newest and uid < newest[iid]:
            expected += 1
        newest[iid] = max(newest.get(iid, uid), uid)
    assert h.backwards == expected


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 50), st.integers(-4, 4), st.booleans()),
        min_size=1,
        max_size=80,
    )
)
def test_backwards_across_restarts_is_the_lexicographic_version_order(
    stream: list[tuple[int, int, int, bool]],
) -> None:
    """Restarts bump the epoch with a fence 2 ms ahead: updates stamped before it keep an older
    epoch, after it a newer one, whatever their ids. The per-iid (epoch, seq) lists must count
    exactly what comparing version tuples counts."""
    clock = FakeClock()
    h = FeedHandler("XNAS", "A", 0, MemoryEpochStore(), clock, update_ids=True, fence_ns=2 * MS)
    h.start(at_once=True)
    delivered = []
    for iid, uid, ts_ms, restart in stream:
        if restart:
            h.start()
        h.on_venue([update(iid, clock.wall_ns() + ts_ms * MS, uid)])
        delivered += h.drain_due()
        clock.advance_ms(1)
    newest: dict[int, tuple[int, int]] = {}
    expected = 0
    for t in delivered:
        version = (t.epoch, t.seq)
        if t.iid in newest and version < newest[t.iid]:
            expected += 1
        else:
            newest[t.iid] = version
    assert len(delivered) == len(stream) and h.backwards == expected


def test_exported_per_venue_and_handler_from_the_start() -> None:
    clock = FakeClock()
    a, b = make_handler_pair(
        "XNAS", MemoryEpochStore(), clock, 6.0, 9.0, random.Random(2), update_ids=True
    )
    a.backwards = 3
    registry = CollectorRegistry()
    registry.register(FeedCollector(lambda: [a, b]))
    assert registry.get_sample_value(m.FEED_BACKWARDS, {"venue": "XNAS", "handler": "A"}) == 3
    assert registry.get_sample_value(m.FEED_BACKWARDS, {"venue": "XNAS", "handler": "B"}) == 0
