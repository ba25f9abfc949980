"""role/collectors.py at scrape time, from the thread a role of the host serves /metrics on
(host/telemetry.py) while its event loop adds and removes what the collectors read.

The storm scrapes in a thread, as that one does, while the test's thread churns the containers a
collector reads, as the loop does; a scrape that raises fails the test. A writer's scrape that
walked the live connections answered 500 in a connection storm ("dictionary changed size during
iteration")."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from prometheus_client.registry import Collector

from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.histograms.gc import GcMonitor
from monotape.invariants import InvariantMonitor
from monotape.invariants.checks import InvariantResult
from monotape.platform.core.outbox import Outbox
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.feeds.validate import TickGate
from monotape.platform.role.collectors import FanoutCollector, IngestCollector, InvariantCollector
from monotape.platform.role.failures import StageFailures
from monotape.platform.server.endpoint import FanoutServer

STORM_S = 1.0  # how long one storm lasts; the build before the fix failed well within it
# Entries each container holds: past CPython's 2,000 spare 2-tuples, so walking ``.items()``
# allocates, and a collection (and the roles' gc callback, GcMonitor) can start mid-walk.
ENTRIES = 5_000
BATCH = 100  # entries added, then removed, between two of the loop's turns

Entry = Callable[[int], tuple[Any, Any]]
Churn = tuple[MutableMapping[Any, Any], Entry]  # a container the loop owns, its i-th entry


def scrape_storm(collector: Collector, *churns: Churn) -> int:
    """Collect from ``collector`` in a thread while this one adds and removes entries of each
    container of ``churns``; re-raise the first error a scrape met. Returns the scrapes done."""
    batches = []
    for churn, entry in churns:
        for i in range(ENTRIES):
            key, value = entry(i)
            churn[key] = value
        batches.append((churn, [entry(ENTRIES + i) for i in range(BATCH)]))
    errors: list[Exception] = []
    scrapes = 0
    done = threading.Event()

    def scrape() -> None:
        nonlocal scrapes
        while not done.is_set():
            try:
                for _ in collector.collect():
                    pass
            except Exception as exc:  # handed to the test's thread
                errors.append(exc)
                return
            scrapes += 1

    monitor = GcMonitor().install()  # every role runs one: Python code in each collection
    threshold = gc.get_threshold()
    switch = sys.getswitchinterval()
    gc.set_threshold(100, 1_000, 1_000)  # young collections often, so one lands inside a walk
    sys.setswitchinterval(1e-6)  # threads switch at nearly every chance
    scraper = threading.Thread(target=scrape, name="storm-scrape", daemon=True)
    try:
        scraper.start()
        deadline = time.monotonic() + STORM_S
        while not errors and time.monotonic() < deadline:
            for churn, batch in batches:
                for key, value in batch:
                    churn[key] = value
                for key, _ in batch:
                    del churn[key]
    finally:
        done.set()
        scraper.join()
        sys.setswitchinterval(switch)
        gc.set_threshold(*threshold)
        monitor.uninstall()
    if errors:
        raise errors[0]
    assert scrapes > 0, "no scrape ran during the storm"
    return scrapes


class _Conn:
    """What FanoutCollector reads of a connection."""

    def __init__(self) -> None:
        self.outbox = Outbox(4)

    def sent(self) -> tuple[int, int]:
        return 3, 300


def _server() -> FanoutServer:
    universe = build_universe(venues=1, instruments=4, seed=1)
    return FanoutServer(ServerConfig(), universe, Sequencer(1), FakeClock())


def test_connections_and_disconnect_reasons_come_and_go_during_scrapes() -> None:
    server = _server()
    conns: dict[int, Any] = server.connections
    scrape_storm(
        FanoutCollector(server),
        (conns, lambda i: (i, _Conn())),
        # every labelled counter of the server (and AuthCollector's) reads through one helper
        (server.stats.disconnects, lambda i: (f"reason{i}", 1)),
    )


def test_invariant_results_appear_during_scrapes() -> None:
    monitor = InvariantMonitor([])

    def result(i: int) -> tuple[str, InvariantResult]:
        return f"inv{i}", InvariantResult(f"inv{i}", True, 0, 0, [], 0, 1)

    scrape_storm(InvariantCollector(monitor), (monitor.results, result))


def test_refused_ticks_and_stage_failures_appear_during_scrapes() -> None:
    clock = FakeClock()
    gate = TickGate(build_universe(venues=1, instruments=4, seed=1), clock.now_ns)
    failures = StageFailures(clock.now_ns)
    scrape_storm(
        IngestCollector(lambda: gate, failures),
        (gate.rejected, lambda i: ((f"V{i}", "range"), 1)),
        (failures.counts, lambda i: (f"stage{i}", 1)),
    )
