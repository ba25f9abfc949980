"""The batch path against the per-tick model (issue 35): for any interleaving of both twins'
streams (exact duplicates, 6-9 ms drift, a feed going backwards, epoch bumps within a drain,
unknown instruments, out-of-range stamps, empty and one-tick batches), the gate in bulk plus
``Sequencer.on_batch`` admit exactly the ticks that the per-tick gate plus
``PerTickSequencer.on_ticks`` admit, count the same per venue, and encode byte-identical
frames at every boundary."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Instrument, Tick
from monotape.platform.wire import codec
from monotape.platform.wire.batch import batch_from_ticks
from monotape.testing.per_tick import PerTickSequencer

MS = 1_000_000
FRAME_NS = 40 * MS
VENUES = ("XNAS", "XLON")
UNIVERSE = [Instrument(i, f"{VENUES[i % 2]}:S{i}", VENUES[i % 2], f"S{i}", 2, 1) for i in range(6)]
UNKNOWN = 40  # an iid the dictionary does not list

update = st.tuples(
    st.sampled_from([0, 1, 2, 3, 4, 5, 5, 5, UNKNOWN]),  # iid (5 is busy)
    st.integers(0, 2),  # epoch bump level
    st.integers(-2, 4),  # seq step (negative: the feed goes backwards)
    st.booleans(),  # a bad venue timestamp (out of range)
)


def _streams(updates: list[tuple[int, int, int, bool]], rnd: random.Random) -> list[Tick]:
    """Both twins' copies, B drifting 6-9 ms behind A, interleaved by arrival time."""
    seqs: dict[int, int] = {}
    arrivals: list[tuple[int, int, Tick]] = []
    drift = rnd.randint(6, 9) * MS
    for n, (iid, epoch, step, bad_ts) in enumerate(updates):
        seq = seqs[iid] = max(0, seqs.get(iid, 0) + step)
        ts = -1 if bad_ts and n % 5 == 0 else 1_000 + n
        venue = VENUES[iid % 2]
        at = n * MS
        for handler, lag in (("A", 0), ("B", drift)):
            if rnd.random() < 0.1:  # a lost packet on one twin
                continue
            t = Tick(iid, venue, epoch, seq, ts, 100 + seq, 102 + seq, 101 + seq, 1 + n, handler,
                     at + lag)  # fmt: skip
            arrivals.append((at + lag, len(arrivals), t))
    arrivals.sort()
    return [t for _, _, t in arrivals]


def _frame_bytes(frame_records: list[tuple[Tick | None, Tick]]) -> list[bytes]:
    return [codec.encode_delta_record(base, new) for base, new in frame_records]


@settings(max_examples=150, deadline=None)
@given(st.lists(update, max_size=60), st.randoms(use_true_random=False), st.integers(1, 9))
def test_batch_path_admits_counts_and_frames_as_the_per_tick_model(
    updates: list[tuple[int, int, int, bool]], rnd: random.Random, most: int
) -> None:
    ticks = _streams(updates, rnd)
    clock = FakeClock()
    quiet = {"log": lambda *a, **k: None}
    gate_model = TickGate(UNIVERSE, clock.now_ns, **quiet)  # type: ignore[arg-type]
    gate_batch = TickGate(UNIVERSE, clock.now_ns, **quiet)  # type: ignore[arg-type]
    model = PerTickSequencer(lanes=3, frame_ns=FRAME_NS)
    batched = Sequencer(lanes=3, frame_ns=FRAME_NS)
    at = 0
    boundary = 0
    while at < len(ticks) or boundary == 0:
        size = rnd.randint(0, most)  # empty and one-tick batches too
        chunk = ticks[at : at + size]
        at += size
        now = at * 7
        want = [(t.iid, t.epoch, t.seq, t.handler) for t in
                model.on_ticks(list(gate_model.admit(chunk, "model")), now)]  # fmt: skip
        got = []
        for batch in batch_from_ticks(chunk):
            kept = gate_batch.gate_batch(batch, "batch")
            admission = batched.on_batch(kept, now)
            got += [(t.iid, t.epoch, t.seq, t.handler) for t in kept.ticks(admission.at)]
        assert got == want
        if rnd.random() < 0.4 or at >= len(ticks):
            boundary += FRAME_NS
            f_model = model.take_frame(boundary)
            f_batch = batched.take_frame(boundary)
            assert f_batch.frame_no == f_model.frame_no
            want_bytes = _frame_bytes([(r.base, r.new) for r in f_model.records])
            # what the hot path ships: the records encoded from the state arrays (encode_rows)
            assert f_batch.encoded is not None or not f_model.records
            if f_batch.encoded is not None:
                deltas, puts, refused = f_batch.encoded
                assert list(deltas.values()) == want_bytes and not refused
                assert [p[3] for p in puts] == [
                    codec.encode_full_record(r.new) for r in f_model.records
                ]
            assert f_batch.count == len(f_model.records)
            assert _frame_bytes([(r.base, r.new) for r in f_batch.records]) == want_bytes
            assert [r.new for r in f_batch.records] == [r.new for r in f_model.records]
    assert batched.counters() == model.counters()
    assert gate_batch.rejected == gate_model.rejected
    for inst in UNIVERSE:
        assert batched.current(inst.iid) == model.current(inst.iid)
