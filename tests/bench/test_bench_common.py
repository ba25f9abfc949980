"""bench/common.py's helpers that the benches' notes depend on."""

from __future__ import annotations

import pytest

from bench.common import box_gauge_ms, cpu_waits, most_waiting
from monotape import metric_names as m


def test_the_box_gauge_counts_the_work_it_is_given() -> None:
    """``box_gauge_ms`` is CPU time of its loop (process time: waiting for a core adds nothing),
    so twenty times the loop reads more, however busy the box is."""
    small, large = box_gauge_ms(50_000), box_gauge_ms(1_000_000)
    assert 0 < small < large


Sample = tuple[tuple[str, tuple[tuple[str, str], ...]], float]


def test_waits_per_process_over_the_window() -> None:
    def wait(process: str | None, v: float) -> Sample:
        labels = (("process", process),) if process else ()
        return (m.CPU_WAIT, labels), v

    m0 = dict([wait("writer-0", 10.0), wait("sequencer", 4.0), wait("writer-1", 30.0)])
    m1 = dict(
        [
            wait("writer-0", 13.0),  # 3 s over 10 s
            wait("sequencer", 4.5),
            wait("writer-1", 0.8),  # restarted inside the window: from its start
            wait("handler-A", 1.0),  # not in the first sample
            ((m.CPU_WAIT + "_created", (("process", "writer-0"),)), 1e9),  # not a wait
        ]
    )
    got = cpu_waits(m0, m1, 10.0)
    assert got == pytest.approx(
        {"writer-0": 0.3, "sequencer": 0.05, "writer-1": 0.08, "handler-A": 0.1}
    )
    assert cpu_waits({}, dict([wait(None, 2.0)]), 4.0) == {"node": 0.5}
    assert most_waiting(got) == "writer-0 0.30" and most_waiting({}) == "not read"
