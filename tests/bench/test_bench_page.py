"""Smoke run of the watchlist page bench (bench/e2e/bench_page.py) at a tiny size: both pages
measured in one headless Chromium, the rows well-formed. Never asserts timings (a shared 2-core
machine is noisy); only shapes and signs. Without Chromium or Playwright: skipped naming what
to install, or failed under CI=true (monotape.testing.tools)."""

from __future__ import annotations

import math

import pytest

from bench.common import Row
from bench.e2e import bench_page
from monotape.testing.tools import missing_tool, require_tool

pytestmark = pytest.mark.slow  # one node and one browser: ~15 s


def test_page_bench_smoke() -> None:
    require_tool("chromium", "chromium")
    if bench_page.skipped_reason() is not None:
        missing_tool("playwright not installed: pip install playwright (the dev extra)")
    rows = bench_page.run(True, symbols=12, seconds=1.0, repeats=1, rate=4000)
    assert all(isinstance(r, Row) for r in rows)
    frame = [r for r in rows if r.unit == "ms"]
    assert {r.variant for r in frame} == {
        "watchlist (painted per frame)",
        "naive (DOM per message)",
    }
    for r in frame:
        assert r.value is not None and math.isfinite(r.value) and r.value > 0, r
        assert r.min is not None and r.max is not None and r.min <= r.value <= r.max, r
        assert r.ratio is not None and r.ratio > 0, r
        assert "frames/s" in r.note and "GUARD REGRESSIONS" not in r.note, r
    ours = next(r for r in frame if r.variant.startswith("watchlist"))
    assert ours.peer == "naive (DOM per message)"
    busy = [r for r in rows if r.unit == "ms/s"]  # main-thread time from Chromium's own metrics
    assert {r.variant for r in busy} == {"watchlist", "naive"}
    for r in busy:
        assert r.value is not None and r.value > 0 and "script" in r.note, r
    for r in rows:
        if r.unit == "/min":  # long animation frames: none at all is a fine answer
            assert r.value is not None and r.value >= 0, r


def test_page_bench_rows_say_why_when_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_page, "skipped_reason", lambda: "skipped: chromium not installed")
    rows = bench_page.run(True)
    assert len(rows) == 2
    assert all(r.value is None and r.note == "skipped: chromium not installed" for r in rows)
