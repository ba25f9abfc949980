"""The WebSocket endpoint: hello, requests, shared-payload fan-out, snapshots, teardown.

The connection registry is the one owner of every per-connection index (subscriptions,
signatures, priority sets): ``teardown`` is the single, idempotent way out, whichever path a
connection leaves by (design: Connections).

Per frame the work is per *signature*, not per connection: a payload is built once from
per-symbol chunks that were encoded once, WebSocket-framed once, and the same bytes are written
to every connection that shares the signature.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.server import Server, ServerConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.frames import CloseCode
from websockets.protocol import State

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.histograms import StageRecorder
from monotape.log import log_event
from monotape.platform.auth import (
    TokenVerifier,
)
from monotape.platform.core.budget import ControlLimits, Overrun
from monotape.platform.core.conflation import Frame
from monotape.platform.core.drain import Drain
from monotape.platform.core.fanout import SubscriptionIndex, plan_payloads
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.model import Instrument, Tick
from monotape.platform.node.failures import StageFailures
from monotape.platform.server.connection import Connection, WriteFailed
from monotape.platform.server.control import TerminalProtocol, TerminalSocket
from monotape.platform.server.upgrade import UpgradeGate
from monotape.platform.wire import codec
from monotape.platform.wire.codec import ErrorCode
from monotape.platform.wire.requests import (
    Request,
    RequestError,
    Subscribe,
    Unsubscribe,
    decode_request,
    judge,
)

__all__ = ["PRIORITY_BUFFER", "FanoutServer", "FanoutStats", "SnapshotCache"]

OPEN = State.OPEN
_NO_IIDS = np.empty(0, dtype=np.int64)
_NO_IIDS.setflags(write=False)

# Close codes (RFC 6455 §7.4.1); docs/wire.md lists them for terminal authors.
CLOSE_GOING_AWAY = 1001
CLOSE_UNSUPPORTED = 1003
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011  # as websockets' own keepalive closes a connection whose pong is late
# A failed connection's queued bytes (bounded by the budgets) get this long to reach a terminal
# that still reads; then the socket is aborted whatever it holds.
FAIL_GRACE_S = 2.0
# Teardown reasons for closes websockets starts itself (the close frame it sent says which).
_FAILED_BY_LIBRARY: dict[int, str] = {
    CloseCode.PROTOCOL_ERROR: "protocol_error",
    CloseCode.INVALID_DATA: "protocol_error",
    CloseCode.MESSAGE_TOO_BIG: "message_too_big",
}
MAX_BAD_REQUESTS = 50  # then the connection is closed with 1008: a client this broken is a bug
MAX_RATE_VIOLATIONS = 200  # a subscribe flood that ignores RATE_LIMITED errors
ERROR_WINDOW_NS = 60 * 1_000_000_000  # both limits count errors within one minute
# Priority write latencies held between frames; a burst that fills the buffer is handed on early.
# Fixed at 4,096 int64 values (32 KiB) per process, whatever the burst.
PRIORITY_BUFFER = 4096
PING_SEND_TIMEOUT_S = 1.0  # a keepalive ping that cannot even be sent in this long is skipped


def _abort(transport: asyncio.Transport) -> None:
    with contextlib.suppress(Exception):  # already gone: nothing to do
        transport.abort()


def _sampled(conn_id: int, share: float) -> bool:
    """A deterministic ~share of connection ids (Knuth's multiplicative hash spreads them)."""
    return (conn_id * 2654435761) % 10_000 < share * 10_000


class SnapshotCache:
    """One pre-encoded full record per symbol, valid while the published tick is the same object.

    Hydrating a (re)subscription joins cached chunks; it encodes nothing per connection."""

    def __init__(self, sequencer: Sequencer) -> None:
        self._sequencer = sequencer
        self._chunks: dict[int, tuple[Tick, bytes]] = {}
        self.encodes = 0
        self.failures: StageFailures | None = None  # the node's: a symbol that cannot encode

    def chunk(self, iid: int) -> bytes | None:
        published = self._sequencer.published(iid)
        if published is None:
            return None
        cached = self._chunks.get(iid)
        if cached is not None and cached[0] is published:
            return cached[1]
        try:
            chunk = codec.encode_full_record(published)
        except ValueError as exc:  # one symbol left out of the snapshot, not the snapshot
            if self.failures is not None:
                self.failures.record("snapshot", exc, iid=iid)
            return None
        self._chunks[iid] = (published, chunk)
        self.encodes += 1
        return chunk

    def snapshot(self, frame_no: int, iids: Iterable[int]) -> bytes:
        chunks = [c for c in (self.chunk(i) for i in sorted(iids)) if c is not None]
        return codec.ws_binary_frame(
            codec.snapshot_header(frame_no, len(chunks)) + b"".join(chunks)
        )


class FanoutStats:
    """Plain-int counters on the hot path; exported at scrape time (MEASURED: Counter.inc is
    ~0.5 µs)."""

    def __init__(self) -> None:
        self.frames = 0  # frames built
        self.payloads_last = 0  # distinct payloads in the last frame
        self.priority_sent = 0
        self.gap_snapshots = 0
        self.request_errors: Counter[str] = Counter()
        self.disconnects: Counter[str] = Counter()
        self.connections_total = 0
        # by reason; both series exist from the start so a rate() over them never starts blank
        self.frame_writes = 0  # frames handed to the kernel straight from publish_frame
        self.priority_writes = 0  # priority writes to the kernel, counted by flush_priority


class FanoutServer:
    def __init__(
        self,
        cfg: ServerConfig,
        universe: Sequence[Instrument],
        sequencer: Sequencer,
        clock: Clock,
        server_id: str = "monotape",
        verifier: TokenVerifier | None = None,
        hydrate: StageRecorder | None = None,
        glass: StageRecorder | None = None,
        overloaded: Callable[[], bool] | None = None,
        priority: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self._hydrate = hydrate  # µs-resolution histogram of (re)subscription hydrations
        self._glass = glass  # RTT/2 samples of the glass cohort (an upper bound)
        # Admitted → written latencies of priority writes, gathered in a fixed buffer (no
        # allocation per value) and handed to ``priority`` in batches (``flush_priority``).
        self._priority_sink = priority
        self._priority_ns = np.empty(PRIORITY_BUFFER, dtype=np.int64)
        self._priority_n = 0
        self.cohort: set[int] = set()  # connections sampled for glass pings
        self.sequencer = sequencer
        self.index = SubscriptionIndex()
        self.snapshots = SnapshotCache(sequencer)
        self.failures: StageFailures | None = None  # the node's; set with snapshots.failures
        self.stats = FanoutStats()
        self.connections: dict[int, Connection] = {}
        self._ids = {inst.key: inst.iid for inst in universe}
        self._keys = {inst.iid: inst.key for inst in universe}
        self._next_id = itertools.count(1)
        self._last_frame_no = 0
        self._hello = codec.ws_binary_frame(
            codec.encode_hello(
                universe,
                frame_ms=round(cfg.frame_ms),
                max_subscriptions=cfg.max_subscriptions,
                max_priority=cfg.max_priority,
                server_id=server_id,
            )
        )
        self._server: Server | None = None
        self.drain: Drain | None = None  # set once a drain starts: new upgrades get 503
        self._drain_task: asyncio.Task[None] | None = None
        self.gate = UpgradeGate(
            cfg,
            clock,
            verifier=verifier,
            draining=lambda: self.drain is not None,
            overloaded=overloaded,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._gone_frames = 0  # written to connections that have since left
        self._gone_bytes = 0
        self._gone_drops = 0
        self.write_latencies_ns: list[int] = []  # the last frame's direct writes
        # the instruments whose record was in a payload of the last frame handed to the kernel
        # for at least one terminal: the ticks that get a tick_to_write value (stamps.py)
        self.written_iids: np.ndarray = _NO_IIDS
        self._behind: set[int] = set()  # connections with queued frames or a gap
        self._pings: dict[int, tuple[int, asyncio.Future[float]]] = {}  # keepalive, unanswered
        self.control_limits = ControlLimits(
            cfg.control_frames_per_s, cfg.control_frames_burst, cfg.max_queued_bytes
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> int:
        """Listen; returns the bound port (0 in the config picks a free one)."""
        self._server = await websockets.serve(
            self._serve_connection,
            self.cfg.host,
            self.cfg.ws_port,
            compression=None,  # MEASURED: deflate costs 34 µs/frame and kills shared buffers
            process_request=self.gate,
            max_size=self.cfg.max_message_bytes,
            max_queue=16,
            ping_interval=None,  # keepalive_loop: one loop for every terminal, not a task each
            ping_timeout=None,
            backlog=self.cfg.listen_backlog,
            # control frames charged to a per-terminal budget where websockets parses them, and
            # a CLOSE message before every close frame of a failed connection (control.py)
            create_connection=TerminalSocket,
        )
        sock = next(iter(self._server.sockets))
        port: int = sock.getsockname()[1]
        return port

    # -- keepalive -----------------------------------------------------------------------------
    async def keepalive_loop(self) -> None:
        """Ping every terminal once per ``keepalive_interval_s``, a slice of them each second,
        and tear down (``keepalive_timeout``) those whose pong is ``keepalive_timeout_s`` late.

        websockets' own keepalive runs a task per connection that sleeps between pings: a
        timer, a future and a coroutine frame per terminal, replaced every interval. They live
        long enough to reach gen 2 and are too young to be frozen (gc_policy), so every gen-2
        collection walked all of them (~10 objects per terminal: 6-11 ms pauses at 1,500
        terminals, measured). Here a ping's waiter lives until its pong, milliseconds."""
        slices = max(1, round(self.cfg.keepalive_interval_s))
        timeout_ns = int(self.cfg.keepalive_timeout_s * 1e9)
        waiting = self._pings
        tick = 0
        while True:
            await asyncio.sleep(1.0)
            now = self.clock.now_ns()
            for cid, (sent, pong) in tuple(waiting.items()):
                if pong.done():
                    del waiting[cid]
                    if not pong.cancelled():
                        pong.exception()  # retrieved: a closed connection's waiter fails
                elif now - sent > timeout_ns:
                    del waiting[cid]
                    conn = self.connections.get(cid)
                    if conn is not None:
                        # A terminal that is only slow to answer still learns why and when to
                        # come back; a dead one costs a bounded close frame and an abort.
                        self.fail(
                            conn,
                            CLOSE_INTERNAL,
                            "keepalive timeout",
                            "keepalive_timeout",
                            reconnect_after_ms=1000,
                        )
            tick += 1
            k = tick % slices
            behind = self._behind
            for cid, conn in tuple(self.connections.items()):
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
                waiting[cid] = (self.clock.now_ns(), asyncio.ensure_future(waiter))

    # -- glass ---------------------------------------------------------------------------------
    async def glass_loop(self) -> None:
        """Ping the sampled cohort; each pong gives RTT/2 into the glass histogram. Labelled an
        upper bound everywhere: without synchronized clocks it is all a server can honestly say
        about the one-way delay to the glass."""
        assert self._glass is not None
        while True:
            await asyncio.sleep(self.cfg.glass_interval_s)
            waiters = []
            for cid in tuple(self.cohort):
                conn = self.connections.get(cid)
                if conn is None or not conn.writable:
                    continue
                with contextlib.suppress(ConnectionClosed, RuntimeError):
                    waiters.append(await conn.ws.ping())
            for waiter in waiters:
                with contextlib.suppress(TimeoutError, ConnectionClosed):
                    rtt_s = await asyncio.wait_for(waiter, self.cfg.glass_interval_s)
                    self._glass.record_ns(int(rtt_s * 1e9) // 2)

    # -- drain ---------------------------------------------------------------------------------
    def start_drain(self) -> bool:
        """Begin a staggered drain of every connection; False if one is already under way."""
        if self.drain is not None:
            return False
        self.drain = Drain(
            self.connections,
            started_ns=self.clock.now_ns(),
            fraction=self.cfg.drain_fraction,
            interval_ns=int(self.cfg.drain_interval_s * 1e9),
            hint_spread_ms=self.cfg.drain_hint_spread_ms,
        )
        log_event(
            "drain_started",
            connections=self.drain.total,
            per_step=self.drain.batch,
            expected_s=self.drain.expected_duration_ns() / 1e9,
        )
        self._drain_task = asyncio.get_running_loop().create_task(self._run_drain(self.drain))
        return True

    async def _run_drain(self, drain: Drain) -> None:
        last_log = self.clock.now_ns()
        while True:
            for cid, hint in drain.step(self.clock.now_ns()):
                conn = self.connections.get(cid)
                if conn is None or conn.closing:
                    continue
                conn.close_reason = "drain"
                self._background(
                    self._close(conn, CLOSE_GOING_AWAY, "drain", reconnect_after_ms=hint)
                )
            if drain.done:
                break
            now = self.clock.now_ns()
            if now - last_log >= 1_000_000_000:
                last_log = now
                log_event("drain_progress", closed=drain.closed, remaining=drain.remaining)
            await asyncio.sleep(drain.interval_ns / 1e9)
        drain.finished_ns = self.clock.now_ns()
        log_event(
            "drain_complete",
            closed=drain.closed,
            seconds=round((drain.finished_ns - drain.started_ns) / 1e9, 3),
        )

    async def wait_drained(self, timeout_s: float) -> bool:
        task = self._drain_task
        if task is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            return False
        return True

    def resume(self) -> bool:
        """Take new terminals again after a drain (POST /admin/resume): a finished drain leaves
        the node out of rotation (503 to upgrades, /readyz 503) until an operator says so.
        False if there was no drain; a drain still running is stopped where it is."""
        if self.drain is None:
            return False
        if self._drain_task is not None and not self._drain_task.done():
            self._drain_task.cancel()
        log_event("drain_resumed", closed=self.drain.closed, remaining=self.drain.remaining)
        self.drain = None
        self._drain_task = None
        return True

    def drain_status(self) -> dict[str, Any]:
        d = self.drain
        if d is None:
            return {"draining": False, "connections": len(self.connections)}
        return {
            "draining": not d.done,
            "drained": d.done,
            "total": d.total,
            "closed": d.closed,
            "remaining": d.remaining,
            "per_step": d.batch,
            "interval_s": d.interval_ns / 1e9,
            "elapsed_s": round(((d.finished_ns or self.clock.now_ns()) - d.started_ns) / 1e9, 3),
            "expected_s": d.expected_duration_ns() / 1e9,
            "connections": len(self.connections),
        }

    async def stop(self, reason: str = "server_shutdown") -> None:
        """Stop accepting, close every terminal with a going-away code and a reconnect hint
        (a close already under way keeps its own reason), then finish the listener."""
        if self._server is not None:
            self._server.close(close_connections=False)  # no new terminals from here on
        if self._drain_task is not None:
            self._drain_task.cancel()
        closing = []
        for conn in list(self.connections.values()):
            if not conn.close_reason:
                conn.close_reason = reason
                closing.append(self._close(conn, CLOSE_GOING_AWAY, reason, reconnect_after_ms=1000))
        await asyncio.gather(*closing, *self._tasks, return_exceptions=True)
        for conn_id, left in list(self.connections.items()):
            self.teardown(conn_id, left.close_reason or reason)
        if self._server is not None:
            await self._server.wait_closed()

    # -- the one way out -------------------------------------------------------------------
    def teardown(self, conn_id: int, reason: str) -> bool:
        """Idempotent: cleans every index before it drops the connection entry."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return False
        conn.closing = True
        if conn.expiry is not None:
            conn.expiry.cancel()
        self.index.remove_connection(conn_id)
        conn.outbox.clear()
        self._behind.discard(conn_id)
        self.cohort.discard(conn_id)
        self._pings.pop(conn_id, None)
        self._gone_frames += conn.frames_sent
        self._gone_bytes += conn.bytes_sent
        self._gone_drops += conn.outbox.drops
        del self.connections[conn_id]
        self.stats.disconnects[reason] += 1
        if not conn.transport.is_closing():
            conn.transport.abort()
        return True

    def fail(
        self, conn: Connection, code: int, why: str, reason: str, *, reconnect_after_ms: int
    ) -> None:
        """Fail the connection now (RFC 6455 §7.1.7), without waiting for the terminal: the
        wire's CLOSE message and a close frame with ``why`` and the hint, if the connection can
        still take them; no more reading (a flood stops costing anything at once); the bytes
        queued get ``FAIL_GRACE_S`` to drain, then the socket is aborted. The teardown (with
        ``reason``, counted) runs at once. For budget overruns, keepalive timeouts and the
        slow-consumer kick: terminals that are not holding up their end of a close handshake."""
        conn.close_reason = conn.close_reason or reason
        ws = conn.ws
        protocol = ws.protocol
        if protocol.state is State.OPEN and isinstance(protocol, TerminalProtocol):
            protocol.fail_with_hint(code, why, reconnect_after_ms)
            with contextlib.suppress(Exception):  # the uvloop write-after-eof trap, and kin
                ws.send_data()
        transport = conn.transport
        if not transport.is_closing():
            transport.close()  # stops reading now; flushes what is queued (bounded)
            asyncio.get_running_loop().call_later(FAIL_GRACE_S, _abort, transport)
        self.teardown(conn.conn_id, conn.close_reason)

    def _overrun(self, conn_id: int, overrun: Overrun) -> None:
        """A terminal went over its control-frame or queued-bytes budget (control.py)."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return
        self.fail(conn, CLOSE_POLICY, overrun.close_reason, overrun.value, reconnect_after_ms=5000)

    # -- the session's token -------------------------------------------------------------------
    def _expire(self, conn_id: int) -> None:
        """The session's token expired: close with a reason and a reconnect hint (the terminal
        reconnects with a fresh token)."""
        conn = self.connections.get(conn_id)
        if conn is None or conn.closing:
            return
        conn.close_reason = "auth_expired"
        # A short hint: the terminal needs a fresh token, not a thundering retry.
        self._background(self._close(conn, CLOSE_POLICY, "token expired", reconnect_after_ms=1000))

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- per connection ------------------------------------------------------------------------
    async def _serve_connection(self, ws: ServerConnection) -> None:
        conn_id = next(self._next_id)
        conn = Connection(
            conn_id,
            ws,
            outbox_frames=self.cfg.outbox_frames,
            high_water=self.cfg.write_high_water,
            opened_ns=self.clock.now_ns(),
            request_burst=self.cfg.request_burst,
            so_sndbuf=self.cfg.so_sndbuf,
        )
        claims = self.gate.claims_for(ws)
        if claims is not None:
            conn.expiry = asyncio.get_running_loop().call_later(
                claims.expires_in(self.clock.wall_ns() / 1e9), self._expire, conn_id
            )
        self.connections[conn_id] = conn
        self.index.add_connection(conn_id)
        if self._glass is not None and _sampled(conn_id, self.cfg.glass_share):
            self.cohort.add(conn_id)
        self.stats.connections_total += 1
        if isinstance(ws, TerminalSocket):
            ws.arm(
                self.control_limits,
                self.clock.now_ns,
                functools.partial(self._overrun, conn_id),
            )
        reason = "closed"
        try:
            self._answer(conn, self._hello)
            async for message in ws:
                if conn_id not in self.connections:
                    break  # torn down under us (write error, kick): queued requests are moot
                close = self._on_message(conn, message)
                if close is not None:
                    conn.close_reason = close[2]
                    await self._close(conn, close[0], close[1], reconnect_after_ms=5000)
                    break
        except ConnectionClosedOK:
            reason = "closed"
        except ConnectionClosed as exc:
            # websockets failed it itself (1002 protocol error, 1009 too big): say which.
            sent = exc.sent.code if exc.sent is not None else 0
            reason = _FAILED_BY_LIBRARY.get(sent, "connection_lost")
        finally:
            # A close the server started (shutdown, drain, kick) names itself; otherwise the
            # way the socket ended does.
            self.teardown(conn_id, conn.close_reason or reason)

    async def _close(
        self, conn: Connection, code: int, why: str, *, reconnect_after_ms: int
    ) -> None:
        if conn.writable:
            # Best effort: the WebSocket close frame below is what a terminal must get.
            with contextlib.suppress(Exception):
                conn.transport.write(
                    codec.ws_binary_frame(codec.encode_close(code, reconnect_after_ms, why))
                )
        conn.closing = True
        try:
            await asyncio.wait_for(
                conn.ws.close(code, f"{why}; reconnect_after_ms={reconnect_after_ms}"), 2.0
            )
        except (TimeoutError, ConnectionClosed, OSError):
            conn.transport.abort()

    def _answer(self, conn: Connection, wire: bytes) -> None:
        """Hello, acks and errors: in order among themselves, never dropped with the data."""
        if conn.closing or conn.ws.protocol.state is not State.OPEN:
            return
        try:
            if not conn.deliver_control(wire):
                self._behind.add(conn.conn_id)
        except WriteFailed:
            self.teardown(conn.conn_id, "slow_consumer")

    def _deliver(self, conn: Connection, wire: bytes) -> bool:
        """True when the bytes went to the kernel now (False: queued, or not deliverable)."""
        if conn.closing or conn.ws.protocol.state is not State.OPEN:
            # A close is under way (ours or the terminal's): its own path tears the connection
            # down and names the reason; a write now would only mislabel it as a write error.
            return False
        try:
            written = conn.deliver(wire)
        except WriteFailed:
            self.teardown(conn.conn_id, "write_error")
            return False
        if not written:
            self._behind.add(conn.conn_id)
        return written

    def _mistake(self, conn: Connection) -> None:
        # Errors are counted per minute, not per lifetime: a desk open all week must not be
        # closed as a flood for mistakes spread over days.
        now = self.clock.now_ns()
        if now - conn.errors_since_ns > ERROR_WINDOW_NS:
            conn.errors_since_ns = now
            conn.request_errors = 0
        conn.request_errors += 1

    def _error(self, conn: Connection, code: ErrorCode, message: str, req: int) -> None:
        self.stats.request_errors[code.name] += 1
        self._mistake(conn)
        self._answer(conn, codec.ws_binary_frame(codec.encode_error(code, message, req)))

    def _rate_ok(self, conn: Connection) -> bool:
        now = self.clock.now_ns()
        rate = self.cfg.requests_per_s
        conn.bucket_tokens = min(
            float(self.cfg.request_burst),
            conn.bucket_tokens + (now - conn.bucket_ts) * rate / 1e9,
        )
        conn.bucket_ts = now
        if conn.bucket_tokens < 1.0:
            return False
        conn.bucket_tokens -= 1.0
        return True

    def _on_message(self, conn: Connection, message: str | bytes) -> tuple[int, str, str] | None:
        """Handle one client request; returns (close code, reason, teardown reason) to close."""
        if isinstance(message, str):
            self._error(conn, ErrorCode.TEXT_NOT_ALLOWED, "binary messages only", 0)
            return (CLOSE_UNSUPPORTED, "binary messages only", "protocol_error")
        if not self._rate_ok(conn):
            self._error(conn, ErrorCode.RATE_LIMITED, "too many requests: slow down", 0)
            if conn.request_errors > MAX_RATE_VIOLATIONS:
                return (CLOSE_POLICY, "request flood", "protocol_error")
            return None
        try:
            request = decode_request(message)
        except RequestError as exc:
            self._error(conn, exc.code, exc.message, exc.req)
            if conn.request_errors > MAX_BAD_REQUESTS:
                return (CLOSE_POLICY, "too many bad requests", "protocol_error")
            return None
        self._apply(conn, request)
        return None

    def _refuse(self, conn: Connection, req: int, refused: Sequence[codec.Refusal]) -> None:
        """REFUSED for the keys of ``req`` that were not applied (before that request's ACK).

        Counted once per request and code: a request that refused some keys is one mistake in
        the connection's error window, however many keys it named."""
        for code in {r.code for r in refused}:
            self.stats.request_errors[ErrorCode(code).name] += 1
        self._mistake(conn)
        self._answer(conn, codec.ws_binary_frame(codec.encode_refused(req, refused)))

    def _apply(self, conn: Connection, request: Request) -> None:
        # Judged key by key (requests.judge): the keys that pass are applied, the others are
        # named in REFUSED, and the ACK that follows gives the counts after the request.
        cid = conn.conn_id
        index = self.index
        ruling = judge(
            request,
            self._ids,
            index.subscriptions(cid),
            index.priority(cid),
            max_subscriptions=self.cfg.max_subscriptions,
            max_priority=self.cfg.max_priority,
        )
        if ruling.refused:
            self._refuse(conn, request.req, ruling.refused)
        iids = ruling.iids  # each once: a snapshot never repeats a record
        if not iids:
            pass  # everything refused: state as it was, and the ACK still closes the answer
        elif isinstance(request, Subscribe):
            # Every requested symbol is hydrated, held ones included: re-subscribing is how a
            # terminal that saw a gap asks for a fresh base (docs/wire.md).
            started = self.clock.now_ns()
            index.subscribe(cid, iids)
            self._deliver(conn, self.snapshots.snapshot(self._last_frame_no, iids))
            if self._hydrate is not None:
                self._hydrate.record_ns(self.clock.now_ns() - started)
        elif isinstance(request, Unsubscribe):
            index.unsubscribe(cid, iids)
        else:
            index.set_priority(cid, iids, request.on)
        ack = codec.encode_ack(request.req, len(index.subscriptions(cid)), len(index.priority(cid)))
        self._answer(conn, codec.ws_binary_frame(ack))

    # -- the fan-out ---------------------------------------------------------------------------
    def publish_frame(self, frame: Frame) -> int:
        """Encode each changed symbol once, build one payload per signature, write it to every
        connection of that signature; then give slow terminals their chance to catch up.

        Returns the monotonic time the payloads were published (encoded and framed); the
        per-connection write latencies from then are left in ``write_latencies_ns``, and the
        instruments that went out in a direct write in ``written_iids``."""
        self._last_frame_no = frame.frame_no
        self.stats.frames += 1
        encode = codec.encode_delta_record
        subscribed = self.index.has_subscribers
        # Encoded once per changed symbol that anyone watches; nobody pays for the others.
        try:
            chunks = {
                rec.iid: encode(rec.base, rec.new) for rec in frame.records if subscribed(rec.iid)
            }
        except ValueError:  # a symbol that cannot encode: contained to that symbol
            chunks = self._encode_each(frame)
        plan = plan_payloads(chunks, self.index)
        self.stats.payloads_last = len(plan)
        index = self.index
        wires = [
            (
                codec.ws_binary_frame(
                    codec.frame_header(frame.frame_no, len(sig_chunks)) + b"".join(sig_chunks)
                ),
                index.connections(sig),
                sig,
            )
            for sig, sig_chunks in plan.items()
        ]
        now_ns = self.clock.now_ns
        published = now_ns()
        latencies = self.write_latencies_ns
        latencies.clear()
        record = latencies.append
        connections = self.connections
        behind = self._behind
        high_water = self.cfg.write_high_water
        # The fast path is the whole point of the tier (MEASURED: ~6 µs per pre-framed write):
        # a connection that is open, not behind and has room gets the shared bytes straight away;
        # anything else takes _deliver's ordered path (ring, gap, closing).
        written_sigs: list[int] = []
        for wire, conn_ids, sig in wires:
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
                    if self._deliver(conn, wire):
                        record(now_ns() - published)
                    continue
                try:
                    transport.write(wire)
                except Exception:  # the uvloop write-after-eof trap: this connection only
                    self.teardown(cid, "write_error")
                    continue
                conn.frames_sent += 1
                conn.bytes_sent += size
                record(now_ns() - published)
            if len(latencies) > before:
                written_sigs.append(sig)
        self.written_iids = self._written_iids(chunks, written_sigs, len(wires))
        self.stats.frame_writes += len(latencies)
        self.flush_behind()
        return published

    def _written_iids(
        self, chunks: dict[int, bytes], written_sigs: list[int], payloads: int
    ) -> np.ndarray:
        """The instruments of the payloads (signatures) that reached at least one terminal."""
        if not written_sigs:
            return _NO_IIDS
        if len(written_sigs) == payloads:
            # The common case, at no per-signature cost: every encoded chunk is in some payload
            # (only symbols with subscribers are encoded), and every payload went out.
            return np.fromiter(chunks, dtype=np.int64, count=len(chunks))
        members = self.index.members
        watched: set[int] = set()
        for sig in written_sigs:
            watched.update(members(sig))
        iids = watched.intersection(chunks)
        return np.fromiter(iids, dtype=np.int64, count=len(iids))

    def _encode_each(self, frame: Frame) -> dict[int, bytes]:
        """The frame's chunks symbol by symbol; one that raises is left out and counted (its
        terminals see a gap on the next frame and get a snapshot)."""
        chunks: dict[int, bytes] = {}
        subscribed = self.index.has_subscribers
        for rec in frame.records:
            if subscribed(rec.iid):
                try:
                    chunks[rec.iid] = codec.encode_delta_record(rec.base, rec.new)
                except ValueError as exc:
                    if self.failures is not None:
                        self.failures.record("encode", exc, iid=rec.iid)
        return chunks

    def flush_behind(self) -> None:
        """Give terminals with queued frames (or a gap) their chance to catch up."""
        if not self._behind:
            return
        now = self.clock.now_ns()
        kick_after = int(self.cfg.slow_consumer_kick_s * 1e9)
        for cid in tuple(self._behind):
            conn = self.connections.get(cid)
            if conn is None:
                self._behind.discard(cid)
                continue
            try:
                if conn.flush(functools.partial(self._gap_snapshot, conn)):
                    self.stats.gap_snapshots += 1
            except WriteFailed:
                self.teardown(cid, "write_error")
                continue
            if not conn.behind:
                self._behind.discard(cid)
            # A terminal that has not drained its socket for this long is not slow, it is gone
            # (or wedged): its ring is bounded anyway, but the kernel buffer and the entry are not
            # worth keeping. It reconnects and hydrates like any other.
            if not conn.outbox.gap:
                conn.gap_since_ns = 0
            elif not conn.gap_since_ns:
                conn.gap_since_ns = now
            elif kick_after and now - conn.gap_since_ns > kick_after:
                self.fail(
                    conn,
                    CLOSE_POLICY,
                    "slow consumer: not reading",
                    "slow_consumer",
                    reconnect_after_ms=5000,
                )
                continue
            # Bytes, not only frames: the transport's buffer (answers, a large snapshot) plus
            # the ring. Only connections already behind get here, never the fast path.
            queued = conn.transport.get_write_buffer_size() + conn.outbox.queued_bytes
            if self.control_limits.over_queued(queued):
                overrun = Overrun.QUEUED_BYTES
                self.fail(
                    conn, CLOSE_POLICY, overrun.close_reason, overrun.value, reconnect_after_ms=5000
                )

    def _gap_snapshot(self, conn: Connection) -> bytes:
        return self.snapshots.snapshot(self._last_frame_no, self.index.subscriptions(conn.conn_id))

    def publish_priority(self, applied: Sequence[Tick]) -> None:
        """The order-ticket path: an admitted tick goes at once to the terminals that marked it,
        encoded and framed once for all of them.

        Each write handed to the kernel now gives one ``priority`` value, written time minus
        ``tick.admitted_ns``; an update queued in a slow terminal's ring gives none (as for
        ``write``: the ring holds bytes, not admitted times)."""
        index = self.index
        has_priority = index.has_priority
        now_ns = self.clock.now_ns
        latencies = self._priority_ns
        for tick in applied:
            if not has_priority(tick.iid):  # the common case: no order ticket holds it
                continue
            targets = index.priority_connections(tick.iid)
            try:
                wire = codec.ws_binary_frame(codec.encode_priority(codec.encode_full_record(tick)))
            except ValueError as exc:  # this tick only; the conflated stream still carries it
                if self.failures is not None:
                    self.failures.record("priority", exc, iid=tick.iid)
                continue
            admitted = tick.admitted_ns
            for cid in tuple(targets):
                conn = self.connections.get(cid)
                if conn is not None:
                    if self._deliver(conn, wire):
                        n = self._priority_n
                        latencies[n] = now_ns() - admitted
                        self._priority_n = n + 1
                        if n + 1 == PRIORITY_BUFFER:  # bounded: a burst is handed on early
                            self.flush_priority()
                    self.stats.priority_sent += 1

    def flush_priority(self) -> int:
        """Hand the priority latencies gathered since the last call to the ``priority`` sink
        (the node calls it once per frame and before each rotation); returns how many. The array
        the sink gets is a view of a reused buffer, valid during the call only."""
        n = self._priority_n
        if not n:
            return 0
        self._priority_n = 0
        self.stats.priority_writes += n
        if self._priority_sink is not None:
            self._priority_sink(self._priority_ns[:n])
        return n

    def publish_heartbeat(self, wall_ms: int) -> None:
        wire = codec.ws_binary_frame(codec.encode_heartbeat(self._last_frame_no, wall_ms))
        for conn in tuple(self.connections.values()):
            self._deliver(conn, wire)

    def iid_of(self, key: str) -> int | None:
        return self._ids.get(key)

    def sent_totals(self) -> tuple[int, int]:
        """(messages, bytes) written so far, live connections plus those already gone."""
        frames = self._gone_frames + sum(c.frames_sent for c in self.connections.values())
        sent = self._gone_bytes + sum(c.bytes_sent for c in self.connections.values())
        return frames, sent

    def slow_consumer_drops(self) -> int:
        """Frames dropped from full outbound rings, live connections plus those gone."""
        return self._gone_drops + sum(c.outbox.drops for c in self.connections.values())
