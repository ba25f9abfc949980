"""The churn driver against the real server, in-process on loopback, with the invariants on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from monotape.invariants import (
    InvariantMonitor,
    InvariantResult,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.platform.churn import (
    ChurnConfig,
    ChurnProgress,
    ChurnRefused,
    check_loopback,
    run_churn,
)
from monotape.platform.node import Node
from tests.conftest import node_config


@pytest.mark.parametrize(
    "url",
    [
        "ws://10.0.0.5:8765/",
        "ws://example.com:8765/",
        "ws://[::ffff:10.0.0.1]:1/",
        "http://127.0.0.1:8765/",
        "ws://0.0.0.0:8765/",
    ],
)
def test_refuses_anything_but_loopback(url: str) -> None:
    with pytest.raises(ChurnRefused):
        check_loopback(url)


@pytest.mark.parametrize(
    "url", ["ws://127.0.0.1:8765/", "ws://127.9.9.9:1/", "ws://[::1]:8765/", "ws://localhost:1/"]
)
def test_accepts_loopback(url: str) -> None:
    check_loopback(url)


async def test_run_churn_refuses_before_connecting() -> None:
    with pytest.raises(ChurnRefused, match="loopback"):
        await run_churn("ws://192.0.2.1:8765/", ChurnConfig(duration_s=1))


@pytest.mark.e2e
@pytest.mark.slow
async def test_churn_leaves_a_clean_server_and_the_invariants_hold(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path, {"simulator.rate": 3000}))
    await node.start()
    server = node.server
    trips: list[InvariantResult] = []
    monitor = InvariantMonitor(
        [
            SubscriptionCardinality(server.index),
            NoDanglingEntries(server.index, lambda: server.connections),
        ],
        interval_s=0.05,
        on_trip=trips.append,
    )
    checker = asyncio.create_task(monitor.run_forever())
    before = asyncio.all_tasks()
    lines: list[ChurnProgress] = []
    try:
        cfg = ChurnConfig(
            arrival_rate_per_s=40,
            mean_session_s=1.0,
            mean_change_interval_s=0.3,
            duration_s=5.0,
            drain_s=5.0,
            max_connections=200,
            progress_interval_s=0.5,
            seed=7,
        )
        report = await run_churn(f"ws://127.0.0.1:{node.ws_port}/", cfg, lines.append)
        # Nothing of the driver is left running (its tasks are all finished or cancelled).
        assert asyncio.all_tasks() - before - {asyncio.current_task()} == set()

        # The server sees the last leavers a moment after the driver returns.
        for _ in range(200):
            if not server.connections:
                break
            await asyncio.sleep(0.02)
        monitor.run_once()
    finally:
        checker.cancel()
        await asyncio.gather(checker, return_exceptions=True)
        await node.stop()

    assert report.started > 100, report
    assert report.opened == report.started, report
    assert report.errors == 0, report.error_samples
    assert report.closed + report.rst == report.opened, report
    assert report.rst >= 1 and report.closed >= 1, report
    assert report.changes > 0 and report.subscribes > report.opened, report
    assert report.cancelled == 0
    assert len(lines) >= 5 and lines[-1].opened == report.opened

    assert server.connections == {}
    assert server.index.is_empty()
    reasons = server.stats.disconnects
    # Every graceful leaver is counted as closed (+ the probe that read the dictionary), every
    # RST as connection_lost: a teardown reason says how the terminal left.
    assert dict(reasons) == {"closed": report.closed + 1, "connection_lost": report.rst}, reasons

    assert monitor.runs > 50
    assert trips == [], trips
    assert all(r.ok for r in monitor.results.values()), monitor.results
