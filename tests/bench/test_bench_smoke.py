"""Smoke run of every benchmark at tiny sizes: the rows stay well-formed, so the benches cannot
rot. Never asserts timings (a shared 2-core machine is noisy); only shapes and signs."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

from bench.common import Row
from bench.fanout import bench_fanout
from bench.micro import bench_wire

bench_main = importlib.import_module("bench.__main__")  # `python -m bench`

pytestmark = pytest.mark.slow  # fan-out: three server/client process pairs, + two with node


def _check(rows: list[Row]) -> None:
    assert rows
    for r in rows:
        assert isinstance(r, Row), r  # one typed row, no adapters for other shapes
        assert r.benchmark and r.variant and r.unit, r
        assert r.value is not None and math.isfinite(r.value) and r.value > 0, r
        for v in (r.min, r.max, r.ratio):
            if v is not None:
                assert math.isfinite(v) and v > 0, r


# The client reads the measurement window from the driver after the server set it. Once, on two
# busy cores (the suite runs on two workers), a run's client counted 0 frames in a 0.8 s window
# after a 0.2 s warm-up: most likely that relay took longer than the warm-up and the client
# began counting after the window closed. A second of warm-up leaves it time.
WARMUP_S = 1.0


def test_fanout_smoke() -> None:
    # The Python variants only (node is optional and has its own test below): ~10 s.
    rows = bench_fanout.run(
        True, connections=12, seconds=0.8, warmup=WARMUP_S, runs=1, variants=("monotape",)
    )
    _check(rows)
    variants = {r.variant for r in rows}
    assert variants == {"naive", "monotape", "floor"}
    assert all(r.benchmark.endswith("@ 12 conns") for r in rows)
    assert not any("only" in r.note and "subscribed" in r.note for r in rows)


@pytest.mark.skipif(
    not bench_fanout.node_available(), reason="node/ws not installed (npm ci --prefix bench/node)"
)
def test_fanout_node_smoke(tmp_path: Path) -> None:
    # One tiny run of the raw-socket node variant against the same client: ~3 s (both node
    # variants share the workload loading, subscribe parsing and reporting code).
    workload = str(tmp_path / "workload.json")
    bench_fanout.write_node_workload(workload, bench_fanout.frames_needed(0.8, WARMUP_S))
    for variant in ("node-ws-shared",):
        r = bench_fanout.measure_once(variant, 12, 0.8, WARMUP_S, node_workload=workload)
        srv, cli = r["server"], r["client"]
        assert srv["variant"] == variant
        assert srv["subscribed"] == 12 and cli["connected"] == 12
        assert srv["delivered"] > 0 and srv["bytes"] > srv["delivered"] and srv["cpu_s"] > 0
        assert cli["msgs"] > 0


def test_fanout_rows_without_node() -> None:
    # No processes: the rows say "skipped" for the node variants and still render.
    fake = {
        "server": {
            "cpu_s": 0.1,
            "wall_s": 1.0,
            "delivered": 1000,
            "bytes": 120_000,
            "feed_s": 0.0,
            "fanout_s": 0.09,
            "late_frames": 0,
            "subscribed": 40,
            "frames": 25,
        },
        "client": {"cpu_s": 0.05, "wall_s": 1.0, "msgs": 1000, "connected": 40},
    }
    variants = ("naive", "monotape", "monotape-paced", "floor")
    summary = {v: bench_fanout._summarize(v, [fake]) for v in variants}
    rows = bench_fanout._rows(40, "40 conns", summary, list(bench_fanout.NODE_VARIANTS))
    paced = [r for r in rows if r.benchmark.startswith("fanout server CPU per 40 ms frame")]
    assert [r.variant for r in paced] == ["monotape", "monotape-paced"]
    assert paced[0].value == paced[1].value == 0.1 * 1e6 / 25  # µs of CPU per boundary
    skipped = [r for r in rows if r.value is None]
    assert {r.variant for r in skipped} == set(bench_fanout.NODE_VARIANTS)
    assert len(skipped) == 4  # CPU and frames/s rows
    assert all(r.note == bench_fanout.NODE_SKIPPED for r in skipped)
    _check([r for r in rows if r.value is not None])
    text = bench_main.table(rows)
    assert text.count("skipped: node/ws not installed (npm ci --prefix bench/node)") == 4


def test_wire_smoke() -> None:
    rows = bench_wire.run(True, count=4)
    _check(rows)
    binary = next(r for r in rows if r.variant == "binary")
    assert binary.ratio is not None
    assert binary.ratio < 1.0  # binary is smaller than the same frame as JSON


def test_main_collects_other_benches_and_renders() -> None:
    rows, problems = bench_main.collect(
        True, only=["ingest", "payloads", "recording"], log=lambda _m: None
    )
    assert not problems, problems
    _check(rows)
    text = bench_main.report(rows, problems, quick=True, secs=1.0)
    assert text.count("\n|") == len(rows) + 2  # header, separator, a line per row


def test_write_doc_keeps_prose(tmp_path: Path) -> None:
    doc = tmp_path / "b.md"
    doc.write_text(f"# B\n\nprose\n\n{bench_main.BEGIN}\nold\n{bench_main.END}\n\nafter\n")
    bench_main.write_doc(doc, "new")
    text = doc.read_text()
    assert "prose" in text and "after" in text and "new" in text and "old" not in text
