"""GcMonitor: every collection lands in the timeline, the counters, the scrape and the overlay."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.histograms.gc import GC_PAUSE_BUCKETS_S, GcMonitor, GcPause
from monotape.histograms.log import IntervalLogWriter
from monotape.histograms.plot import render_latency_svg
from monotape.histograms.recorder import Recorders
from monotape.histograms.timeline import overlay, timeline_rows, timeline_with_gc
from monotape.platform.role.collectors import GcCollector

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_764_460_800_000  # wall ms, on the 10 s grid


class Node:
    """A reference cycle: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.other: Node = self


def make_cyclic_garbage(n: int) -> None:
    for _ in range(n):
        a, b = Node(), Node()
        a.other, b.other = b, a


@pytest.fixture
def monitor() -> Iterator[GcMonitor]:
    mon = GcMonitor(capacity=1_000).install()
    try:
        yield mon
    finally:
        mon.uninstall()


def provoke_full_collection() -> int:
    """Cyclic garbage that only the explicit full collection may free (automatic collections
    are off while it is made), then that collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        make_cyclic_garbage(5_000)
        return gc.collect(2)
    finally:
        if was_enabled:
            gc.enable()


def test_a_provoked_gen2_collection_is_recorded(monitor: GcMonitor) -> None:
    before_ms = time.time_ns() // 1_000_000
    freed = provoke_full_collection()
    after_ms = time.time_ns() // 1_000_000
    assert freed >= 10_000  # two Nodes per cycle, each with its __dict__ on 3.11
    full = [p for p in monitor.pauses() if p.generation == 2]
    assert full, monitor.pauses()
    last = full[-1]
    assert last.collected >= 10_000
    assert last.uncollectable == 0
    assert last.duration_ns > 0
    assert before_ms <= last.start_ms <= after_ms
    assert monitor.counts()[2] >= 1
    assert last in monitor.pauses_between(before_ms, after_ms + 1)
    assert last not in monitor.pauses_between(after_ms + 1, after_ms + 10_000)
    assert last not in monitor.pauses_between(before_ms - 10_000, before_ms)
    assert all(p.generation == 2 for p in monitor.pauses_between(0, 2**62, min_generation=2))


def test_the_collector_exports_a_histogram_per_generation(monitor: GcMonitor) -> None:
    provoke_full_collection()
    registry = CollectorRegistry()
    registry.register(GcCollector(monitor))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families[m.GC_PAUSE]
    assert family.type == "histogram"
    samples = [(s.name, s.labels, s.value) for s in family.samples]
    for gen in ("0", "1", "2"):
        buckets = [
            (lab["le"], v)
            for name, lab, v in samples
            if name == m.GC_PAUSE + "_bucket" and lab["generation"] == gen
        ]
        assert [le for le, _ in buckets] == [*(repr(b) for b in GC_PAUSE_BUCKETS_S), "+Inf"]
        counts = [v for _, v in buckets]
        assert counts == sorted(counts)  # cumulative
        (count,) = [
            v for n, lab, v in samples if n == m.GC_PAUSE + "_count" and lab["generation"] == gen
        ]
        assert counts[-1] == count
    (gen2_count,) = [
        v for n, lab, v in samples if n == m.GC_PAUSE + "_count" and lab["generation"] == "2"
    ]
    (gen2_sum,) = [
        v for n, lab, v in samples if n == m.GC_PAUSE + "_sum" and lab["generation"] == "2"
    ]
    assert gen2_count >= 1
    assert gen2_sum > 0


def test_frozen_gauge_only_when_named(monitor: GcMonitor) -> None:
    registry = CollectorRegistry()
    registry.register(GcCollector(monitor, frozen_name="monotape_gc_frozen_objects"))
    names = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert "monotape_gc_frozen_objects" in names


def test_install_is_idempotent_and_uninstall_leaves_nothing() -> None:
    mon = GcMonitor()
    before = list(gc.callbacks)
    mon.install()
    mon.install()
    assert sum(1 for cb in gc.callbacks if cb is mon.callback) == 1
    assert mon.installed
    mon.uninstall()
    mon.uninstall()
    assert not mon.installed
    assert list(gc.callbacks) == before
    recorded = len(mon.pauses())
    gc.collect()
    assert len(mon.pauses()) == recorded


def test_context_manager_uninstalls_on_error() -> None:
    mon = GcMonitor()
    with pytest.raises(RuntimeError), mon:
        assert mon.installed
        raise RuntimeError("boom")
    assert not mon.installed


def test_a_stop_without_its_start_is_ignored() -> None:
    mon = GcMonitor()
    mon.callback("stop", {"generation": 2, "collected": 1, "uncollectable": 0})
    assert mon.pauses() == []
    assert mon.counts() == {0: 0, 1: 0, 2: 0}


def test_callback_pair_dates_with_the_injected_clock_and_buckets_by_le() -> None:
    clock = FakeClock(wall_offset_ns=T0 * 1_000_000)
    mon = GcMonitor(capacity=2, clock=clock)
    for gen in (2, 0, 0, 0, 1):
        mon.callback("start", {"generation": gen, "collected": 0, "uncollectable": 0})
        mon.callback("stop", {"generation": gen, "collected": 3, "uncollectable": 1})
    # Bounded per kind, drop-oldest: gen 0 cannot push the full collection out.
    assert sorted(p.generation for p in mon.pauses()) == [0, 0, 1, 2]
    assert mon.dropped == 1
    assert all(p.start_ms == clock.wall_ns() // 1_000_000 for p in mon.pauses())
    buckets, total_s, count = mon.histogram(0)
    assert count == 3 and total_s > 0
    assert buckets[-1] == ("+Inf", 3)
    snap = mon.snapshot(recent=5)
    assert snap["generations"]["2"]["collections"] == 1
    assert snap["timeline_dropped"] == 1
    assert len(snap["recent"]) == 4


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        GcMonitor(capacity=0)


def test_freeze_after_warmup_records_the_frozen_count() -> None:
    mon = GcMonitor()
    try:
        frozen = mon.freeze_after_warmup()
        # A frozen object freed since (another thread of this test process: a server's loop,
        # a client's) leaves the permanent generation; none enters it without a freeze.
        assert 0 < gc.get_freeze_count() <= frozen
        assert mon.frozen_objects == frozen
    finally:
        gc.unfreeze()


def test_the_provoked_pause_is_a_band_in_the_svg(monitor: GcMonitor) -> None:
    before_ms = time.time_ns() // 1_000_000
    provoke_full_collection()
    after_ms = time.time_ns() // 1_000_000
    pauses = monitor.pauses_between(before_ms, after_ms + 1, min_generation=2)
    root = ET.fromstring(render_latency_svg({}, pauses))
    bands = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "gc-pause"]
    assert len(bands) == len(pauses) >= 1
    title = bands[-1].find(f"{SVG}title")
    assert title is not None and title.text is not None
    assert "gen 2" in title.text and "ms" in title.text


def write_intervals(directory: Path, slots: int) -> None:
    recs = Recorders(start_ms=T0, stages=("decode", "write"), buffer_capacity=100)
    writer = IntervalLogWriter(directory, "p1", "h1")
    now = T0
    for k in range(slots):
        recs["decode"].record_ns(1_000_000 * (k + 1))
        recs["write"].record_ns(2_000_000 * (k + 1))
        now += 10_000
        intervals = recs.rotate_all(now)
        writer.write(intervals)
        recs.recycle_all(intervals)
    writer.close()


def test_timeline_with_gc_overlays_pauses_on_their_interval(tmp_path: Path) -> None:
    write_intervals(tmp_path, 3)
    clock = FakeClock(start_ns=0, wall_offset_ns=(T0 + 15_000) * 1_000_000)
    with GcMonitor(clock=clock) as mon:
        provoke_full_collection()
    body = timeline_with_gc(tmp_path, T0, T0 + 30_000, mon, stages=("decode", "write"))
    assert [s["start_ms"] for s in body] == [T0, T0 + 10_000, T0 + 20_000]
    for slot in body:
        assert set(slot["stages"]) == {"decode", "write"}
        assert slot["end_ms"] == slot["start_ms"] + 10_000
    assert body[0]["gc_pauses"] == [] and body[2]["gc_pauses"] == []
    gcs = body[1]["gc_pauses"]
    assert any(p["generation"] == 2 and p["start_ms"] == T0 + 15_000 for p in gcs)
    assert body[1]["stages"]["write"]["p99_us"] >= 3_990
    # A window without latency intervals still lists its pauses; no monitor, no pauses.
    assert timeline_with_gc(tmp_path, T0 + 10_000, T0 + 20_000, None)[0]["gc_pauses"] == []


def test_overlay_lists_a_slot_that_has_only_pauses() -> None:
    pause = GcPause(generation=1, start_ms=T0 + 42_000, duration_ns=5_000_000)
    (slot,) = overlay({"decode": []}, [pause])
    assert slot["start_ms"] == T0 + 40_000
    assert slot["gc_pauses"] == [{"generation": 1, "start_ms": T0 + 42_000, "duration_ms": 5.0}]
    with pytest.raises(ValueError):
        overlay({}, [], step_ms=0)


def test_timeline_rows_feed_the_svg(tmp_path: Path) -> None:
    write_intervals(tmp_path, 4)
    rows = timeline_rows([p for p in tmp_path.iterdir()], T0, T0 + 40_000, ("decode", "write"))
    assert [len(v) for v in rows.values()] == [4, 4]
    root = ET.fromstring(render_latency_svg(rows, []))
    assert len([p for p in root.iter(f"{SVG}polyline")]) == 2
