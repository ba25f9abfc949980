"""The freeze policy: when new connections are frozen, when closed ones are reclaimed."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core.gc_policy import FreezeAction, FreezePolicy
from monotape.platform.node.node import Node
from tests.conftest import node_config

NONE, FREEZE, RECLAIM = FreezeAction.NONE, FreezeAction.FREEZE, FreezeAction.RECLAIM


def test_nothing_to_do_without_new_connections() -> None:
    p = FreezePolicy(settle_s=2, reclaim_closed=10)
    p.start(opened=5, closed=0)
    assert [p.decide(t, 5, 0) for t in range(100)] == [NONE] * 100


def test_freezes_once_the_population_settles() -> None:
    p = FreezePolicy(settle_s=2, reclaim_closed=10)
    p.start(0, 0)
    # a ramp: connections open at t = 0..4, then nothing
    acts = [p.decide(t, min(t + 1, 5) * 100, 0) for t in range(10)]
    # the last open moved the count at t=4; settled at t=6; frozen once
    assert acts == [NONE] * 6 + [FREEZE] + [NONE] * 3


def test_steady_churn_is_never_frozen_nor_reclaimed() -> None:
    """The soak's shape: connects every second, sessions of a second or two. Freezing them
    would freeze their garbage and need a long reclaim; nothing happens until it settles."""
    p = FreezePolicy(settle_s=1, reclaim_closed=100)
    p.start(0, 0)
    acts = [p.decide(t, 100 * (t + 1), 100 * t) for t in range(300)]
    assert acts == [NONE] * 300
    # then it settles: one reclaim (which freezes too), and nothing after it
    assert p.decide(301, 30_000, 30_000) is RECLAIM
    assert [p.decide(t, 30_000, 30_000) for t in range(302, 310)] == [NONE] * 8


def test_reclaims_after_enough_closes_and_only_when_settled() -> None:
    p = FreezePolicy(settle_s=2, reclaim_closed=100)
    p.start(1_000, 0)
    assert p.decide(0, 1_000, 99) is NONE
    assert p.decide(1, 1_050, 150) is NONE  # enough closes, but connections still opening
    assert p.decide(2, 1_100, 200) is NONE
    assert p.decide(3, 1_100, 200) is NONE
    assert p.decide(4, 1_100, 200) is RECLAIM  # settled: one reclaim (it also freezes)
    assert p.decide(5, 1_100, 250) is NONE
    assert p.decide(9, 1_100, 299) is NONE
    assert p.decide(10, 1_100, 300) is RECLAIM
    assert p.decide(11, 1_100, 300) is NONE  # a reclaim also froze the 100 new connections


def test_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="reclaim_closed"):
        FreezePolicy(settle_s=1, reclaim_closed=0)
    with pytest.raises(ValueError, match="settle_s"):
        FreezePolicy(settle_s=-1)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=200))
def test_acts_only_when_settled_and_freezes_what_settled(steps: list[tuple[int, int]]) -> None:
    """Whatever the arrivals and closes: nothing happens while connections are opening, a
    reclaim never comes before reclaim_closed closes, and once the population has been quiet
    for settle_s every connection opened so far is frozen."""
    p = FreezePolicy(settle_s=2, reclaim_closed=40)
    p.start(0, 0)
    opened = closed = 0
    covered = 0  # opened count as of the last FREEZE or RECLAIM
    closed_at_reclaim = 0
    last_open = float("-inf")
    t = 0.0
    for new, gone in [*steps, *([(0, 0)] * 3)]:
        opened += new
        closed = min(opened, closed + gone)
        if new:
            last_open = t
        act = p.decide(t, opened, closed)
        if act is not NONE:
            assert t - last_open >= 2
            covered = opened
        if act is RECLAIM:
            assert closed - closed_at_reclaim >= 40
            closed_at_reclaim = closed
        if t - last_open >= 2:
            assert covered == opened
        t += 1.0
    assert covered == opened  # three quiet seconds at the end: everything frozen


async def test_a_node_freezes_its_terminals_and_reclaims_them(tmp_path: Path) -> None:
    """The real node: terminals connect, and once they settle the permanent generation holds
    their objects (the gen-2 collector no longer walks them); once they have closed, one
    reclaim frees the cycles they left in it."""
    from websockets.asyncio.client import connect

    cfg = node_config(
        tmp_path,
        {
            "server.gc_refreeze_settle_s": 1.0,
            "server.gc_reclaim_closed": 30,
        },
    )
    node = Node(cfg)
    await node.start()
    try:
        frozen0 = gc.get_freeze_count()
        url = f"ws://127.0.0.1:{node.ws_port}/"
        clients = [await connect(url, compression=None) for _ in range(30)]
        for _ in range(50):
            await asyncio.sleep(0.1)
            if node.gc_monitor.freezes:
                break
        assert node.gc_monitor.freezes == 1
        frozen1 = gc.get_freeze_count()
        assert frozen1 > frozen0 + 30 * 20  # ~100 objects per connection
        for c in clients:
            await c.close()
        for _ in range(50):
            await asyncio.sleep(0.1)
            if node.gc_monitor.reclaims:
                break
        assert node.gc_monitor.reclaims == 1
        # the closed terminals left the permanent generation (reference counting + the reclaim)
        assert gc.get_freeze_count() < frozen1 - 30 * 20
    finally:
        await node.stop()
