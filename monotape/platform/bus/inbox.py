"""A bus's receiving end, one for every bus: decode → salvage → gate → deliver.

``ipc.IpcTickBus`` (the host's Unix socket) and ``nats_bus.NatsTickBus`` (across hosts) receive
the same message, a ``TickCodec`` batch, and must treat a bad one the same way: a batch that does
not decode whole is salvaged item by item (every other item refused at the gate as
``UNDECODABLE``), what decodes passes the node's ``TickGate`` (a tick out of the wire's range is
refused and counted, never admitted), and what passes goes to every sink in order; one sink's
bug is counted and never stops the others. Each bus keeps its own counters from the
``Received`` that ``receive`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from monotape.platform.bus.memory import TickSink
from monotape.platform.bus.nats_codec import TickCodec
from monotape.platform.feeds.validate import Refusal, TickGate
from monotape.platform.model import Tick

__all__ = ["Inbox", "Received"]


class Received(NamedTuple):
    """What one message came to, for the bus's own counters."""

    ticks: int  # decoded (whole or salvaged), before the gate
    whole: bool  # the batch decoded at once
    malformed: bool  # not a batch at all, or some item not a tick


class Inbox:
    """The receiving steps. ``refuse_unreadable``: a message that is not a batch at all is one
    gate refusal (NATS: a subject names its venue) rather than only ``Received.malformed`` (the
    IPC bus, which counts it as a malformed message). ``on_error`` takes the last error's text
    (the bus's ``last_error``: it has other sources too)."""

    def __init__(
        self,
        codec: TickCodec,
        gate: TickGate | None,
        on_error: Callable[[str], None],
        *,
        refuse_unreadable: bool,
    ) -> None:
        self.codec = codec
        self.gate = gate
        self.on_error = on_error
        self.refuse_unreadable = refuse_unreadable
        self.sinks: list[TickSink] = []
        self.sink_errors = 0

    def receive(self, data: bytes, where: str, venue: str = "") -> Received:
        """Decode ``data`` (salvaging what it can), gate it, deliver it; ``where`` names the
        door in refusals (``"ipc bus.sock"``, ``"nats md.XNAS.batch"``)."""
        ticks: Sequence[Tick]
        try:
            ticks = self.codec.decode(data)
        except msgspec.DecodeError as exc:
            self.on_error(f"{where}: {exc}")
            ticks, malformed = self._salvage(data, where, venue)
            received = Received(len(ticks), whole=False, malformed=malformed)
        else:
            received = Received(len(ticks), whole=True, malformed=False)
        if ticks and self.gate is not None:
            ticks = self.gate.admit(ticks, where)
        if ticks:
            self.deliver(ticks)
        return received

    def deliver(self, ticks: Sequence[Tick]) -> None:
        for sink in self.sinks:
            try:
                sink(ticks)
            except Exception as exc:  # one sink's bug must not stop the stream for the others
                self.sink_errors += 1
                self.on_error(repr(exc))

    def _salvage(self, data: bytes, where: str, venue: str) -> tuple[list[Tick], bool]:
        """The ticks of a batch that did not decode whole, and whether the message was
        malformed; every other item is refused at the gate."""
        items: Sequence[object]
        try:
            items = self.codec.decode_each(data)
        except msgspec.DecodeError as exc:
            if not self.refuse_unreadable:
                return [], True
            items = [exc]  # not a batch at all: one refusal for the message
        ticks: list[Tick] = []
        for i, item in enumerate(items):
            if isinstance(item, Tick):
                ticks.append(item)
            elif self.gate is not None:
                detail = f"item {i}: {' '.join(str(item).split())}"
                self.gate.refuse(venue, Refusal.UNDECODABLE, where, detail)
        return ticks, len(ticks) < len(items)
