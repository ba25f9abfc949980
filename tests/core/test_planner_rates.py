"""Rate groups (max_hz) in the frame plan, with no socket: a k terminal gets FRAMEs only at
frame_no % k == 0 with everything changed since its previous boundary, at the latest version; a
25 Hz terminal's deltas are unaffected; every delta a terminal gets names exactly the version it
holds, and no record is older than what it holds (the SDK guard's two alarms: a gap, a
regression), whatever joins, re-subscribes, gap snapshots and rate changes happen between
boundaries; after each of its boundaries a k terminal holds exactly what the sequencer
published; and a boundary encodes only the symbols that changed more than once since the last."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.conflation import FRAME_NS, Conflator
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.planner import FramePlan, Pacer, gap_snapshot, plan_frame, written_iids
from monotape.platform.core.snapshots import SnapshotCache
from monotape.platform.model import Tick
from monotape.platform.wire import codec

# (epoch, seq, bid, ask, last): what a terminal holds for a symbol
Held = dict[int, tuple[int, int, int, int, int]]


def _tick(iid: int, seq: int, price: int) -> Tick:
    return Tick(iid, "XNAS", 1, seq, 0, price, price + 2, price + 1, 1, "A", 0, 0)


def _unframe(wire: bytes) -> bytes:
    assert wire[0] == 0x82  # FIN + binary
    n = wire[1]
    if n < 126:
        return wire[2:]
    return wire[4:] if n == 126 else wire[10:]


class Relay:
    """Snapshots that are not the ``SnapshotCache`` (a writer process's ring table, which may be
    newer than the frame planned): the pacer sends only full records from them."""

    def __init__(self, cache: SnapshotCache) -> None:
        self.cache = cache

    def chunk(self, iid: int) -> bytes | None:
        return self.cache.chunk(iid)

    def snapshot(self, frame_no: int, iids: Iterable[int]) -> bytes:
        return self.cache.snapshot(frame_no, iids)


class Desk:
    """A conflator, its snapshot cache, an index and a pacer: the planner's whole world, and
    terminals that apply what they get under the SDK's guard (sdk/view.py): a delta must name
    the version held (else a gap, or a regression), a full record must not be older."""

    def __init__(self, subs: dict[int, tuple[list[int], int]], *, exact: bool = True) -> None:
        self.conflator = Conflator()
        self.cache = SnapshotCache(self.conflator.published)
        self.pacer = Pacer(self.cache if exact else Relay(self.cache))
        self.index = SubscriptionIndex()
        self.held: dict[int, Held] = {cid: {} for cid in subs}
        self.frames: dict[int, list[int]] = {cid: [] for cid in subs}  # frame_no received
        self.seq = 0
        self.frame_no = 0
        for cid, (iids, k) in subs.items():
            self.index.add_connection(cid)
            self.index.subscribe(cid, iids)
            self.index.set_rate(cid, k)

    def step(self, frame_no: int, changed: list[int]) -> FramePlan:
        for iid in changed:
            self.seq += 1
            self.conflator.offer(_tick(iid, self.seq, 100 + self.seq % 50))
        frame = self.conflator.take_frame(frame_no * FRAME_NS)
        self.frame_no = frame_no
        plan = plan_frame(frame, self.index, None, self.pacer)
        for wire, conns, _sig in plan.payloads:
            msg = codec.decode_message(_unframe(wire))
            assert isinstance(msg, codec.Frame) and msg.frame_no == frame_no
            for cid in conns:
                assert self.frames[cid][-1:] != [frame_no], "two payloads of one frame"
                self.frames[cid].append(frame_no)
                self._apply(cid, msg.records)
        return plan

    # -- what a terminal's requests do (core/session.py, server/endpoint.py) ------------------
    def subscribe(self, cid: int, iids: list[int]) -> None:
        """Subscribe, answered with a snapshot of every requested symbol."""
        self.index.subscribe(cid, iids)
        self._snapshot(cid, self.cache.snapshot(self.frame_no, iids))

    def set_rate(self, cid: int, k: int) -> None:
        """Back to 25 Hz from a slower rate: a snapshot of its subscriptions first."""
        before = self.index.set_rate(cid, k)
        if k == 1 and before != 1:
            self.subscribe(cid, sorted(self.index.subscriptions(cid)))

    def gap(self, cid: int) -> None:
        """Its ring overflowed: a snapshot of everything it watches."""
        self._snapshot(cid, gap_snapshot(self.cache, self.index, self.frame_no, cid))

    def _snapshot(self, cid: int, wire: bytes) -> None:
        msg = codec.decode_message(_unframe(wire))
        assert isinstance(msg, codec.Snapshot)
        self._apply(cid, msg.records)

    def _apply(self, cid: int, records: list[codec.Record]) -> None:
        held = self.held[cid]
        for rec in records:
            before = held.get(rec.iid)
            if rec.has_base:  # else a gap (newer) or a regression (not newer) at the glass
                assert before is not None and before[:2] == (rec.base_epoch, rec.base_seq), (
                    f"terminal {cid}: a delta on {rec.iid} names a base it does not hold"
                )
            elif before is not None:
                # never older than what it holds (the same version: its guard drops a duplicate)
                assert (rec.epoch, rec.seq) >= before[:2], f"terminal {cid}: {rec.iid} went back"
            base = before[2:] if before is not None and rec.has_base else None
            bid, ask, last = codec.apply_record(base, rec)
            held[rec.iid] = (rec.epoch, rec.seq, bid, ask, last)

    def published(self, cid: int) -> Held:
        """What the sequencer published for what ``cid`` watches (symbols with state)."""
        out: Held = {}
        for iid in self.index.subscriptions(cid):
            t = self.conflator.published(iid)
            if t is not None:
                out[iid] = (t.epoch, t.seq, t.bid, t.ask, t.last)
        return out

    def shown(self, cid: int) -> Held:
        subs = self.index.subscriptions(cid)
        return {iid: v for iid, v in self.held[cid].items() if iid in subs}


def test_a_k_terminal_gets_only_its_boundaries_with_what_changed_since_the_last() -> None:
    desk = Desk({1: ([1, 2, 3], 1), 2: ([1, 2, 3], 5)})
    desk.step(100, [1])  # a boundary: symbol 1 changed in it
    desk.step(101, [2])
    desk.step(102, [2, 9])  # 9: nobody watches it
    desk.step(103, [])
    plan = desk.step(104, [3])
    assert desk.frames[2] == [100]
    last = desk.step(105, [])  # nothing changed in 105 itself: still 101-104's changes
    assert desk.frames[1] == [100, 101, 102, 104]  # 25 Hz: every frame that changed its set
    assert desk.frames[2] == [100, 105]
    assert desk.held[2] == desk.held[1]
    # at 105: 2 changed twice (a full record), 3 once, on its first appearance (a full record)
    (wire, conns, _sig) = last.payloads[0]
    msg = codec.decode_message(_unframe(wire))
    assert isinstance(msg, codec.Frame) and conns == {2}
    assert [(r.iid, r.has_base) for r in msg.records] == [(2, False), (3, False)]
    assert plan.whole  # terminal 1 (25 Hz) watches the same set: every chunk is in its payload
    alone = Desk({1: ([1], 1), 2: ([2, 3], 5)})
    assert not alone.step(100, [2]).whole  # 2 is watched by the k terminal alone


def test_terminals_of_one_rate_and_one_set_share_one_payload() -> None:
    desk = Desk({1: ([1, 2], 5), 2: ([1, 2], 5), 3: ([1, 2], 2), 4: ([1, 2], 1), 5: ([2], 5)})
    desk.step(99, [1, 2])
    plan = desk.step(100, [1])
    groups = sorted((sorted(conns), len(wire)) for wire, conns, _ in plan.payloads)
    # 25 Hz {4}; k=2 {3}; k=5 {1, 2} together; k=5 on another set {5}
    assert [g[0] for g in groups] == [[1, 2], [3], [4], [5]]


def test_the_25_hz_deltas_are_unchanged_by_slower_terminals() -> None:
    alone = Desk({1: ([1, 2, 3], 1)})
    shared = Desk({1: ([1, 2, 3], 1), 2: ([1, 2, 3], 10), 3: ([2], 25)})
    for frame_no in range(200, 260):
        changed = [i for i in (1, 2, 3) if (frame_no * 7 + i) % 3]
        a = alone.step(frame_no, changed)
        b = shared.step(frame_no, changed)
        fast = [wire for wire, conns, _ in b.payloads if 1 in conns]
        assert fast == [wire for wire, _, _ in a.payloads]  # the same bytes
    assert alone.held[1] == shared.held[1]


def test_a_terminal_back_in_a_rate_gets_everything_it_watches_in_full_once() -> None:
    desk = Desk({1: ([1, 2], 1), 2: ([1, 2], 5)})
    desk.step(100, [1, 2])
    desk.step(101, [1])
    desk.set_rate(2, 1)  # 25 Hz again: a snapshot first
    desk.step(102, [2])  # k=5 has no terminal now: forgotten
    desk.set_rate(2, 5)
    desk.step(103, [])
    plan = desk.step(105, [])  # nothing changed since it rejoined: still a full record of each
    ((wire, conns, _sig),) = plan.payloads
    msg = codec.decode_message(_unframe(wire))
    assert isinstance(msg, codec.Frame) and conns == {2}
    assert [(r.iid, r.has_base) for r in msg.records] == [(1, False), (2, False)]
    assert desk.shown(2) == desk.published(2)
    assert desk.step(110, []).payloads == []  # then only what changes


def test_a_terminal_moved_to_a_faster_slow_rate_is_not_left_behind() -> None:
    """From k=5 to k=2: it holds what k=5 last sent (frame 100); k=2's window began at 102, so
    the change of frame 101 is in no window it gets: only a full record of all it watches
    brings it up to date."""
    desk = Desk({1: ([1], 1), 2: ([1], 5), 3: ([1], 2)})
    desk.step(100, [1])
    desk.step(101, [1])
    desk.step(102, [])  # k=2's boundary: terminal 3 gets 101's change
    desk.set_rate(2, 2)
    desk.step(103, [])
    desk.step(104, [])
    assert desk.frames[2] == [100, 104]
    assert desk.shown(2) == desk.shown(1) == desk.published(2)


def test_a_snapshot_between_boundaries_is_followed_by_full_records_not_deltas() -> None:
    """A re-subscribe or a gap snapshot after a symbol's only change gives the terminal the new
    version; the group's delta for that change names the old one: it gets full records."""
    for resync in ("subscribe", "gap"):
        desk = Desk({1: ([1, 2], 1), 2: ([1, 2], 5), 3: ([1, 2], 5)})
        desk.step(100, [1, 2])
        desk.step(101, [1])
        if resync == "subscribe":
            desk.subscribe(2, [1])  # it holds 1 already: re-subscribing asks for a fresh base
        else:
            desk.gap(2)
        desk.step(102, [2])
        desk.step(103, [])
        desk.step(104, [])
        plan = desk.step(105, [])
        kinds = {}
        for wire, conns, _sig in plan.payloads:
            msg = codec.decode_message(_unframe(wire))
            assert isinstance(msg, codec.Frame)
            kinds[frozenset(conns)] = [(r.iid, r.has_base) for r in msg.records]
        assert kinds == {
            frozenset({3}): [(1, True), (2, True)],  # it got 100 and nothing since: deltas
            frozenset({2}): [(1, False), (2, False)],
        }, resync
        assert desk.shown(2) == desk.shown(3) == desk.published(2)


def test_a_boundary_reuses_the_record_of_a_symbol_changed_once() -> None:
    """Encoded at the boundary: only what changed more than once since the last one (full
    records, once per version, shared by every group and rate); a symbol changed once goes as
    the 25 Hz record, a delta on what the group holds."""
    desk = Desk({1: ([1, 2, 3, 4], 1), 2: ([1, 2, 3], 5), 3: ([2, 3, 4], 5), 4: ([1, 2], 10)})
    desk.step(100, [1, 2, 3, 4])  # every terminal is new to its group: full records of all
    encodes = desk.cache.encodes
    desk.step(101, [1, 2])
    desk.step(102, [2, 3])
    desk.step(103, [4])
    desk.step(104, [])
    plan = desk.step(105, [])
    assert desk.cache.encodes - encodes == 1  # symbol 2 (twice since 100), once for both groups
    for wire, conns, _sig in plan.payloads:
        msg = codec.decode_message(_unframe(wire))
        assert isinstance(msg, codec.Frame)
        assert {r.iid: r.has_base for r in msg.records} == (
            {1: True, 2: False, 3: True} if conns == {2} else {2: False, 3: True, 4: True}
        )
    for cid in (1, 2, 3):
        assert desk.shown(cid) == desk.published(cid)


def test_written_iids_with_rate_groups_names_only_the_written_signatures() -> None:
    desk = Desk({1: ([1], 1), 2: ([2], 5)})
    plan = desk.step(101, [1, 2])  # 2 is encoded (someone watches it) but not due before 105
    sig1 = desk.index.signature(1)
    assert sig1 is not None
    written = written_iids(plan, [sig1], desk.index)
    assert sorted(written.tolist()) == [1]


_changes = st.lists(st.lists(st.integers(0, 7), max_size=6), min_size=1, max_size=60)


@settings(max_examples=120, deadline=None)
@given(
    changes=_changes,
    k=st.sampled_from([2, 5, 10, 25]),
    start=st.integers(0, 30),
    subs=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True),
)
def test_after_each_of_its_boundaries_a_k_terminal_holds_what_a_25_hz_terminal_holds(
    changes: list[list[int]], k: int, start: int, subs: list[int]
) -> None:
    desk = Desk({1: (subs, 1), 2: (subs, k)})
    for i, changed in enumerate(changes):
        frame_no = start + i
        desk.step(frame_no, changed)
        assert all(f % k == 0 for f in desk.frames[2])
        if frame_no % k == 0:
            assert desk.held[2] == desk.held[1], f"k={k} differs at boundary {frame_no}"


@settings(max_examples=200, deadline=None)
@given(
    subs=st.dictionaries(
        st.integers(1, 12),
        st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=5), st.sampled_from([1, 5])),
        min_size=1,
        max_size=8,
    ),
    changed=st.lists(st.integers(0, 12), max_size=10),
)
def test_written_iids_are_exactly_the_chunks_some_25_hz_payload_carries(
    subs: dict[int, tuple[list[int], int]], changed: list[int]
) -> None:
    desk = Desk(subs)
    plan = desk.step(100, changed)
    sigs = [sig for _wire, _conns, sig in plan.payloads]
    index = desk.index
    fast = set(written_iids(plan, sigs, index).tolist())
    # the slow truth: the members of every 25 Hz signature written, among this frame's chunks
    full_rate = {index.signature(cid) for cid, (_iids, k) in subs.items() if k == 1}
    truth = {iid for sig in full_rate if sig is not None for iid in index.members(sig)}
    assert fast == truth & set(plan.chunks)
    assert plan.whole == (fast == set(plan.chunks))


# Few terminals and symbols, frames most of the time: the interleavings that matter (a symbol
# changed once, then a snapshot or a join, then the boundary) come up in every run.
_cid = st.integers(1, 3)
_iids = st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True)
_frame = st.tuples(
    st.just("frame"), st.lists(st.integers(0, 3), max_size=3), st.sampled_from([1, 1, 1, 2])
)
_op = st.one_of(
    _frame,
    _frame,
    _frame,
    st.tuples(st.just("subscribe"), _cid, _iids),
    st.tuples(st.just("unsubscribe"), _cid, _iids),
    st.tuples(st.just("rate"), _cid, st.sampled_from([1, 2, 5])),
    st.tuples(st.just("gap"), _cid),
)


@settings(max_examples=400, deadline=None)
@given(
    start=st.integers(0, 30),
    rates=st.lists(st.sampled_from([1, 2, 5]), min_size=3, max_size=3),
    ops=st.lists(_op, min_size=1, max_size=60),
    exact=st.booleans(),
)
def test_no_terminal_ever_gets_a_delta_it_cannot_apply_and_each_boundary_brings_it_up_to_date(
    start: int, rates: list[int], ops: list[tuple[object, ...]], exact: bool
) -> None:
    """Joins, re-subscribes, unsubscribes, gap snapshots and rate changes between boundaries,
    frames skipped on an overdue grid: every record applies under the SDK guard (``Desk._apply``
    asserts it) and at each boundary of its rate a terminal shows what was published."""
    subs = {cid: ([cid % 4, (cid * 3) % 4], k) for cid, k in zip(range(1, 4), rates, strict=True)}
    desk = Desk(subs, exact=exact)
    frame_no = start
    for op in ops:
        if op[0] == "frame":
            _, changed, skip = op
            frame_no += skip  # type: ignore[operator]
            desk.step(frame_no, changed)  # type: ignore[arg-type]
            for cid in range(1, 4):
                k = desk.index.rate(cid)
                got = desk.frames[cid]
                if got and got[-1] == frame_no:
                    assert frame_no % k == 0, f"terminal {cid} (k={k}) got frame {frame_no}"
                if frame_no % k == 0:
                    assert desk.shown(cid) == desk.published(cid), f"{cid} behind at {frame_no}"
        elif op[0] == "subscribe":
            desk.subscribe(op[1], op[2])  # type: ignore[arg-type]
        elif op[0] == "unsubscribe":
            desk.index.unsubscribe(op[1], op[2])  # type: ignore[arg-type]
        elif op[0] == "rate":
            desk.set_rate(op[1], op[2])  # type: ignore[arg-type]
        else:
            desk.gap(op[1])  # type: ignore[arg-type]
    assert not desk.index.dangling()


def test_from_snapshots_that_may_be_newer_than_the_frame_a_boundary_sends_full_records_only() -> (
    None
):
    desk = Desk({1: ([1, 2], 1), 2: ([1, 2], 5)}, exact=False)
    for frame_no in range(100, 121):
        plan = desk.step(frame_no, [1] if frame_no % 3 else [1, 2])
        for wire, conns, _sig in plan.payloads:
            msg = codec.decode_message(_unframe(wire))
            assert isinstance(msg, codec.Frame)
            if conns == {2}:
                assert msg.records and not any(r.has_base for r in msg.records)
    assert desk.frames[2] == [100, 105, 110, 115, 120]
    assert desk.shown(2) == desk.published(2)


class Lagging(Relay):
    """A writer process's ring table when it is two frames behind: both stored records of a
    withheld symbol are newer than the frame it planned, so the table has none to give."""

    def __init__(self, cache: SnapshotCache) -> None:
        super().__init__(cache)
        self.withheld: set[int] = set()

    def chunk(self, iid: int) -> bytes | None:
        return None if iid in self.withheld else self.cache.chunk(iid)


def test_a_full_record_the_snapshots_lack_at_a_boundary_is_retried_at_the_next_and_counted() -> (
    None
):
    desk = Desk({1: ([1, 2], 1), 2: ([1, 2], 5)}, exact=False)
    table = Lagging(desk.cache)
    desk.pacer = Pacer(table)
    desk.step(100, [1, 2])  # a boundary: terminal 2 new to its group gets both in full
    assert desk.shown(2) == desk.published(2)
    table.withheld = {1}
    for frame_no in range(101, 106):
        desk.step(frame_no, [1])  # 105 is a boundary, and symbol 1's record is not there
    assert desk.frames[2] == [100]
    assert desk.pacer.retried == 1
    table.withheld = set()
    for frame_no in range(106, 111):
        desk.step(frame_no, [])  # symbol 1 does not change again: only the retry sends it
    assert desk.frames[2] == [100, 110]
    assert desk.shown(2) == desk.published(2)
    assert desk.pacer.retried == 1


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.lists(st.integers(0, 7), max_size=4),
            st.one_of(st.just(set[int]()), st.sets(st.integers(0, 7), min_size=1, max_size=3)),
        ),
        min_size=1,
        max_size=40,
    ),
    k=st.sampled_from([2, 5, 10]),
    subs=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True),
)
def test_a_k_terminal_is_up_to_date_after_every_boundary_at_which_the_table_lacked_nothing(
    steps: list[tuple[list[int], set[int]]], k: int, subs: list[int]
) -> None:
    """Whatever the table lacked at earlier boundaries (a writer process behind the ring), a
    boundary at which it lacks nothing leaves the k terminal holding what was published; never a
    delta it cannot apply, never a version going back (the Desk's guard)."""
    desk = Desk({1: (subs, 1), 2: (subs, k)}, exact=False)
    table = Lagging(desk.cache)
    desk.pacer = Pacer(table)
    for i, (changed, withheld) in enumerate(steps):
        frame_no = 100 + i
        table.withheld = withheld
        desk.step(frame_no, changed)
        if frame_no % k == 0 and not withheld:
            assert desk.shown(2) == desk.published(2), f"stale after boundary {frame_no}"


def test_the_index_owes_full_records_to_who_joined_or_got_a_snapshot_and_forgets_the_gone() -> None:
    index = SubscriptionIndex()
    for cid in (1, 2, 3):
        index.add_connection(cid)
        index.subscribe(cid, [1, 2])
    index.set_rate(1, 5)
    index.set_rate(2, 5)
    assert index.take_fresh(5) == {1, 2}  # joined the rate
    assert index.take_fresh(5) == set()  # taken once
    index.resync(3)  # 25 Hz: its next frame's deltas name what the snapshot showed
    index.resync(1)  # a gap snapshot
    index.subscribe(2, [2])  # a re-subscribe: answered with a snapshot
    assert index.take_fresh(5) == {1, 2}
    index.resync(2)
    index.set_rate(2, 2)  # left k=5 for k=2: owed there, not here
    assert index.take_fresh(5) == set() and index.take_fresh(2) == {2}
    index.resync(1)
    index.remove_connection(1)
    assert index.take_fresh(5) == set() and not index.dangling()
    for cid in (2, 3):
        index.remove_connection(cid)
    assert index.is_empty()


def test_the_25_hz_connections_of_a_signature_are_kept_until_it_changes() -> None:
    index = SubscriptionIndex()
    for cid in (1, 2, 3):
        index.add_connection(cid)
    index.subscribe(1, [1, 2])
    index.subscribe(2, [1, 2])
    index.set_rate(1, 5)
    sig = index.signature(1)
    assert sig is not None
    fast = index.paced_connections(sig)
    assert fast == {2} and index.paced_connections(sig) is fast  # no copy per frame
    index.subscribe(3, [1, 2])
    assert index.paced_connections(sig) == {2, 3}
    index.set_rate(1, 1)
    assert index.paced_connections(sig) == {1, 2, 3}
    index.unsubscribe(2, [1])
    assert index.paced_connections(sig) == {1, 3}
    for cid in (1, 2, 3):
        index.remove_connection(cid)
    assert index.paced_connections(sig) == frozenset() and index.is_empty()


_index_op = st.one_of(
    st.tuples(st.just("subscribe"), _cid, _iids),
    st.tuples(st.just("unsubscribe"), _cid, _iids),
    st.tuples(st.just("rate"), _cid, st.sampled_from([1, 2, 5])),
    st.tuples(st.just("remove"), _cid),
    st.tuples(st.just("look"), st.sampled_from([2, 5])),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(_index_op, min_size=1, max_size=40))
def test_what_the_index_keeps_for_boundaries_is_what_it_would_compute_now(
    ops: list[tuple[object, ...]],
) -> None:
    """``rate_groups`` and ``slow_only`` are kept between changes (a boundary must not pay for
    a set per group): after any sequence of subscribes, unsubscribes, rate changes, teardowns
    and looks, they equal what the index's plain queries say now."""
    index = SubscriptionIndex()
    for op in ops:
        cid = op[1]
        if op[0] == "look":
            index.rate_groups(op[1])  # type: ignore[arg-type]
            index.slow_only()
            continue
        if cid not in index.connection_ids():
            index.add_connection(cid)  # type: ignore[arg-type]
        if op[0] == "subscribe":
            index.subscribe(cid, op[2])  # type: ignore[arg-type]
        elif op[0] == "unsubscribe":
            index.unsubscribe(cid, op[2])  # type: ignore[arg-type]
        elif op[0] == "rate":
            index.set_rate(cid, op[2])  # type: ignore[arg-type]
        else:
            index.remove_connection(cid)  # type: ignore[arg-type]
        for k in (2, 5):
            view = index.rate_groups(k)
            truth = {sig: conns for sig, conns in index.rated_groups(k)}
            assert {sig: set(conns) for sig, conns, _m in view.groups} == truth
            assert all(members == index.sorted_members(sig) for sig, _c, members in view.groups)
            assert view.watched == {iid for sig in truth for iid in index.members(sig)}
        live = index.connection_ids()
        fast = {index.signature(c) for c in live if index.rate(c) == 1} - {None}
        watched_fast = {iid for sig in fast for iid in index.members(sig)}  # type: ignore[arg-type]
        watched = {iid for c in live for iid in index.subscriptions(c)}
        assert index.slow_only() == watched - watched_fast


def test_a_rate_group_keeps_its_connection_set_between_boundaries_until_it_changes() -> None:
    """The native writer keeps a group's connection tuple under the group's set: the same
    object at every boundary until a change (no rebuild, no copy per boundary)."""
    index = SubscriptionIndex()
    for cid in (1, 2, 3):
        index.add_connection(cid)
        index.subscribe(cid, [1, 2])
    index.set_rate(1, 5)
    index.set_rate(2, 5)
    ((_sig, group, members),) = index.rate_groups(5).groups
    assert group == frozenset({1, 2}) and members == (1, 2)
    assert index.rate_groups(5).groups[0][1] is group
    assert index.slow_only() == frozenset()  # terminal 3 watches both at 25 Hz
    index.set_rate(3, 5)
    assert index.rate_groups(5).groups[0][1] == frozenset({1, 2, 3})
    assert index.slow_only() == {1, 2}
