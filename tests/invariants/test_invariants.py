"""Invariants on a SubscriptionIndex: they hold under any sequence of changes, and they trip
with the right numbers when the seed's bug is injected."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.invariants import (
    MAX_OFFENDING,
    InvariantMonitor,
    InvariantResult,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.log import set_stream
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.role.collectors import InvariantCollector
from tests.conftest import until


class Registry:
    """The server's side: live connections, kept in step with the index (as ``teardown``)."""

    def __init__(self) -> None:
        self.index = SubscriptionIndex()
        self.live: dict[int, object] = {}

    def open(self, conn: int) -> None:
        self.live[conn] = object()
        self.index.add_connection(conn)

    def teardown(self, conn: int) -> None:
        self.index.remove_connection(conn)
        self.live.pop(conn, None)

    def seed_bug(self, conn: int) -> None:
        """The seed's error path: drop the connection entry, skip the index cleanup."""
        del self.live[conn]


def _monitor(reg: Registry, clock: FakeClock | None = None) -> InvariantMonitor:
    clock = clock or FakeClock()
    return InvariantMonitor(
        [
            SubscriptionCardinality(reg.index, clock=clock),
            NoDanglingEntries(reg.index, lambda: reg.live, clock=clock),
        ],
        interval_s=30.0,
        clock=clock,
    )


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    set_stream(buf)
    yield buf
    set_stream(sys.stderr)


def _events(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def _violation(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(m.INVARIANT_VIOLATION, {"invariant": name})


ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "sub", "unsub", "prio", "unprio", "close"]),
        st.integers(1, 12),
        st.sets(st.integers(0, 30), max_size=6),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_invariants_hold_under_any_changes(script: list[tuple[str, int, set[int]]]) -> None:
    reg = Registry()
    monitor = _monitor(reg)
    for op, conn, iids in script:
        known = conn in reg.live
        if op == "open" and not known:
            reg.open(conn)
        elif op == "close":
            reg.teardown(conn)  # idempotent, like FanoutServer.teardown
        elif known and op == "sub":
            reg.index.subscribe(conn, iids)
        elif known and op == "unsub":
            reg.index.unsubscribe(conn, iids)
        elif known and op == "prio":
            reg.index.set_priority(conn, iids & reg.index.subscriptions(conn), True)
        elif known and op == "unprio":
            reg.index.set_priority(conn, iids, False)
        results = monitor.run_once()
        assert all(r.ok for r in results), results
        assert all(r.offending == [] for r in results)
    assert monitor.trips == {"subscription_cardinality": 0, "no_dangling_entries": 0}


def test_seed_bug_trips_no_dangling_entries_with_the_numbers(log: io.StringIO) -> None:
    reg = Registry()
    for conn in (1, 2, 3):
        reg.open(conn)
        reg.index.subscribe(conn, [10, 11, 12])
    reg.index.set_priority(2, [11, 12], True)
    registry = CollectorRegistry()
    monitor = _monitor(reg)
    registry.register(InvariantCollector(monitor))
    monitor.run_once()
    assert _violation(registry, "no_dangling_entries") == 0.0

    reg.seed_bug(2)  # an RST: the error path dropped the entry, the close path found nothing
    assert reg.index.dangling() == []  # the index alone cannot see it: it still holds conn 2
    result = {r.name: r for r in monitor.run_once()}["no_dangling_entries"]

    # conn 2 is still named by: the registry, conn->iids, conn->sig, sig->conns,
    # conn->priority, and iid->priority_conns twice (iids 11 and 12).
    assert (result.ok, result.expected, result.actual) == (False, 0, 7)
    assert sorted(result.offending) == sorted(
        [
            "registry:2",
            "conn->iids:2",
            "conn->sig:2",
            "sig->conns:2",
            "conn->priority:2",
            "iid->priority_conns:2",
            "iid->priority_conns:2",
        ]
    )
    assert _violation(registry, "no_dangling_entries") == 1.0
    assert _violation(registry, "subscription_cardinality") == 0.0  # the sums still agree
    seconds = registry.get_sample_value(
        m.INVARIANT_CHECK_SECONDS, {"invariant": "no_dangling_entries"}
    )
    assert seconds == 0.0  # the fake clock did not move
    assert monitor.report()["ok"] is False


def test_dangling_entries_the_index_forgot_are_counted_too() -> None:
    reg = Registry()
    reg.open(1)
    reg.index.subscribe(1, [5, 6])
    reg.index._conns.discard(1)  # corrupt: the index forgot its own registration
    reg.live.pop(1)
    result = NoDanglingEntries(reg.index, lambda: reg.live).check()
    assert result.actual == len(reg.index.dangling()) == 3  # conn->iids, conn->sig, sig->conns
    assert not result.ok


def test_offending_is_capped_but_actual_counts_everything() -> None:
    reg = Registry()
    for conn in range(1, 51):
        reg.open(conn)
        reg.index.subscribe(conn, [conn % 7])
    for conn in range(1, 51):
        reg.seed_bug(conn)
    result = NoDanglingEntries(reg.index, lambda: reg.live).check()
    assert result.actual == 50 * 4  # registry, conn->iids, conn->sig, sig->conns
    assert len(result.offending) == MAX_OFFENDING


def test_cardinality_trips_when_a_subscriber_set_is_corrupted() -> None:
    reg = Registry()
    for conn in (1, 2, 3):
        reg.open(conn)
        reg.index.subscribe(conn, [1, 2, 3, 4])
    check = SubscriptionCardinality(reg.index)
    assert check.check().ok and check.check().expected == 12

    sig = reg.index.signature(2)
    assert sig is not None
    reg.index._conns_of_sig[sig] -= {2}  # the writer would silently skip conn 2
    result = check.check()
    assert (result.ok, result.expected, result.actual) == (False, 12, 8)
    assert result.offending == ["conn:2"]


def test_cardinality_trips_when_a_connection_set_is_changed_behind_the_index() -> None:
    reg = Registry()
    reg.open(1)
    reg.index.subscribe(1, [1, 2])
    reg.index._subs[1].add(3)  # subscribed without relinking its signature
    result = SubscriptionCardinality(reg.index).check()
    assert (result.ok, result.expected, result.actual) == (False, 3, 2)
    assert result.offending == ["conn:1"]


def test_trip_and_recovery_are_logged_once_each(log: io.StringIO) -> None:
    reg = Registry()
    reg.open(1)
    reg.index.subscribe(1, [1, 2])
    tripped: list[InvariantResult] = []
    monitor = _monitor(reg)
    monitor.on_trip = tripped.append
    monitor.run_once()
    reg.seed_bug(1)
    for _ in range(5):  # five checks while it fails: one line
        monitor.run_once()
    reg.index.remove_connection(1)  # someone cleans up: it recovers
    for _ in range(3):
        monitor.run_once()

    events = [e for e in _events(log) if str(e["event"]).startswith("invariant_")]
    assert [e["event"] for e in events] == ["invariant_tripped", "invariant_recovered"]
    trip = events[0]
    assert trip["level"] == "error"
    assert trip["invariant"] == "no_dangling_entries"
    assert (trip["expected"], trip["actual"]) == (0, 4)
    offending = trip["offending"]
    assert isinstance(offending, list) and "registry:1" in offending
    assert events[1]["invariant"] == "no_dangling_entries"
    assert [r.name for r in tripped] == ["no_dangling_entries"]
    assert monitor.trips["no_dangling_entries"] == 1
    assert monitor.ok


def test_a_check_that_raises_is_a_failed_result_not_a_dead_monitor(log: io.StringIO) -> None:
    class Broken:
        name = "broken"

        def check(self) -> InvariantResult:
            raise RuntimeError("boom")

    monitor = InvariantMonitor([Broken()], clock=FakeClock())
    (result,) = monitor.run_once()
    assert (result.ok, result.actual) == (False, -1)
    assert "boom" in result.offending[0]


def test_a_check_that_raises_is_told_and_the_others_still_run() -> None:
    class Broken:
        name = "broken"

        def check(self) -> InvariantResult:
            raise RuntimeError("boom")

    reg = Registry()
    told: list[tuple[str, str]] = []
    monitor = InvariantMonitor(
        [Broken(), NoDanglingEntries(reg.index, lambda: reg.live)],
        clock=FakeClock(),
        on_failure=lambda name, exc: told.append((name, str(exc))),
    )
    broken, dangling = monitor.run_once()
    assert told == [("broken", "boom")]
    assert not broken.ok and dangling.ok
    monitor.run_once()
    assert len(told) == 2  # every time it raises, not only on the transition


async def test_run_forever_survives_a_pass_that_raises_outside_any_check() -> None:
    class Bogus:
        name = "bogus"

        def check(self) -> InvariantResult:
            return None  # type: ignore[return-value]  # not a result: the pass itself breaks

    told: list[str] = []
    monitor = InvariantMonitor(
        [Bogus()], interval_s=0.01, on_failure=lambda name, exc: told.append(name)
    )
    task = asyncio.create_task(monitor.run_forever())
    try:
        await until(lambda: len(told) >= 3 or task.done(), "three passes")
        assert not task.done(), "the loop died"
        assert told[:3] == ["*", "*", "*"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_results_carry_times_from_the_injected_clock() -> None:
    clock = FakeClock()
    reg = Registry()
    monitor = _monitor(reg, clock)
    (card, _) = monitor.run_once()
    assert card.checked_at_ms == clock.wall_ns() // 1_000_000
    assert card.duration_us == 0  # the fake clock did not move


def test_monitor_rejects_bad_settings() -> None:
    reg = Registry()
    with pytest.raises(ValueError, match="interval_s"):
        InvariantMonitor([SubscriptionCardinality(reg.index)], interval_s=0)
    with pytest.raises(ValueError, match="unique"):
        InvariantMonitor([SubscriptionCardinality(reg.index), SubscriptionCardinality(reg.index)])


def test_collector_exports_nothing_before_the_first_check() -> None:
    registry = CollectorRegistry()
    registry.register(InvariantCollector(_monitor(Registry())))
    assert _violation(registry, "no_dangling_entries") is None


async def test_run_forever_checks_at_once_and_on_schedule() -> None:
    reg = Registry()
    monitor = InvariantMonitor([NoDanglingEntries(reg.index, lambda: reg.live)], interval_s=0.01)
    task = asyncio.create_task(monitor.run_forever())
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert monitor.runs >= 3
    assert monitor.ok
