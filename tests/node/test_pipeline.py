"""The pipeline driver, one step at a time (no loop, no socket): pump moves what the handlers
have due through the bus into the sequencer, a frame carries what was admitted, and a batch that
raises is a counted stage failure, not a dead loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from monotape.clock import FakeClock
from monotape.config import FeedConfig, ServerConfig
from monotape.histograms import Recorders
from monotape.platform.bus.memory import InProcessBus
from monotape.platform.core.sequencer import Admission, Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Tick
from monotape.platform.node.pipeline import Pipeline
from monotape.platform.role.failures import StageFailures
from monotape.platform.server.endpoint import FanoutServer
from monotape.platform.wire.batch import TickBatch, batch_from_ticks

FRAME_NS = 40_000_000


@dataclass
class DueHandler:
    """A feed handler whose delay line holds the given ticks, one drain's worth per
    ``drain_batches`` (as tick batches, one per run of one epoch, as a handler drains them)."""

    venue: str
    due: list[list[Tick]] = field(default_factory=list)
    drained_at: list[int | None] = field(default_factory=list)
    drained: list[TickBatch] = field(default_factory=list)

    def drain_batches(self, now: int | None = None) -> list[TickBatch]:
        self.drained_at.append(now)
        batches = batch_from_ticks(self.due.pop(0)) if self.due else []
        self.drained += batches
        return batches


class BrokenHandler(DueHandler):
    def drain_batches(self, now: int | None = None) -> list[TickBatch]:
        raise RuntimeError("a handler's bug")


def _tick(iid: int, seq: int, clock: FakeClock) -> Tick:
    return Tick(
        iid=iid, venue="XA", epoch=1, seq=seq, venue_ts_ns=clock.wall_ns(),
        bid=100, ask=102, last=101, size=1, handler="a", decoded_ns=clock.now_ns(),
    )  # fmt: skip


def _pipeline(handlers: Sequence[Any], clock: FakeClock) -> Pipeline:
    universe = build_universe(1, 4, 7)
    sequencer = Sequencer(2, FRAME_NS)
    stamps = StageStamps(Recorders(start_ms=clock.wall_ns() // 1_000_000))
    cfg = ServerConfig()
    server = FanoutServer(cfg, universe, sequencer, clock, priority=stamps.prioritized)
    return Pipeline(
        clock=clock,
        feeds=FeedConfig(),
        frame_ns=FRAME_NS,
        simulator=None,
        replay=None,
        handlers=handlers,
        bus=InProcessBus(),
        sequencer=sequencer,
        server=server,
        stamps=stamps,
        failures=StageFailures(clock.now_ns, log=lambda *a, **k: None),
    )


def test_pump_moves_due_ticks_through_the_bus_into_the_sequencer() -> None:
    clock = FakeClock()
    twin_a, twin_b = DueHandler("XA"), DueHandler("XA")
    twins: list[Any] = [twin_a, twin_b]
    twin_a.due = [[_tick(0, 1, clock), _tick(1, 1, clock)]]
    twin_b.due = [[_tick(0, 1, clock)]]  # the twin's copy: a duplicate
    p = _pipeline(twins, clock)
    p.pump()
    assert p.decoded_ticks == 3
    counts = p.sequencer.counters()["XA"]
    assert (counts.admitted, counts.duplicates) == (2, 1)
    current = p.sequencer.current(1)
    assert current is not None and current.seq == 1
    assert dict(p.by_venue) == {"XA": twins}


def test_a_pump_drains_every_handler_at_one_time_a_batch_each_by_reference() -> None:
    """Every handler drained at one time, each drain's batch stamped once and handed to the
    sequencer as it is: the handler's own object (no copy, no merge, no object per tick)."""
    clock = FakeClock()
    handlers = [DueHandler("XA", [[_tick(i, 1, clock), _tick(i + 3, 1, clock)]]) for i in range(3)]
    p = _pipeline(handlers, clock)
    batches: list[TickBatch] = []
    p.bus.subscribe(batches.append)
    stamped: list[int] = []
    real = p.stamps.decoded_batch

    def decoded_batch(batch: TickBatch) -> None:
        stamped.append(batch.count)
        real(batch)

    p.stamps.decoded_batch = decoded_batch  # type: ignore[method-assign]
    p.pump()
    assert [b.iid.tolist() for b in batches] == [[0, 3], [1, 4], [2, 5]]
    assert all(b is h.drained[0] for b, h in zip(batches, handlers, strict=True))
    assert stamped == [2, 2, 2] and p.decoded_ticks == 6
    assert {h.drained_at[0] for h in handlers} == {clock.now_ns()}
    assert p.sequencer.counters()["XA"].admitted == 6


def test_a_handler_that_raises_costs_the_others_nothing() -> None:
    clock = FakeClock()
    ok = DueHandler("XA", [[_tick(0, 1, clock)]])
    p = _pipeline([BrokenHandler("XA"), ok], clock)
    p.pump()
    assert p.failures.counts == {"pump": 1}
    current = p.sequencer.current(0)
    assert current is not None and current.seq == 1
    assert p.decoded_ticks == 1


def test_a_frame_carries_every_tick_admitted_since_the_last() -> None:
    clock = FakeClock()
    handler = DueHandler("XA", [[_tick(0, 1, clock)], [_tick(1, 1, clock), _tick(2, 1, clock)]])
    p = _pipeline([handler], clock)
    p.pump()
    clock.advance(FRAME_NS)
    p.frame(FRAME_NS * (clock.now_ns() // FRAME_NS))  # pumps the second batch first
    assert p.framed_ticks == 3
    clock.advance(FRAME_NS)
    p.frame(FRAME_NS * (clock.now_ns() // FRAME_NS))
    assert p.framed_ticks == 3  # nothing new: an empty frame carries nothing
    intervals = {iv.stage: iv.count for iv in p.stamps.rotate(clock.wall_ns() // 1_000_000, 0)}
    assert intervals["sequence"] == intervals["conflate"] == intervals["encode"] == 3


def test_a_batch_that_raises_is_counted_and_the_next_is_admitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    p = _pipeline([], clock)
    real = p.stamps.admitted_batch
    calls = {"n": 0}

    def admitted_batch(admission: Admission) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("a poisoned batch")
        real(admission)

    monkeypatch.setattr(p.stamps, "admitted_batch", admitted_batch)
    for batch in batch_from_ticks([_tick(0, 1, clock)]) + batch_from_ticks([_tick(0, 2, clock)]):
        p.bus.publish(batch)
    assert p.failures.counts == {"sequence": 1}
    current = p.sequencer.current(0)
    assert current is not None and current.seq == 2
