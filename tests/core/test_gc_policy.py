"""The freeze policy: when new connections are frozen, when closed ones are reclaimed.

The first tests pin the settle rule alone (``settle_only``: the batch, cadence, pause-budget and
forced-reclaim triggers off); the later ones the triggers that make a trickle of opens freeze."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.histograms.gc import GcMonitor
from monotape.platform.core.gc_policy import FreezeAction, FreezePolicy
from monotape.platform.node.node import Node
from tests.conftest import node_config

NONE, FREEZE, RECLAIM = FreezeAction.NONE, FreezeAction.FREEZE, FreezeAction.RECLAIM


def settle_only(settle_s: float = 1.0, reclaim_closed: int = 10_000) -> FreezePolicy:
    """The policy as it was before trickles: freeze and reclaim only once settled."""
    return FreezePolicy(
        settle_s=settle_s,
        reclaim_closed=reclaim_closed,
        refreeze_opened=0,
        refreeze_every_s=0,
        pause_budget_ms=0,
        reclaim_forced_closed=0,
    )


def test_nothing_to_do_without_new_connections() -> None:
    p = settle_only(settle_s=2, reclaim_closed=10)
    p.start(opened=5, closed=0)
    assert [p.decide(t, 5, 0) for t in range(100)] == [NONE] * 100


def test_freezes_once_the_population_settles() -> None:
    p = settle_only(settle_s=2, reclaim_closed=10)
    p.start(0, 0)
    # a ramp: connections open at t = 0..4, then nothing
    acts = [p.decide(t, min(t + 1, 5) * 100, 0) for t in range(10)]
    # the last open moved the count at t=4; settled at t=6; frozen once
    assert acts == [NONE] * 6 + [FREEZE] + [NONE] * 3


def test_settle_only_never_freezes_steady_churn() -> None:
    """The soak's shape under the settle rule alone: connects every second, sessions of a
    second or two; nothing happens until it settles (the trickle problem of issue #12)."""
    p = settle_only(settle_s=1, reclaim_closed=100)
    p.start(0, 0)
    acts = [p.decide(t, 100 * (t + 1), 100 * t) for t in range(300)]
    assert acts == [NONE] * 300
    # then it settles: one freeze; nothing was frozen while open, so nothing to reclaim
    assert p.frozen_closes(30_000) == 0
    assert p.decide(301, 30_000, 30_000) is FREEZE
    assert [p.decide(t, 30_000, 30_000) for t in range(302, 310)] == [NONE] * 8


def test_reclaims_after_enough_closes_and_only_when_settled() -> None:
    p = settle_only(settle_s=2, reclaim_closed=100)
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
    with pytest.raises(ValueError, match="reclaim_forced_closed"):
        FreezePolicy(reclaim_forced_closed=-1)
    with pytest.raises(ValueError, match="min_lifetime_s"):
        FreezePolicy(min_lifetime_s=-1)
    with pytest.raises(ValueError, match="refreeze_opened"):
        FreezePolicy(refreeze_opened=-1)


# -- the trickle: freezing without ever settling ---------------------------------------------


def test_a_trickle_is_frozen_on_the_cadence() -> None:
    """One open a second never settles (settle_s=2); the cadence freezes what opened anyway."""
    p = FreezePolicy(settle_s=2, refreeze_opened=0, refreeze_every_s=10)
    p.start(0, 0, now_s=0)
    acts = [p.decide(t, t, 0) for t in range(1, 41)]
    freezes = [t for t, a in zip(range(1, 41), acts, strict=True) if a is FREEZE]
    assert freezes == [10, 20, 30, 40]


def test_a_batch_of_opens_is_frozen_at_once() -> None:
    p = FreezePolicy(settle_s=5, refreeze_opened=64, refreeze_every_s=100)
    p.start(0, 0, now_s=0)
    assert p.decide(1, 63, 0) is NONE
    assert p.decide(2, 127, 0) is FREEZE  # 127 since the start: a batch
    assert p.decide(3, 150, 0) is NONE  # 23 since the freeze
    assert p.decide(4, 191, 0) is FREEZE


def test_a_gen2_pause_over_budget_refreezes_at_most_once_per_cadence() -> None:
    """The heap grew by something the counts do not see: the pause itself says so."""
    p = FreezePolicy(settle_s=1, refreeze_opened=0, refreeze_every_s=10, pause_budget_ms=2)
    p.start(0, 0, now_s=0)
    assert p.decide(5, 0, 0, gen2_pause_ms=9.0) is NONE  # too soon after the start
    assert p.decide(10, 0, 0, gen2_pause_ms=1.9) is NONE  # within budget
    assert p.decide(11, 0, 0, gen2_pause_ms=2.0) is FREEZE
    assert p.decide(12, 0, 0, gen2_pause_ms=8.0) is NONE  # once per cadence
    assert p.decide(21, 0, 0, gen2_pause_ms=8.0) is FREEZE


def test_a_trickle_that_never_settles_is_reclaimed_at_the_forced_bound() -> None:
    """The frozen garbage is bounded: long sessions (2,000 live, 50 opens and closes a
    second) are frozen, and once 1,000 of the frozen ones may have closed, a reclaim comes,
    settled or not."""
    p = FreezePolicy(settle_s=1, reclaim_closed=100, reclaim_forced_closed=1_000)
    p.start(2_000, 0, now_s=0)  # 2,000 open at the warm-up freeze
    acts = [p.decide(t, 2_000 + 50 * t, 50 * t) for t in range(1, 61)]
    reclaims = [t for t, a in zip(range(1, 61), acts, strict=True) if a is RECLAIM]
    assert reclaims == [20, 40, 60]


def test_short_sessions_are_neither_frozen_nor_reclaimed() -> None:
    """The soak's shape (100 sessions a second of ~2 s): a freeze would freeze sessions about
    to end, and their cycles would need a full-heap reclaim; the lifetime gate keeps them
    unfrozen (gen 2 collects them, and with ~200 live they are a small heap to walk)."""
    p = FreezePolicy(settle_s=1, reclaim_closed=100, reclaim_forced_closed=1_000)
    p.start(0, 0, now_s=0)
    acts = [p.decide(t, 100 * t, max(0, 100 * (t - 2))) for t in range(1, 301)]
    # the first seconds look long-lived (nothing closed yet): a freeze or two at most
    assert acts.count(FREEZE) <= 2 and RECLAIM not in acts
    assert set(acts[10:]) == {NONE}
    assert p.frozen_closes(100 * 298) <= 300


@given(
    st.lists(
        st.tuples(st.integers(0, 100), st.integers(0, 100), st.floats(0, 10), st.booleans()),
        max_size=150,
    ),
    st.integers(0, 80),
    st.sampled_from([0.0, 3.0, 7.0]),
    st.sampled_from([0, 300]),
    st.sampled_from([0.0, 60.0]),
)
def test_young_state_and_frozen_garbage_stay_bounded(
    steps: list[tuple[int, int, float, bool]],
    batch: int,
    every: float,
    forced: int,
    lifetime: float,
) -> None:
    """Whatever opens, closes (oldest or newest first) and pauses come, after every decision:
    the connections that really closed frozen since the last reclaim are at most
    ``frozen_closes`` and, with a forced bound, fewer than ``reclaim_forced_closed``; with the
    lifetime gate off,
    fewer than ``refreeze_opened`` opens wait unfrozen and none has waited
    ``refreeze_every_s``."""
    p = FreezePolicy(
        settle_s=2,
        reclaim_closed=200,
        refreeze_opened=batch,
        refreeze_every_s=every,
        pause_budget_ms=2,
        min_lifetime_s=lifetime,
        reclaim_forced_closed=forced,
    )
    p.start(0, 0, now_s=0)
    live: list[bool] = []  # open connections, oldest first: frozen or not
    opened = closed = 0
    at_freeze = 0
    frozen_closed = 0  # the model's truth since the last reclaim
    freeze_t = 0.0
    for step, (new, gone, pause, oldest_first) in enumerate(steps, start=1):
        t = float(step)
        live += [False] * new
        opened += new
        for _ in range(min(gone, len(live))):
            frozen_closed += live.pop(0 if oldest_first else -1)
            closed += 1
        act = p.decide(t, opened, closed, pause)
        if act is RECLAIM:
            frozen_closed = 0
        if act is not NONE:
            at_freeze, freeze_t = opened, t
            live = [True] * len(live)
        assert frozen_closed <= p.frozen_closes(closed)
        if forced:
            assert frozen_closed < forced
        fresh = opened - at_freeze
        if not lifetime and batch:
            assert fresh < batch
        if not lifetime and every and fresh:
            assert t - freeze_t < every


def test_the_monitor_collects_young_garbage_before_it_refreezes() -> None:
    """refreeze() frees young cycles (they are not frozen) and counts what it froze without
    walking the permanent generation; take_gen2_peak_ms() reports and forgets."""

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    mon = GcMonitor()
    with mon:
        try:
            gc.collect()
            gc.freeze()
            before = gc.get_freeze_count()
            keep = [[i] for i in range(1_000)]  # live: frozen
            for _ in range(1_000):
                Cycle()  # garbage: collected, not frozen
            mon.refreeze()
            grown = gc.get_freeze_count() - before
            assert 1_000 <= grown < 1_500
            assert mon.frozen_now >= grown  # an upper bound, counted at the freeze
            assert mon.freezes == 1
            gc.unfreeze()
            gc.collect(2)
            assert mon.take_gen2_peak_ms() > 0
            assert mon.take_gen2_peak_ms() == 0.0
            del keep
        finally:
            gc.unfreeze()


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=200))
def test_acts_only_when_settled_and_freezes_what_settled(steps: list[tuple[int, int]]) -> None:
    """Whatever the arrivals and closes: nothing happens while connections are opening, a
    reclaim never comes before reclaim_closed closes, and once the population has been quiet
    for settle_s every connection opened so far is frozen."""
    p = settle_only(settle_s=2, reclaim_closed=40)
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
