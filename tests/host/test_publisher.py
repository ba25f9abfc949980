"""The sequencer role's core (host/publisher.py), with a MemoryRing: a frame becomes snapshot puts
and one FRAME entry, wanted symbols a PRIORITY entry, and a restart seeded from the table never
publishes a version at or below one a reader saw."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.core.conflation import Frame, FrameRecord
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.host.publisher import FramePublisher, seed
from monotape.platform.model import Tick
from monotape.platform.ring import (
    Entry,
    EntryKind,
    Gap,
    Lapped,
    MemoryReader,
    MemoryRing,
    PublishOutcome,
    RingConfig,
    RingFrame,
    SnapshotChunk,
)
from monotape.platform.wire import codec
from monotape.platform.wire.batch import batch_from_ticks

FRAME_NS = 40_000_000
# 1 MiB: 23 slots of 32 KiB, a 1,024-iid table; the property test's frames are tiny
RING = RingConfig(total_bytes=1 << 20, slot_bytes=32 * 1024, snapshot_iids=1024, max_readers=4)


def tick(iid: int, seq: int, epoch: int = 1, price: int = 10_000, venue: str = "XNAS") -> Tick:
    return Tick(iid, venue, epoch, seq, 0, price, price + 10, price + 5, 100)


class Marked:
    """A stand-in for PriorityInterest: the iids some terminal holds in an order ticket."""

    def __init__(self, *iids: int) -> None:
        self.iids = set(iids)

    def wanted_among(self, iids: Iterable[int]) -> frozenset[int]:
        return frozenset(self.iids.intersection(iids))


class Failures:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, object]]] = []

    def record(self, stage: str, exc: BaseException, **context: object) -> None:
        self.seen.append((stage, context))


def build(
    ring: MemoryRing, interest: Marked | None = None, sequencer: Sequencer | None = None
) -> tuple[Sequencer, FramePublisher, FakeClock, Failures]:
    clock = FakeClock()
    failures = Failures()
    seq = sequencer or Sequencer(lanes=3, frame_ns=FRAME_NS)
    pub = FramePublisher(ring, clock.now_ns, interest=interest, failures=failures)
    return seq, pub, clock, failures


def admit(seq: Sequencer, pub: FramePublisher, ticks: list[Tick], now: int) -> int:
    """What the sequencer role does with each bus batch (host/sequencer.py ``on_batch``):
    admit it whole, then one PRIORITY entry of the wanted symbols' latest ticks. Returns the
    PRIORITY entries published."""
    entries = 0
    for batch in batch_from_ticks(ticks):
        admission = seq.on_batch(batch, now)
        if admission.count:
            wanted = pub.wanted(admission.iids)
            if wanted and pub.publish_priority(seq.latest(wanted), now) is not None:
                entries += 1
    return entries


def frames_of(reader: MemoryReader) -> list[RingFrame]:
    out = []
    while (got := reader.poll()) is not None:
        assert isinstance(got, RingFrame), got
        out.append(got)
    return out


def test_a_frame_is_snapshot_puts_then_one_frame_entry_of_delta_records() -> None:
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    seq, pub, clock, _ = build(ring)
    first = [tick(7, 1), tick(3, 1), tick(7, 2)]
    seq.on_ticks(first, clock.now_ns())
    outcome, published = pub.publish_frame(seq.take_frame(FRAME_NS))
    assert outcome is PublishOutcome.PUBLISHED and published == clock.now_ns()
    seq.on_ticks([tick(3, 5, price=10_200)], clock.now_ns())
    pub.publish_frame(seq.take_frame(2 * FRAME_NS))
    one, two = frames_of(reader)
    assert (one.kind, one.frame_no, one.boundary_ns) == (EntryKind.FRAME, 1, FRAME_NS)
    # every record, ascending iid, exactly the bytes the one-process planner encodes
    assert one.records.as_dict() == {
        3: codec.encode_delta_record(None, first[1]),
        7: codec.encode_delta_record(None, first[2]),
    }
    assert list(one.records.iids) == [3, 7]
    assert two.records.as_dict() == {
        3: codec.encode_delta_record(first[1], tick(3, 5, price=10_200))
    }
    assert len(two.priority) == 0
    # the table holds each symbol's latest full record, at the version the frame carried
    assert reader.snapshot(3) == SnapshotChunk(
        (1, 5), codec.encode_full_record(tick(3, 5, price=10_200))
    )
    assert reader.snapshot(7) == SnapshotChunk((1, 2), codec.encode_full_record(first[2]))


def test_a_frames_puts_are_tagged_with_its_entry_so_a_reader_gets_the_frames_it_read() -> None:
    """The puts of a frame carry the entry the frame gets (priority entries between frames take
    numbers too): a reader that has not read that frame gets the record of the one before."""
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    seq, pub, clock, _ = build(ring, Marked(3))
    seq.on_ticks([tick(3, 1)], clock.now_ns())
    pub.publish_frame(seq.take_frame(FRAME_NS))  # entry 1
    applied = [tick(3, 2)]
    seq.on_ticks(applied, clock.now_ns())
    pub.publish_priority(applied, clock.now_ns())  # entry 2
    assert len(frames_of(reader)) == 2 and reader.position == 2
    # frame 2 (entry 3): its put is in the table before the frame is in the ring
    real_publish = ring.publish
    seen: list[SnapshotChunk | None] = []

    def publish(entry: Entry) -> PublishOutcome:
        seen.append(reader.snapshot(3, at_most=reader.position))
        seen.append(reader.snapshot(3))
        return real_publish(entry)

    ring.publish = publish  # type: ignore[method-assign]
    pub.publish_frame(seq.take_frame(2 * FRAME_NS))
    assert seen == [
        SnapshotChunk((1, 1), codec.encode_full_record(tick(3, 1))),  # the frame it has read
        SnapshotChunk((1, 2), codec.encode_full_record(tick(3, 2))),  # the newest: ahead of it
    ]
    assert [f.no for f in frames_of(reader)] == [3]
    assert reader.snapshot(3, at_most=reader.position) == seen[1]


def test_an_empty_boundary_is_published_too() -> None:
    """A writer plans every boundary (rate groups, slow terminals' catch-up): none is skipped."""
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    seq, pub, _, _ = build(ring)
    for n in (1, 2, 3):
        pub.publish_frame(seq.take_frame(n * FRAME_NS))
    got = frames_of(reader)
    assert [f.frame_no for f in got] == [1, 2, 3]
    assert all(len(f.records) == 0 for f in got)


def test_a_symbol_that_cannot_encode_is_left_out_and_counted() -> None:
    """A tick batch cannot hold such a price (its columns are int64), so the frame is built
    by hand: the publisher is the last line, whatever reaches it."""
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    _, pub, _, failures = build(ring)
    poison = tick(4, 1, price=1 << 63)  # past int64 once zigzagged: the encoder refuses it
    records = [FrameRecord(t.iid, None, t) for t in (tick(2, 1), poison, tick(9, 1))]
    pub.publish_frame(Frame(1, FRAME_NS, records))
    (got,) = frames_of(reader)
    assert list(got.records.iids) == [2, 9]
    assert reader.snapshot(4) is None
    assert [stage for stage, _ in failures.seen] == ["encode"]
    assert failures.seen[0][1] == {"iid": 4} and pub.left_out == 1


def test_priority_only_for_wanted_symbols_latest_tick_each() -> None:
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    seq, pub, clock, _ = build(ring, Marked(5, 8))
    pub.publish_frame(seq.take_frame(FRAME_NS))
    batch = [tick(5, 1), tick(6, 1), tick(8, 3), tick(5, 2, price=10_100)]
    clock.advance_ms(3)
    applied = seq.on_ticks(batch, clock.now_ns())
    assert pub.publish_priority(applied, clock.now_ns()) is PublishOutcome.PUBLISHED
    assert pub.publish_priority(seq.on_ticks([tick(6, 2)], clock.now_ns()), 0) is None
    _, prio = frames_of(reader)
    assert (prio.kind, prio.frame_no, prio.boundary_ns) == (EntryKind.PRIORITY, 1, FRAME_NS)
    assert prio.published_ns == clock.now_ns()  # the batch's admit time: the priority stage
    assert len(prio.records) == 0
    assert prio.priority.as_dict() == {
        5: codec.encode_full_record(tick(5, 2, price=10_100)),
        8: codec.encode_full_record(tick(8, 3)),
    }
    assert pub.priority_entries == 1


def test_the_batch_path_publishes_the_same_priority_entry() -> None:
    """The sequencer role's way (``on_batch``, ``wanted``, ``latest``): the entry the per-tick
    path above publishes, byte for byte; none for a batch without a wanted symbol."""
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    seq, pub, clock, _ = build(ring, Marked(5, 8))
    pub.publish_frame(seq.take_frame(FRAME_NS))
    clock.advance_ms(3)
    batch = [tick(5, 1), tick(6, 1), tick(8, 3), tick(5, 2, price=10_100)]
    assert admit(seq, pub, batch, clock.now_ns()) == 1
    assert admit(seq, pub, [tick(6, 2), tick(5, 2)], clock.now_ns()) == 0  # 5: a duplicate
    _, prio = frames_of(reader)
    assert (prio.kind, prio.frame_no, prio.published_ns) == (EntryKind.PRIORITY, 1, clock.now_ns())
    assert prio.priority.as_dict() == {
        5: codec.encode_full_record(tick(5, 2, price=10_100)),
        8: codec.encode_full_record(tick(8, 3)),
    }
    assert pub.priority_entries == 1


def test_the_seed_refuses_versions_at_or_below_the_table() -> None:
    ring = MemoryRing(RING)
    seq, pub, clock, _ = build(ring)
    seq.on_ticks([tick(1, 10), tick(2, 4, epoch=2)], clock.now_ns())
    pub.publish_frame(seq.take_frame(FRAME_NS))
    seq.on_ticks([tick(1, 11)], clock.now_ns())  # admitted, never framed: lost with the process

    restarted = Sequencer(lanes=2, frame_ns=FRAME_NS)
    result = seed(restarted, ring, {1: "XNAS", 2: "XNAS"})
    assert (result.seeded, result.undecodable) == (2, 0)
    assert restarted.current(1) == tick(1, 10)
    late = [tick(1, 10), tick(1, 9), tick(2, 9, epoch=1), tick(2, 4, epoch=2), tick(1, 11)]
    applied = restarted.on_ticks(late, clock.now_ns())
    assert [(t.iid, t.seq) for t in applied] == [(1, 11)]
    counts = restarted.counters()["XNAS"]
    assert (counts.duplicates, counts.regressions) == (2, 2)
    # the first record after a restart names no base: a full record any terminal applies
    pub2 = FramePublisher(ring, clock.now_ns)
    reader = ring.reader(0)
    pub2.publish_frame(restarted.take_frame(2 * FRAME_NS))
    (got,) = frames_of(reader)
    assert got.records.as_dict() == {1: codec.encode_full_record(tick(1, 11))}


def test_priority_since_the_last_frame_seeds_too() -> None:
    """An order-ticket terminal was shown (1, 12) by a PRIORITY entry after the last frame: the
    restarted sequencer admits nothing at or below it, though the table said (1, 10), and puts
    it into the table, so a second restart (after frames that did not carry it) remembers."""
    ring = MemoryRing(RING)
    seq, pub, clock, _ = build(ring, Marked(5))
    seq.on_ticks([tick(5, 10), tick(6, 3)], clock.now_ns())
    pub.publish_frame(seq.take_frame(FRAME_NS))
    for s in (11, 12):
        pub.publish_priority(seq.on_ticks([tick(5, s)], clock.now_ns()), clock.now_ns())

    restarted = Sequencer(lanes=2, frame_ns=FRAME_NS)
    result = seed(restarted, ring, {5: "XNAS", 6: "XNAS"})
    assert (result.seeded, result.table_puts) == (2, 1)
    assert restarted.current(5) == tick(5, 12)
    assert dict(ring.table())[5] == SnapshotChunk((1, 12), codec.encode_full_record(tick(5, 12)))
    assert [t.seq for t in restarted.on_ticks([tick(5, 11), tick(5, 12)], 0)] == []

    FramePublisher(ring, clock.now_ns).publish_frame(restarted.take_frame(2 * FRAME_NS))
    again = Sequencer(lanes=2, frame_ns=FRAME_NS)
    seed(again, ring)  # the newest entry is now an empty frame: the table remembers
    assert [t.seq for t in again.on_ticks([tick(5, 12), tick(5, 13)], 0)] == [13]


def test_a_chunk_that_does_not_decode_still_seeds_its_version() -> None:
    ring = MemoryRing(RING)
    ring.put_snapshot(3, (2, 40), b"\xff")
    restarted = Sequencer(lanes=1, frame_ns=FRAME_NS)
    result = seed(restarted, ring)
    assert (result.seeded, result.undecodable) == (1, 1)
    assert restarted.on_ticks([tick(3, 40, epoch=2), tick(3, 39, epoch=2)], 0) == []


# -- the property ------------------------------------------------------------------------------
# A step: ("batch", ticks) admitted as bus batches (one per run of one epoch, as the role
# admits them: ``admit``), ("frame",) a boundary, ("restart",) the
# sequencer dies (what it admitted since the last frame is lost) and a new one seeds itself.
versions = st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 30))  # iid, epoch, seq
steps = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.lists(versions, min_size=1, max_size=12)),
        st.tuples(st.just("frame")),
        st.tuples(st.just("restart")),
    ),
    max_size=40,
)


def shown(entries: Iterable[RingFrame]) -> dict[int, list[tuple[int, int]]]:
    """Versions per symbol in entry order: a frame's records, a priority entry's records."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for f in entries:
        for iid, chunk in itertools.chain(f.records.items(), f.priority.items()):
            rec = codec.decode_record(chunk)
            assert rec.iid == iid
            out[iid].append((rec.epoch, rec.seq))
    return out


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(1, 4), st.sets(st.integers(0, 5), max_size=3))
def test_versions_a_reader_sees_never_go_back_across_restarts(
    script: list[tuple[object, ...]], lanes: int, marked: set[int]
) -> None:
    """Frames: strictly rising versions per symbol. Frames and priority entries together, in
    entry order: never back (a frame may repeat the version a priority entry showed)."""
    ring = MemoryRing(RING)
    reader = ring.reader(0)
    clock = FakeClock()
    interest = Marked(*marked)
    seq = Sequencer(lanes, FRAME_NS)
    pub = FramePublisher(ring, clock.now_ns, interest=interest)
    boundary = 0
    got: list[RingFrame] = []
    for step in script:
        if step[0] == "batch":
            batch = [tick(i, s, epoch=e, price=10_000 + s) for i, e, s in step[1]]  # type: ignore[attr-defined]
            admit(seq, pub, batch, clock.now_ns())  # a bus batch per run of one epoch
        elif step[0] == "frame":
            boundary += FRAME_NS
            pub.publish_frame(seq.take_frame(boundary))
        else:
            seq = Sequencer(lanes, FRAME_NS)
            seed(seq, ring)
            pub = FramePublisher(ring, clock.now_ns, interest=interest)
        while (r := reader.poll()) is not None:
            assert not isinstance(r, Lapped | Gap), r
            got.append(r)
        # the table never lags what a reader has read in frames
        for iid, vs in shown(f for f in got if f.kind is EntryKind.FRAME).items():
            snap = reader.snapshot(iid)
            assert snap is not None and snap.version >= vs[-1]
    for iid, vs in shown(f for f in got if f.kind is EntryKind.FRAME).items():
        assert all(a < b for a, b in itertools.pairwise(vs)), (iid, vs)
    for iid, vs in shown(got).items():
        assert all(a <= b for a, b in itertools.pairwise(vs)), (iid, vs)
