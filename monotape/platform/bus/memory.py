"""The tick bus: feed handlers publish tick batches, sequencers subscribe.

``TickBus`` is the boundary (its docstring states the ordering guarantee every implementation
keeps); ``InProcessBus`` beside it is the embedded default: it hands a batch over by reference.
The IPC (``ipc``) and NATS (``nats_bus``) implementations carry the batch's own buffer
(``wire/batch.py``), the same bytes on both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from monotape.platform.wire.batch import TickBatch

__all__ = ["InProcessBus", "TickBus", "TickSink"]

TickSink = Callable[[TickBatch], None]


class TickBus(Protocol):
    """Ordering guarantee: every subscriber receives each publisher's batches in publish order,
    each batch in its own order. Nothing is promised across publishers: the two handlers of a
    pair interleave freely, which is why the sequencer orders by version, never by arrival."""

    def publish(self, batch: TickBatch) -> None: ...

    def publish_many(self, batches: Sequence[TickBatch]) -> None:
        """``publish`` each, in order; a bus that can carry several in one message does."""
        ...

    def subscribe(self, sink: TickSink) -> None: ...


class InProcessBus:
    """Synchronous hand-off inside one event loop: publish returns after every sink ran.

    Stronger than the protocol: every sink sees every batch, in publish order across all
    publishers (one loop, one call at a time), and nothing is ever dropped."""

    def __init__(self) -> None:
        self._sinks: list[TickSink] = []
        self.published = 0

    def publish(self, batch: TickBatch) -> None:
        if not batch.count:
            return
        self.published += batch.count
        for sink in self._sinks:
            sink(batch)

    def publish_many(self, batches: Sequence[TickBatch]) -> None:
        for batch in batches:
            self.publish(batch)

    def subscribe(self, sink: TickSink) -> None:
        self._sinks.append(sink)
