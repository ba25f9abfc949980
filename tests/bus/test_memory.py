"""bus/memory.py: the in-process bus keeps the ordering the TickBus protocol promises (and more)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.bus.memory import InProcessBus, TickBus
from monotape.platform.model import Tick


def _tick(handler: str, seq: int) -> Tick:
    return Tick(0, "XNAS", 1, seq, seq, 9_999, 10_001, 10_000, 100, handler=handler)


@given(st.lists(st.tuples(st.sampled_from("AB"), st.integers(0, 5)), max_size=30))
def test_every_sink_sees_every_batch_in_publish_order(plan: list[tuple[str, int]]) -> None:
    bus: TickBus = InProcessBus()
    seen: dict[str, list[list[tuple[str, int]]]] = {"first": [], "second": []}
    for name in seen:

        def sink(ticks: Sequence[Tick], name: str = name) -> None:
            seen[name].append([(t.handler, t.seq) for t in ticks])

        bus.subscribe(sink)
    sent = []
    for n, (handler, size) in enumerate(plan):
        batch = [_tick(handler, n * 10 + i) for i in range(size)]
        bus.publish(batch)
        if batch:  # an empty batch is not delivered
            sent.append([(t.handler, t.seq) for t in batch])
    assert seen["first"] == sent and seen["second"] == sent
    assert isinstance(bus, InProcessBus) and bus.published == sum(len(b) for b in sent)
