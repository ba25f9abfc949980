"""bus/memory.py: the in-process bus keeps the ordering the TickBus protocol promises (and more),
and hands each batch over by reference."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.bus.memory import InProcessBus, TickBus
from monotape.platform.model import Tick
from monotape.platform.wire.batch import COLUMNS, TickBatch, batch_from_ticks, batch_of


def _batch(handler: str, seqs: list[int]) -> TickBatch:
    ticks = [Tick(0, "XNAS", 1, s, s, 9_999, 10_001, 10_000, 100, handler=handler) for s in seqs]
    if ticks:
        (batch,) = batch_from_ticks(ticks)
        return batch
    return batch_of("XNAS", handler, 1, 0, {name: [] for name, _ in COLUMNS})  # nothing due


@given(st.lists(st.tuples(st.sampled_from("AB"), st.integers(0, 5)), max_size=30))
def test_every_sink_sees_every_batch_in_publish_order(plan: list[tuple[str, int]]) -> None:
    bus: TickBus = InProcessBus()
    seen: dict[str, list[TickBatch]] = {"first": [], "second": []}
    for name in seen:
        bus.subscribe(seen[name].append)
    sent: list[TickBatch] = []
    for n, (handler, size) in enumerate(plan):
        batch = _batch(handler, [n * 10 + i for i in range(size)])
        assert batch.count == size
        bus.publish(batch)
        if batch.count:  # an empty batch is not delivered
            sent.append(batch)
    for name in seen:  # the very objects published (by reference: no copy, no re-read)
        assert len(seen[name]) == len(sent)
        assert all(got is batch for got, batch in zip(seen[name], sent, strict=True))
    rows = [(b.handler, b.seq.tolist()) for b in seen["first"]]
    assert rows == [(h, [n * 10 + i for i in range(s)]) for n, (h, s) in enumerate(plan) if s]
    assert isinstance(bus, InProcessBus) and bus.published == sum(b.count for b in sent)
