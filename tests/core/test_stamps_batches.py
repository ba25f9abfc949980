"""Stage stamps by batch (struct of arrays): every value lands, equal to stamping tick by tick.

``StageStamps`` reads a batch's shared stamps once and records values a run of ticks shares as
one value with its count. These tests hold it to a plain per-tick reference: the same values in
every stage, whatever the batches (one stamp or mixed, overdue frames, rotations between), and
the totals a node checks (decoded ticks == decode values, framed ticks == conflate values).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.config import SimulatorConfig
from monotape.histograms import Recorders, hdr
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import make_handler_pair
from monotape.platform.feeds.simulator import VenueSimulator, build_universe, venues_with_update_ids
from monotape.platform.model import Tick

MS = 1_000_000
OFFSET = 1_700_000_000 * 10**9  # wall - monotonic
STAGES = ("decode", "sequence", "conflate", "encode", "write", "tick_to_write")


class PerTick:
    """The reference: every value computed tick by tick, as the stage table defines it."""

    def __init__(self) -> None:
        self.values: dict[str, list[int]] = {s: [] for s in STAGES}
        self._pending: list[Tick] = []
        self._framed: list[Tick] = []
        self._published = 0

    def decoded(self, ticks: Sequence[Tick], offset: int) -> None:
        self.values["decode"] += [t.decoded_ns + offset - t.venue_ts_ns for t in ticks]

    def admitted(self, applied: Sequence[Tick]) -> None:
        self.values["sequence"] += [t.admitted_ns - t.decoded_ns for t in applied]
        self._pending += applied

    def framed(self, boundary: int, published: int) -> None:
        for t in self._pending:
            framed = max(t.admitted_ns, boundary)
            self.values["conflate"].append(framed - t.admitted_ns)
            self.values["encode"].append(published - framed)
        self._framed, self._pending = self._pending, []
        self._published = published

    def written(self, latencies: list[int], iids: set[int], direct: int) -> None:
        self.values["write"] += latencies
        if latencies[:direct] and iids:
            last = self._published + max(latencies[:direct])
            self.values["tick_to_write"] += [
                last - t.decoded_ns for t in self._framed if t.iid in iids
            ]
        self._framed = []


def _same(values: dict[str, list[int]], recorders: Recorders) -> None:
    for stage in STAGES:
        got = recorders[stage].rotate(1).histogram
        want = hdr.new_histogram()
        for v in values[stage]:
            want.record_value(min(max(v // 1000, 0), hdr.HIGHEST_US))
        assert got.total_count == len(values[stage]), stage
        assert np.array_equal(hdr.counts_view(got), hdr.counts_view(want)), stage
        if values[stage]:
            assert (got.min_value, got.max_value) == (want.min_value, want.max_value), stage


def _tick(iid: int, venue_ts: int, decoded: int, admitted: int = 0) -> Tick:
    return Tick(iid, "XNAS", 1, iid, venue_ts, 100, 101, 100, 1, "A", decoded, admitted)


# A batch: its ticks' (iid, venue lag ms, decoded ms, admitted ms after decoding); "shared"
# batches stamp every tick alike (a drain, a lane call), the others mix stamps.
_batch = st.tuples(
    st.booleans(),
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(-2, 300), st.integers(0, 80), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(_batch, max_size=5), st.integers(0, 60), st.integers(0, 5)),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.integers(0, 90 * MS), max_size=6),
    st.integers(0, 6),
    st.sets(st.integers(0, 40), max_size=10),
)
def test_by_batch_equals_tick_by_tick(
    frames: list[tuple[list[tuple[bool, list[tuple[int, int, int, int]]]], int, int]],
    latencies: list[int],
    direct: int,
    written: set[int],
) -> None:
    recorders = Recorders(start_ms=0)
    stamps = StageStamps(recorders)
    ref = PerTick()
    boundary = 0
    for batches, late_ms, encode_ms in frames:
        boundary += 40 * MS
        for shared, items in batches:
            ticks = []
            admitted = 0
            # stamps never go down along a batch (they are taken in order): see StageStamps
            for iid, lag_ms, dec_ms, adm_ms in sorted(items, key=lambda item: item[2]):
                if shared:
                    dec_ms, adm_ms = items[0][2], items[0][3]
                decoded = boundary - 40 * MS + dec_ms * MS
                admitted = max(admitted, decoded + adm_ms * MS)
                ticks.append(_tick(iid, OFFSET + decoded - lag_ms * MS, decoded, admitted))
            stamps.decoded(ticks)
            ref.decoded(ticks, OFFSET)
            applied = ticks[::2]  # a lane applies some of a batch
            stamps.admitted(applied)
            ref.admitted(applied)
        published = boundary + late_ms * MS + encode_ms * MS
        assert stamps.framed(boundary, published, OFFSET) == len(ref._pending)
        ref.framed(boundary, published)
        cut = min(direct, len(latencies))
        stamps.written(np.array(latencies, dtype=np.int64), np.array(sorted(written)), cut)
        ref.written(latencies, written, cut)
    _same(ref.values, recorders)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.lists(_batch, max_size=5), st.booleans()), min_size=1, max_size=6),
    st.integers(0, 2),
)
def test_the_frames_record_count_skips_the_pass_over_ticks(
    frames: list[tuple[list[tuple[bool, list[tuple[int, int, int, int]]]], bool]],
    direct: int,
) -> None:
    """``framed(symbols=)``, the frame's record count, as the node passes it: when the written
    instruments are as many, every tick counts without reading one; when fewer, each tick is
    looked up. Either way the same values as tick by tick (instruments written: among the
    frame's, as the fan-out's are)."""
    recorders = Recorders(start_ms=0)
    stamps = StageStamps(recorders)
    ref = PerTick()
    boundary = 0
    latencies = [MS, 3 * MS]
    for batches, all_written in frames:
        boundary += 40 * MS
        for _shared, items in batches:
            ticks = [
                _tick(iid, OFFSET + boundary - 40 * MS - lag_ms * MS, boundary - 40 * MS)
                for iid, lag_ms, _, _ in items
            ]
            for t in ticks:
                t.admitted_ns = t.decoded_ns + MS
            stamps.decoded(ticks)
            ref.decoded(ticks, OFFSET)
            applied = ticks[1::2]
            stamps.admitted(applied)
            ref.admitted(applied)
        symbols = sorted({t.iid for t in ref._pending})  # conflation: one record per instrument
        written = symbols if all_written else symbols[1::2]
        assert stamps.framed(boundary, boundary + MS, OFFSET, len(symbols)) == len(ref._pending)
        ref.framed(boundary, boundary + MS)
        stamps.written(
            np.array(latencies, dtype=np.int64), np.array(written, dtype=np.int64), direct
        )
        ref.written(latencies, set(written), direct)
    _same(ref.values, recorders)


def test_a_mixed_batch_is_stamped_tick_by_tick() -> None:
    """Ends that differ mean more than one stamp: each tick keeps its own."""
    recorders = Recorders(start_ms=0)
    stamps = StageStamps(recorders)
    ticks = [_tick(1, OFFSET + 0, 5 * MS, 6 * MS), _tick(2, OFFSET + 0, 9 * MS, 12 * MS)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    assert stamps.framed(40 * MS, 41 * MS, OFFSET) == 2
    h = {iv.stage: iv.histogram for iv in recorders.rotate_all(1)}
    assert h["decode"].get_count_at_value(5_000) == h["decode"].get_count_at_value(9_000) == 1
    assert h["sequence"].get_count_at_value(1_000) == h["sequence"].get_count_at_value(3_000) == 1
    assert h["conflate"].get_count_at_value(34_000) == h["conflate"].get_count_at_value(28_000) == 1


def _simulated(frames: int, every: bool = False) -> tuple[Recorders, dict[str, int]]:
    """The bench's pipeline (simulator, both handlers per venue, 4 lanes) for ``frames`` frames,
    stamped as the node stamps it. Written: the frame's instruments but every third, or with
    ``every`` all of them, the frame's record count given (``framed(symbols=)``, as the node)."""
    clock = FakeClock()
    universe = build_universe()
    sim = VenueSimulator(universe, SimulatorConfig(rate=60_000.0), clock)
    epochs = MemoryEpochStore()
    with_ids = venues_with_update_ids(universe)
    rng = random.Random(5)
    handlers = []
    for venue in sorted({i.venue for i in universe}):
        pair = make_handler_pair(venue, epochs, clock, 6.0, 9.0, rng, update_ids=venue in with_ids)
        for h in pair:
            h.start()
        handlers += [(venue, h) for h in pair]
    sequencer = Sequencer(4)
    recorders = Recorders(start_ms=0)
    stamps = StageStamps(recorders)
    totals = {"decoded": 0, "admitted": 0, "framed": 0, "writes": 0, "carried": 0}
    carried_now: list[int] = []
    for _ in range(frames):
        for _ in range(40):
            clock.advance(MS)
            updates = sim.step()
            for venue, h in handlers:
                h.on_venue([u for u in updates if u.venue == venue])
            for _, h in handlers:
                ticks = h.drain_due()
                if not ticks:
                    continue
                totals["decoded"] += len(ticks)
                stamps.decoded(ticks)
                applied = sequencer.on_ticks(ticks, clock.now_ns())
                totals["admitted"] += len(applied)
                carried_now += [t.iid for t in applied]
                if applied:
                    stamps.admitted(applied)
        boundary = clock.now_ns()
        frame = sequencer.take_frame(boundary)
        clock.advance(2 * MS)
        offset = clock.wall_ns() - clock.now_ns()
        symbols = len(frame.records) if every else None
        totals["framed"] += stamps.framed(boundary, clock.now_ns(), offset, symbols)
        keep = (lambda iid: True) if every else (lambda iid: iid % 3 != 0)
        watched = np.array([r.new.iid for r in frame.records if keep(r.new.iid)], dtype=np.int64)
        lat = np.array([MS, 2 * MS, 3 * MS], dtype=np.int64)
        stamps.written(lat, watched, direct=2)
        totals["writes"] += 3
        totals["carried"] += sum(1 for i in carried_now if keep(i))
        carried_now = []
    return recorders, totals


@pytest.mark.parametrize("every", [False, True], ids=["some_written", "all_written"])
def test_every_tick_lands_once_in_each_stage_it_reached(every: bool) -> None:
    recorders, totals = _simulated(frames=12, every=every)
    assert totals["decoded"] > 10_000 and totals["admitted"] < totals["decoded"]  # twins refused
    count = {iv.stage: iv.count for iv in recorders.rotate_all(1)}
    assert count["decode"] == totals["decoded"]
    assert count["sequence"] == totals["admitted"] == totals["framed"]
    assert count["conflate"] == count["encode"] == totals["framed"]
    assert count["write"] == totals["writes"]
    assert count["tick_to_write"] == totals["carried"]
    if every:  # every admitted tick reached a screen: one tick_to_write value each
        assert totals["carried"] == totals["admitted"]
    assert all(r.clamped == 0 for r in recorders)
