"""Sequencer: the admit rule per symbol, exact per-venue counts, lanes, and the collector."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monotape.metric_names import DUPLICATE_TICKS, SEQUENCE_REGRESSIONS, TICKS_ADMITTED
from monotape.platform.core.admit import Verdict, VersionGuard
from monotape.platform.core.conflation import FRAME_NS
from monotape.platform.core.sequencer import Sequencer, VenueCounters
from monotape.platform.model import Tick
from monotape.platform.role.collectors import SequencerCollector
from monotape.testing.per_tick import Lane, PerTickSequencer


def tick(iid: int, epoch: int, seq: int, venue: str = "XNAS", handler: str = "a") -> Tick:
    return Tick(
        iid=iid, venue=venue, epoch=epoch, seq=seq, venue_ts_ns=seq, bid=seq, ask=seq + 2,
        last=seq + 1, size=1, handler=handler,
    )  # fmt: skip


def test_duplicates_and_regressions_counted_per_venue() -> None:
    s = Sequencer(lanes=3)
    ticks = [
        tick(1, 1, 10, "XNAS"),  # applied
        tick(1, 1, 10, "XNAS", "b"),  # duplicate (the twin)
        tick(1, 1, 9, "XNAS"),  # regression (older seq)
        tick(1, 0, 99, "XNAS"),  # regression (older epoch beats a higher seq)
        tick(1, 2, 1, "XNAS"),  # applied (new epoch, seq restarts)
        tick(2, 5, 5, "XLON"),  # applied
        tick(2, 5, 5, "XLON", "b"),  # duplicate
        tick(2, 5, 5, "XLON", "b"),  # duplicate
        tick(3, 1, 1, "XLON"),  # applied
    ]
    applied = s.on_ticks(ticks, now_ns=42)
    assert applied == [ticks[0], ticks[4], ticks[5], ticks[8]]
    assert all(t.admitted_ns == 42 for t in applied)
    assert ticks[1].admitted_ns == 0  # discarded copies are not stamped
    assert s.counters() == {
        "XNAS": VenueCounters(admitted=2, duplicates=1, regressions=2),
        "XLON": VenueCounters(admitted=2, duplicates=2, regressions=0),
    }
    assert (s.admitted_total, s.duplicates_total, s.regressions_total) == (4, 3, 2)
    assert s.current(1) == ticks[4]
    assert s.current(9) is None


def test_on_ticks_agrees_with_lane_admit_and_the_shared_rule() -> None:
    rng = random.Random(7)
    ticks = [
        tick(rng.randrange(20), rng.randrange(3), rng.randrange(30), rng.choice("AB"))
        for _ in range(3000)
    ]
    fast = Sequencer(lanes=4)
    slow = PerTickSequencer(lanes=4)
    guard = VersionGuard()
    expected = [t for t in ticks if guard.check(t.iid, (t.epoch, t.seq)) is Verdict.APPLIED]
    got = fast.on_ticks(ticks, 1)
    got_slow = [t for t in ticks if slow.lane_of(t.iid).admit(t, 1)]
    assert got == expected == got_slow
    assert fast.counters() == slow.counters()


def test_lane_ownership_is_stable_in_the_reference_model() -> None:
    s = PerTickSequencer(lanes=4)
    for iid in range(100):
        lane = s.lane_of(iid)
        assert lane is s.lane_of(iid)
        assert lane.index == iid % 4
    s.on_ticks([tick(i, 1, 1) for i in range(100)], 0)
    for lane in s.lanes:
        assert all(iid % 4 == lane.index for iid in lane.states)
        assert sum(len(lane.states) for lane in s.lanes) == 100


def test_lane_admit_alone() -> None:
    lane = Lane(0)
    assert lane.admit(tick(4, 1, 1), 5)
    assert not lane.admit(tick(4, 1, 1), 6)
    assert not lane.admit(tick(4, 0, 7), 6)
    assert lane.conflator.dirty_count == 1
    assert lane.counters["XNAS"] == VenueCounters(1, 1, 1)


def test_take_frame_merges_lanes_sorted_and_chains_bases() -> None:
    s = Sequencer(lanes=4)
    first = [tick(i, 1, 1) for i in (9, 2, 7, 4, 3)]
    s.on_ticks(first, 0)
    assert s.dirty_count == 5
    f1 = s.take_frame(FRAME_NS)
    assert f1.frame_no == 1 and [r.iid for r in f1.records] == [2, 3, 4, 7, 9]
    assert s.published(7) == first[2]
    t = tick(7, 1, 2)
    s.on_ticks([t], 1)
    assert s.current(7) == t and s.published(7) == first[2]  # not shown until the boundary
    f2 = s.take_frame(2 * FRAME_NS)
    assert [(r.iid, r.base, r.new) for r in f2.records] == [(7, first[2], t)]
    assert s.take_frame(3 * FRAME_NS).records == []


def test_rejects_zero_lanes() -> None:
    with pytest.raises(ValueError):
        Sequencer(lanes=0)


versions = st.tuples(
    st.integers(min_value=0, max_value=5),  # iid
    st.integers(min_value=0, max_value=3),  # epoch
    st.integers(min_value=0, max_value=20),  # seq
)


@settings(max_examples=300)
@given(
    st.lists(versions, min_size=1, max_size=40),
    st.randoms(use_true_random=False),
    st.integers(min_value=1, max_value=5),
    st.integers(min_value=1, max_value=7),
)
def test_any_interleaving_applies_strictly_increasing_versions(
    updates: list[tuple[int, int, int]], rnd: random.Random, lanes: int, batch: int
) -> None:
    # Each update delivered by two handlers (plus random extra copies), in any order.
    deliveries = [
        tick(iid, e, q, venue=f"V{iid % 2}", handler=h)
        for iid, e, q in updates
        for h in ["a", "b"] + ["c"] * rnd.randrange(2)
    ]
    rnd.shuffle(deliveries)
    s = Sequencer(lanes=lanes)
    applied: list[Tick] = []
    for i in range(0, len(deliveries), batch):
        applied += s.on_ticks(deliveries[i : i + batch], i)
        if rnd.random() < 0.3:
            s.take_frame(FRAME_NS * (i + 1))
    per_symbol: dict[int, list[tuple[int, int]]] = {}
    for t in applied:
        per_symbol.setdefault(t.iid, []).append((t.epoch, t.seq))
    for vs in per_symbol.values():
        assert all(a < b for a, b in itertools.pairwise(vs))
    for iid in {u[0] for u in updates}:
        cur = s.current(iid)
        assert cur is not None
        assert (cur.epoch, cur.seq) == max((e, q) for i, e, q in updates if i == iid)
    c = s.counters()
    assert sum(v.admitted + v.duplicates + v.regressions for v in c.values()) == len(deliveries)
    assert s.admitted_total == len(applied)


def test_collector_exports_three_counters_per_venue() -> None:
    s = Sequencer()
    s.on_ticks([tick(1, 1, 1, "XNAS"), tick(1, 1, 1, "XNAS"), tick(2, 1, 2, "XLON")], 0)
    s.on_ticks([tick(2, 1, 1, "XLON")], 1)
    registry = CollectorRegistry()
    registry.register(SequencerCollector(s))
    text = generate_latest(registry).decode()
    samples = {
        (sample.name, sample.labels["venue"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert samples == {
        (TICKS_ADMITTED, "XNAS"): 1,
        (DUPLICATE_TICKS, "XNAS"): 1,
        (SEQUENCE_REGRESSIONS, "XNAS"): 0,
        (TICKS_ADMITTED, "XLON"): 1,
        (DUPLICATE_TICKS, "XLON"): 0,
        (SEQUENCE_REGRESSIONS, "XLON"): 1,
    }
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert all(
        types[n.removesuffix("_total")] == "counter"
        for n in (TICKS_ADMITTED, DUPLICATE_TICKS, SEQUENCE_REGRESSIONS)
    )


def test_published_is_the_same_tick_until_the_symbol_is_shown_again() -> None:
    """The snapshot cache keys a symbol's encoded chunk on its published tick object
    (core/snapshots.py): the same object frame after frame while the symbol does not change,
    a new one once a frame shows it anew."""
    from monotape.platform.core.sequencer import Sequencer
    from monotape.platform.model import Tick
    from monotape.platform.wire.batch import batch_from_ticks

    seq = Sequencer(frame_ns=40)
    for batch in batch_from_ticks([Tick(1, "XNAS", 1, 5, 0, 10, 11, 10, 1, "A"),
                                   Tick(2, "XNAS", 1, 6, 0, 20, 21, 20, 1, "A")]):  # fmt: skip
        seq.on_batch(batch, 1)
    seq.take_frame(40)
    one, two = seq.published(1), seq.published(2)
    assert one is not None and two is not None and one.seq == 5
    for batch in batch_from_ticks([Tick(2, "XNAS", 1, 7, 0, 22, 23, 22, 1, "A")]):
        seq.on_batch(batch, 2)
    assert seq.published(2) is two  # admitted, not yet shown
    seq.take_frame(80)
    assert seq.published(1) is one
    again = seq.published(2)
    assert again is not two and again is not None and (again.seq, again.bid) == (7, 22)
    assert seq.published(3) is None
