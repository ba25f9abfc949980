"""The native writer's loop: one payload to a group of terminals in one ``send_many`` call.

Once payloads are shared, what a delivered frame costs is the per-terminal Python work around
``transport.write`` (loop, attribute reads, transport call, bookkeeping): 10.0-10.9 µs per frame
for the bare Python floor against 8.0-8.8 µs for a C send loop in the same bench_fanout runs
(issue 13). So the writer (server/writer.py) hands each payload group here: terminals that are
open, not behind and whose transport holds nothing are gathered and written by one call of the
C loop (server/sendmany.py: one non-blocking send per socket, GIL released); the others take
the transport path exactly as the writer's own loop does. A socket that takes less than the
whole payload hands the exact remainder to its transport (then the ring), and stays on that path
until its transport has drained; a send the kernel refuses tears the terminal down with a named
reason (``send_error_reason``), after the loop.

A frame's payloads take ``send_frame``: per signature the connection objects are kept in a
tuple (rebuilt only when the index's connection set for it is another one: the planner hands
the index's own frozenset, replaced on every subscribe, unsubscribe and teardown; a max_hz rate
group's set, the index's ``RateGroup`` kept until the group changes, is kept apart under its
signature and members, so the boundaries rebuild neither it nor the 25 Hz tuple of the same
signature), with their entries' handles in the writer's ``SendTable`` as an ``array('q')``;
one ``SendTable.send`` call per payload reads each entry's flags (kept by the connections on
every change: server/connection.py), sends to the clear ones and counts there, all in C
(server/sendmany.py), so a payload that every terminal took costs O(1) Python, not
O(terminals), and the pass touches no Python object per terminal; only the exceptions (not
eligible, partial, EAGAIN, an errno) come back here.
"""

from __future__ import annotations

import errno
import socket
from array import array
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Final, TypeAlias

from websockets.protocol import State

from monotape.platform.core.disconnect import Disconnect
from monotape.platform.server.connection import Connection
from monotape.platform.server.sendmany import (
    NOT_ELIGIBLE,
    SendMany,
    SendTable,
    Shortfall,
    new_table,
)
from monotape.platform.server.terminals import Terminals

__all__ = ["Deliver", "Failed", "SendLoop", "send_error_reason"]

OPEN = State.OPEN
# A send that would block queued nothing: the whole payload goes to the transport.
_WOULD_BLOCK: Final = frozenset({errno.EAGAIN, errno.EWOULDBLOCK})
# What a send says when the terminal is gone. On the transport path these end in the transport's
# own connection_lost, so the terminal leaves as "connection_lost"; the native path names the
# same reason. Any other errno (EBADF, ENOBUFS...) is the socket refusing bytes: "write_error".
_PEER_GONE: Final = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ENOTCONN,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
    }
)
# EPIPE says either. A terminal that closed (FIN) and then reset us while we still had frames for
# it (Linux: a reset in CLOSE_WAIT is EPIPE, not ECONNRESET; measured: 2-5 of 40 terminals
# closing at once) is gone: "connection_lost", as the transport path says. Our own side shut
# (the write-after-eof trap) is "write_error", as the transport path says: the TCP state tells
# them apart, these being the states after we sent our FIN (include/net/tcp_states.h).
_WE_SENT_FIN: Final = frozenset({4, 5, 6, 9, 11})  # FIN_WAIT1/2, TIME_WAIT, LAST_ACK, CLOSING
_TCP_INFO: Final = getattr(socket, "TCP_INFO", 0)
# A signature's connection tuple unused for this many frames (1 s at 25 Hz) is dropped: it
# holds its connections' objects alive.
_KEEP_FRAMES: Final = 25
# What a connection tuple is kept under: the signature for the index's own frozenset (25 Hz),
# (signature, its members) for a rate group's set.
_GroupKey: TypeAlias = "int | tuple[int, frozenset[int]]"
# (connection id, why): the sockets that failed in a loop, torn down after it
Failed: TypeAlias = list[tuple[int, Disconnect]]
# The writer's ordered path for one terminal (ring, gap, closing): True when written now.
Deliver: TypeAlias = Callable[[Connection, bytes, Failed], bool]


def send_error_reason(err: int, fd: int = -1) -> Disconnect:
    """The teardown reason for a send to ``fd`` that failed with ``err``."""
    if err == errno.EPIPE:
        return Disconnect.WRITE_ERROR if _we_shut(fd) else Disconnect.CONNECTION_LOST
    return Disconnect.CONNECTION_LOST if err in _PEER_GONE else Disconnect.WRITE_ERROR


def _we_shut(fd: int) -> bool:
    """Whether the socket's TCP state says we sent our FIN (the fd stays open: detached)."""
    if fd < 0 or not _TCP_INFO:
        return False
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 8)[0] in _WE_SENT_FIN
    except OSError:
        return False
    finally:
        sock.detach()


class SendLoop:
    """``send`` one payload to a group of terminals; counts what the native path did."""

    def __init__(
        self,
        send_many: SendMany,
        terminals: Terminals,
        high_water: int,
        deliver: Deliver,
        table: SendTable | None = None,
    ) -> None:
        self.send_many = send_many  # the extension's; tests may pass the Python twin
        # Every terminal's entry (fd, flags, counts): the extension's table for its send_many,
        # else the twin (tests may hand one over modelled sockets). Terminals owns it: its
        # entries follow admit and teardown.
        terminals.use_table(new_table(send_many) if table is None else table)
        # group key -> (the connection-id set it was built from, its connections, their
        # entries' handles, last frame)
        self._groups: dict[
            _GroupKey, tuple[AbstractSet[int], tuple[Connection, ...], array[int], int]
        ] = {}
        self._frames = 0
        self.terminals = terminals
        self.high_water = high_water
        self.deliver = deliver
        self.writes = 0  # terminals a send_many call handed a whole payload or a part of it
        self.handoffs = 0  # ...of which a part or nothing: the rest went to the transport
        self.partials = 0  # ...of which a part: the kernel took the payload's first bytes
        self.failures = 0  # sends the kernel refused: torn down

    @property
    def table(self) -> SendTable:
        """The terminals' table (``Terminals.table``), which this loop sends through."""
        table = self.terminals.table
        assert table is not None, "the send loop's table was taken from the terminals"
        return table

    def send(
        self,
        wire: bytes,
        conn_ids: Iterable[int],
        failed: Failed,
        stamp: Callable[[int], None] | None,
    ) -> int:
        """``wire`` to every connection of ``conn_ids``; returns how many were written now
        (handed to the kernel or the transport), calling ``stamp(n)`` as they are.

        Why sending to the fd behind the transport's back is safe, only in that state:
        - ``get_write_buffer_size() == 0``: uvloop counts its own buffer plus libuv's write
          queue (``write_queue_size + _buffer_size``), asyncio its buffer: every byte the
          transport took is already in the kernel, so ours land after them, and nothing of the
          transport's can follow ours out of order. websockets writes nothing of its own in
          between either: it flushes its protocol's output inside the callbacks that make it.
        - nothing runs between that check and the send: the gathering and the call are one
          synchronous stretch of the event loop, so no callback can write to the transport or
          close it, and the teardowns of this loop run after it (``failed``).
        - ``is_closing()`` False: every way a transport closes (close, abort, a fatal read or
          write error) marks it closing first and releases the fd later (connection_lost is
          scheduled), so the fd is still this terminal's socket, never a number the kernel has
          handed to a newer connection.
        - a measured trap (uvloop write after write_eof: ``is_closing()`` still False):
          websockets shuts the write side only once the protocol has left OPEN, which the state
          check excludes; were it reached, the send fails with EPIPE, an errno: the terminal is
          torn down, no crash, no SIGPIPE (MSG_NOSIGNAL).
        - a part sent (or nothing, EAGAIN): the exact rest goes to ``transport.write`` while its
          buffer is still empty, right behind the bytes the kernel took; from then on the
          buffer holds bytes and the terminal stays on the transport path (then the ring) until
          it has drained.
        - TLS: never (``Connection.fd`` is -1: the socket carries records, not our bytes)."""
        connections = self.terminals.connections
        size = len(wire)
        fds: list[int] = []
        batch: list[Connection] = []
        count = 0
        for cid in conn_ids:
            conn = connections.get(cid)
            if conn is None:
                continue
            written = self._ordered(cid, conn, wire, failed, may_send=True)
            if written is None:  # behind its transport's back: gathered for send_many
                fds.append(conn.fd)
                batch.append(conn)
                conn.count(1, size)  # counted now; a refused send takes it back (_hand_off)
            elif written:
                count += 1
                if stamp is not None:
                    stamp(1)
        if not fds:
            return count
        try:
            shortfalls = self.send_many(wire, fds)
        except BaseException:  # raised before any send (bad arguments): take the counts back
            for conn in batch:
                conn.count(-1, -size)
            raise
        sent = len(fds)
        if shortfalls is not None:
            sent -= self._hand_off(wire, shortfalls, batch, failed, counted_refused=True)
        self.writes += len(fds)
        if stamp is not None and sent:
            stamp(sent)
        return count + sent

    def send_frame(self, wire: bytes, conn_ids: AbstractSet[int], sig: int, failed: Failed) -> int:
        """``wire`` to the connections of ``conn_ids`` (signature ``sig``'s, or a rate
        group's): one ``SendTable.send`` call; returns how many were written now (kernel or
        transport). The terminals that are not eligible take ``send``'s per-terminal path.

        Why an entry whose flags are clear may be written behind its transport's back (the
        conditions of ``send``, kept as flags instead of asked per frame):
        - QUEUED clear means the transport holds nothing: with the write-buffer limits at 0
          and 0 (``TerminalSocket.track_queued``) asyncio and uvloop call ``pause_writing`` in
          the write that keeps a first byte and ``resume_writing`` once none is left, both
          synchronously; tests/server/test_native_writer.py checks the flag against
          ``get_write_buffer_size()`` frame by frame on both loops.
        - NOT_OPEN and CLOSING follow the protocol's state (its setter, which every change
          of websockets' goes through) and ``Connection.closing`` (a property): websockets
          leaves OPEN before it writes a close frame or shuts the write side, and the server's
          own closes set ``closing`` before their teardown runs.
        - BEHIND follows ``Terminals.behind`` (a ``BehindSet``, which tells the connection).
        - the entry's fd is the table's own duplicate: while the entry lives (until the
          protocol's ``connection_lost``, or the teardown) the kernel cannot give that number
          to another connection, even when the transport closed its own fd after a fatal error
          it has not yet told the protocol about; a send to a socket that died is an errno,
          and the terminal is torn down by name.
        - a handle removed since the group was built is another generation: not eligible,
          and ``_one`` skips the connection, gone from the registry."""
        groups = self._groups
        key: _GroupKey
        if type(conn_ids) is frozenset:  # the index's own set: replaced on every change
            key = sig
            entry = groups.get(key)
            stale = entry is None or (entry[0] is not conn_ids and entry[0] != conn_ids)
        else:  # a rate group's (a RateGroup, the same until it changes, hashed once; or a
            # one-off set): its members are the key, so it neither evicts the 25 Hz tuple nor
            # is rebuilt at each boundary
            key = (sig, conn_ids if isinstance(conn_ids, frozenset) else frozenset(conn_ids))
            entry = groups.get(key)
            stale = entry is None
        if entry is None or stale:
            connections = self.terminals.connections
            conns = tuple(c for c in map(connections.get, conn_ids) if c is not None)
            handles = array("q", [c.handle for c in conns])
        else:
            conns, handles = entry[1], entry[2]
        groups[key] = (conn_ids, conns, handles, self._frames)
        shortfalls = self.table.send(wire, handles)
        if shortfalls is None:
            self.writes += len(conns)
            return len(conns)
        count = len(conns) - len(shortfalls)
        short = [item for item in shortfalls if item[2] != NOT_ELIGIBLE]
        self.writes += len(short) + count
        # The rests first: a partial send's stream holds half a frame until its rest is with
        # the transport, whatever a per-terminal path below raises.
        if short:  # the table counted the partial and blocked ones, not the refused ones
            count += len(short) - self._hand_off(wire, short, conns, failed, counted_refused=False)
        for index, _, err in shortfalls:
            if err == NOT_ELIGIBLE:
                count += self._one(conns[index], wire, failed)
        return count

    def audit(self, limit: int = 20) -> tuple[int, list[str]]:
        """(how many, up to ``limit`` named) entries of the table that would let the C loop
        write where the Python path would not: a clear entry of a terminal that is closing,
        not open, behind or whose transport holds bytes (``conn:<id>``); and entries no
        connection holds, each a leaked socket duplicate (``leaked:<n>``). The invariant
        ``native_entries`` checks it is (0, []) in production."""
        table = self.table
        behind = self.terminals.behind
        count = attached = 0
        offending: list[str] = []
        for cid, conn in self.terminals.connections.items():
            if conn.table is not table:
                continue
            attached += 1
            if not table.flags(conn.handle) and conn.expected_flags(cid in behind):
                count += 1
                if len(offending) < limit:
                    offending.append(f"conn:{cid}")
        leaked = len(table) - attached
        if leaked:
            count += leaked
            if len(offending) < limit:
                offending.append(f"leaked:{leaked}")
        return count, offending

    def end_frame(self) -> None:
        """Once per frame: forget the signatures not seen for ``_KEEP_FRAMES`` frames."""
        self._frames = frame = self._frames + 1
        if frame % _KEEP_FRAMES == 0:
            groups = self._groups
            for sig in [s for s, (*_, seen) in groups.items() if frame - seen > _KEEP_FRAMES]:
                del groups[sig]

    def _one(self, conn: Connection, wire: bytes, failed: Failed) -> int:
        """A terminal the table found not eligible: ``send``'s per-terminal path (1 if
        written now). A terminal torn down since its tuple was built is skipped."""
        cid = conn.conn_id
        if self.terminals.connections.get(cid) is not conn:
            return 0
        return int(bool(self._ordered(cid, conn, wire, failed, may_send=False)))

    def _ordered(
        self, cid: int, conn: Connection, wire: bytes, failed: Failed, *, may_send: bool
    ) -> bool | None:
        """One terminal's path: the writer's ordered one when it is behind, closing, not open
        or over the high-water mark; else the transport when its buffer holds bytes, the fd is
        not ours to use or ``may_send`` is False; else None: it may be sent behind the
        transport's back. True when written now (handed to the kernel or the transport)."""
        if cid in self.terminals.behind or conn.closing or conn.protocol.state is not OPEN:
            return self.deliver(conn, wire, failed)
        transport = conn.transport
        queued = transport.get_write_buffer_size()
        if queued > self.high_water:
            return self.deliver(conn, wire, failed)
        if may_send and not queued and conn.fd >= 0 and not transport.is_closing():
            return None
        try:  # the transport path: its buffer holds bytes, or the fd is not ours to use
            transport.write(wire)
        except Exception:  # the uvloop write-after-eof trap: this connection only
            conn.closing = True
            failed.append((cid, Disconnect.WRITE_ERROR))
            return False
        conn.count(1, len(wire))
        return True

    def _hand_off(
        self,
        wire: bytes,
        shortfalls: list[Shortfall],
        conns: Sequence[Connection],
        failed: Failed,
        *,
        counted_refused: bool,
    ) -> int:
        """The terminals a send left short: the exact rest of the payload to the transport
        (whose buffer was empty: it follows the kernel's part directly), or, for a send the
        kernel refused, a teardown after the loop. A part or nothing handed on was counted by
        the send; a refused one only by ``send`` (``counted_refused``), not by the table:
        every count of a terminal that got nothing is taken back. Returns how many got nothing."""
        lost = 0
        size = len(wire)
        for index, sent, err in shortfalls:
            conn = conns[index]
            if not err or err in _WOULD_BLOCK:
                self.handoffs += 1
                self.partials += sent > 0
                try:
                    conn.transport.write(wire[sent:] if sent else wire)
                    continue
                except Exception:  # the uvloop write-after-eof trap: this connection only
                    reason = Disconnect.WRITE_ERROR
                counted = True
            else:
                self.failures += 1
                reason = send_error_reason(err, conn.fd)
                counted = counted_refused
            conn.closing = True  # nothing more for it until the loop's teardowns run
            if counted:
                conn.count(-1, -size)
            failed.append((conn.conn_id, reason))
            lost += 1
        return lost
