"""Hydration in a writer process is frame-consistent: a terminal's snapshot from the ring's
shared table is at the versions of the frames this writer has read, never a frame ahead.

The sequencer puts a symbol's full record before it publishes the frame that carries the
change, so the table's newest record can be a frame ahead of a writer. A terminal hydrated from
it would get that frame's delta on a base it does not hold, at or below the version it holds:
the SDK (``TerminalView``) counts that as a glass regression, which pages. Here every terminal's
bytes go through the SDK's own view, which must count no regression in any interleaving of the
producer's puts and publishes with the writer's reads, hydrations and laps."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.host.ring_feed import RingFeed, RingSnapshots
from monotape.platform.model import Tick
from monotape.platform.ring import Entry, EntryKind, MemoryReader, MemoryRing, RingConfig
from monotape.platform.sdk.view import TerminalView
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire import codec
from tests.server.test_priority_stage import FakeTransport, _connect

# 13 slots: a writer that reads nothing for a dozen entries is lapped
TINY = RingConfig(total_bytes=128 * 1024, slot_bytes=8192, snapshot_iids=64, max_readers=2)
IIDS = [1, 2, 3, 4, 5]


def _tick(iid: int, seq: int) -> Tick:
    price = 10_000 + 100 * iid + 7 * seq
    return Tick(iid, "XNAS", 1, seq, 0, price, price + 10, price + 5, seq, "A", 0, 0)


class Producer:
    """Plays the sequencer process in two steps, as another process is seen from a writer:
    ``put`` (the frame's full records into the table) then ``publish`` (the frame)."""

    def __init__(self, ring: MemoryRing) -> None:
        self.ring = ring
        self.seq = dict.fromkeys(IIDS, 0)
        self.frame_no = 0
        self.pending: dict[int, bytes] | None = None

    def put(self, iids: list[int]) -> None:
        assert self.pending is None
        self.pending = {}
        for iid in sorted(set(iids)):
            base = self.seq[iid]
            self.seq[iid] = new = base + 1
            self.ring.put_snapshot(iid, (1, new), codec.encode_full_record(_tick(iid, new)))
            self.pending[iid] = codec.encode_delta_record(
                _tick(iid, base) if base else None, _tick(iid, new)
            )

    def publish(self) -> None:
        records = self.pending if self.pending is not None else {}
        self.pending = None
        self.frame_no += 1
        self.ring.publish(Entry(EntryKind.FRAME, self.frame_no, self.frame_no, 0, records))

    def priority(self) -> None:
        """An order-ticket entry between frames: it takes an entry number, no frame's."""
        assert self.pending is None
        iid = IIDS[0]
        chunk = codec.encode_full_record(_tick(iid, self.seq[iid]))
        self.ring.publish(Entry(EntryKind.PRIORITY, self.frame_no, 0, 0, {}, {iid: chunk}))


class Writer:
    """A writer process's server fed by a ``MemoryRing`` reader; each terminal's bytes are
    decoded into the SDK's ``TerminalView``."""

    def __init__(self, ring: MemoryRing, snapshots: Callable[[MemoryReader], RingSnapshots]):
        self.clock = FakeClock()
        self.reader = ring.reader(0)
        self.server = FanoutServer(
            ServerConfig(),
            build_universe(venues=1, instruments=16, seed=1),
            None,
            self.clock,
            snapshots=snapshots(self.reader),
        )
        self.feed = RingFeed(self.server.writer, self.server.index)
        self.terminals: list[tuple[FakeTransport, TerminalView]] = []

    def read(self) -> bool:
        got = self.reader.poll()
        if got is None:
            return False
        self.feed.on_read(got)
        return True

    def drain(self) -> None:
        while self.read():
            pass

    def hydrate(self, iids: list[int]) -> None:
        """A terminal subscribes: the endpoint's order (index, then the snapshot)."""
        t = _connect(self.server, self.clock, sorted(set(iids)), [])
        cid = len(self.server.connections)
        conn = self.server.connections[cid]
        self.server.writer.answer(conn, self.server._hello)  # the dictionary: keys by iid
        snapshot = self.server.snapshots.snapshot(self.server.writer.last_frame_no, iids)
        self.server.writer.deliver(conn, snapshot)
        self.terminals.append((t, TerminalView(self.clock)))

    def views(self) -> list[TerminalView]:
        """Every terminal's view, fed what it was written since last asked."""
        out = []
        for t, view in self.terminals:
            for wire in t.writes:
                view.receive(codec.decode_message(wire[2:] if wire[1] < 126 else wire[4:]))
            t.writes.clear()
            out.append(view)
        return out

    def regressions(self) -> int:
        return sum(v.stats.regressions for v in self.views())


def _chained(view: TerminalView, iid: int) -> tuple[int, int] | None:
    """The version ``view``'s chain holds for ``iid`` (None: nothing, or gapped)."""
    link = view.chain(view.instruments[iid].key)
    return None if link is None else link.version


def _key(view: TerminalView, iid: int) -> str:
    return view.instruments[iid].key


class NewestSnapshots(RingSnapshots):
    """What a writer did before: the table's newest record, whatever frame it has read."""

    def chunk(self, iid: int) -> bytes | None:
        stored = self._reader.snapshot(iid)
        return None if stored is None else stored.chunk


def _race(snapshots: Callable[[MemoryReader], RingSnapshots]) -> tuple[Writer, TerminalView]:
    ring = MemoryRing(TINY)
    producer = Producer(ring)
    writer = Writer(ring, snapshots)
    producer.put(IIDS)
    producer.publish()
    writer.drain()  # frame 1 read
    producer.put([1, 2])  # frame 2's records are in the table ...
    writer.hydrate([1, 2, 3])  # ... when a terminal subscribes, before frame 2 is published
    producer.publish()
    writer.drain()  # frame 2 read: its deltas reach the new terminal
    (view,) = writer.views()
    return writer, view


def test_a_terminal_hydrated_while_the_next_frame_is_put_sees_no_regression() -> None:
    writer, view = _race(RingSnapshots)
    assert view.stats.snapshots == 1 and view.stats.frames == 1
    assert view.stats.regressions == 0 and view.stats.gaps == 0
    # the snapshot was frame 1's; frame 2's deltas chained from it
    assert _chained(view, 1) == (1, 2) and _chained(view, 3) == (1, 1)
    assert writer.reader.counters.snapshot_ahead == 0


def test_the_same_race_with_the_tables_newest_record_is_a_regression() -> None:
    """The bug this guards: a snapshot a frame ahead of the writer (the old behaviour)."""
    _, view = _race(NewestSnapshots)
    assert view.stats.regressions == 2  # symbols 1 and 2: frame 2's deltas below the snapshot


def test_a_writer_more_than_a_frame_behind_leaves_the_symbol_out_then_resyncs() -> None:
    """Both records newer than what the writer read: the symbol is left out (a gap on its next
    delta, then its snapshot), never a snapshot ahead of the frames."""
    ring = MemoryRing(TINY)
    producer = Producer(ring)
    writer = Writer(ring, RingSnapshots)
    producer.put(IIDS)
    producer.publish()
    writer.drain()
    producer.put([1])
    producer.publish()  # frame 2: not read yet
    producer.put([1])  # frame 3 being put
    writer.hydrate([1, 2])
    assert writer.reader.counters.snapshot_ahead == 1
    (view,) = writer.views()
    assert view.stats.snapshots == 1 and _chained(view, 1) is None and _chained(view, 2) == (1, 1)
    producer.publish()
    writer.drain()
    (view,) = writer.views()
    assert (
        view.stats.regressions == 0 and view.stats.gaps >= 1 and view.resyncing == [_key(view, 1)]
    )


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(st.sampled_from(IIDS), min_size=1, max_size=5)),
        st.tuples(st.just("publish"), st.just([])),
        st.tuples(st.just("priority"), st.just([])),
        st.tuples(st.just("read"), st.just([])),
        # frames while the writer reads nothing: past the ring's 13 slots it is lapped
        st.tuples(st.just("burst"), st.lists(st.sampled_from(IIDS), min_size=1, max_size=20)),
        st.tuples(st.just("hydrate"), st.lists(st.sampled_from(IIDS), min_size=1, max_size=5)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_no_interleaving_of_puts_publishes_reads_and_hydrations_shows_a_regression(
    ops: list[tuple[str, list[int]]],
) -> None:
    ring = MemoryRing(TINY)
    producer = Producer(ring)
    writer = Writer(ring, RingSnapshots)
    for op, iids in ops:
        if op == "put":
            if producer.pending is not None:
                producer.publish()  # one frame's puts at a time, as publish_frame does
            producer.put(iids)
        elif op == "publish":
            producer.publish()
        elif op == "priority" and producer.pending is None:
            producer.priority()
        elif op == "burst":
            for iid in iids:
                if producer.pending is not None:
                    producer.publish()
                producer.put([iid, IIDS[-1]])
        elif op == "read":
            writer.read()
        elif op == "hydrate" and len(writer.terminals) < 6:
            writer.hydrate(iids)
        assert writer.regressions() == 0, op
    if producer.pending is not None:
        producer.publish()
    writer.drain()  # laps included: a lap is a gap snapshot at what the writer has read
    assert writer.regressions() == 0
