"""The churn driver against the real server, in-process on loopback, with the invariants on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus

from monotape.commands.clientside import connect_failure
from monotape.invariants import (
    InvariantMonitor,
    InvariantResult,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.loadgen.churn import (
    ChurnConfig,
    ChurnFailed,
    ChurnProgress,
    ChurnRefused,
    check_loopback,
    run_churn,
)
from monotape.platform.node.node import Node
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
    # A busy machine may make the node shed a few upgrades (503 + Retry-After, by design): those
    # sessions retry, and the ones still refused at their planned end gave up; none is an error.
    assert report.opened + report.gave_up == report.started, report
    # Every upgrade tried ends opened, refused (503) or timed out; only a cancel cuts one short.
    answered = report.opened + report.rejected + report.timeouts
    assert answered <= report.attempts <= answered + report.cancelled, report
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


@pytest.mark.e2e
async def test_designed_503s_are_retried_after_retry_after_and_never_errors(
    tmp_path: Path,
) -> None:
    # A bucket of 5 upgrades/s with a burst of 5: the node sheds most of 40 arrivals/s with 503
    # + Retry-After, as designed. Before, each refusal was an error and failed the soak on a
    # busy machine; now the session waits Retry-After (+ jitter) and tries again.
    node = Node(
        node_config(
            tmp_path,
            {
                "simulator.rate": 1000,
                "server.admission_rate_per_s": 5,
                "server.admission_burst": 5,
            },
        )
    )
    await node.start()
    try:
        cfg = ChurnConfig(
            arrival_rate_per_s=40,
            rate_multiple=1.0,
            mean_session_s=4.0,
            duration_s=4.0,
            drain_s=10.0,
            retry_cap_s=2.0,
            seed=3,
        )
        report = await run_churn(f"ws://127.0.0.1:{node.ws_port}/", cfg)
    finally:
        await node.stop()
    assert report.rejected > 0, report  # the node did shed
    assert report.errors == 0, report.error_samples
    assert report.opened > 5, report  # refused sessions came back and opened
    assert report.opened + report.gave_up == report.started, report
    # Every upgrade tried ends opened, refused (503) or timed out; only a cancel cuts one short.
    answered = report.opened + report.rejected + report.timeouts
    assert answered <= report.attempts <= answered + report.cancelled, report
    assert node.server.gate.rejected["rate"] >= report.rejected


async def test_a_refused_probe_is_one_line_with_the_reason(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, {"auth.enabled": True})
    node = Node(cfg)
    await node.start()
    url = f"ws://127.0.0.1:{node.ws_port}/"
    try:
        with pytest.raises(ChurnFailed) as err:
            await run_churn(url, ChurnConfig(duration_s=1))
    finally:
        await node.stop()
    assert "HTTP 401" in str(err.value) and "missing token" in str(err.value)
    assert "\n" not in str(err.value)
    # The refusal itself travels with it, so the command line says what to do in tape's words:
    # the node's reason, which data dir's key signed a minted token, and how to point elsewhere.
    failure = err.value.failure
    assert isinstance(failure, InvalidStatus) and failure.response.status_code == 401
    line = str(connect_failure(url, failure, cfg, minted=True))
    assert "missing token" in line and str(tmp_path) in line and "--data-dir" in line


async def test_nothing_listening_is_a_churn_failed_carrying_the_refused_connect() -> None:
    with socket.socket() as s:  # a port nothing listens on: bound, never listened
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ChurnFailed) as err:
            await run_churn(f"ws://127.0.0.1:{port}/?token=secret", ChurnConfig(duration_s=1))
    assert isinstance(err.value.failure, ConnectionRefusedError)
    assert "secret" not in str(err.value) and f"127.0.0.1:{port}/" in str(err.value)


@pytest.mark.e2e
def test_load_churn_writers_2_churns_its_own_host_and_judges_it(tmp_path: Path) -> None:
    # `monotape load churn --writers 2`: the churn against a multi-process host it starts
    # itself, then the soak's verdict on it (the same checks as against one process).
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONOTAPE_")}
    done = subprocess.run(
        [
            sys.executable, "-m", "monotape", "load", "churn", "--writers", "2",
            # 40 arrivals/s (as the in-process churn above), sessions of 3 s: a 503's Retry-After
            # (the host shedding on a busy machine) must not outlast a session's planned end,
            # or the session gives up and the verdict's 5% rule trips on a short run.
            "--arrival-rate-per-s", "40", "--duration-s", "15", "--mean-session-s", "3",
            "--mean-change-interval-s", "0.5", "--max-connections", "200", "--seed", "5",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "monotape run --writers 2" in done.stderr
    assert "soak verdict: PASS" in done.stderr, done.stderr
    checks = [line.split()[:2] for line in done.stderr.splitlines() if line.startswith("  ")]
    assert [name for _, name in checks] == [
        "invariants", "scrapes", "connections", "index_empty", "tasks", "fds", "rss", "churn",
        "processes", "server_exit",
    ]  # fmt: skip
    assert all(ok == "ok" for ok, _ in checks), done.stderr
    processes = next(line for line in done.stderr.splitlines() if "ok   processes" in line)
    served = dict(re.findall(r"(writer-\d) (\d+)", processes))
    assert sorted(served) == ["writer-0", "writer-1"] and all(int(n) > 0 for n in served.values())
    report = json.loads(done.stdout)  # the churn's own report, as without --writers
    assert report["opened"] > 100 and report["errors"] == 0, report
    assert report["closed"] + report["rst"] == report["opened"], report
