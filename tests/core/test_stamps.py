"""Stage stamps: every tick lands once at each stage it reached, with the right value."""

from __future__ import annotations

import numpy as np

from monotape.histograms import Recorders
from monotape.platform.core.stamps import StageStamps
from monotape.platform.model import Tick

MS = 1_000_000
OFFSET = 1_700_000_000 * 10**9  # wall - monotonic


def tick(i: int, venue_ts: int, decoded: int, admitted: int = 0) -> Tick:
    return Tick(i, "XNAS", 1, i, venue_ts, 100, 101, 100, 1, "A", decoded, admitted)


def test_values_and_counts_per_stage() -> None:
    recs = Recorders(start_ms=0)
    stamps = StageStamps(recs)
    # decoded 2 ms after the venue stamped them (wall), admitted 1 ms after decoding
    ticks = [tick(i, OFFSET + 100 * MS - 2 * MS, 100 * MS, 101 * MS) for i in range(10)]
    stamps.decoded(ticks)
    stamps.decoded([tick(99, OFFSET + 100 * MS - 2 * MS, 100 * MS)])  # delivered, never admitted
    stamps.admitted(ticks[:6])
    assert stamps.framed(120 * MS, 121 * MS, OFFSET) == 6
    stamps.written(np.array([5_000, 7_000]))
    stamps.admitted(ticks[6:])  # admitted after the boundary: no frame carries them yet
    by = {iv.stage: iv for iv in stamps.rotate(1_000, OFFSET, final=True)}
    h = {s: iv.histogram for s, iv in by.items()}
    assert h["decode"].get_total_count() == 11
    assert h["decode"].get_value_at_percentile(50) // 1000 == 2  # ms
    assert h["sequence"].get_total_count() == 10
    assert h["conflate"].get_total_count() == 6
    assert h["conflate"].get_max_value() // 1000 == 19  # 120 - 101 ms
    assert h["encode"].get_total_count() == 6
    assert h["write"].get_total_count() == 2


def test_a_rotation_between_frames_keeps_pending_ticks_for_their_frame() -> None:
    stamps = StageStamps(Recorders(start_ms=0))
    ticks = [tick(i, OFFSET, 10 * MS, 11 * MS) for i in range(4)]
    stamps.decoded(ticks)
    stamps.admitted(ticks)
    first = {iv.stage: iv.count for iv in stamps.rotate(1_000, OFFSET)}
    assert first["sequence"] == 0 and first["decode"] == 0  # not lost: still pending
    assert stamps.framed(40 * MS, 41 * MS, OFFSET) == 4
    second = {iv.stage: iv.count for iv in stamps.rotate(2_000, OFFSET)}
    assert second["decode"] == second["sequence"] == second["conflate"] == 4


def test_an_overdue_frame_charges_late_ticks_from_their_admission() -> None:
    """The previous publish overran: the frame at 40 ms goes out at 47 ms and carries ticks
    admitted at 45 ms. They spent no time waiting for a boundary and 2 ms being encoded; the
    ticks admitted before the boundary keep their usual split."""
    recs = Recorders(start_ms=0)
    stamps = StageStamps(recs)
    early = [tick(i, OFFSET + 30 * MS, 30 * MS, 30 * MS) for i in range(3)]
    late = [tick(i, OFFSET + 45 * MS, 45 * MS, 45 * MS) for i in range(3, 5)]
    stamps.decoded(early + late)
    stamps.admitted(early + late)
    assert stamps.framed(40 * MS, 47 * MS, OFFSET) == 5
    h = {iv.stage: iv.histogram for iv in stamps.rotate(1_000, OFFSET)}
    conflate, encode = h["conflate"], h["encode"]
    assert conflate.get_total_count() == 5 and encode.get_total_count() == 5
    assert conflate.get_count_at_value(10_000) == 3  # 40 - 30 ms, in µs
    assert conflate.get_value_at_percentile(0) <= 1  # the late two: nothing waited
    assert encode.get_count_at_value(7_000) == 3  # 47 - 40 ms
    assert encode.get_count_at_value(2_000) == 2  # 47 - 45 ms, not 7
    assert sum(r.clamped for r in recs) == 0  # nothing negative was recorded
