"""Keepalive and the glass cohort: the server's pings, one loop each for every terminal.

``keepalive_loop`` pings every terminal once per ``keepalive_interval_s`` (a slice of them each
second) and fails those whose pong is ``keepalive_timeout_s`` late. ``glass_loop`` pings the
sampled cohort (``glass_share``, 0.5% by default) and records RTT/2 into the ``glass``
histogram: labelled an upper bound everywhere, since without synchronized clocks that is all a
server can honestly say about the one-way delay to the glass.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable
from typing import Final

from websockets.exceptions import ConnectionClosed

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.histograms import StageRecorder
from monotape.platform.core.disconnect import Disconnect
from monotape.platform.server.connection import Connection
from monotape.platform.server.terminals import Terminals

__all__ = [
    "PING_SEND_TIMEOUT_S",
    "glass_loop",
    "in_glass_cohort",
    "keepalive_loop",
    "late_pong_reason",
]

PING_SEND_TIMEOUT_S: Final = 1.0  # a ping that cannot even be sent in this long is skipped
# struct tcp_info (linux/tcp.h): tcpi_notsent_bytes, the bytes the kernel holds for the peer
# that it has not even sent (the peer's window is closed: it is not reading)
_TCP_INFO_NOTSENT: Final = struct.Struct("=I")
_NOTSENT_AT: Final = 144


def _kernel_notsent(conn: Connection) -> int:
    """The bytes queued in the kernel for this terminal that it could not take yet; 0 when the
    kernel cannot say (not Linux, not a TCP socket, a test's fake)."""
    sock = conn.transport.get_extra_info("socket")
    if sock is None or not hasattr(socket, "TCP_INFO"):
        return 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (OSError, AttributeError, TypeError):
        return 0
    if len(info) < _NOTSENT_AT + 4:
        return 0
    notsent: int = _TCP_INFO_NOTSENT.unpack_from(info, _NOTSENT_AT)[0]
    return notsent


def late_pong_reason(conn: Connection, behind: bool) -> Disconnect:
    """Why a terminal whose pong is late is closed. With bytes queued for it (its ring, its
    transport, or its kernel send queue, which fills only once the terminal's receive window has
    closed) it is not reading what it is sent, the ping included: a slow consumer, named so
    (docs/observability.md, Slow consumers). With nothing queued, it reads but never answers,
    or it is gone: a keepalive timeout."""
    if behind or conn.transport.get_write_buffer_size() or _kernel_notsent(conn):
        return Disconnect.SLOW_CONSUMER
    return Disconnect.KEEPALIVE_TIMEOUT


def in_glass_cohort(conn_id: int, share: float) -> bool:
    """A deterministic ~share of connection ids (Knuth's multiplicative hash spreads them)."""
    return (conn_id * 2654435761) % 10_000 < share * 10_000


async def keepalive_loop(cfg: ServerConfig, clock: Clock, terminals: Terminals) -> None:
    """Ping every terminal once per ``keepalive_interval_s``, a slice of them each second,
    and tear down (``keepalive_timeout``) those whose pong is ``keepalive_timeout_s`` late.

    websockets' own keepalive runs a task per connection that sleeps between pings: a
    timer, a future and a coroutine frame per terminal, replaced every interval. They live
    long enough to reach gen 2 and are too young to be frozen (gc_policy), so every gen-2
    collection walked all of them (~10 objects per terminal: 6-11 ms pauses at 1,500
    terminals, measured). Here a ping's waiter lives until its pong, milliseconds."""
    slices = max(1, round(cfg.keepalive_interval_s))
    timeout_ns = int(cfg.keepalive_timeout_s * 1e9)
    waiting = terminals.pings
    connections = terminals.connections
    tick = 0
    while True:
        await asyncio.sleep(1.0)
        now = clock.now_ns()
        for cid, (sent, pong) in tuple(waiting.items()):
            if pong.done():
                del waiting[cid]
                if not pong.cancelled():
                    pong.exception()  # retrieved: a closed connection's waiter fails
            elif now - sent > timeout_ns:
                del waiting[cid]
                conn = connections.get(cid)
                if conn is not None:
                    # A terminal that is only slow to answer still learns why and when to
                    # come back; a dead one costs a bounded close frame and an abort.
                    reason = late_pong_reason(conn, cid in terminals.behind)
                    terminals.fail(conn, reason.close())
        tick += 1
        k = tick % slices
        behind = terminals.behind
        for cid, conn in tuple(connections.items()):
            if cid % slices != k or cid in waiting or not conn.writable:
                continue
            # Bytes already queued: websockets' ping() would wait for them to drain (for as
            # long as the terminal does not read), stalling every ping after it. Such a
            # terminal is the slow-consumer path's (ring, gap, kick after
            # slow_consumer_kick_s); an idle dead peer has an empty buffer and is pinged.
            if cid in behind or conn.transport.get_write_buffer_size():
                continue
            try:
                waiter: Awaitable[float] = await asyncio.wait_for(
                    conn.ws.ping(), PING_SEND_TIMEOUT_S
                )
            except (ConnectionClosed, RuntimeError, TimeoutError):
                continue
            waiting[cid] = (clock.now_ns(), asyncio.ensure_future(waiter))


async def glass_loop(cfg: ServerConfig, terminals: Terminals, glass: StageRecorder) -> None:
    """Ping the sampled cohort; each pong gives RTT/2 into the glass histogram."""
    while True:
        await asyncio.sleep(cfg.glass_interval_s)
        waiters = []
        for cid in tuple(terminals.cohort):
            conn = terminals.connections.get(cid)
            # Bytes already queued: ping() would wait for them to drain (with the native
            # writer, for an empty buffer), stalling the cohort's other pings behind it.
            if conn is None or not conn.writable or conn.transport.get_write_buffer_size():
                continue
            with contextlib.suppress(ConnectionClosed, RuntimeError, TimeoutError):
                waiters.append(await asyncio.wait_for(conn.ws.ping(), PING_SEND_TIMEOUT_S))
        for waiter in waiters:
            with contextlib.suppress(TimeoutError, ConnectionClosed):
                rtt_s = await asyncio.wait_for(waiter, cfg.glass_interval_s)
                glass.record_ns(int(rtt_s * 1e9) // 2)
