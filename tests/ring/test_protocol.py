"""The ring's guarantees (protocol.RingProducer / RingReader), held by the in-process ring and the
/dev/shm ring alike: every test runs against both."""

from __future__ import annotations

import asyncio
import select
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.ring import (
    Entry,
    EntryKind,
    Gap,
    GapCause,
    Lapped,
    PublishOutcome,
    RingFollower,
    RingFrame,
    RingRead,
    SnapshotChunk,
    SnapshotPut,
    TickAges,
)
from monotape.platform.ring.layout import encode_entry
from monotape.platform.ring.protocol import RingReader
from tests.conftest import until
from tests.ring.conftest import RingPair, open_ring
from tests.ring.frames import expected_frame, realistic_records


def frame(frame_no: int, records: int = 20) -> Entry:
    return expected_frame(frame_no, records)


def assert_same(got: RingRead | None, sent: Entry, no: int) -> None:
    assert isinstance(got, RingFrame), got
    assert got.no == no
    assert (got.kind, got.frame_no, got.boundary_ns, got.published_ns) == (
        sent.kind,
        sent.frame_no,
        sent.boundary_ns,
        sent.published_ns,
    )
    assert got.records.as_dict() == sent.records
    assert got.priority.as_dict() == sent.priority


def test_every_reader_gets_every_entry_in_order(ring: RingPair) -> None:
    producer, reader = ring
    a, b = reader(0), reader(1)
    assert a.poll() is None and b.poll() is None
    sent = [frame(k) for k in range(1, 2 * producer.geometry.slots)]
    for no, entry in enumerate(sent, 1):
        assert producer.publish(entry) is PublishOutcome.PUBLISHED
        assert_same(a.poll(), entry, no)  # a reads as it goes
        if no % 7 == 0:  # b reads in bursts, never more than a ring behind
            for k in range(no - 6, no + 1):
                assert_same(b.poll(), sent[k - 1], k)
    assert a.poll() is None
    assert a.counters.frames == len(sent) and a.counters.laps == 0
    assert producer.counters.published == len(sent)


def test_a_reader_starts_after_the_newest_entry(ring: RingPair) -> None:
    producer, reader = ring
    producer.publish(frame(1))
    late = reader(2)
    assert late.poll() is None
    producer.publish(frame(2))
    assert_same(late.poll(), frame(2), 2)


def test_a_lapped_reader_knows_it_and_the_other_misses_nothing(ring: RingPair) -> None:
    producer, reader = ring
    slots = producer.geometry.slots
    steady, stalled = reader(0), reader(1)
    for no in range(1, slots + 6):
        producer.publish(frame(no))
        assert_same(steady.poll(), frame(no), no)
    head = slots + 5
    lap = stalled.poll()
    assert lap == Lapped(first=1, resume=head) and lap.missed == head - 1
    assert_same(stalled.poll(), frame(head), head)  # continues with the newest entry
    assert stalled.poll() is None
    producer.publish(frame(head + 1))
    assert_same(stalled.poll(), frame(head + 1), head + 1)
    assert stalled.counters.laps == 1 and stalled.counters.missed == head - 1
    assert steady.counters.laps == 0 and steady.counters.frames == head


def test_a_frame_larger_than_a_slot_is_a_gap_for_everyone(ring: RingPair) -> None:
    producer, reader = ring
    a, b = reader(0), reader(1)
    huge = Entry(EntryKind.FRAME, 9, 360, 361, realistic_records(1000))  # ~27 KB > 8 KiB slot
    assert producer.publish(huge) is PublishOutcome.OVERSIZE
    assert producer.counters.oversize == 1 and producer.counters.published == 1
    for r in (a, b):
        assert r.poll() == Gap(GapCause.OVERSIZE, frame_no=9)
        assert r.counters.gaps == 1
    producer.publish(frame(10))
    assert_same(a.poll(), frame(10), 2)


def _ages(ticks: int) -> TickAges:
    """``ticks`` ticks in one run (u16 iids): 2 bytes a tick."""
    return TickAges((5).to_bytes(8, "little"), ticks.to_bytes(4, "little"), bytes(2 * ticks))


def test_tick_ages_travel_with_the_frame_and_are_the_first_thing_left_out(
    ring: RingPair,
) -> None:
    producer, reader = ring
    r = reader(0)
    ages = _ages(7)
    small = Entry(EntryKind.FRAME, 3, 120, 121, realistic_records(20), ages=ages)
    assert producer.publish(small) is PublishOutcome.PUBLISHED
    got = r.poll()
    assert_same(got, small, 1)
    assert isinstance(got, RingFrame) and got.ages is not None
    assert bytes(got.ages.iids) == bytes(14) and bytes(got.ages.ticks) == ages.ticks
    # records that fit a slot only without their ages: published without them, counted
    room = producer.geometry.max_entry - len(encode_entry(replace(small, ages=None)))
    tight = replace(small, frame_no=4, ages=_ages(room // 2 + 1))
    assert producer.publish(tight) is PublishOutcome.AGES_DROPPED
    got = r.poll()
    assert_same(got, tight, 2)
    assert isinstance(got, RingFrame) and got.ages is None
    assert producer.counters.ages_dropped == 1 and producer.counters.oversize == 0


def test_priority_entries_between_frames(ring: RingPair) -> None:
    producer, reader = ring
    r = reader(0)
    ticket = Entry(EntryKind.PRIORITY, 4, 160, 170, priority=realistic_records(2, seed=5))
    producer.publish(frame(4))
    producer.publish(ticket)
    assert_same(r.poll(), frame(4), 1)
    assert_same(r.poll(), ticket, 2)


def test_snapshot_table(ring: RingPair) -> None:
    producer, reader = ring
    r = reader(0)
    assert r.snapshot(5) is None
    assert producer.put_snapshot(5, (1, 100), b"full-5") is SnapshotPut.STORED
    assert r.snapshot(5) == SnapshotChunk((1, 100), b"full-5")
    assert producer.put_snapshot(5, (2, 7), b"newer") is SnapshotPut.STORED
    assert r.snapshot(5) == SnapshotChunk((2, 7), b"newer")
    limit = producer.geometry.max_chunk
    assert producer.put_snapshot(6, (1, 1), b"x" * limit) is SnapshotPut.STORED
    assert producer.put_snapshot(5, (3, 1), b"x" * (limit + 1)) is SnapshotPut.TOO_LARGE
    assert r.snapshot(5) is None  # absent, never a stale chunk under a newer version
    assert producer.put_snapshot(producer.geometry.snapshot_iids, (1, 1), b"y") is (
        SnapshotPut.OUT_OF_RANGE
    )
    assert producer.counters.snapshots_refused == 2
    assert r.snapshot(6) == SnapshotChunk((1, 1), b"x" * limit)


def test_a_frames_puts_in_one_call(ring: RingPair) -> None:
    """``put_snapshots``: each put as ``put_snapshot`` would store it, in order, counted alike;
    a malformed one stores nothing of its batch."""
    producer, reader = ring
    r = reader(0)
    cap, iids = producer.geometry.max_chunk, producer.geometry.snapshot_iids
    puts = [(5, 1, 100, b"full-5"), (6, 1, 1, b"x" * (cap + 1)), (iids, 1, 1, b"y")]
    assert producer.put_snapshots([*puts, (5, 1, 101, b"again")]) == 2
    assert producer.counters.snapshots_refused == 2
    assert r.snapshot(5) == SnapshotChunk((1, 101), b"again")  # the same frame's: replaced
    assert r.snapshot(6) is None and r.snapshot(iids) is None
    producer.publish(frame(1))
    assert isinstance(r.poll(), RingFrame)
    assert r.snapshot(5, at_most=1) == SnapshotChunk((1, 101), b"again")
    assert producer.put_snapshots([]) == 0
    with pytest.raises(ValueError):
        producer.put_snapshots([(7, 1, 1, b"ok"), (8, -1, 0, b"bad")])
    with pytest.raises(TypeError):  # both rings check alike (protocol.check_puts)
        producer.put_snapshots([(7, 1, 1, b"ok"), (8, 1, 1, "not a buffer")])  # type: ignore[list-item]
    assert r.snapshot(7) is None and producer.counters.snapshots_refused == 2


def test_the_table_keeps_two_records_tagged_with_their_frames_entry(ring: RingPair) -> None:
    """A put is tagged with the entry its frame will be (the next publish); a reader asks for
    the newest at or before the entries it has read (``position``), so a record put for a
    frame it has not read yet is never the one it gets."""
    producer, reader = ring
    r = reader(0)
    assert r.position == 0
    producer.put_snapshot(5, (1, 1), b"v1")  # for entry 1
    assert r.snapshot(5, at_most=r.position) is None and r.counters.snapshot_ahead == 1
    producer.publish(frame(1))
    assert isinstance(r.poll(), RingFrame) and r.position == 1
    assert r.snapshot(5, at_most=1) == SnapshotChunk((1, 1), b"v1")
    producer.put_snapshot(5, (1, 2), b"v2")  # for entry 2, not published yet
    assert r.snapshot(5, at_most=1) == SnapshotChunk((1, 1), b"v1")
    assert r.snapshot(5) == SnapshotChunk((1, 2), b"v2")  # the newest, whatever was read
    producer.put_snapshot(5, (1, 3), b"v2 again")  # the same frame's record again: replaced
    assert r.snapshot(5, at_most=1) == SnapshotChunk((1, 1), b"v1")
    producer.publish(frame(2))
    producer.publish(Entry(EntryKind.PRIORITY, 2, 0, 0, priority={5: b"p"}))  # entry 3
    producer.put_snapshot(5, (1, 4), b"v4")  # for entry 4: the oldest (v1) goes
    assert r.snapshot(5, at_most=1) is None and r.counters.snapshot_ahead == 2
    assert r.snapshot(5, at_most=3) == SnapshotChunk((1, 3), b"v2 again")
    assert r.snapshot(5, at_most=4) == SnapshotChunk((1, 4), b"v4")
    assert r.snapshot(6, at_most=4) is None and r.counters.snapshot_ahead == 2  # never put
    # a refused chunk is an absent record at its entry: the older one still serves entry 3
    assert producer.put_snapshot(5, (1, 5), b"x" * (producer.geometry.max_chunk + 1)) is (
        SnapshotPut.TOO_LARGE
    )
    assert r.snapshot(5, at_most=3) == SnapshotChunk((1, 3), b"v2 again")
    assert r.snapshot(5, at_most=4) is None and r.snapshot(5) is None
    assert r.snapshot(producer.geometry.snapshot_iids, at_most=4) is None  # out of range
    assert list(producer.table()) == []  # the newest record of 5 is the refused one


def test_position_after_a_lap_is_before_the_entry_read_next(ring: RingPair) -> None:
    producer, reader = ring
    r = reader(0)
    for n in range(1, producer.geometry.slots + 4):
        producer.publish(frame(n, records=1))
    lap = r.poll()
    assert isinstance(lap, Lapped) and r.position == lap.resume - 1
    got = r.poll()
    assert isinstance(got, RingFrame) and got.no == lap.resume == r.position


def test_the_table_lists_what_it_holds(ring: RingPair) -> None:
    """``table()``: every stored iid, ascending, with its version; a refused chunk is absent."""
    producer, _ = ring
    assert list(producer.table()) == []
    producer.put_snapshot(9, (1, 3), b"nine")
    producer.put_snapshot(2, (4, 1), b"two")
    producer.put_snapshot(2, (4, 2), b"two again")
    producer.put_snapshot(5, (1, 1), b"x" * (producer.geometry.max_chunk + 1))
    assert list(producer.table()) == [
        (2, SnapshotChunk((4, 2), b"two again")),
        (9, SnapshotChunk((1, 3), b"nine")),
    ]


def test_recent_reads_back_what_is_still_in_the_ring_newest_first(ring: RingPair) -> None:
    producer, _ = ring
    assert list(producer.recent()) == []
    sent = [frame(n, records=3) for n in range(1, 4)]
    for e in sent:
        producer.publish(e)
    got = list(producer.recent())
    assert [f.no for f in got] == [3, 2, 1]
    for f, e in zip(got, reversed(sent), strict=True):
        assert_same(f, e, f.no)
    slots = producer.geometry.slots
    for n in range(4, slots + 10):  # lapped: only the last ``slots`` entries are left
        producer.publish(frame(n, records=3))
    nos = [f.no for f in producer.recent()]
    assert nos == list(range(slots + 9, 9, -1))


def _readable(r: RingReader) -> bool:
    return bool(select.select([r.fileno()], [], [], 0)[0])


def test_the_doorbell_rings_on_publish(ring: RingPair) -> None:
    producer, reader = ring
    r = reader(0)
    assert not _readable(r)
    producer.publish(frame(1))
    producer.publish(frame(2))
    assert _readable(r)
    assert r.drain_bell() >= 1
    assert not _readable(r)
    assert isinstance(r.poll(), RingFrame) and isinstance(r.poll(), RingFrame)


async def test_follower_wakes_on_the_doorbell(ring: RingPair) -> None:
    producer, reader = ring
    got: list[RingRead] = []
    follower = RingFollower(reader(0), got.append, asyncio.get_running_loop(), reads_per_wake=2)
    follower.start()
    for k in range(1, 6):
        producer.publish(frame(k))
    await until(lambda: len(got) == 5, "five frames followed")
    assert [g.no for g in got if isinstance(g, RingFrame)] == [1, 2, 3, 4, 5]
    assert follower.wakes >= 1
    follower.stop()
    producer.publish(frame(6))
    await asyncio.sleep(0.05)
    assert len(got) == 5  # stopped: nothing read


OPS = st.lists(st.one_of(st.integers(1, 80), st.just(0)), max_size=30)


@pytest.mark.parametrize("kind", ["memory", "shm"])
@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_a_reader_sees_entries_in_order_or_a_lap_naming_what_it_lost(
    kind: str, ops: list[int]
) -> None:
    """Any mix of bursts (publish n) and reads (0: poll until None): the reader's frames are
    exactly the published ones, in order, and every jump is a Lapped naming it."""
    with open_ring(kind) as (producer, reader):
        r = reader(0)
        head, want = 0, 1
        for op in ops:
            for _ in range(op):
                head += 1
                producer.publish(frame(head, records=3))
            if op:
                continue
            while (got := r.poll()) is not None:
                if isinstance(got, Lapped):
                    assert got.first == want and head - want >= producer.geometry.slots
                    assert got.resume == head
                    want = got.resume
                    continue
                assert_same(got, frame(want, records=3), want)
                want += 1
            assert want == head + 1
