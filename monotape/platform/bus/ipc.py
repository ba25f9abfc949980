"""The tick bus between the processes of one host: feed handlers -> the sequencer.

Same ``TickBus`` protocol as ``memory.InProcessBus`` and ``nats_bus.NatsTickBus``; the handlers'
end publishes, the sequencer's end (``listen``) receives and calls its sinks. A message is one
tick batch's buffer (``wire/batch.py``: the same bytes the NATS bus carries, read in place at
the other end), carried by a ``link`` (a Unix SOCK_SEQPACKET socket at ``run_dir/bus.sock``).

Publishing never blocks and never queues: while the sequencer is down (a restart) or its socket
buffer is full, the batch is dropped and counted by reason (``link.Drop``), and the handler
connects again as soon as a sequencer listens on the path. A batch larger than a message may be
(a 190k/s spike after a stall) is split into several, in order.

Received batches pass the node's ``TickGate`` as the NATS bus's do (a tick out of the wire's
range is refused and counted, never admitted); a message that is not a batch of this format is
refused whole, counted by reason and as malformed (``inbox.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from monotape.platform.bus.inbox import Inbox
from monotape.platform.bus.link import (
    MAX_MESSAGE_BYTES,
    Drop,
    LinkCounters,
    LinkReceiver,
    LinkSender,
)
from monotape.platform.bus.memory import TickSink
from monotape.platform.feeds.validate import TickGate
from monotape.platform.wire.batch import TickBatch, split
from monotape.platform.wire.bundle import bundles

__all__ = ["BUS_SOCKET", "IpcTickBus", "bus_path"]

BUS_SOCKET = "bus.sock"


def bus_path(run_dir: str | Path) -> Path:
    """Where the sequencer's end listens: ``run_dir/bus.sock``."""
    return Path(run_dir) / BUS_SOCKET


class IpcTickBus:
    """The TickBus protocol over a Unix socket of the host's run directory.

    Ordering guarantee: every sink receives each publisher's batches in publish order (one
    connection per publisher: a SEQPACKET stream keeps order), each batch's ticks in their own
    order, minus what was dropped (counted). Nothing is promised across publishers: the two
    handlers of a pair interleave freely, which is why the sequencer orders by version.

    One object is one end: a handler calls ``publish`` (it connects lazily), the sequencer calls
    ``subscribe`` and ``listen``. ``now_ns`` paces reconnects (the monotonic clock)."""

    def __init__(
        self,
        path: str | Path,
        now_ns: Callable[[], int],
        *,
        gate: TickGate | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        link: str = "bus",
    ) -> None:
        self.path = Path(path)
        self.gate = gate
        self.max_message_bytes = max_message_bytes
        self.counters = LinkCounters(link)
        self.last_error = ""
        self._inbox = Inbox(gate, self._note_error)
        self._sender = LinkSender(self.path, self.counters, now_ns)
        self._receiver: LinkReceiver | None = None

    # -- TickBus ---------------------------------------------------------------------------------
    def publish(self, batch: TickBatch) -> None:
        """Send the batch's buffer now, split under the message size; a batch that cannot go
        is dropped and counted (``counters.dropped_*`` by reason). Never blocks, never raises."""
        self.publish_many((batch,))

    def publish_many(self, batches: Sequence[TickBatch]) -> None:
        """``publish`` for each, in order, in as few messages as fit (``wire/bundle.py``): a
        feed process's wake-up is one send and one receive, not one per venue. A message that
        cannot go drops its batches, counted (by ticks and by message) as ``publish`` does."""
        parts: list[TickBatch] = []
        for batch in batches:
            try:
                parts += split(batch, self.max_message_bytes)
            except ValueError:
                self.counters.drop(Drop.OVERSIZE, batch.count)
        for message, ticks in bundles(parts, self.max_message_bytes):
            self._sender.send(message, ticks)

    def on_heard(self, heard: Callable[[str, str], None]) -> None:
        """``heard(venue, handler)`` for every batch read, header-only beats included (the
        receiving end's feed liveness, core/feed_liveness.py)."""
        self._inbox.on_heard = heard

    def subscribe(self, sink: TickSink) -> None:
        self._inbox.sinks.append(sink)

    # -- the sequencer's end -----------------------------------------------------------------------
    def listen(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind ``path`` (a dead predecessor's socket file is replaced) and deliver what arrives
        to the sinks, on ``loop`` (the running loop by default)."""
        if self._receiver is None:
            self._receiver = LinkReceiver(
                self.path, self.counters, self._on_message,
                max_message_bytes=self.max_message_bytes,
            )  # fmt: skip
            self._receiver.open(loop)

    @property
    def sink_errors(self) -> int:
        return self._inbox.sink_errors

    @property
    def connected(self) -> bool:
        """Handlers' end: connected to a sequencer. Sequencer's end: at least one handler."""
        return self._sender.connected or self.counters.peers > 0

    def close(self) -> None:
        """Both ends; idempotent. Later publishes are dropped as ``Drop.CLOSED``."""
        self._sender.close()
        if self._receiver is not None:
            self._receiver.close()

    def stats(self) -> dict[str, int]:
        c = self.counters
        return {
            "sent_messages": c.sent_messages,
            "sent_ticks": c.sent_items,
            "dropped_messages": sum(c.dropped_messages.values()),
            "dropped_ticks": sum(c.dropped_items.values()),
            "received_messages": c.received_messages,
            "received_ticks": c.received_items,
            "malformed_messages": c.malformed_messages,
            "sink_errors": self.sink_errors,
        }

    # -- internals -------------------------------------------------------------------------------
    def _note_error(self, text: str) -> None:
        self.last_error = text

    def _on_message(self, data: bytes) -> None:
        got = self._inbox.receive(data, f"ipc {self.path.name}")
        self.counters.received_items += got.ticks
        if got.malformed:
            self.counters.malformed_messages += 1
