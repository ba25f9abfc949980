"""Rate groups (max_hz) in the frame plan, with no socket: a k terminal gets FRAMEs only at
frame_no % k == 0, full records of everything changed since its previous boundary, at the latest
version; a 25 Hz terminal's deltas are unaffected; and after each of its boundaries a k terminal
holds exactly what a 25 Hz terminal holds then."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.conflation import FRAME_NS, Conflator
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.planner import FramePlan, Pacer, plan_frame, written_iids
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


class Desk:
    """A conflator, its snapshot cache, an index and a pacer: the planner's whole world."""

    def __init__(self, subs: dict[int, tuple[list[int], int]]) -> None:
        self.conflator = Conflator()
        self.pacer = Pacer(SnapshotCache(self.conflator.published))
        self.index = SubscriptionIndex()
        for cid, (iids, k) in subs.items():
            self.index.add_connection(cid)
            self.index.subscribe(cid, iids)
            self.index.set_rate(cid, k)
        self.held: dict[int, Held] = {cid: {} for cid in subs}
        self.frames: dict[int, list[int]] = {cid: [] for cid in subs}  # frame_no received
        self.seq = 0

    def step(self, frame_no: int, changed: list[int]) -> FramePlan:
        for iid in changed:
            self.seq += 1
            self.conflator.offer(_tick(iid, self.seq, 100 + self.seq % 50))
        frame = self.conflator.take_frame(frame_no * FRAME_NS)
        plan = plan_frame(frame, self.index, None, self.pacer)
        for wire, conns, _sig in plan.payloads:
            msg = codec.decode_message(_unframe(wire))
            assert isinstance(msg, codec.Frame) and msg.frame_no == frame_no
            for cid in conns:
                assert self.frames[cid][-1:] != [frame_no], "two payloads of one frame"
                self.frames[cid].append(frame_no)
                self._apply(cid, msg.records)
        return plan

    def _apply(self, cid: int, records: list[codec.Record]) -> None:
        held = self.held[cid]
        k = self.index.rate(cid)
        for rec in records:
            before = held.get(rec.iid)
            if k > 1:
                assert not rec.has_base, "a k terminal got a delta"
            if rec.has_base:
                assert before is not None and before[:2] == (rec.base_epoch, rec.base_seq)
            if before is not None:
                # never older than what it holds (the same version only on joining a rate)
                assert (rec.epoch, rec.seq) >= before[:2]
            base = before[2:] if before is not None and rec.has_base else None
            bid, ask, last = codec.apply_record(base, rec)
            held[rec.iid] = (rec.epoch, rec.seq, bid, ask, last)


def test_a_k_terminal_gets_only_its_boundaries_with_full_records_of_what_changed() -> None:
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
    # the k terminal's payload at 105: 2 and 3 as full records at their latest versions
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


def test_a_rate_no_one_has_any_more_is_forgotten_and_starts_afresh() -> None:
    desk = Desk({1: ([1], 1), 2: ([1], 5)})
    desk.step(101, [1])
    desk.index.set_rate(2, 1)
    desk.step(102, [])  # k=5 gone: its gathered changes are dropped
    desk.index.set_rate(2, 5)
    plan = desk.step(105, [])
    assert [conns for _, conns, _ in plan.payloads] == []  # nothing changed since it rejoined


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
