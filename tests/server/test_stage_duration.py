"""monotape_stage_duration_seconds{stage}: the HDR stages' very values as Prometheus buckets,
and the end-to-end tick_to_write stage."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.histograms import (
    STAGE_DURATION_BUCKETS_S,
    DurationBuckets,
    Recorders,
    StageRecorder,
)
from monotape.platform.core.conflation import Frame
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Tick
from monotape.platform.role.collectors import StageDurationCollector
from monotape.platform.server.endpoint import FanoutServer
from tests.server.test_priority_stage import _connect  # the fake terminal socket of fan-out tests

MS = 1_000_000
OFFSET = 1_700_000_000 * 10**9


def test_the_buckets_sit_around_the_budgets() -> None:
    ms = [round(b * 1000, 3) for b in STAGE_DURATION_BUCKETS_S]
    assert ms == [1, 2, 5, 10, 20, 40, 45, 50, 80, 100, 200, 500, 1000, 5000]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 6_000_000), max_size=300))
def test_cumulative_counts_follow_le_exactly(values_us: list[int]) -> None:
    b = DurationBuckets()
    b.add_us(np.array(values_us, dtype=np.int64))
    got = dict(b.cumulative())
    for bound in STAGE_DURATION_BUCKETS_S:
        expected = sum(1 for v in values_us if v <= round(bound * 1e6))
        assert got[repr(bound)] == expected
    assert got["+Inf"] == len(values_us) == b.count
    assert b.sum_us == sum(values_us)


def test_a_value_on_a_bound_is_counted_in_that_bucket() -> None:
    b = DurationBuckets()
    b.add_us(np.array([40_000, 40_001], dtype=np.int64))
    got = dict(b.cumulative())
    assert got["0.04"] == 1 and got["0.045"] == 2


def test_the_recorder_feeds_both_from_the_same_values_and_never_resets_the_buckets() -> None:
    rec = StageRecorder("write", start_ms=0, buffer_capacity=4)
    for ns in (500_000, 3 * MS, 41 * MS):  # buffered: in neither until a flush
        rec.record_ns(ns)
    assert rec.buckets.count == 0
    first = rec.rotate(10_000)
    assert first.count == rec.buckets.count == 3
    rec.record_many_ns(np.array([90 * MS, 2_000 * MS, -5]))  # -5 ns: clamped to 0, as HDR does
    second = rec.rotate(20_000)
    assert second.count == 3
    assert rec.buckets.count == 6  # cumulative across rotations, as a Prometheus histogram is
    got = dict(rec.buckets.cumulative())
    assert got["0.001"] == 2 and got["0.005"] == 3 and got["0.045"] == 4
    assert got["0.1"] == 5 and got["5.0"] == got["+Inf"] == 6


def test_exported_per_stage_at_scrape_time() -> None:
    recs = Recorders(start_ms=0)
    recs["tick_to_write"].record_many_ns(np.array([30 * MS, 42 * MS, 85 * MS]))
    registry = CollectorRegistry()
    registry.register(StageDurationCollector(lambda: recs))
    bucket = f"{m.STAGE_DURATION}_bucket"
    get = registry.get_sample_value
    assert get(bucket, {"stage": "tick_to_write", "le": "0.04"}) == 1
    assert get(bucket, {"stage": "tick_to_write", "le": "0.08"}) == 2
    assert get(bucket, {"stage": "tick_to_write", "le": "+Inf"}) == 3
    assert get(f"{m.STAGE_DURATION}_count", {"stage": "tick_to_write"}) == 3
    total = get(f"{m.STAGE_DURATION}_sum", {"stage": "tick_to_write"})
    assert total is not None and abs(total - 0.157) < 1e-9
    assert get(f"{m.STAGE_DURATION}_count", {"stage": "decode"}) == 0  # every stage, from start
    text = generate_latest(registry).decode()
    assert f"# TYPE {m.STAGE_DURATION} histogram" in text


def tick(i: int, decoded: int, admitted: int) -> Tick:
    return Tick(i, "XNAS", 1, i, OFFSET + decoded, 100, 101, 100, 1, "A", decoded, admitted)


def test_tick_to_write_is_decoded_to_the_frames_last_direct_write_per_tick() -> None:
    recs = Recorders(start_ms=0)
    stamps = StageStamps(recs)
    ticks = [tick(0, 10 * MS, 11 * MS), tick(1, 30 * MS, 31 * MS)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    assert stamps.framed(40 * MS, 42 * MS, OFFSET) == 2
    carried = np.array([0, 1], dtype=np.int64)
    stamps.written(np.array([1 * MS, 3 * MS, 2 * MS], dtype=np.int64), carried)  # last at 45 ms
    by = {iv.stage: iv.histogram for iv in stamps.rotate(1_000, OFFSET)}
    h = by["tick_to_write"]
    assert h.get_total_count() == 2  # one value per tick, not per connection
    assert h.get_count_at_value(35_000) == 1  # 45 - 10 ms, in µs
    assert h.get_count_at_value(15_000) == 1  # 45 - 30 ms
    assert by["write"].get_total_count() == 3


def test_a_frame_with_no_direct_write_gives_its_ticks_no_end_to_end_value() -> None:
    recs = Recorders(start_ms=0)
    stamps = StageStamps(recs)
    ticks = [tick(0, 10 * MS, 11 * MS)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    stamps.framed(40 * MS, 41 * MS, OFFSET)
    stamps.written(np.array([], dtype=np.int64), np.array([0]))  # everyone behind
    stamps.framed(80 * MS, 81 * MS, OFFSET)  # an empty frame: nothing carried over
    stamps.written(np.array([MS], dtype=np.int64), np.array([0]))
    by = {iv.stage: iv.count for iv in stamps.rotate(1_000, OFFSET)}
    assert by["tick_to_write"] == 0 and by["conflate"] == 1 and by["write"] == 1


def test_tick_to_write_counts_only_ticks_of_instruments_a_payload_carried() -> None:
    """A tick of a symbol nobody watches was never handed to the kernel: it has no end-to-end
    value, or the alert's p99 would be diluted by ticks that cost no write."""
    stamps = StageStamps(Recorders(start_ms=0))
    ticks = [tick(0, 10 * MS, 11 * MS), tick(1, 20 * MS, 21 * MS), tick(2, 30 * MS, 31 * MS)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    assert stamps.framed(40 * MS, 42 * MS, OFFSET) == 3  # every admitted tick is conflated
    stamps.written(np.array([3 * MS], dtype=np.int64), np.array([2, 0], dtype=np.int64))
    by = {iv.stage: iv.histogram for iv in stamps.rotate(1_000, OFFSET)}
    h = by["tick_to_write"]
    assert h.get_total_count() == 2  # iids 0 and 2; iid 1's tick went to no screen
    assert h.get_count_at_value(35_000) == 1 and h.get_count_at_value(15_000) == 1
    assert by["conflate"].get_total_count() == 3
    assert by["write"].get_total_count() == 1


def test_without_written_instruments_no_tick_gets_an_end_to_end_value() -> None:
    stamps = StageStamps(Recorders(start_ms=0))
    stamps.decoded([tick(0, 10 * MS, 11 * MS)])
    stamps.admitted([tick(0, 10 * MS, 11 * MS)])
    stamps.framed(40 * MS, 41 * MS, OFFSET)
    stamps.written(np.array([MS], dtype=np.int64))  # a caller that does not say which
    assert {iv.stage: iv.count for iv in stamps.rotate(1_000, OFFSET)}["tick_to_write"] == 0


def _fanout(clock: FakeClock) -> FanoutServer:
    universe = build_universe(venues=1, instruments=16, seed=1)
    return FanoutServer(ServerConfig(), universe, Sequencer(1), clock)


def _frame_of(server: FanoutServer, clock: FakeClock, iids: list[int]) -> Frame:
    now = clock.now_ns()
    ticks = [Tick(i, "XNAS", 1, now, OFFSET, 100, 101, 100, 1, "A", now, 0) for i in iids]
    sequencer = server.sequencer
    assert sequencer is not None  # the one-process node's server
    sequencer.on_ticks(ticks, now)
    clock.advance(40 * MS)
    return sequencer.take_frame(clock.now_ns())


def test_the_fanout_names_the_instruments_of_payloads_it_handed_to_the_kernel() -> None:
    clock = FakeClock()
    server = _fanout(clock)
    fast = _connect(server, clock, [1, 2], [])
    _connect(server, clock, [2], [])  # another signature, also written at once
    # above the high-water mark (not so far as to be kicked): its frame goes to its ring
    behind = _connect(server, clock, [4], [], buffered=server.cfg.write_high_water + 1)
    frame = _frame_of(server, clock, [1, 2, 3, 4])  # iid 3: nobody watches it
    assert len(frame.records) == 4
    server.publish_frame(frame)
    assert sorted(server.written_iids.tolist()) == [1, 2]
    assert len(fast.writes) == 1 and behind.writes == []
    assert len(server.write_latencies_ns) == 2

    # every payload of the frame written (the cheap path): still not iid 3
    frame = _frame_of(server, clock, [1, 3])
    server.publish_frame(frame)
    assert server.written_iids.tolist() == [1]

    # nobody written at all: no instrument
    frame = _frame_of(server, clock, [3])
    server.publish_frame(frame)
    assert server.written_iids.tolist() == []
