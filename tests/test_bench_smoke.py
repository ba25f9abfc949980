"""Smoke run of every benchmark at tiny sizes: the rows stay well-formed, so the benches cannot
rot. Never asserts timings (a shared 2-core machine is noisy); only shapes and signs."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `bench` lives at the repository root, beside `monotape`
    sys.path.insert(0, str(ROOT))
bench_main = importlib.import_module("bench.__main__")
bench_fanout = importlib.import_module("bench.bench_fanout")
bench_wire = importlib.import_module("bench.bench_wire")

pytestmark = pytest.mark.slow  # ~15 s: three server/client process pairs for the fan-out


def _check(rows: list[dict[str, Any]]) -> None:
    assert rows
    for r in rows:
        for key in ("benchmark", "variant", "value", "unit", "min", "max", "ratio", "note"):
            assert key in r, (key, r)
        assert isinstance(r["benchmark"], str) and r["benchmark"]
        assert isinstance(r["variant"], str) and r["variant"]
        assert isinstance(r["unit"], str) and r["unit"]
        assert math.isfinite(r["value"]) and r["value"] > 0, r
        for key in ("min", "max", "ratio"):
            if r[key] is not None:
                assert math.isfinite(r[key]) and r[key] > 0, (key, r)


def test_fanout_smoke() -> None:
    rows = bench_fanout.run(True, connections=12, seconds=0.8, warmup=0.2, runs=1)
    _check(rows)
    variants = {r["variant"] for r in rows}
    assert variants == {"naive", "monotape", "floor"}
    assert not any("only" in r["note"] and "subscribed" in r["note"] for r in rows)


def test_wire_smoke() -> None:
    rows = bench_wire.run(True, count=4)
    _check(rows)
    binary = next(r for r in rows if r["variant"] == "binary")
    assert binary["ratio"] < 1.0  # binary is smaller than the same frame as JSON


def test_main_collects_other_benches_and_renders() -> None:
    rows, problems = bench_main.collect(True, only=["ingest", "payloads", "recording"], log=lambda _m: None)
    assert not problems, problems
    _check(rows)
    text = bench_main.report(rows, problems, quick=True, secs=1.0)
    assert text.count("\n|") == len(rows) + 2  # header, separator, a line per row


def test_write_doc_keeps_prose(tmp_path: Any) -> None:
    doc = tmp_path / "b.md"
    doc.write_text(f"# B\n\nprose\n\n{bench_main.BEGIN}\nold\n{bench_main.END}\n\nafter\n")
    bench_main.write_doc(doc, "new")
    text = doc.read_text()
    assert "prose" in text and "after" in text and "new" in text and "old" not in text
