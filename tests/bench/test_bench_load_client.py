"""bench/e2e/bench_load_client.py: a tiny population through every client, real processes."""

from __future__ import annotations

from bench.e2e import bench_load_client as b


def test_every_client_reads_the_broadcast_and_the_rows_compare_them() -> None:
    size = b.Size(terminals=20, warm_s=1.0, window_s=1.5, repeats=1)
    log: list[str] = []
    runs = b.measure(size, log.append)
    assert set(runs) == set(b.VARIANTS) and len(log) == len(b.VARIANTS)
    for variant, rs in runs.items():
        assert len(rs) == 1 and rs[0]["failed"] == 0, variant
        assert rs[0]["messages"] > 0 and rs[0]["cpu_s"] > 0, (variant, rs)  # shapes, not speeds
    rows = b.rows_of(runs, size)
    assert [r.variant for r in rows] == list(b.VARIANTS)
    assert rows[0].ratio == 1.0 and all(r.peer == "websockets" and r.unit == "µs" for r in rows)
    assert all(r.value is not None and r.value > 0 for r in rows)
    assert "20 connections x 25 Hz" in rows[1].note


def test_the_parsers_are_timed_on_the_same_read() -> None:
    costs = b.parse_costs(reads=2_000, repeats=2)
    assert {k: len(v) for k, v in costs.items()} == {"walk": 2, "websockets": 2}
    assert all(us > 0 for v in costs.values() for us in v)  # shapes, not speeds
    rows = b.parse_rows(costs, 2_000)
    assert [r.variant for r in rows] == ["walk", "websockets"] and rows[1].ratio == 1.0
    assert "2,000 reads per timing" in rows[0].note
