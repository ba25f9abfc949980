"""The tick bus between the processes of one host: feed handlers -> the sequencer.

Same ``TickBus`` protocol as ``memory.InProcessBus`` and ``nats_bus.NatsTickBus``; the handlers'
end publishes, the sequencer's end (``listen``) receives and calls its sinks. A message is one
batch encoded with the NATS bus's ``TickCodec`` (msgpack arrays, ~45 B per tick; no pickle),
carried by a ``link`` (a Unix SOCK_SEQPACKET socket at ``run_dir/bus.sock``).

Publishing never blocks and never queues: while the sequencer is down (a restart) or its socket
buffer is full, the batch is dropped and counted by reason (``link.Drop``), and the handler
connects again as soon as a sequencer listens on the path. A batch larger than a message may be
(a 190k/s spike after a stall) is split into several, in order.

Received batches pass the node's ``TickGate`` as the NATS bus's do (a tick out of the wire's
range is refused and counted, never admitted); a message that does not decode is salvaged item
by item, and one that is not a batch at all is counted as malformed.
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
    split_encode,
)
from monotape.platform.bus.memory import TickSink
from monotape.platform.bus.nats_codec import TickCodec
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Tick

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
        self.codec = TickCodec()
        self.last_error = ""
        # Not a batch at all: a malformed message (counted), not a gate refusal.
        self._inbox = Inbox(self.codec, gate, self._note_error, refuse_unreadable=False)
        self._sender = LinkSender(self.path, self.counters, now_ns)
        self._receiver: LinkReceiver | None = None

    # -- TickBus ---------------------------------------------------------------------------------
    def publish(self, ticks: Sequence[Tick]) -> None:
        """Encode and send now, split under the message size; a batch that cannot go is dropped
        and counted (``counters.dropped_*`` by reason). Never blocks, never raises."""
        if not ticks:
            return
        messages, oversize = split_encode(ticks, self.codec.encode, self.max_message_bytes)
        if oversize:
            self.counters.drop(Drop.OVERSIZE, oversize)
        for payload, n in messages:
            self._sender.send(payload, n)

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
