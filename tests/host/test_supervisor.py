"""The host's process table (platform/host/supervisor.py): pure, so time is a number and the
jitter a value passed in. Backoff grows and caps, exit reasons are counted, stages start in
order and stop in reverse, and nothing starts once the host is stopping."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.host.supervisor import (
    START_ORDER,
    STOP_ORDER,
    Backoff,
    ProcessTable,
    SlotState,
    exit_reason,
)

S = 1_000_000_000
ROLES = [
    ("sequencer", "sequencer"),
    ("writer-0", "writer"),
    ("writer-1", "writer"),
    ("handler-A", "handler"),
    ("handler-B", "handler"),
    ("venue", "venue"),
]


def table(rand: float = 1.0, start_wait_ns: int = 30 * S) -> ProcessTable:
    return ProcessTable(ROLES, Backoff(), lambda: rand, start_wait_ns=start_wait_ns)


def start_all(t: ProcessTable, now: int = 0) -> None:
    """Start every stage as it opens, each role ready at once."""
    pid = 100
    while due := t.due(now):
        for name in due:
            pid += 1
            t.started(name, pid, now, 0)
            t.mark_ready(name)


# -- backoff -----------------------------------------------------------------------------------
def test_backoff_doubles_from_base_and_caps() -> None:
    b = Backoff(base_s=0.1, factor=2.0, cap_s=5.0, jitter=0.5)
    top = [b.delay_s(n, 1.0) for n in range(1, 10)]
    assert top == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert b.delay_s(3, 0.0) == pytest.approx(0.2)  # jitter: never below half the step


@given(
    failures=st.integers(1, 200),
    rand=st.floats(0.0, 1.0, exclude_max=True),
    cap=st.floats(0.5, 30.0),
)
def test_backoff_stays_within_its_step_and_never_passes_the_cap(
    failures: int, rand: float, cap: float
) -> None:
    b = Backoff(cap_s=cap)
    d = b.delay_s(failures, rand)
    step = min(cap, b.base_s * b.factor ** (failures - 1))
    assert step * (1 - b.jitter) <= d <= step <= cap
    assert b.delay_s(failures + 1, rand) >= d  # a longer crash loop never waits less


def test_exit_reasons_name_the_signal_or_the_code() -> None:
    assert exit_reason(-signal.SIGKILL) == "SIGKILL"
    assert exit_reason(-signal.SIGSEGV) == "SIGSEGV"
    assert exit_reason(3) == "exit_3"
    assert exit_reason(0) == "exit_0"  # a role that leaves on its own was not asked to


# -- restarts ----------------------------------------------------------------------------------
def test_a_crash_loop_backs_off_further_each_time_and_every_exit_is_counted() -> None:
    t = table(rand=1.0)
    start_all(t)
    now = 0
    waits = []
    for _ in range(9):
        ex = t.exited("venue", 3, now + 1)  # dies at once, every time
        assert ex.restart_in_s is not None and ex.reason == "exit_3"
        waits.append(ex.restart_in_s)
        now = t.slots["venue"].restart_at_ns
        assert t.due(now - 1) == []  # not before its time...
        assert t.due(now) == ["venue"]  # ...and then
        t.started("venue", 999, now, 0)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert t.restart_counts[("venue", "venue", "exit_3")] == 9
    assert t.slots["venue"].restarts == 9
    assert t.slots["venue"].last_reason == "exit_3"


def test_reasons_are_counted_apart_per_process() -> None:
    t = table()
    start_all(t)
    t.exited("writer-1", -signal.SIGKILL, 10 * S)
    t.started("writer-1", 500, 11 * S, 0)
    t.exited("writer-1", 1, 12 * S)
    t.exited("writer-0", -signal.SIGKILL, 12 * S)
    assert dict(t.restart_counts) == {
        ("writer", "writer-1", "SIGKILL"): 1,
        ("writer", "writer-1", "exit_1"): 1,
        ("writer", "writer-0", "SIGKILL"): 1,
    }
    assert not t.all_up()
    assert t.slots["writer-0"].state is SlotState.BACKOFF


def test_a_role_that_stayed_up_starts_its_backoff_again_from_the_first_step() -> None:
    t = table(rand=1.0)
    start_all(t)
    for _ in range(4):  # four quick crashes: 0.1, 0.2, 0.4, 0.8
        ex = t.exited("sequencer", 1, t.slots["sequencer"].started_ns + S)
        t.started("sequencer", 1, t.slots["sequencer"].restart_at_ns, 0)
    assert ex.restart_in_s == pytest.approx(0.8)
    up = t.slots["sequencer"].started_ns
    ex = t.exited("sequencer", 1, up + 31 * S)  # stable for > 30 s, then one crash
    assert ex.failures == 1 and ex.restart_in_s == pytest.approx(0.1)


# -- start and stop order ----------------------------------------------------------------------
def test_stages_start_in_order_each_once_the_ones_before_are_ready() -> None:
    t = table()
    assert t.due(0) == ["sequencer"]
    t.started("sequencer", 1, 0, 0)
    assert t.due(1) == []  # the writers wait until the sequencer is ready
    t.mark_ready("sequencer")
    assert t.due(2) == ["writer-0", "writer-1"]
    t.started("writer-0", 2, 2, 0)
    t.started("writer-1", 3, 2, 0)
    t.mark_ready("writer-0")
    assert t.due(3) == []  # one writer not ready yet holds the handlers back
    t.mark_ready("writer-1")
    assert t.due(4) == ["handler-A", "handler-B"]
    for n in ("handler-A", "handler-B"):
        t.started(n, 4, 4, 0)
        t.mark_ready(n)
    assert t.due(5) == ["venue"]
    t.started("venue", 5, 5, 0)
    assert t.all_up() and not t.all_ready()
    t.mark_ready("venue")
    assert t.all_ready()


def test_a_stage_that_never_gets_ready_holds_the_next_only_until_the_start_wait() -> None:
    t = table(start_wait_ns=30 * S)
    t.started("sequencer", 1, 0, 0)  # never ready (a role that forgot its port file)
    assert t.due(29 * S) == []
    assert t.due(30 * S) == ["writer-0", "writer-1"]
    assert t.next_due_ns(0) == 30 * S


def test_stop_drains_the_writers_first_then_the_rest_in_reverse_and_nothing_starts_again() -> None:
    t = table()
    start_all(t)
    t.exited("writer-1", -signal.SIGKILL, S)  # in backoff when the stop comes
    stages = t.stop()
    # the writers move their terminals while the sequencer and the feeds keep the prices going
    assert [role for role, _ in stages] == list(STOP_ORDER)
    assert list(STOP_ORDER[1:]) == [r for r in reversed(START_ORDER) if r != "writer"]
    assert stages == [
        ("writer", ["writer-0"]),  # writer-1 is not running: nothing to stop, never restarted
        ("venue", ["venue"]),
        ("handler", ["handler-A", "handler-B"]),
        ("sequencer", ["sequencer"]),
    ]
    assert t.slots["writer-1"].state is SlotState.STOPPED
    assert t.due(100 * S) == [] and t.next_due_ns(0) is None
    for role, names in stages:
        for name in names:
            t.stopping_now(name)
            ex = t.exited(name, 0 if role != "writer" else -signal.SIGKILL, 2 * S)
            assert ex.restart_in_s is None  # exits during a stop are not restarts...
    assert sum(t.restart_counts.values()) == 1  # ...and not counted: only the crash before
    assert all(s.state is SlotState.STOPPED for s in t.slots.values())


def test_a_role_killed_as_hung_exits_as_hung_once_and_is_restarted() -> None:
    t = table()
    start_all(t)
    assert t.mark_hung("sequencer")
    assert not t.mark_hung("sequencer")  # one kill, one count
    ex = t.exited("sequencer", -signal.SIGKILL, S)
    assert ex.reason == "hung" and ex.restart_in_s is not None
    assert t.restart_counts[("sequencer", "sequencer", "hung")] == 1
    t.started("sequencer", 7, 2 * S, 0)  # the next run is judged afresh
    assert t.exited("sequencer", -signal.SIGKILL, 3 * S).reason == "SIGKILL"
    t.stop()
    t.stopping_now("writer-0")
    assert not t.mark_hung("writer-0")  # told to stop already: its exit is the stop's


def test_a_role_table_refuses_unknown_roles_and_duplicate_names() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        ProcessTable([("x", "gateway")])
    with pytest.raises(ValueError, match="unique"):
        ProcessTable([("w", "writer"), ("w", "writer")])
