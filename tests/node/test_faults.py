"""Fault injection for alert drills: off by default, and the fault it makes is one the
invariants catch (and only that one)."""

from __future__ import annotations

import json

import pytest

from monotape.cli import main
from monotape.config import load_config
from monotape.invariants import NoDanglingEntries, SubscriptionCardinality
from monotape.platform.admin.faults import inject_dangling_entry
from monotape.platform.core.fanout import SubscriptionIndex


def test_the_phantom_is_caught_by_no_dangling_entries_only() -> None:
    index = SubscriptionIndex()
    live = {1: object(), 2: object()}
    for conn in live:
        index.add_connection(conn)
        index.subscribe(conn, [10, 11])
    dangling = NoDanglingEntries(index, lambda: live)
    cardinality = SubscriptionCardinality(index)
    assert dangling.check().ok and cardinality.check().ok

    conn = inject_dangling_entry(index, live, [11, 10])
    assert conn < 0 and conn not in live
    assert index.subscriptions(conn) == {10}  # the first symbol only
    result = dangling.check()
    assert not result.ok and f"registry:{conn}" in result.offending
    assert cardinality.check().ok  # the books add up; they name a connection that is gone


def test_a_second_phantom_gets_its_own_id() -> None:
    index = SubscriptionIndex()
    first = inject_dangling_entry(index, {}, [1])
    second = inject_dangling_entry(index, {}, [1])
    assert first != second and NoDanglingEntries(index, dict).check().actual > 0


def test_off_by_default_and_on_with_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_config().server.fault_injection is False
    assert main(["run", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["server"]["fault_injection"] is False
    assert main(["run", "--enable-fault-injection", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["server"]["fault_injection"] is True
