"""A bus's receiving end, one for every bus: read the batch → gate it → deliver it.

``ipc.IpcTickBus`` (the host's Unix socket) and ``nats_bus.NatsTickBus`` (across hosts) receive
the same message, a tick batch's buffer (``wire/batch.py``), and treat a bad one the same way: a
buffer that is not a batch of this format (an unknown version, torn, short, a count its length
disagrees with) is refused whole, counted by reason in the node's ``TickGate`` (and logged at
most once a second); a batch that reads passes the gate in bulk (a tick out of range is refused
and counted, never admitted), and what passes goes to every sink in order; one sink's bug is
counted and never stops the others. Each bus keeps its own counters from the ``Received`` that
``receive`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from monotape.platform.bus.memory import TickSink
from monotape.platform.feeds.validate import TickGate
from monotape.platform.wire.batch import BatchError, TickBatch, read_batch
from monotape.platform.wire.bundle import is_bundle, read_bundle

__all__ = ["Inbox", "Received"]


class Received(NamedTuple):
    """What one message came to, for the bus's own counters."""

    ticks: int  # read, before the gate
    malformed: bool  # not a batch at all (refused whole)


class Inbox:
    """The receiving steps. ``on_error`` takes the last error's text (the bus's
    ``last_error``: it has other sources too)."""

    def __init__(self, gate: TickGate | None, on_error: Callable[[str], None]) -> None:
        self.gate = gate
        self.on_error = on_error
        self.sinks: list[TickSink] = []
        self.sink_errors = 0
        self.refused: dict[str, int] = {}  # reason -> buffers refused whole
        # told (venue, handler) of every batch read, header-only beats too: feed liveness
        self.on_heard: Callable[[str, str], None] | None = None

    def receive(self, data: bytes, where: str) -> Received:
        """Read ``data`` as a batch, or a bundle of them (``wire/bundle.py``), gate each, deliver
        each; ``where`` names the door in refusals (``"ipc bus.sock"``, ``"nats md.XNAS.batch"``).
        A bundle that does not read is refused whole (``malformed``); a batch of a bundle that
        does not read is refused alone, and the others are delivered."""
        try:
            parts: list[TickBatch | BatchError] = (
                read_bundle(data) if is_bundle(data) else [read_batch(data)]
            )
        except BatchError as exc:
            self._refuse(exc, where)
            return Received(0, malformed=True)
        read = 0
        for part in parts:
            if isinstance(part, BatchError):
                self._refuse(part, where)
            else:
                read += self._take(part, where)
        return Received(read, malformed=False)

    def _refuse(self, exc: BatchError, where: str) -> None:
        reason = str(exc.reason)
        self.refused[reason] = self.refused.get(reason, 0) + 1
        self.on_error(f"{where}: {exc}")
        if self.gate is not None:
            self.gate.refuse_batch(exc.reason, where, str(exc))

    def _take(self, batch: TickBatch, where: str) -> int:
        """One batch that read: heard, gated, delivered; the ticks it held before the gate."""
        read = batch.count
        if self.on_heard is not None:
            self.on_heard(batch.venue, batch.handler)
        if self.gate is not None:
            batch = self.gate.gate_batch(batch, where)
        if batch.count:
            self.deliver(batch)
        return read

    def deliver(self, batch: TickBatch) -> None:
        for sink in self.sinks:
            try:
                sink(batch)
            except Exception as exc:  # one sink's bug must not stop the stream for the others
                self.sink_errors += 1
                self.on_error(repr(exc))
