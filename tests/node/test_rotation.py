"""The histogram rotation: every value recorded before a rotation lands in its interval, in the
log and in the summaries the scrape exports; the hook before it runs first; spares recycle."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from monotape.clock import FakeClock
from monotape.histograms import ALL_STAGES, IntervalLogWriter, Recorders, read_intervals
from monotape.platform.core.stamps import StageStamps
from monotape.platform.role.rotation import HistogramRotation

MS = 1_000_000


def _rotation(tmp_path: Path, clock: FakeClock) -> tuple[HistogramRotation, list[str]]:
    calls: list[str] = []
    stamps = StageStamps(Recorders(start_ms=clock.wall_ns() // MS))
    writer = IntervalLogWriter(tmp_path / "hdr", proc="node-test", host="here")

    def before() -> None:
        # the server's priority writes since the last frame: this interval's
        calls.append("before")
        stamps.prioritized(np.array([2 * MS], dtype=np.int64))

    return HistogramRotation(stamps, writer, clock, interval_s=10, before=before), calls


def test_rotate_now_writes_every_stage_and_summarizes_it(tmp_path: Path) -> None:
    clock = FakeClock()
    rotation, calls = _rotation(tmp_path, clock)
    recorders = rotation.stamps.recorders
    recorders["hydrate"].record_ns(3 * MS)
    recorders["write"].add_ns(np.array([1 * MS, 4 * MS, 9 * MS], dtype=np.int64))
    clock.advance(10_000 * MS)
    rotation.rotate_now()
    rotation.writer.close()
    assert calls == ["before"]
    assert set(rotation.latest) == set(ALL_STAGES)
    assert rotation.latest["write"].count == 3
    assert rotation.latest["hydrate"].count == 1
    assert rotation.latest["priority"].count == 1  # recorded by the hook, in this interval
    logged = {iv.stage: iv.count for iv in read_intervals(tmp_path / "hdr")}
    assert logged == {s: rotation.latest[s].count for s in ALL_STAGES}
    # the next interval starts empty: nothing is counted twice
    clock.advance(10_000 * MS)
    rotation.rotate_now()
    assert rotation.latest["write"].count == 0
    assert rotation.latest["priority"].count == 1  # the hook's value of the second interval


async def test_rotate_off_loop_writes_in_a_thread_and_recycles(tmp_path: Path) -> None:
    clock = FakeClock()
    rotation, _ = _rotation(tmp_path, clock)
    rotation.stamps.recorders["glass"].record_ns(5 * MS)
    clock.advance(10_000 * MS)
    await rotation.rotate_off_loop()
    await rotation.settle(10)
    assert rotation.latest["glass"].count == 1
    clock.advance(10_000 * MS)
    await rotation.rotate_off_loop()  # the recycled spare is clean: no value carried over
    assert rotation.latest["glass"].count == 0
    rotation.rotate_now(final=True)
    rotation.writer.close()
    glass = [iv.count for iv in read_intervals(tmp_path / "hdr", stage="glass")]
    assert glass == [1, 0, 0]
