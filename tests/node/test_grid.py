"""The frame grid's counts: every boundary it passes over while late is counted as skipped, so a
tape running below 25 Hz shows in /metrics (``monotape_frame_boundaries_skipped_total``).

The loop runs on a fake clock: a frame costs what the test says (it moves the clock), a sleep
wakes exactly at its deadline. Nothing here depends on how busy the machine is."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monotape import metric_names as m
from monotape.platform.role import grid
from monotape.platform.role.collectors import FrameGridCollector
from monotape.platform.role.failures import StageFailures

FRAME = 40_000_000


class _Done(BaseException):
    """Ends the endless loop after the last frame (not an ``Exception``: the grid contains
    those as a lost frame)."""


def _run(
    costs: list[int], start: int, raising: frozenset[int] = frozenset()
) -> tuple[list[int], grid.GridCounts, StageFailures]:
    """The grid over ``len(costs)`` frames starting at ``start``; frame ``i`` takes
    ``costs[i]`` ns of the fake clock and raises if ``i`` is in ``raising``."""
    now = [start]
    taken: list[int] = []
    counts = grid.GridCounts()
    failures = StageFailures(lambda: now[0])

    async def sleep_until(clock: Callable[[], int], deadline: int) -> None:
        now[0] = max(now[0], deadline)

    def frame(boundary: int) -> None:
        i = len(taken)
        taken.append(boundary)
        now[0] += costs[i]
        if i == len(costs) - 1:
            raise _Done
        if i in raising:
            raise RuntimeError("frame failed")

    async def main() -> None:
        with pytest.raises(_Done):
            await grid.run_frame_grid(lambda: now[0], FRAME, frame, failures, counts)

    mp = pytest.MonkeyPatch()
    mp.setattr(grid, "sleep_until", sleep_until)
    try:
        asyncio.run(main())
    finally:
        mp.undo()
    return taken, counts, failures


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 5 * FRAME), min_size=1, max_size=40),
    st.integers(1, 10**12),
    st.frozensets(st.integers(0, 39), max_size=5),
)
def test_every_grid_boundary_is_taken_or_counted_skipped(
    costs: list[int], start: int, raising: frozenset[int]
) -> None:
    taken, counts, _ = _run(costs, start, raising)
    assert counts.taken == len(taken) == len(costs)  # a frame that raised was still taken
    assert all(b % FRAME == 0 for b in taken)
    assert all(a < b for a, b in itertools.pairwise(taken))
    # taken + skipped covers the grid from the first boundary to the last, each point once
    assert counts.taken + counts.skipped == (taken[-1] - taken[0]) // FRAME + 1
    # A frame starts less than a frame after its boundary (at it, or at once when overdue), so
    # one that costs c passes over at least c // F - 1 boundaries and at most (c - 1) // F.
    done = costs[:-1]
    assert sum(max(0, c // FRAME - 1) for c in done) <= counts.skipped
    assert counts.skipped <= sum(max(0, (c - 1) // FRAME) for c in done)


def test_on_time_frames_skip_nothing_and_a_late_one_is_exported() -> None:
    _, on_time, _ = _run([FRAME // 4] * 10, start=7 * FRAME + 3)
    assert (on_time.taken, on_time.skipped) == (10, 0)
    _, late, _ = _run([FRAME // 4, 3 * FRAME + 1, FRAME // 4, FRAME // 4], start=FRAME)
    assert (late.taken, late.skipped) == (4, 2)
    registry = CollectorRegistry()
    registry.register(FrameGridCollector(late))
    assert registry.get_sample_value(m.FRAME_BOUNDARIES) == 4
    assert registry.get_sample_value(m.FRAME_BOUNDARIES_SKIPPED) == 2
