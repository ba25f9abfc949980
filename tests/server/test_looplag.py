"""LoopLagMonitor: the core counts what it is fed; the driver sees a blocked loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monotape import metric_names as m
from monotape.platform.role.collectors import LoopLagCollector
from monotape.platform.server.looplag import LOOP_LAG_BUCKETS_S, LoopLagMonitor

BLOCK_S = 0.05
INTERVAL_S = 0.005


def test_observe_keeps_last_max_peak_and_buckets() -> None:
    mon = LoopLagMonitor()
    for ns in (2_000_000, 30_000_000, -5, 7_000_000):
        mon.observe(ns)
    assert mon.last_ns == 7_000_000
    assert mon.take_max() == 30_000_000
    assert mon.take_max() == 0  # reset by the scrape
    assert mon.peak_ns == 30_000_000
    buckets, total_s, count = mon.histogram()
    assert count == 4 and buckets[-1] == ("+Inf", 4)
    assert [le for le, _ in buckets[:-1]] == [repr(b) for b in LOOP_LAG_BUCKETS_S]
    assert dict(buckets)["0.001"] == 1  # the negative sample counts as 0
    assert dict(buckets)["0.04"] == 4
    assert total_s == pytest.approx(0.039)
    assert mon.snapshot()["samples"] == 4


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LoopLagMonitor(0)


async def test_a_blocked_loop_shows_a_lag_at_least_the_block() -> None:
    mon = LoopLagMonitor(INTERVAL_S)
    task = asyncio.create_task(mon.run())
    while mon.samples < 5:  # a quiet baseline first
        await asyncio.sleep(INTERVAL_S)
    baseline = mon.peak_ns
    mon.take_max()
    seen = mon.samples
    time.sleep(BLOCK_S)  # holds the loop: every timer is late
    while mon.samples <= seen:
        await asyncio.sleep(INTERVAL_S)
    # The block may begin part-way through an interval, so a wake-up is late by at least
    # the block minus one interval.
    assert mon.peak_ns >= (BLOCK_S - INTERVAL_S) * 1e9
    assert mon.peak_ns > baseline
    mon.stop()
    await asyncio.wait_for(task, timeout=1.0)  # stop() wakes the driver at once
    assert task.done() and task.exception() is None


async def test_stop_is_immediate_and_idempotent() -> None:
    mon = LoopLagMonitor(30.0)
    task = asyncio.create_task(mon.run())
    await asyncio.sleep(0)
    t0 = time.monotonic()
    mon.stop()
    mon.stop()
    await asyncio.wait_for(task, timeout=1.0)
    assert time.monotonic() - t0 < 1.0
    assert mon.samples == 0


def test_collector_exports_gauges_and_histogram() -> None:
    mon = LoopLagMonitor()
    mon.observe(12_000_000)
    mon.observe(3_000_000)
    registry = CollectorRegistry()
    registry.register(
        LoopLagCollector(
            mon,
            max_name="monotape_event_loop_lag_max_seconds",
            histogram_name="monotape_event_loop_lag_histogram_seconds",
        )
    )
    text = generate_latest(registry).decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[m.EVENT_LOOP_LAG] == pytest.approx(0.003)
    assert samples["monotape_event_loop_lag_max_seconds"] == pytest.approx(0.012)
    assert samples["monotape_event_loop_lag_histogram_seconds_count"] == 2
    only_gauge = CollectorRegistry()
    only_gauge.register(LoopLagCollector(mon))
    families = list(text_string_to_metric_families(generate_latest(only_gauge).decode()))
    assert [f.name for f in families] == [m.EVENT_LOOP_LAG]
