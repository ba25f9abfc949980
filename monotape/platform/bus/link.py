"""A one-way message link between two processes of one host: a Unix SOCK_SEQPACKET socket.

The feed (venue -> each handler, ``run_dir/feed-<handler>.sock``) and the tick bus (handlers ->
sequencer, ``run_dir/bus.sock``) both use it. The receiving end binds the path and reads with
``loop.add_reader`` (never blocks its loop); the sending end connects and sends each message
with ``MSG_DONTWAIT``: a message that cannot go now is *dropped and counted* with a named reason
(``Drop``), never queued in user space. That is the behaviour of the real thing it stands for: a
venue's multicast feed does not wait for a slow handler, and the twin of a pair plus the version
rule cover a lost batch (design: Ordering).

Why SOCK_SEQPACKET and not SOCK_DGRAM: both keep message boundaries, but a datagram socket bound
to a path accepts at most ``net.unix.max_dgram_qlen`` queued messages per receiver (10 on this
machine): one 10 ms stall of the receiver's loop at 1 message/ms would drop. A connected pair is
limited by the sender's send buffer in *bytes* only (set to ``SEND_BUFFER_BYTES``: ~1 MiB, about
200 ms of one venue at the 190k ticks/s spike), and each end learns when the other is gone
(``EPIPE`` / end of stream), so the sender reconnects to a restarted receiver by itself.

A batch too large for ``MAX_MESSAGE_BYTES`` (a 190k/s spike after a stall makes batches of
thousands of ticks) is cut by ``wire.batch.split`` before it gets here; the counters
(``LinkCounters``) are plain ints, read at scrape time by ``ipc_collector.LinkCollector``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

__all__ = [
    "MAX_MESSAGE_BYTES",
    "RETRY_NS",
    "SEND_BUFFER_BYTES",
    "Drop",
    "LinkCounters",
    "LinkReceiver",
    "LinkSender",
]

MAX_MESSAGE_BYTES = 60_000  # ~1,300 ticks (~45 B each); well under the send buffer
SEND_BUFFER_BYTES = 1 << 20  # the kernel doubles it; net.core.wmem_max here is 4 MiB
RETRY_NS = 20_000_000  # a down receiver is looked for again at most every 20 ms
_READS_PER_WAKE = 256  # messages read per readiness callback: other callbacks get their turn
# Plain ints: socket's flags are an IntFlag, and every `|` or `&` on one runs enum code in
# Python (two of them per message, on every feed and bus message of every process).
_SEND_FLAGS: Final = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
_TRUNC: Final = int(socket.MSG_TRUNC)

T = TypeVar("T")


class Drop(enum.StrEnum):
    """Why a message was not sent: the ``reason`` label of the dropped counters."""

    DOWN = "receiver_down"  # no socket at the path, connection refused, or the peer went away
    FULL = "receiver_full"  # the send buffer is full: the receiver is not reading fast enough
    OVERSIZE = "oversize"  # one item alone is larger than a message may be
    CLOSED = "closed"  # sent after close()


@dataclass
class LinkCounters:
    """Plain ints, exported at scrape time (``Counter.inc`` costs ~0.5 µs, measured).

    ``items`` are what a message carries (ticks on the bus, venue updates on a feed)."""

    link: str
    sent_messages: int = 0
    sent_items: int = 0
    dropped_messages: dict[Drop, int] = field(default_factory=dict)
    dropped_items: dict[Drop, int] = field(default_factory=dict)
    received_messages: int = 0
    received_items: int = 0
    malformed_messages: int = 0  # truncated or undecodable: counted, never a crash
    connects: int = 0  # sender: successful (re)connects; receiver: peers accepted
    peers: int = 0  # sender: 1 while connected; receiver: connected senders now

    def drop(self, reason: Drop, items: int) -> None:
        self.dropped_messages[reason] = self.dropped_messages.get(reason, 0) + 1
        self.dropped_items[reason] = self.dropped_items.get(reason, 0) + items


_SUN_PATH_MAX = 107  # bytes a Unix socket address holds (sun_path[108], NUL-terminated)


@contextlib.contextmanager
def _addressable(path: str) -> Iterator[str]:
    """``path`` as a socket address. A run directory under a deep temporary directory can make
    ``<run_dir>/feed-XNAS-A.sock`` longer than an address may be; then the directory is named
    through a descriptor (``/proc/self/fd/N/<name>``, Linux), held open while the caller binds
    or connects."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        yield path
        return
    directory, name = os.path.split(path)
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


class LinkSender:
    """The sending end: connect to ``path`` when it is there, send without ever waiting.

    Not thread-safe; one per (process, link). ``now_ns`` paces reconnect attempts."""

    def __init__(
        self,
        path: str | Path,
        counters: LinkCounters,
        now_ns: Callable[[], int],
        *,
        retry_ns: int = RETRY_NS,
        send_buffer_bytes: int = SEND_BUFFER_BYTES,
    ) -> None:
        self.path = str(path)
        self.counters = counters
        self._now_ns = now_ns
        self._retry_ns = retry_ns
        self._send_buffer = send_buffer_bytes
        self._sock: socket.socket | None = None
        self._next_try = 0
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def send(self, payload: bytes, items: int) -> Drop | None:
        """Send one message; None when it went, else why it was dropped (already counted)."""
        sock = self._sock or self._connect()
        if sock is None:
            reason = Drop.CLOSED if self._closed else Drop.DOWN
            self.counters.drop(reason, items)
            return reason
        try:
            sock.send(payload, _SEND_FLAGS)
        except BlockingIOError:
            self.counters.drop(Drop.FULL, items)
            return Drop.FULL
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:  # larger than the send buffer: never fits
                self.counters.drop(Drop.OVERSIZE, items)
                return Drop.OVERSIZE
            # EPIPE, ECONNRESET: the receiver is gone; look for its successor
            self._disconnect()
            self.counters.drop(Drop.DOWN, items)
            return Drop.DOWN
        self.counters.sent_messages += 1
        self.counters.sent_items += items
        return None

    def _connect(self) -> socket.socket | None:
        if self._closed:
            return None
        now = self._now_ns()
        if now < self._next_try:
            return None
        self._next_try = now + self._retry_ns
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
            sock.setblocking(False)
            with _addressable(self.path) as address:
                sock.connect(address)  # a Unix connect completes at once or fails at once
        except OSError:  # ENOENT (not bound yet), ECONNREFUSED (stale path), EAGAIN (backlog)
            sock.close()
            return None
        self._sock = sock
        self.counters.connects += 1
        self.counters.peers = 1
        return sock

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self.counters.peers = 0
        self._next_try = 0  # a restarted receiver may already be there: try on the next send

    def close(self) -> None:
        """Idempotent; later sends are dropped as ``Drop.CLOSED``."""
        self._closed = True
        self._disconnect()


class LinkReceiver:
    """The receiving end: bind ``path`` (replacing a stale one), accept every sender, call
    ``on_message(payload)`` for each message, in each sender's order, on the loop's thread.

    ``on_message`` raising is the caller's bug: it is counted as malformed and the link keeps
    reading (one bad message never stops the stream)."""

    def __init__(
        self,
        path: str | Path,
        counters: LinkCounters,
        on_message: Callable[[bytes], None],
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.path = str(path)
        self.counters = counters
        self._on_message = on_message
        # One byte more than a message may be: a longer one shows as MSG_TRUNC, not as a cut.
        self._buf = bytearray(max_message_bytes + 1)
        self._view = memoryview(self._buf)
        self._listener: socket.socket | None = None
        self._peers: dict[int, socket.socket] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind and start reading on ``loop`` (the running one by default)."""
        if self._listener is not None:
            raise RuntimeError(f"link {self.counters.link} is already open")
        self._loop = loop or asyncio.get_running_loop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a dead predecessor's path: connects to it are refused
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with _addressable(self.path) as address:
                listener.bind(address)
            listener.listen(64)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._loop.add_reader(listener.fileno(), self._accept)

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # EMFILE and the like: the sender retries
            conn.setblocking(False)
            fd = conn.fileno()
            self._peers[fd] = conn
            self.counters.connects += 1
            self.counters.peers = len(self._peers)
            self._loop.add_reader(fd, self._read, fd)

    def _read(self, fd: int) -> None:
        conn = self._peers.get(fd)
        if conn is None:
            return
        counters = self.counters
        buf = self._buf
        most = len(buf) - 1
        for _ in range(_READS_PER_WAKE):
            try:
                # MSG_TRUNC: the message's whole length even when the buffer holds less (a
                # SEQPACKET socket, Linux), so a message too long shows, never a silent cut;
                # recv_into, not recvmsg_into: no tuple and no ancillary list per message
                n = conn.recv_into(buf, 0, _TRUNC)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop_peer(fd)
                return
            if n == 0:
                self._drop_peer(fd)  # end of stream: the sender closed or died
                return
            counters.received_messages += 1
            if n > most:
                counters.malformed_messages += 1
                continue
            try:
                self._on_message(bytes(self._view[:n]))
            except Exception:
                counters.malformed_messages += 1

    def _drop_peer(self, fd: int) -> None:
        conn = self._peers.pop(fd, None)
        if conn is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(fd)
        conn.close()
        self.counters.peers = len(self._peers)

    def close(self) -> None:
        """Stop reading, close every connection, remove the path. Idempotent."""
        for fd in list(self._peers):
            self._drop_peer(fd)
        listener, self._listener = self._listener, None
        if listener is not None:
            if self._loop is not None:
                self._loop.remove_reader(listener.fileno())
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
