"""The tick bus across hosts: NATS core pub/sub, batched (docs/nats.md); its asyncio driver.

Feed handlers publish tick batches; every host's sequencer subscribes (design: Processes and
scale). A message is a batch's own buffer (``wire/batch.py``: the bytes the IPC bus carries);
its subject (one batch per venue, ``md.<venue>.batch``) comes from ``nats_codec``, without I/O;
this module moves those messages.

The synchronous ``publish()`` (the node calls it from its pump) takes the buffer and appends to a
bounded outbox; a task started by ``connect()`` drains the outbox into nats-py's pending buffer,
which nats-py's own flusher writes to the socket. A full outbox drops the batch and counts it
(``dropped_batches`` / ``dropped_ticks``): memory never grows without bound.

Its counters are plain ints, exported at scrape time by ``nats_collector.NatsBusCollector``; the
nats-server that tests and benchmarks run against is ``monotape.testing.nats.NatsServer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import nats
import nats.errors
import numpy as np
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from monotape.log import log_event
from monotape.platform.bus.inbox import Inbox
from monotape.platform.bus.memory import TickSink
from monotape.platform.bus.nats_codec import (
    BATCH_TOKEN,
    SUBJECT_PREFIX,
    SubjectScheme,
    subject_token,
)
from monotape.platform.feeds.validate import TickGate
from monotape.platform.wire.batch import TickBatch, take

__all__ = ["DEFAULT_MAX_PENDING_BATCHES", "NatsTickBus"]

DEFAULT_MAX_PENDING_BATCHES = 4_096  # x 256 ticks x 67 B: at most ~70 MB queued, ~5 s of spike
DEFAULT_PENDING_MSGS = 65_536  # per subscription, in nats-py, before it drops (slow consumer)
DEFAULT_PENDING_BYTES = 256 * 1024 * 1024


class NatsTickBus:
    """The TickBus protocol over NATS core pub/sub.

    Ordering guarantee: every subscriber receives each publisher's batches *for one subject* in
    publish order, each batch's ticks in their own order (NATS preserves order per publishing
    connection per subject; a publisher is one ``NatsTickBus``, i.e. one connection). In the
    default scheme a subject is a venue, so a handler's stream arrives in order. Nothing is
    promised across venues (subjects) or across publishers: the two handlers of a pair
    interleave freely, which is why the sequencer orders by version, never by arrival.
    Delivery is at most once (NATS core): a batch is lost if the outbox overflows
    (``dropped_batches``), if the subscriber falls behind nats-py's pending limits
    (``slow_consumer_drops``) or across a reconnect; the redundant twin and the version rule
    cover a lost batch, the counters make it visible.

    ``publish`` and ``subscribe`` are synchronous, as the protocol wants; ``connect`` and
    ``close`` are the asyncio driver. Sinks run synchronously, in arrival order, on the loop
    that called ``connect``.
    """

    def __init__(
        self,
        *,
        scheme: SubjectScheme | str = SubjectScheme.BATCH,
        symbols: Mapping[int, str] | None = None,
        prefix: str = SUBJECT_PREFIX,
        max_pending_batches: int = DEFAULT_MAX_PENDING_BATCHES,
        venues: Sequence[str] | None = None,
        name: str = "monotape",
        gate: TickGate | None = None,
    ) -> None:
        self.scheme = SubjectScheme(scheme)
        if self.scheme is SubjectScheme.SYMBOL and symbols is None:
            raise ValueError("the per-symbol subject scheme needs the iid -> symbol map")
        if max_pending_batches < 1:
            raise ValueError("max_pending_batches must be >= 1")
        self.prefix = prefix
        self.symbols: Mapping[int, str] = symbols or {}
        self.max_pending_batches = max_pending_batches
        self.venues = list(venues) if venues else None  # subscribe filter; None: every venue
        self.name = name
        # The NATS door for ticks (``validate``): what arrives is checked before any sink sees
        # it; a tick out of the wire's range is refused, counted and logged with its subject.
        self.gate = gate
        # Counters (plain ints: read at scrape time, never incremented through a metric client).
        self.published_batches = 0  # accepted into the outbox
        self.published_ticks = 0
        self.sent_batches = 0  # handed to nats-py
        self.dropped_batches = 0  # outbox full, closed bus, or nats-py refused the publish
        self.dropped_ticks = 0
        self.received_batches = 0
        self.received_ticks = 0
        self.decode_errors = 0
        self.slow_consumer_drops = 0  # messages nats-py dropped before our callback saw them
        self.last_error = ""
        self._inbox = Inbox(gate, self._note_error)
        self._outbox: deque[tuple[str, bytes, int]] = deque()
        self._wake = asyncio.Event()
        self._nc: Client | None = None
        self._subs: list[Subscription] = []
        self._drainer: asyncio.Task[None] | None = None
        self._pending_subscribe: asyncio.Task[None] | None = None
        self._closed = False

    # -- subjects --------------------------------------------------------------------------------
    def subject_for(self, venue: str, iid: int | None = None) -> str:
        if self.scheme is SubjectScheme.BATCH:
            return f"{self.prefix}.{subject_token(venue)}.{BATCH_TOKEN}"
        assert iid is not None
        symbol = self.symbols.get(iid, str(iid))
        return f"{self.prefix}.{subject_token(venue)}.{subject_token(symbol)}"

    def subscribe_subjects(self) -> list[str]:
        last = BATCH_TOKEN if self.scheme is SubjectScheme.BATCH else "*"
        if not self.venues:
            return [f"{self.prefix}.*.{last}"]
        return [f"{self.prefix}.{subject_token(v)}.{last}" for v in self.venues]

    def _groups(self, batch: TickBatch) -> list[tuple[str, TickBatch]]:
        """The messages of one batch: itself on its venue's subject (the default scheme), or
        one batch per instrument on its own subject (the per-symbol scheme)."""
        if self.scheme is SubjectScheme.BATCH:
            return [(self.subject_for(batch.venue), batch)]
        out: list[tuple[str, TickBatch]] = []
        for iid in np.unique(batch.iid).tolist():
            out.append((self.subject_for(batch.venue, iid), take(batch, batch.iid == iid)))
        return out

    # -- TickBus ---------------------------------------------------------------------------------
    def publish(self, batch: TickBatch) -> None:
        """Queue the batch's buffer, return. Never blocks, never raises for a full queue: an
        overflowing or closed bus drops the batch and counts it."""
        outbox = self._outbox
        for subject, group in self._groups(batch):
            if self._closed or len(outbox) >= self.max_pending_batches:
                self.dropped_batches += 1
                self.dropped_ticks += group.count
                continue
            outbox.append((subject, group.buffer, group.count))
            self.published_batches += 1
            self.published_ticks += group.count
        self._wake.set()

    def publish_many(self, batches: Sequence[TickBatch]) -> None:
        """``publish`` each: a subject per venue (or symbol), so a message per batch."""
        for batch in batches:
            self.publish(batch)

    def on_heard(self, heard: Callable[[str, str], None]) -> None:
        """``heard(venue, handler)`` for every batch read, header-only beats included (the
        receiving end's feed liveness, core/feed_liveness.py)."""
        self._inbox.on_heard = heard

    def subscribe(self, sink: TickSink) -> None:
        """Register a sink. Before ``connect`` (the node's order) the NATS subscription is made
        by ``connect``; after it, a task makes it (``flush()`` waits for it)."""
        self._inbox.sinks.append(sink)
        if self._nc is not None and not self._subs and self._pending_subscribe is None:
            self._pending_subscribe = asyncio.get_running_loop().create_task(
                self._subscribe(self._nc)
            )

    # -- asyncio driver --------------------------------------------------------------------------
    async def connect(self, servers: list[str], *, timeout_s: float = 10.0, **options: Any) -> None:
        """Connect (extra ``options`` go to ``nats.connect``), subscribe if a sink is registered,
        start draining the outbox. Raises ``ConnectionError`` if no server answers within
        ``timeout_s``; once connected, nats-py reconnects forever (a fan-out host never gives
        up on its feed)."""
        if self._nc is not None:
            raise RuntimeError("NatsTickBus is already connected")
        if self._closed:
            raise RuntimeError("NatsTickBus is closed")
        options.setdefault("name", self.name)
        # -1 makes nats-py retry the *first* connect forever too: the wait_for bounds that.
        options.setdefault("max_reconnect_attempts", -1)
        options.setdefault("connect_timeout", 2)
        try:
            self._nc = await asyncio.wait_for(
                nats.connect(
                    servers=servers,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    **options,
                ),
                timeout_s,
            )
        except (TimeoutError, OSError, nats.errors.Error) as exc:
            raise ConnectionError(f"no NATS server answered at {servers}: {exc!r}") from exc
        log_event("nats_connected", servers=servers, scheme=str(self.scheme))
        if self._inbox.sinks:
            await self._subscribe(self._nc)
        if self._outbox:  # published before connect
            self._wake.set()
        self._drainer = asyncio.get_running_loop().create_task(self._drain_loop(self._nc))

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the outbox is empty, the subscription exists and the server has seen
        everything sent so far (a PING/PONG round trip)."""
        nc = self._require()
        if self._pending_subscribe is not None:
            await self._pending_subscribe
        deadline = time.monotonic() + timeout
        while self._outbox:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self._outbox)} batches still queued")
            self._wake.set()
            await asyncio.sleep(0.001)
        await nc.flush(timeout=max(1, round(deadline - time.monotonic())))

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to ``timeout``), then unsubscribe and close the connection.
        Idempotent. Batches published afterwards are dropped and counted."""
        if self._closed:
            return
        self._closed = True
        nc, self._nc = self._nc, None
        try:
            if nc is not None and nc.is_connected:
                deadline = time.monotonic() + timeout
                while self._outbox and self._drainer is not None and not self._drainer.done():
                    if time.monotonic() > deadline:
                        break
                    self._wake.set()
                    await asyncio.sleep(0.001)
                with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                    await nc.flush(timeout=max(1, round(timeout)))
        finally:
            for task in (self._drainer, self._pending_subscribe):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self._drainer = self._pending_subscribe = None
            left = len(self._outbox)
            if left:
                self.dropped_batches += left
                self.dropped_ticks += sum(n for _, _, n in self._outbox)
                self._outbox.clear()
            self._subs = []
            if nc is not None and not nc.is_closed:
                await nc.close()
            log_event(
                "nats_closed",
                sent_batches=self.sent_batches,
                dropped_batches=self.dropped_batches,
                received_batches=self.received_batches,
            )

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def pending_batches(self) -> int:
        return len(self._outbox)

    @property
    def sink_errors(self) -> int:
        return self._inbox.sink_errors

    def stats(self) -> dict[str, int]:
        return {
            "published_batches": self.published_batches,
            "published_ticks": self.published_ticks,
            "sent_batches": self.sent_batches,
            "dropped_batches": self.dropped_batches,
            "dropped_ticks": self.dropped_ticks,
            "pending_batches": len(self._outbox),
            "received_batches": self.received_batches,
            "received_ticks": self.received_ticks,
            "decode_errors": self.decode_errors,
            "sink_errors": self.sink_errors,
            "slow_consumer_drops": self.slow_consumer_drops,
        }

    # -- internals -------------------------------------------------------------------------------
    def _require(self) -> Client:
        if self._nc is None:
            raise RuntimeError("NatsTickBus is not connected")
        return self._nc

    async def _subscribe(self, nc: Client) -> None:
        if self._subs:
            return
        # One wildcard subscription by default: one delivery task in nats-py, so callbacks run
        # in the order the server delivered. A venue filter makes one subscription per venue.
        for subject in self.subscribe_subjects():
            sub = await nc.subscribe(
                subject,
                cb=self._on_msg,
                pending_msgs_limit=DEFAULT_PENDING_MSGS,
                pending_bytes_limit=DEFAULT_PENDING_BYTES,
            )
            self._subs.append(sub)
        await nc.flush()  # the SUB has reached the server before anyone publishes
        self._pending_subscribe = None

    async def _drain_loop(self, nc: Client) -> None:
        outbox = self._outbox
        wake = self._wake
        while True:
            await wake.wait()
            wake.clear()
            while outbox:
                subject, payload, n = outbox[0]
                try:
                    # Appends to nats-py's pending buffer; it awaits only when that buffer is
                    # over its limit (socket backpressure), while the outbox absorbs bursts.
                    await nc.publish(subject, payload)
                except nats.errors.Error as exc:  # closed, or reconnecting with a full buffer
                    self.dropped_batches += 1
                    self.dropped_ticks += n
                    self.last_error = repr(exc)
                else:
                    self.sent_batches += 1
                outbox.popleft()

    def _note_error(self, text: str) -> None:
        self.last_error = text

    async def _on_msg(self, msg: Msg) -> None:
        got = self._inbox.receive(msg.data, f"nats {msg.subject}")
        if got.malformed:
            self.decode_errors += 1
        if got.ticks:
            self.received_batches += 1
            self.received_ticks += got.ticks

    async def _on_error(self, exc: Exception) -> None:
        if isinstance(exc, nats.errors.SlowConsumerError):
            self.slow_consumer_drops += 1  # per dropped message: never logged one by one
            return
        self.last_error = repr(exc)
        log_event("nats_error", level="warning", error=repr(exc))

    async def _on_disconnected(self) -> None:
        if not self._closed:
            log_event("nats_disconnected", level="warning")

    async def _on_reconnected(self) -> None:
        nc = self._nc
        log_event("nats_reconnected", server=str(nc.connected_url) if nc else "")
