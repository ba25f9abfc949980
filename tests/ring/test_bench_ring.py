"""bench_ring runs and returns its three typed rows (the figures themselves belong to the bench)."""

from __future__ import annotations

from bench.common import Row
from bench.ring import bench_ring


def test_bench_ring_quick_rows() -> None:
    rows = bench_ring.run(quick=True)
    assert [r.variant.split(" ")[0] for r in rows] == ["publish", "poll:", "poll"]
    for r in rows:
        assert isinstance(r, Row) and r.unit == "µs/frame"
        assert r.value is not None and r.min is not None and r.max is not None
        assert 0 < r.min <= r.value <= r.max
