"""Conflation: the 40 ms grid, collapse to one record per symbol, and base chaining."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.conflation import (
    FRAME_NS,
    Conflator,
    FrameRecord,
    due_boundary,
    frame_no_at,
    next_boundary,
)
from monotape.platform.model import Tick


def tick(iid: int, seq: int, epoch: int = 1, last: int = 100) -> Tick:
    return Tick(
        iid=iid, venue="XNAS", epoch=epoch, seq=seq, venue_ts_ns=seq, bid=last - 1, ask=last + 1,
        last=last, size=10,
    )  # fmt: skip


class TestGrid:
    def test_next_boundary_is_strictly_after_and_on_the_grid(self) -> None:
        assert next_boundary(0) == FRAME_NS
        assert next_boundary(1) == FRAME_NS
        assert next_boundary(FRAME_NS - 1) == FRAME_NS
        assert next_boundary(FRAME_NS) == 2 * FRAME_NS  # strictly after
        assert next_boundary(FRAME_NS + 1, 10) == FRAME_NS + 10

    def test_frame_no(self) -> None:
        assert frame_no_at(0) == 0
        assert frame_no_at(3 * FRAME_NS) == 3
        assert frame_no_at(3 * FRAME_NS + 5) == 3
        assert frame_no_at(100, 10) == 10

    def test_late_wakeups_never_drift(self) -> None:
        # A driver that wakes up late every time still lands on the grid: no accumulation.
        now = 123_456_789
        boundaries = []
        for lateness in [3_000_000, 17_000_000, 0, 39_999_999, 1] * 200:
            b = next_boundary(now)
            boundaries.append(b)
            now = b + lateness
        assert all(b % FRAME_NS == 0 for b in boundaries)
        assert all(b2 - b1 == FRAME_NS for b1, b2 in itertools.pairwise(boundaries))

    @given(st.integers(min_value=0, max_value=2**62), st.integers(min_value=1, max_value=10**9))
    def test_next_boundary_property(self, now: int, frame_ns: int) -> None:
        b = next_boundary(now, frame_ns)
        assert b % frame_ns == 0
        assert now < b <= now + frame_ns

    def test_rejects_non_positive_frame(self) -> None:
        with pytest.raises(ValueError):
            next_boundary(5, 0)
        with pytest.raises(ValueError):
            Conflator(0)


class TestConflator:
    def test_many_ticks_collapse_to_one_record_per_symbol(self) -> None:
        c = Conflator()
        for seq in range(1, 101):
            c.offer(tick(7, seq))
            c.offer(tick(3, seq))
        assert c.dirty_count == 2
        frame = c.take_frame(FRAME_NS)
        assert [r.iid for r in frame.records] == [3, 7]  # ascending iid
        assert [r.new.seq for r in frame.records] == [100, 100]
        assert all(r.base is None for r in frame.records)  # first appearance
        assert c.dirty_count == 0

    def test_base_is_the_previous_frames_published_tick(self) -> None:
        c = Conflator()
        t1, t2, t3 = tick(1, 1), tick(1, 2), tick(1, 3)
        c.offer(t1)
        f1 = c.take_frame(FRAME_NS)
        assert f1.records == [FrameRecord(1, None, t1)]
        assert c.published(1) is t1
        c.offer(t2)
        c.offer(t3)
        f2 = c.take_frame(2 * FRAME_NS)
        assert f2.records[0].base is t1 and f2.records[0].new is t3
        assert c.published(1) is t3

    def test_empty_frames_and_frame_numbers(self) -> None:
        c = Conflator()
        f = c.take_frame(5 * FRAME_NS)
        assert f.frame_no == 5 and f.boundary_ns == 5 * FRAME_NS and f.records == []
        c.offer(tick(1, 1))
        c.take_frame(6 * FRAME_NS)
        f = c.take_frame(7 * FRAME_NS)  # nothing changed since: nothing carried
        assert f.records == [] and f.frame_no == 7
        assert c.published(1) is not None and c.published(2) is None

    def test_boundaries_never_go_back(self) -> None:
        c = Conflator()
        c.take_frame(2 * FRAME_NS)
        with pytest.raises(ValueError):
            c.take_frame(FRAME_NS)

    def test_pending(self) -> None:
        c = Conflator()
        t = tick(4, 1)
        c.offer(t)
        assert c.pending(4) is t and c.published(4) is None
        c.take_frame(FRAME_NS)
        assert c.pending(4) is None and c.published(4) is t


# Each step: offer a tick for one of a few symbols, or close a frame.
steps = st.lists(
    st.one_of(st.integers(min_value=0, max_value=5), st.just(-1)), min_size=1, max_size=200
)


@settings(max_examples=200)
@given(steps)
def test_replaying_records_reproduces_latest_state_and_bases_chain(plan: list[int]) -> None:
    c = Conflator()
    seq = 0
    latest: dict[int, Tick] = {}
    frames = []
    boundary = 0
    for step in [*plan, -1]:
        if step < 0:
            boundary = next_boundary(boundary)
            frames.append(c.take_frame(boundary))
        else:
            seq += 1
            t = tick(step, seq)
            latest[step] = t
            c.offer(t)
    # A terminal applying every record on its base sees exactly the latest state.
    held: dict[int, Tick] = {}
    for frame in frames:
        iids = [r.iid for r in frame.records]
        assert iids == sorted(set(iids))
        for r in frame.records:
            assert r.base is held.get(r.iid)  # the chain never skips
            held[r.iid] = r.new
    assert held == latest
    assert all(c.published(i) is t for i, t in latest.items())


def test_a_boundary_is_taken_once() -> None:
    c = Conflator(40_000_000)
    c.take_frame(80_000_000)
    with pytest.raises(ValueError, match="not after"):
        c.take_frame(80_000_000)  # an early wake-up must not publish the same frame twice


def test_due_boundary_on_time_sleeps_to_the_next_grid_point() -> None:
    assert due_boundary(now_ns=85, last_ns=80, frame_ns=40) == 120
    assert due_boundary(now_ns=80, last_ns=80, frame_ns=40) == 120  # just published it
    assert due_boundary(now_ns=79, last_ns=80, frame_ns=40) == 120  # an early wake-up


def test_due_boundary_overdue_publishes_the_latest_passed_at_once() -> None:
    assert due_boundary(now_ns=127, last_ns=80, frame_ns=40) == 120  # one overran frame
    assert due_boundary(now_ns=290, last_ns=80, frame_ns=40) == 280  # several: conflated
    assert due_boundary(now_ns=5, last_ns=0, frame_ns=40) == 40  # before the first boundary
    with pytest.raises(ValueError, match="frame_ns"):
        due_boundary(1, 0, 0)


@given(
    st.integers(0, 10**12),
    st.lists(st.integers(0, 200_000_000), min_size=1, max_size=60),
)
def test_due_boundary_keeps_the_grid_order_and_never_waits_when_behind(
    start: int, steps: list[int]
) -> None:
    """Any sequence of publish durations: boundaries are on the grid, strictly increasing, never
    after their publication time... and when the loop is behind it never sleeps."""
    frame = 40_000_000
    now, last = start, 0
    for took in steps:
        b = due_boundary(now, last, frame)
        assert b % frame == 0 and b > last
        if b <= now:  # overdue: the newest passed grid point, at once
            assert now - b < frame
        else:  # on time: the next grid point, and nothing newer had passed
            assert b - frame <= now < b and b - frame <= last
            now = b  # slept until it
        last = b
        now += took
