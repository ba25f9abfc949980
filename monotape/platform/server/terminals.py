"""The connection registry and the one way out: who is connected, and ``teardown``.

Owns every per-connection piece of state the server keeps outside the connection itself (the
subscription index, the set of connections behind, the glass cohort, unanswered keepalive pings)
and the totals of connections already gone. ``teardown`` is the single, idempotent way out,
whichever path a connection leaves by (design: Connections): it cleans every index before it
drops the connection entry and counts the ``Disconnect`` under its label. ``fail`` and ``close``
are the two ways the server ends a connection itself: at once (a terminal not holding up its end
of a close handshake) or with a close handshake (drain, shutdown, an expired token, a session
rule).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from typing import Final, NoReturn

from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from monotape.platform.core.disconnect import Close, Disconnect
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.glass import GlassLedger
from monotape.platform.core.planner import Pacer
from monotape.platform.server.connection import Connection
from monotape.platform.server.control import TerminalProtocol
from monotape.platform.server.sendmany import SendTable
from monotape.platform.wire import codec

__all__ = ["CLOSE_HANDSHAKE_S", "FAIL_GRACE_S", "BehindSet", "FanoutStats", "Terminals"]

# A failed connection's queued bytes (bounded by the budgets) get this long to reach a terminal
# that still reads; then the socket is aborted whatever it holds.
FAIL_GRACE_S: Final = 2.0
CLOSE_HANDSHAKE_S: Final = 2.0  # a close handshake the terminal does not finish: abort


def _abort(transport: asyncio.Transport) -> None:
    with contextlib.suppress(Exception):  # already gone: nothing to do
        transport.abort()


class FanoutStats:
    """Plain-int counters on the hot path; exported at scrape time (measured: Counter.inc is
    ~0.5 µs)."""

    def __init__(self) -> None:
        self.frames = 0  # frames built
        self.payloads_last = 0  # distinct payloads in the last frame
        self.priority_sent = 0
        self.gap_snapshots = 0
        self.request_errors: Counter[str] = Counter()  # by ErrorCode name
        self.disconnects: Counter[str] = Counter()  # by Disconnect value (the exported label)
        self.connections_total = 0
        self.frame_writes = 0  # frames handed to the kernel straight from publish_frame
        self.priority_writes = 0  # priority writes to the kernel, counted by flush_priority
        # terminals left on the transport path: their socket could not be duplicated for the
        # native writer's table (EMFILE)
        self.native_unattached = 0
        self.stale_notices = 0  # STALE messages published (each to every terminal)


class BehindSet(set[int]):
    """The ids of the connections behind, telling each connection when it enters and leaves
    (``Connection.set_behind``: the native writer's entry keeps it as a flag). Only ``add``,
    ``discard``, ``remove`` and ``clear`` change it; the in-place operators are refused."""

    __slots__ = ("_mark",)

    def __init__(self, mark: Callable[[int, bool], None]) -> None:
        super().__init__()
        self._mark = mark

    def add(self, conn_id: int) -> None:
        if conn_id not in self:
            super().add(conn_id)
            self._mark(conn_id, True)

    def discard(self, conn_id: object) -> None:
        if isinstance(conn_id, int) and conn_id in self:
            super().discard(conn_id)
            self._mark(conn_id, False)

    def remove(self, conn_id: int) -> None:
        if conn_id not in self:
            raise KeyError(conn_id)
        self.discard(conn_id)

    def clear(self) -> None:
        for conn_id in tuple(self):
            self.discard(conn_id)

    def _refused(self, *_: object) -> NoReturn:
        raise TypeError("BehindSet changes only through add, discard, remove and clear")

    __ior__ = __iand__ = __isub__ = __ixor__ = _refused
    update = intersection_update = difference_update = symmetric_difference_update = _refused
    pop = _refused


class Terminals:
    """Every connected terminal, by connection id, and the indexes that point at them."""

    def __init__(self) -> None:
        self.connections: dict[int, Connection] = {}
        self.index = SubscriptionIndex()
        self.stats = FanoutStats()
        self.behind = BehindSet(self._mark_behind)  # connections with queued frames or a gap
        # The native writer's table of terminals (server/sendmany.py SendTable), when it runs:
        # every admitted connection gets its entry there, dropped at its teardown.
        self.table: SendTable | None = None
        self.cohort: set[int] = set()  # connections sampled for glass pings
        self.pings: dict[int, tuple[int, asyncio.Future[float]]] = {}  # keepalive, unanswered
        # the rate groups' memory of what changed since their boundary (core/planner.py); the
        # server sets it once it has a snapshot cache
        self.pacer: Pacer | None = None
        self.glass = GlassLedger()  # what terminals' own guards reported dropping
        self.gone_frames = 0  # written to connections that have since left
        self.gone_bytes = 0
        self.gone_drops = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def admit(self, conn: Connection) -> None:
        self.connections[conn.conn_id] = conn
        self.index.add_connection(conn.conn_id)
        self.stats.connections_total += 1
        if self.table is not None:
            self._attach(conn, self.table)

    def use_table(self, table: SendTable | None) -> None:
        """Keep every connection's entry in ``table`` from now on (None: in none)."""
        for conn in self.connections.values():
            conn.detach()
        self.table = table
        if table is not None:
            for conn in self.connections.values():
                self._attach(conn, table)

    def _attach(self, conn: Connection, table: SendTable) -> None:
        """Its entry; a socket that cannot be duplicated (out of descriptors, a storm near the
        limit: the entry costs one more) leaves the terminal on the transport path, counted."""
        try:
            conn.attach(table, conn.conn_id in self.behind)
        except OSError:
            self.stats.native_unattached += 1

    def _mark_behind(self, conn_id: int, behind: bool) -> None:
        conn = self.connections.get(conn_id)
        if conn is not None:
            conn.set_behind(behind)

    def teardown(self, conn_id: int, reason: Disconnect) -> bool:
        """Idempotent: cleans every index before it drops the connection entry."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return False
        conn.closing = True
        if conn.expiry is not None:
            conn.expiry.cancel()
        self.index.remove_connection(conn_id)
        conn.outbox.clear()
        self.behind.discard(conn_id)
        self.cohort.discard(conn_id)
        self.pings.pop(conn_id, None)
        conn.detach()  # its counts stay on the connection; its socket duplicate closes
        self.gone_frames += conn.frames_sent
        self.gone_bytes += conn.bytes_sent
        self.gone_drops += conn.outbox.drops
        del self.connections[conn_id]
        self.stats.disconnects[reason.value] += 1
        if not conn.transport.is_closing():
            conn.transport.abort()
        return True

    def fail(self, conn: Connection, close: Close) -> None:
        """Fail the connection now (RFC 6455 §7.1.7), without waiting for the terminal: the
        wire's CLOSE message and a close frame with the text and the hint, if the connection can
        still take them; no more reading (a flood stops costing anything at once); the bytes
        queued get ``FAIL_GRACE_S`` to drain, then the socket is aborted. The teardown (counted
        under the reason) runs at once. For budget overruns, keepalive timeouts and the
        slow-consumer kick: terminals that are not holding up their end of a close handshake."""
        reason = conn.close_reason = conn.close_reason or close.reason
        ws = conn.ws
        protocol = ws.protocol
        if protocol.state is State.OPEN and isinstance(protocol, TerminalProtocol):
            protocol.fail_with_hint(int(close.code), close.text, close.reconnect_after_ms)
            with contextlib.suppress(Exception):  # the uvloop write-after-eof trap, and kin
                ws.send_data()
        transport = conn.transport
        if not transport.is_closing():
            transport.close()  # stops reading now; flushes what is queued (bounded)
            asyncio.get_running_loop().call_later(FAIL_GRACE_S, _abort, transport)
        self.teardown(conn.conn_id, reason)

    async def close(self, conn: Connection, close: Close) -> None:
        """A close handshake: the wire's CLOSE message, then the close frame (the hint at the end
        of its reason); a terminal that does not answer in ``CLOSE_HANDSHAKE_S`` is aborted."""
        if conn.writable:
            # Best effort: the WebSocket close frame below is what a terminal must get.
            with contextlib.suppress(Exception):
                conn.transport.write(
                    codec.ws_binary_frame(
                        codec.encode_close(int(close.code), close.reconnect_after_ms, close.text)
                    )
                )
        conn.closing = True
        try:
            await asyncio.wait_for(
                conn.ws.close(
                    int(close.code),
                    f"{close.text}; reconnect_after_ms={close.reconnect_after_ms}",
                ),
                CLOSE_HANDSHAKE_S,
            )
        except (TimeoutError, ConnectionClosed, OSError):
            conn.transport.abort()

    def close_later(self, conn: Connection, close: Close) -> None:
        """Start a close handshake without waiting for it (``stop`` waits for the rest)."""
        conn.close_reason = close.reason
        task = asyncio.get_running_loop().create_task(self.close(conn, close))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait for the close handshakes started with ``close_later``."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sent_totals(self) -> tuple[int, int]:
        """(messages, bytes) written so far, live connections plus those already gone. Safe
        off the loop's thread (a host writer's /metrics): it walks a copy of the registry, made
        in one C step (role/collectors.py says why)."""
        counts = [c.sent() for c in list(self.connections.values())]  # one table read each
        frames = self.gone_frames + sum(f for f, _ in counts)
        sent = self.gone_bytes + sum(b for _, b in counts)
        return frames, sent

    def slow_consumer_drops(self) -> int:
        """Frames dropped from full outbound rings, live connections plus those gone (a copy
        of the registry, as ``sent_totals``)."""
        return self.gone_drops + sum(c.outbox.drops for c in list(self.connections.values()))
