"""The ring -> writer adapter with a ``MemoryRing``: frames in, planned payloads out; a lap or a
producer gap puts every terminal into a gap that ends in a snapshot from the shared table; the
priority records reach exactly the terminals that marked them; the server tells the role
every mark, unmark and what a leaving terminal held."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest
import websockets

from monotape.clock import FakeClock, SystemClock
from monotape.config import ServerConfig
from monotape.histograms import Recorders
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.host.ring_feed import RingFeed, RingSnapshots
from monotape.platform.model import Tick
from monotape.platform.ring import (
    Entry,
    EntryKind,
    Gap,
    GapCause,
    Lapped,
    MemoryReader,
    MemoryRing,
    RingConfig,
    RingRead,
    TickAges,
)
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire import codec
from monotape.platform.wire.requests import SetPriority, Subscribe, encode_request
from tests.conftest import until
from tests.server.test_priority_stage import WRITE_NS, FakeTransport, _connect

SMALL = RingConfig(total_bytes=512 * 1024, slot_bytes=8192, snapshot_iids=256, max_readers=4)
MS = 1_000_000


def _tick(iid: int, seq: int) -> Tick:
    price = 10_000 + 7 * seq
    return Tick(iid, "XNAS", 1, seq, 0, price, price + 10, price + 5, seq, "A", 0, 0)


class Sequencer:
    """Plays the sequencer process: every frame moves every symbol of ``iids`` one version."""

    def __init__(self, ring: MemoryRing, iids: list[int], clock: FakeClock) -> None:
        self.ring, self.iids, self.clock = ring, iids, clock
        self.frame_no = 0

    def frame(self, ages: TickAges | None = None, stale_venues: int = 0) -> Entry:
        self.frame_no += 1
        n = self.frame_no
        records = {}
        for iid in self.iids:
            new = _tick(iid, n)
            self.ring.put_snapshot(iid, (1, n), codec.encode_full_record(new))
            records[iid] = codec.encode_delta_record(_tick(iid, n - 1) if n > 1 else None, new)
        now = self.clock.now_ns()
        entry = Entry(EntryKind.FRAME, n, now, now, records, ages=ages, stale_venues=stale_venues)
        self.ring.publish(entry)
        return entry


class SpyStamps(StageStamps):
    """The role's StageStamps, keeping the write values it was given as well."""

    def __init__(self) -> None:
        super().__init__(Recorders(start_ms=0))
        self.write_values: list[int] = []

    def written_frame(self, latencies_ns: np.ndarray, *args: object, **kw: object) -> None:
        self.write_values.extend(latencies_ns.tolist())
        super().written_frame(latencies_ns, *args, **kw)  # type: ignore[arg-type]


def _unframe(wire: bytes) -> bytes:
    return wire[2:] if wire[1] < 126 else wire[4:]


def _messages(t: FakeTransport) -> list[object]:
    return [codec.decode_message(_unframe(w)) for w in t.writes]


@pytest.fixture
def ring() -> Iterator[tuple[MemoryRing, MemoryReader]]:
    mem = MemoryRing(SMALL)
    reader = mem.reader(0)
    try:
        yield mem, reader
    finally:
        mem.close()


def _server(
    clock: FakeClock, reader: MemoryReader, priority: list[int] | None = None
) -> FanoutServer:
    universe = build_universe(venues=1, instruments=16, seed=1)
    sink = None if priority is None else (lambda v: priority.extend(v.tolist()))
    return FanoutServer(
        ServerConfig(), universe, None, clock, priority=sink, snapshots=RingSnapshots(reader)
    )


def _feed_all(feed: RingFeed, reader: MemoryReader) -> list[RingRead]:
    reads: list[RingRead] = []
    while (read := reader.poll()) is not None:
        reads.append(read)
        feed.on_read(read)
    return reads


class Desk:
    """One writer on the ring, as the writer role wires it: a server on a fake clock whose
    snapshots come from the ring's table, and the feed that turns ring reads into its frames.
    ``stages``: the stage values recorded as the role records them (``stamps``; the write
    values also in ``written``, the priority ones in ``priority_written``)."""

    def __init__(self, ring: tuple[MemoryRing, MemoryReader], *, stages: bool = False) -> None:
        self.mem, self.reader = ring
        self.clock = FakeClock()
        self.priority_written: list[int] = []
        self.server = _server(self.clock, self.reader, self.priority_written if stages else None)
        self.stamps = SpyStamps()
        self.written = self.stamps.write_values
        self.feed = RingFeed(
            self.server.writer, self.server.index, stamps=self.stamps if stages else None
        )

    def connect(
        self, subs: list[int], prio: Sequence[int] = (), *, buffered: int = 0
    ) -> FakeTransport:
        return _connect(self.server, self.clock, subs, list(prio), buffered=buffered)

    def sequencer(self, iids: list[int]) -> Sequencer:
        return Sequencer(self.mem, iids, self.clock)

    def feed_all(self) -> list[RingRead]:
        return _feed_all(self.feed, self.reader)


@pytest.fixture
def desk(ring: tuple[MemoryRing, MemoryReader]) -> Desk:
    return Desk(ring)


def test_a_frame_becomes_one_payload_per_signature_of_the_sequencers_bytes(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    d = Desk(ring, stages=True)
    server, feed, written = d.server, d.feed, d.written
    a, b, c = d.connect([1, 2]), d.connect([1, 2]), d.connect([3])
    entry = d.sequencer([1, 2, 3, 9]).frame()  # nobody here watches 9
    d.clock.advance(3 * MS)  # the ring hop: counted in the write stage
    d.feed_all()

    assert a.writes[0] is b.writes[0]  # one payload per signature, shared bytes
    frame = _messages(a)[0]
    assert isinstance(frame, codec.Frame) and frame.frame_no == 1
    assert [r.iid for r in frame.records] == [1, 2]
    want = codec.frame_header(1, 2) + entry.records[1] + entry.records[2]
    assert _unframe(a.writes[0]) == want  # the sequencer's bytes, nothing re-encoded
    only_c = _messages(c)[0]
    assert isinstance(only_c, codec.Frame) and [r.iid for r in only_c.records] == [3]
    assert server.writer.last_frame_no == 1 and feed.counters.frames == 1
    # one write value per terminal, from the sequencer's publish: the hop, then the writes
    # (WRITE_NS each; the native loop stamps a payload's terminals together)
    assert len(written) == 3 and min(written) >= 3 * MS + WRITE_NS
    assert max(written) == 3 * MS + 3 * WRITE_NS


def test_tick_to_write_comes_from_the_entrys_tick_ages_for_the_instruments_sent(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    """The writer never saw the ticks: their decode times come with the frame. Ticks of an
    instrument this writer sent get decoded -> its slowest direct write; the others none."""
    d = Desk(ring, stages=True)
    d.connect([1, 2]), d.connect([3])
    now = d.clock.now_ns()
    # five ticks in two runs (decoded 7 and 2 ms before the publish); iid 9 goes to nobody here
    decoded, runs = [now - 7 * MS, now - 2 * MS], [3, 2]
    iids = [1, 9, 2, 3, 9]
    ages = TickAges(
        np.array(decoded, np.int64).tobytes(),
        np.array(runs, np.uint32).tobytes(),
        np.array(iids, np.uint16).tobytes(),
    )
    d.sequencer([1, 2, 3, 9]).frame(ages)
    d.clock.advance(3 * MS)
    d.feed_all()
    last = 3 * MS + 2 * WRITE_NS  # two payloads, two direct writes: the slower one
    assert max(d.written) == last
    h = {iv.stage: iv.histogram for iv in d.stamps.rotate(1_000, 0)}["tick_to_write"]
    assert h.get_total_count() == 3  # the ticks of 1, 2 and 3; none of 9's
    assert h.get_count_at_value((7 * MS + last) // 1000) == 2  # 1 and 2, first run (µs)
    assert h.get_count_at_value((2 * MS + last) // 1000) == 1  # 3, second run


def test_a_frame_without_ages_records_writes_and_no_end_to_end_value(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    d = Desk(ring, stages=True)
    d.connect([1])
    d.sequencer([1]).frame()  # no ticks carried (or their ages dropped: the ring counts it)
    d.feed_all()
    by = {iv.stage: iv.count for iv in d.stamps.rotate(1_000, 0)}
    assert by["write"] == 1 and by["tick_to_write"] == 0


def test_a_frame_nobody_here_watches_writes_nothing(desk: Desk) -> None:
    a = desk.connect([5])
    desk.sequencer([1, 2]).frame()
    desk.feed_all()
    assert a.writes == [] and desk.server.writer.last_frame_no == 1


def test_a_lapped_writer_gaps_every_terminal_and_snapshots_from_the_table(desk: Desk) -> None:
    server, feed = desk.server, desk.feed
    a, b = desk.connect([1, 2]), desk.connect([3])
    seq = desk.sequencer([1, 2, 3])
    seq.frame()
    desk.feed_all()
    before = len(a.writes), len(b.writes)
    for _ in range(desk.mem.geometry.slots + 5):  # the writer was stopped: lapped
        seq.frame()
    reads = desk.feed_all()
    assert isinstance(reads[0], Lapped) and desk.reader.counters.laps == 1
    assert feed.counters.gaps == 1 and feed.counters.gapped_terminals == 2
    for t, iids in ((a, [1, 2]), (b, [3])):
        after = _messages(t)[before[0] if t is a else before[1] :]
        snap = after[0]
        # the next thing after the lap is a snapshot of everything it holds, from the table
        assert isinstance(snap, codec.Snapshot) and [r.iid for r in snap.records] == iids
        assert all(not r.has_base for r in snap.records)
        held = {r.iid: r.seq for r in snap.records}
        assert min(held.values()) >= seq.frame_no - 1  # at least as new as the last frame read
        # then the newest frame: at or below what the snapshot holds, never a regression
        for m in after[1:]:
            assert isinstance(m, codec.Frame)
            assert all(r.seq >= held[r.iid] for r in m.records)
    assert server.stats.gap_snapshots == 2


def test_a_producer_gap_or_restart_gaps_every_terminal(desk: Desk) -> None:
    feed = desk.feed
    a = desk.connect([1])
    idle = desk.connect([])  # subscribed to nothing yet: nothing to correct
    desk.sequencer([1]).frame()
    desk.feed_all()  # the writer's snapshots are at the frames it has read
    for cause in (GapCause.RESTARTED, GapCause.OVERSIZE):
        feed.on_read(Gap(cause, 7))
    snaps = [m for m in _messages(a) if isinstance(m, codec.Snapshot)]
    assert len(snaps) == 2 and feed.counters.gaps == 2
    assert idle.writes == [] and feed.counters.gapped_terminals == 2
    assert [r.iid for r in snaps[0].records] == [1] and snaps[0].records[0].seq == 1


def test_a_slow_terminal_in_a_gap_gets_one_snapshot_when_it_reads_again(desk: Desk) -> None:
    slow = desk.connect([1], buffered=desk.server.cfg.write_high_water + 1)
    seq = desk.sequencer([1])
    seq.frame()
    desk.feed_all()
    desk.feed.gap()
    assert slow.writes == []  # no room: the gap waits, nothing older goes out
    slow.buffered = 0
    seq.frame()
    desk.feed_all()
    first = _messages(slow)[0]
    assert isinstance(first, codec.Snapshot) and first.records[0].seq == 2


def test_priority_records_reach_only_the_terminals_that_marked_them(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    d = Desk(ring, stages=True)
    server, feed, got = d.server, d.feed, d.priority_written
    a, b, idle = d.connect([1, 2], [1]), d.connect([1, 2], [2]), d.connect([1, 2])
    admitted = d.clock.now_ns()
    full = {1: codec.encode_full_record(_tick(1, 5)), 2: codec.encode_full_record(_tick(2, 6))}
    d.mem.publish(Entry(EntryKind.PRIORITY, 0, 0, admitted, {}, {**full, 3: full[1]}))
    d.clock.advance(2 * MS)
    d.feed_all()
    for t, iid in ((a, 1), (b, 2)):
        (m,) = _messages(t)
        assert isinstance(m, codec.PriorityUpdate) and m.record.iid == iid
        assert _unframe(t.writes[0]) == codec.encode_priority(full[iid])
    assert idle.writes == []
    assert server.flush_priority() == 2
    assert sorted(got) == [2 * MS + WRITE_NS, 2 * MS + 2 * WRITE_NS]  # admitted -> written
    assert feed.counters.priority_writes == 2 and server.stats.priority_sent == 2


def test_ring_snapshots_read_the_table_and_leave_out_absent_symbols(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    mem, reader = ring
    snaps = RingSnapshots(reader)
    chunk = codec.encode_full_record(_tick(4, 9))
    mem.put_snapshot(4, (1, 9), chunk)
    assert snaps.chunk(4) is None  # the frame that carries it is not read yet
    mem.publish(Entry(EntryKind.FRAME, 1, 0, 0))
    assert reader.poll() is not None
    assert snaps.chunk(4) == chunk and snaps.chunk(5) is None
    m = codec.decode_message(_unframe(snaps.snapshot(12, [5, 4])))
    assert isinstance(m, codec.Snapshot) and m.frame_no == 12
    assert [(r.iid, r.seq) for r in m.records] == [(4, 9)]


def test_a_server_needs_a_sequencer_or_a_snapshots_source() -> None:
    with pytest.raises(ValueError, match="sequencer or a snapshots"):
        FanoutServer(ServerConfig(), build_universe(1, 4, 1), None, FakeClock())


async def test_marks_follow_a_terminals_order_ticket_and_its_teardown(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    """The server tells the writer role which iids a terminal marked or unmarked, and what it
    held when it left, so the role's interest row is exact (the row: host/interest.py)."""
    _mem, reader = ring
    universe = build_universe(venues=1, instruments=16, seed=1)
    told: list[set[int]] = []
    server = FanoutServer(
        ServerConfig(ws_port=0, admission_max_lag_ms=0),
        universe,
        None,
        SystemClock(),
        snapshots=RingSnapshots(reader),
        marks=lambda iids: told.append(set(iids)),
    )
    port = await server.start()
    keys = [universe[1].key, universe[2].key]
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}/", compression=None) as ws:
            await ws.recv()  # hello
            await ws.send(encode_request(Subscribe(req=1, keys=keys)))
            await ws.send(encode_request(SetPriority(req=2, keys=keys)))
            await ws.send(encode_request(SetPriority(req=3, keys=keys[:1], on=False)))
            await until(lambda: len(told) >= 2, "both requests told")
        await until(lambda: len(told) >= 3, "the teardown told")
    finally:
        await server.stop()
    iid1, iid2 = universe[1].iid, universe[2].iid
    assert told == [{iid1, iid2}, {iid1}, {iid2}]  # marked both, unmarked one, left holding one
    assert not server.index.has_priority(iid1) and not server.index.has_priority(iid2)


def test_each_frame_s_down_venues_reach_the_terminals_as_stale_before_its_records(
    ring: tuple[MemoryRing, MemoryReader],
) -> None:
    """The host sequencer's verdict rides every FRAME entry (ring/venues.py); the writer tells
    its terminals on a change only, and a recovered venue is cleared ahead of its frame."""
    from monotape.platform.ring.venues import VenueBits

    desk = Desk(ring)
    reader = ring[1]
    bits = VenueBits.of(["XNAS", "EBS"])
    desk.feed = RingFeed(desk.server.writer, desk.server.index, stale=(desk.server.stale, bits))
    t = desk.connect([0, 1])
    seq = desk.sequencer([0, 1])
    for mask in (0, bits.mask({"XNAS"}), bits.mask({"XNAS"}), 0):
        seq.frame(stale_venues=mask)
    t.writes.clear()
    _feed_all(desk.feed, reader)
    kinds = [type(msg).__name__ for msg in _messages(t) if not isinstance(msg, codec.Snapshot)]
    expected = ["Frame", "Stale", "Frame", "Frame", "Stale", "Frame"]
    assert kinds == expected, kinds
    told = [msg for msg in _messages(t) if isinstance(msg, codec.Stale)]
    assert [v.venue for v in told[0].venues] == ["XNAS"] and told[1].venues == []
