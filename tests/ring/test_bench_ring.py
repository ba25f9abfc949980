"""bench_ring runs and returns its typed rows (the figures themselves belong to the bench): the
ring's three, then the sequencer's frame publish with the Python twins and, when the extensions
are built, the native record encoders and the native table puts beside them; then the tick
ages' three, the writer's against the one-process node's."""

from __future__ import annotations

from bench.common import Row
from bench.ring import bench_ring
from monotape.platform.ring import table
from monotape.platform.wire import records


def test_bench_ring_quick_rows() -> None:
    rows = bench_ring.run(quick=True)
    publish = ["python encoders"] + (["native encoders"] if records.NATIVE else [])
    publish += ["native encoders + puts"] if records.NATIVE and table.NATIVE else []
    assert [r.variant.split(" ")[0] for r in rows[:3]] == ["publish", "poll:", "poll"]
    assert [r.variant for r in rows[3:-3]] == publish
    assert {r.benchmark for r in rows[3:-3]} == {"sequencer frame publish"}
    ages = rows[-3:]
    assert {r.benchmark for r in ages} == {"tick ages"}
    assert [r.peer for r in ages[1:]] == ["one process: written"] * 2 and ages[2].ratio == 1.0
    for r in rows:
        assert isinstance(r, Row) and r.unit == "µs/frame"
        assert r.value is not None and r.min is not None and r.max is not None
        assert 0 < r.min <= r.value <= r.max
