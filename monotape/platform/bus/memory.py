"""The tick bus: feed handlers publish normalized ticks, sequencers subscribe.

``TickBus`` is the boundary (its docstring states the ordering guarantee every implementation
keeps); ``InProcessBus`` beside it is the embedded default. The NATS implementation
(``nats_bus``, with its message format in ``nats_codec``) joins it behind the same protocol when
the pipeline spans hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from monotape.platform.model import Tick

__all__ = ["InProcessBus", "TickBus", "TickSink"]

TickSink = Callable[[Sequence[Tick]], None]


class TickBus(Protocol):
    """Ordering guarantee: every subscriber receives each publisher's batches in publish order,
    each batch in its own order. Nothing is promised across publishers: the two handlers of a
    pair interleave freely, which is why the sequencer orders by version, never by arrival."""

    def publish(self, ticks: Sequence[Tick]) -> None: ...

    def subscribe(self, sink: TickSink) -> None: ...


class InProcessBus:
    """Synchronous hand-off inside one event loop: publish returns after every sink ran.

    Stronger than the protocol: every sink sees every batch, in publish order across all
    publishers (one loop, one call at a time), and nothing is ever dropped."""

    def __init__(self) -> None:
        self._sinks: list[TickSink] = []
        self.published = 0

    def publish(self, ticks: Sequence[Tick]) -> None:
        if not ticks:
            return
        self.published += len(ticks)
        for sink in self._sinks:
            sink(ticks)

    def subscribe(self, sink: TickSink) -> None:
        self._sinks.append(sink)
