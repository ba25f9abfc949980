"""The writer: planned bytes to sockets, and nothing else.

Per frame the decisions are made in core (core/planner.py: each changed symbol encoded once,
one payload per signature, framed once); here the planned bytes are written to every connection
of their signature. A connection that is behind (queued frames, a gap, a full socket) takes the
ordered path through its bounded ring (server/connection.py, core/outbox.py). A socket that
refuses the bytes fails that one write, caught where it is made, so one misbehaving terminal
never costs the others their frame (measured: the uvloop write-after-eof trap); its connection is
marked closing (nothing more for it in this loop) and torn down once the loop is over, in a
``finally`` (so even a loop that raises leaves no failed terminal registered): the registry and
the index do not change while a plan is being written.

The same for the order-ticket path (``publish_priority``), heartbeats, STALE (``stale``:
core/staleness.py decides, every frame written feeds it) and the answers to requests
(``answer``: never dropped with the data).

The native writer (``server.native_writer``, issue 13): the per-terminal Python work around
``transport.write`` is what a delivered frame costs once payloads are shared, so each payload
group goes to one ``SendTable.send`` call (server/sendmany.py: in C, per terminal its entry's
flags, kept by the connection: open, not closing, not behind, its transport holding nothing;
then one non-blocking send per socket with the GIL released, then its counts); only the
terminals that are not eligible or fell short come back to Python. A socket that takes less than
the whole payload hands the exact remainder to its transport (then the ring), and stays on that
path until its transport has drained; a socket the kernel refuses is torn down with a named
reason. Off (or not built), the transport path runs
alone, as before. The loop, and why the fd may be written behind the transport's back:
server/sendloop.py.

Size: past ~400 lines because every delivery path (frame plan, order ticket from ticks or from
the frame ring's pre-encoded records, heartbeat, answer, gap) shares one failure discipline here.
"""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

import numpy as np
from websockets.protocol import State

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.platform.core.budget import ControlLimits
from monotape.platform.core.conflation import Frame
from monotape.platform.core.disconnect import Disconnect
from monotape.platform.core.planner import (
    NO_IIDS,
    FramePlan,
    gap_snapshot,
    plan_frame,
    written_iids,
)
from monotape.platform.core.snapshots import FailureSink, Snapshots
from monotape.platform.core.staleness import StaleState, StaleWatch
from monotape.platform.model import Tick
from monotape.platform.server import sendmany
from monotape.platform.server.connection import Connection, WriteFailed
from monotape.platform.server.sendloop import Failed, SendLoop
from monotape.platform.server.sendmany import SendMany, SendTable
from monotape.platform.server.terminals import Terminals
from monotape.platform.wire import codec

__all__ = ["PRIORITY_BUFFER", "Delivery", "Writer"]

OPEN = State.OPEN
# Priority write latencies held between frames; a burst that fills the buffer is handed on early.
# Fixed at 4,096 int64 values (32 KiB) per process, whatever the burst.
PRIORITY_BUFFER: Final = 4096


class Delivery(enum.Enum):
    WRITTEN = "written"  # handed to the kernel now
    QUEUED = "queued"  # in the connection's ring (or dropped into its gap)
    REFUSED = "refused"  # not deliverable: closing, or the socket failed (then torn down)


class Writer:
    def __init__(
        self,
        cfg: ServerConfig,
        clock: Clock,
        terminals: Terminals,
        snapshots: Snapshots,
        priority: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.terminals = terminals
        self.snapshots = snapshots
        self.failures: FailureSink | None = None  # the node's: a symbol that cannot encode
        self.last_frame_no = 0
        # whether this writer's prices stopped (grid stalled, venues down): STALE
        self.stale = StaleWatch(int(cfg.frame_ms * 1e6))
        # The last frame's writes: its direct writes first (``direct_writes`` of them), then the
        # frames that had waited in a slow terminal's ring and went out in ``flush_behind``,
        # each timed from its own publish: every value is a ``write`` (core/stamps.py).
        self.write_latencies_ns: list[int] = []
        self.direct_writes = 0
        # the publish time of the frame being written (0 between frames): a frame that has to
        # wait in a terminal's ring keeps it there, so its late write is timed from it
        self.publishing_ns = 0
        # the instruments whose record was in a payload of the last frame handed to the kernel
        # for at least one terminal: the ticks that get a tick_to_write value (stamps.py)
        self.written_iids: np.ndarray = NO_IIDS
        # Admitted → written latencies of priority writes, gathered in a fixed buffer (no
        # allocation per value) and handed to ``priority`` in batches (``flush_priority``).
        self._priority_sink = priority
        self._priority_ns = np.empty(PRIORITY_BUFFER, dtype=np.int64)
        self._priority_n = 0
        self.control_limits = ControlLimits(
            cfg.control_frames_per_s, cfg.control_frames_burst, cfg.max_queued_bytes
        )
        # The native send loop (server/sendloop.py), or None: the transport path alone
        # (switched off, or not built).
        native = sendmany.native(cfg.native_writer)
        self.sendloop: SendLoop | None = None if native is None else self.send_loop(native)

    def send_loop(self, send_many: SendMany, table: SendTable | None = None) -> SendLoop:
        """A native send loop over ``send_many`` (tests pass sendmany.python_send_many: the
        same loop through the fallback, or a table over modelled sockets)."""
        return SendLoop(
            send_many, self.terminals, self.cfg.write_high_water, self._written_now, table
        )

    def audit(self) -> tuple[int, list[str]] | None:
        """The native send loop's table against the connections (``SendLoop.audit``), or None
        when the transport path runs alone: the ``native_entries`` invariant."""
        return None if self.sendloop is None else self.sendloop.audit()

    @property
    def native(self) -> bool:
        """Whether the native send loop is in use (the monotape_native_writer gauge)."""
        return self.sendloop is not None

    # -- the fan-out ---------------------------------------------------------------------------
    def publish_frame(self, frame: Frame) -> int:
        """Plan the frame (encode each watched change once, one payload per signature) and
        write it: ``publish_plan``."""
        terminals = self.terminals
        return self.publish_plan(plan_frame(frame, terminals.index, self.failures, terminals.pacer))

    def publish_plan(self, plan: FramePlan) -> int:
        """Write the plan's payloads to every connection of their signature; then give slow
        terminals their chance to catch up.

        Returns the monotonic time the payloads were published (encoded and framed); the
        per-connection write latencies from then are left in ``write_latencies_ns``, and the
        instruments that went out in a direct write in ``written_iids``."""
        terminals = self.terminals
        index = terminals.index
        self.last_frame_no = plan.frame_no
        resumed = self.stale.framed(self.clock.now_ns(), self.clock.wall_ns() // 1_000_000)
        if resumed is not None:  # the grid had stalled: cleared for quiet terminals too
            self.publish_stale(resumed)
        terminals.stats.frames += 1
        terminals.stats.payloads_last = len(plan.payloads)
        now_ns = self.clock.now_ns
        published = now_ns()
        self.publishing_ns = published
        latencies = self.write_latencies_ns
        latencies.clear()
        failed: Failed = []  # sockets that refused bytes: torn down after the loop
        written_sigs: list[int] = []
        sendloop = self.sendloop
        try:
            if sendloop is not None:
                # One SendTable.send call per payload (server/sendloop.py); its terminals share
                # one write latency, taken when the call returns.
                send_frame = sendloop.send_frame
                for wire, conn_ids, sig in plan.payloads:
                    count = send_frame(wire, conn_ids, sig, failed)
                    if count:
                        latencies.extend(itertools.repeat(now_ns() - published, count))
                        written_sigs.append(sig)
                sendloop.end_frame()
            else:
                self._write_plan(plan.payloads, failed, written_sigs, published)
        finally:  # whatever raised mid-loop, no failed terminal stays registered
            self.publishing_ns = 0
            self._teardown_failed(failed)
        self.written_iids = written_iids(plan, written_sigs, index)
        terminals.stats.frame_writes += len(latencies)
        self.flush_behind()
        return published

    def _write_plan(
        self,
        payloads: list[tuple[bytes, AbstractSet[int], int]],
        failed: Failed,
        written_sigs: list[int],
        published: int,
    ) -> None:
        """The transport path of ``publish_frame``: the planned payloads to their connections,
        the signatures that reached a terminal into ``written_sigs``."""
        terminals = self.terminals
        connections = terminals.connections
        behind = terminals.behind
        high_water = self.cfg.write_high_water
        now_ns = self.clock.now_ns
        latencies = self.write_latencies_ns
        record = latencies.append
        written = Delivery.WRITTEN
        # The fast path is the whole point of the tier (measured: ~6 µs per pre-framed write):
        # a connection that is open, not behind and has room gets the shared bytes straight away;
        # anything else takes deliver's ordered path (ring, gap, closing).
        for wire, conn_ids, sig in payloads:
            size = len(wire)
            before = len(latencies)
            for cid in conn_ids:
                conn = connections.get(cid)
                if conn is None:
                    continue
                transport = conn.transport
                if (
                    cid in behind
                    or conn.closing
                    or conn.protocol.state is not OPEN
                    or transport.get_write_buffer_size() > high_water
                ):
                    if self._deliver(conn, wire, failed) is written:
                        record(now_ns() - published)
                    continue
                try:
                    transport.write(wire)
                except Exception:  # the uvloop write-after-eof trap: this connection only
                    conn.closing = True  # nothing more for it in this loop
                    failed.append((cid, Disconnect.WRITE_ERROR))
                    continue
                conn.count(1, size)
                record(now_ns() - published)
            if len(latencies) > before:
                written_sigs.append(sig)

    def flush_behind(self) -> None:
        """Give terminals with queued frames (or a gap) their chance to catch up.

        Each queued frame handed to the kernel here adds its ``write`` value (now minus its own
        publish) to ``write_latencies_ns``, after the frame's ``direct_writes``: a slow terminal
        shows in the write histogram with the latencies it really had. A frame its ring dropped
        was never written: a gap (counted as drops), not a value."""
        terminals = self.terminals
        behind = terminals.behind
        latencies = self.write_latencies_ns
        self.direct_writes = len(latencies)
        if not behind:
            return
        now_ns = self.clock.now_ns
        record = latencies.append

        def written(published_ns: int) -> None:  # one frame out of a ring, now
            record(now_ns() - published_ns)

        now = now_ns()
        kick_after = int(self.cfg.slow_consumer_kick_s * 1e9)
        for cid in tuple(behind):
            conn = terminals.connections.get(cid)
            if conn is None:
                behind.discard(cid)
                continue
            try:
                if conn.flush(functools.partial(self._gap_snapshot, cid), written):
                    terminals.stats.gap_snapshots += 1
            except WriteFailed:
                terminals.teardown(cid, Disconnect.WRITE_ERROR)
                continue
            if not conn.behind:
                behind.discard(cid)
            # A terminal that has not drained its socket for this long is not slow, it is gone
            # (or wedged): its ring is bounded anyway, but the kernel buffer and the entry are not
            # worth keeping. It reconnects and hydrates like any other.
            if not conn.outbox.gap:
                conn.gap_since_ns = 0
            elif not conn.gap_since_ns:
                conn.gap_since_ns = now
            elif kick_after and now - conn.gap_since_ns > kick_after:
                terminals.fail(conn, Disconnect.SLOW_CONSUMER.close())
                continue
            # Bytes, not only frames: the transport's buffer (answers, a large snapshot) plus
            # the ring. Only connections already behind get here, never the fast path.
            queued = conn.transport.get_write_buffer_size() + conn.outbox.queued_bytes
            if self.control_limits.over_queued(queued):
                terminals.fail(conn, Disconnect.QUEUED_BYTES.close())

    def _gap_snapshot(self, conn_id: int) -> bytes:
        return gap_snapshot(self.snapshots, self.terminals.index, self.last_frame_no, conn_id)

    # -- the order ticket ----------------------------------------------------------------------
    def publish_priority(self, applied: Sequence[Tick]) -> None:
        """The order-ticket path: an admitted tick goes at once to the terminals that marked it,
        encoded and framed once for all of them.

        Each write handed to the kernel now gives one ``priority`` value, written time minus
        ``tick.admitted_ns``; an update queued in a slow terminal's ring gives none (as for
        ``write``: the ring holds bytes, not admitted times)."""
        index = self.terminals.index
        has_priority = index.has_priority
        failed: Failed = []
        try:
            for tick in applied:
                if not has_priority(tick.iid):  # the common case: no order ticket holds it
                    continue
                try:
                    wire = codec.ws_binary_frame(
                        codec.encode_priority(codec.encode_full_record(tick))
                    )
                except ValueError as exc:  # this tick only; the conflated stream still carries it
                    if self.failures is not None:
                        self.failures.record("priority", exc, iid=tick.iid)
                    continue
                self.terminals.stats.priority_sent += self._priority_to(
                    tick.iid, wire, tick.admitted_ns, failed
                )
        finally:  # whatever raised mid-loop, no failed terminal stays registered
            self._teardown_failed(failed)

    def _priority_to(self, iid: int, wire: bytes, admitted_ns: int, failed: Failed) -> int:
        """``wire`` to the terminals whose order ticket holds ``iid`` (none already in
        ``failed``): one ``priority`` value per write handed to the kernel now. Returns the
        terminals it was written or queued for: a terminal whose socket refused it is not."""
        terminals = self.terminals
        connections = terminals.connections
        targets = terminals.index.priority_connections(iid)  # a copy
        if failed:  # rare: failed on an earlier update of this batch, torn down after it
            targets.difference_update(cid for cid, _ in failed)
        refused = len(failed)
        if self.sendloop is not None:
            stamp = functools.partial(self._priority_written, admitted_ns)
            self.sendloop.send(wire, targets, failed, stamp)
            addressed = sum(1 for c in targets if c in connections)
        else:
            addressed = 0
            for cid in targets:
                conn = connections.get(cid)
                if conn is None:
                    continue
                addressed += 1
                if self._deliver(conn, wire, failed) is Delivery.WRITTEN:
                    self._priority_written(admitted_ns, 1)
        return addressed - (len(failed) - refused)

    def _priority_written(self, admitted_ns: int, count: int) -> None:
        """``count`` priority writes handed to the kernel now: one value each."""
        value = self.clock.now_ns() - admitted_ns
        latencies = self._priority_ns
        for _ in range(count):
            n = self._priority_n
            latencies[n] = value
            self._priority_n = n + 1
            if n + 1 == PRIORITY_BUFFER:  # bounded: a burst is handed on early
                self.flush_priority()

    def flush_priority(self) -> int:
        """Hand the priority latencies gathered since the last call to the ``priority`` sink
        (the node calls it once per frame and before each rotation); returns how many. The array
        the sink gets is a view of a reused buffer, valid during the call only."""
        n = self._priority_n
        if not n:
            return 0
        self._priority_n = 0
        self.terminals.stats.priority_writes += n
        if self._priority_sink is not None:
            self._priority_sink(self._priority_ns[:n])
        return n

    def publish_heartbeat(self, wall_ms: int) -> None:
        self._to_all(codec.ws_binary_frame(codec.encode_heartbeat(self.last_frame_no, wall_ms)))

    def stale_wire(self, state: StaleState) -> bytes:
        """STALE of ``state``, WebSocket-framed (once for every terminal)."""
        venues = state.venues[:256]  # the wire's bound; 6 venues in the design's workload
        return codec.ws_binary_frame(
            codec.encode_stale(self.last_frame_no, state.grid_since_ms, venues)
        )

    def publish_stale(self, state: StaleState) -> None:
        """Tell every terminal the new staleness state (it replaces the one before)."""
        self.terminals.stats.stale_notices += 1
        self._to_all(self.stale_wire(state))

    def _to_all(self, wire: bytes) -> None:
        """``wire`` to every terminal, in order with its data (a slow one queues it)."""
        failed: Failed = []
        try:
            if self.sendloop is not None:
                self.sendloop.send(wire, tuple(self.terminals.connections), failed, None)
            else:
                for conn in tuple(self.terminals.connections.values()):
                    self._deliver(conn, wire, failed)
        finally:  # whatever raised mid-loop, no failed terminal stays registered
            self._teardown_failed(failed)

    # -- a writer process fed by the frame ring (host/ring_feed.py) ----------------------------
    def publish_priority_chunks(self, records: Mapping[int, bytes], admitted_ns: int) -> int:
        """The order-ticket path from records the sequencer encoded once (iid -> full record,
        a ring PRIORITY entry): each to the terminals of this process that marked it, framed
        once for all of them. ``admitted_ns`` is the batch's admit time: one ``priority`` value
        per write handed to the kernel now, as ``publish_priority``. Returns the writes made."""
        has_priority = self.terminals.index.has_priority
        failed: Failed = []
        sent = 0
        try:
            for iid, record in records.items():
                if has_priority(iid):
                    wire = codec.ws_binary_frame(codec.encode_priority(record))
                    sent += self._priority_to(iid, wire, admitted_ns, failed)
        finally:  # whatever raised mid-loop, no failed terminal stays registered
            self._teardown_failed(failed)
            self.terminals.stats.priority_sent += sent
        return sent

    def gap_all(self) -> int:
        """Put every terminal into a gap: what it holds is dropped and the next thing it gets is
        a snapshot of its subscriptions from ``snapshots`` (a writer process that was lapped by
        the frame ring, or whose sequencer restarted, cannot know which deltas it missed).
        Sent at once where the socket has room (``flush_behind``); returns how many terminals."""
        terminals = self.terminals
        holds = terminals.index.subscriptions
        n = 0
        for cid, conn in terminals.connections.items():
            if conn.closing or not holds(cid):  # nothing held: nothing to correct
                continue
            conn.outbox.clear()  # deltas against versions the snapshot supersedes
            conn.outbox.gap = True
            terminals.behind.add(cid)
            n += 1
        self.flush_behind()
        return n

    # -- one connection ------------------------------------------------------------------------
    def answer(self, conn: Connection, wire: bytes) -> None:
        """Hello, acks and errors: in order among themselves, never dropped with the data."""
        if conn.closing or conn.ws.protocol.state is not OPEN:
            return
        try:
            if not conn.deliver_control(wire):
                self.terminals.behind.add(conn.conn_id)
        except WriteFailed:
            self.terminals.teardown(conn.conn_id, Disconnect.SLOW_CONSUMER)

    def deliver(self, conn: Connection, wire: bytes) -> Delivery:
        """Data bytes (a snapshot) to one connection, outside a fan-out loop."""
        failed: Failed = []
        try:
            return self._deliver(conn, wire, failed)
        finally:
            self._teardown_failed(failed)

    def _deliver(self, conn: Connection, wire: bytes, failed: Failed) -> Delivery:
        if conn.closing or conn.ws.protocol.state is not OPEN:
            # A close is under way (ours or the terminal's): its own path tears the connection
            # down and names the reason; a write now would only mislabel it as a write error.
            return Delivery.REFUSED
        try:
            written = conn.deliver(wire, self.publishing_ns)
        except WriteFailed:
            conn.closing = True  # nothing more for it until the loop's teardowns run
            failed.append((conn.conn_id, Disconnect.WRITE_ERROR))
            return Delivery.REFUSED
        if not written:
            self.terminals.behind.add(conn.conn_id)
            return Delivery.QUEUED
        return Delivery.WRITTEN

    def _written_now(self, conn: Connection, wire: bytes, failed: Failed) -> bool:
        return self._deliver(conn, wire, failed) is Delivery.WRITTEN

    def _teardown_failed(self, failed: Failed) -> None:
        """Tear down the terminals a loop found failed: every one, even if one teardown raises."""
        teardown = self.terminals.teardown
        for i, (cid, reason) in enumerate(failed):
            try:
                teardown(cid, reason)
            except BaseException:
                self._teardown_failed(failed[i + 1 :])
                raise
