"""bench/common.py's helpers that the benches' notes depend on."""

from __future__ import annotations

from bench.common import box_gauge_ms


def test_the_box_gauge_counts_the_work_it_is_given() -> None:
    """``box_gauge_ms`` is CPU time of its loop (process time: waiting for a core adds nothing),
    so twenty times the loop reads more, however busy the box is."""
    small, large = box_gauge_ms(50_000), box_gauge_ms(1_000_000)
    assert 0 < small < large
