"""Outbox: a bounded ring; overflow clears it and opens a gap; a snapshot closes the gap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core.outbox import OUTBOX_FRAMES, Outbox


def test_fifo_and_accounting() -> None:
    o = Outbox(4)
    assert o.push(b"a") and o.push(b"bb")
    assert len(o) == 2 and o.queued_bytes == 3 and o.peek() == b"a"
    assert o.pop() == b"a" and o.queued_bytes == 2
    assert o.pop() == b"bb" and o.pop() is None and o.peek() is None
    assert o.queued_bytes == 0 and o  # an empty outbox is still truthy


def test_default_capacity_is_the_design_figure() -> None:
    assert Outbox().capacity == OUTBOX_FRAMES == 64


def test_overflow_clears_and_opens_a_gap() -> None:
    o = Outbox(3)
    assert all(o.push(bytes([i])) for i in range(3))
    assert not o.push(b"x")  # full: gap
    assert o.gap and o.gaps == 1 and o.drops == 4  # 3 queued + the incoming one
    assert len(o) == 0 and o.queued_bytes == 0


def test_gap_discards_until_resolved_and_snapshot_goes_first() -> None:
    o = Outbox(2)
    o.push(b"1")
    o.push(b"2")
    o.push(b"3")
    assert o.gap
    assert not o.push(b"4") and not o.push(b"5")
    assert o.drops == 5 and len(o) == 0 and o.gaps == 1
    o.resolve_gap(b"SNAP")
    assert not o.gap and len(o) == 1 and o.queued_bytes == 4
    assert o.push(b"6")
    assert o.pop() == b"SNAP" and o.pop() == b"6"


def test_resolve_without_gap_supersedes_queued() -> None:
    o = Outbox(4)
    o.push(b"old")
    o.resolve_gap(b"SNAP")
    assert o.drops == 1 and o.gaps == 0 and list(o.drain()) == [b"SNAP"]


def test_drain_and_clear() -> None:
    o = Outbox(8)
    for i in range(5):
        o.push(bytes([i]) * 2)
    assert o.drain(2) == [b"\x00\x00", b"\x01\x01"] and o.queued_bytes == 6
    o.clear()
    assert len(o) == 0 and o.queued_bytes == 0 and o.drops == 0


def test_rejects_zero_capacity() -> None:
    with pytest.raises(ValueError):
        Outbox(0)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.binary(max_size=5)),
        st.tuples(st.just("pop"), st.just(b"")),
        st.tuples(st.just("resolve"), st.just(b"")),
    ),
    max_size=300,
)


@settings(max_examples=300)
@given(st.integers(min_value=1, max_value=8), ops)
def test_push_pop_property(capacity: int, plan: list[tuple[str, bytes]]) -> None:
    o = Outbox(capacity)
    pushed = accepted = popped = 0
    expect_snapshot_next = False
    n = 0
    for op, payload in plan:
        if op == "push":
            pushed += 1
            was_gap = o.gap
            ok = o.push(b"F" + payload)
            accepted += ok
            if was_gap:
                assert not ok
        elif op == "pop":
            item = o.pop()
            if expect_snapshot_next and item is not None:
                assert item.startswith(b"S")
                expect_snapshot_next = False
            if item is not None:
                popped += 1
        elif o.gap:
            n += 1
            o.resolve_gap(b"S%d" % n)
            expect_snapshot_next = True
        assert len(o) <= capacity
        assert o.queued_bytes == sum(len(x) for x in o._items)
        if o.gap:
            assert len(o) == 0
    # Conservation: everything pushed (frames and snapshots) was popped, is queued, or was
    # counted as a drop: no silent loss (STYLE habit 7).
    assert pushed + n == popped + len(o) + o.drops
    assert o.drops >= pushed - accepted
