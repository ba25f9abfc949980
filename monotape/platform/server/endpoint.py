"""The WebSocket endpoint: ``FanoutServer``, the asyncio driver that only moves bytes.

It listens (websockets' ``serve``, deflate off), refuses in-band the upgrades the gate let through
only for that (server/upgrade.py: browsers), greets each terminal with the hello, hands every
message to the terminal's ``Session`` (core/session.py: the request rules, limits and token
expiry, pure) and writes what the session answers (a ``refresh``'s token is verified here, off
the loop, by the upgrade's verifier and cache, then judged by the session); the frame, priority
and heartbeat writes are the writer's (server/writer.py), STALE server/stale.py's, the pings
keepalive's (server/keepalive.py), the drain its driver's (server/drain.py); every way out ends
in the registry's one idempotent ``teardown`` (server/terminals.py) with a named ``Disconnect``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.server import Server, ServerConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from monotape.clock import Clock
from monotape.config import ServerConfig
from monotape.histograms import StageRecorder
from monotape.platform.auth import AuthError, Claims, TokenVerifier
from monotape.platform.core.budget import Overrun
from monotape.platform.core.conflation import Frame
from monotape.platform.core.disconnect import Disconnect
from monotape.platform.core.drain import Drain
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.glass import GlassLedger
from monotape.platform.core.planner import Pacer
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.session import Received, Session, SessionRules
from monotape.platform.core.snapshots import FailureSink, SnapshotCache, Snapshots
from monotape.platform.model import Instrument, Tick
from monotape.platform.server.connection import Connection
from monotape.platform.server.control import TerminalSocket
from monotape.platform.server.drain import DrainDriver
from monotape.platform.server.keepalive import glass_loop, in_glass_cohort, keepalive_loop
from monotape.platform.server.stale import StaleNotices
from monotape.platform.server.terminals import FanoutStats, Terminals
from monotape.platform.server.upgrade import UpgradeGate, refuse_in_band, select_subprotocol
from monotape.platform.server.writer import Writer
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Refresh

__all__ = ["FanoutServer"]


class FanoutServer:
    def __init__(
        self,
        cfg: ServerConfig,
        universe: Sequence[Instrument],
        sequencer: Sequencer | None,
        clock: Clock,
        server_id: str = "monotape",
        verifier: TokenVerifier | None = None,
        hydrate: StageRecorder | None = None,
        glass: StageRecorder | None = None,
        overloaded: Callable[[], bool] | None = None,
        priority: Callable[[np.ndarray], None] | None = None,
        *,
        snapshots: Snapshots | None = None,
        reuse_port: bool = False,
        marks: Callable[[Iterable[int]], None] | None = None,
    ) -> None:
        """A writer process passes ``snapshots`` (the ring's table), not a ``sequencer``;
        ``reuse_port`` (SO_REUSEPORT) and ``marks`` (told the iids whose order-ticket marks may
        have changed: its row of the priority interest)."""
        self.cfg = cfg
        self._reuse_port = reuse_port
        self._marks = marks
        self._marked: dict[int, frozenset[int]] = {}  # conn -> its priority iids (with marks)
        self.clock = clock
        self._hydrate = hydrate  # µs-resolution histogram of (re)subscription hydrations
        self._glass = glass  # RTT/2 samples of the glass cohort (an upper bound)
        self.sequencer = sequencer
        self.terminals = Terminals()
        if snapshots is None:
            if sequencer is None:
                raise ValueError("FanoutServer needs a sequencer or a snapshots source")
            snapshots = SnapshotCache(sequencer.published)
        self.snapshots: Snapshots = snapshots
        self.terminals.pacer = Pacer(self.snapshots)  # max_hz < 25 terminals' boundaries
        self.writer = Writer(cfg, clock, self.terminals, self.snapshots, priority)
        self.drainer = DrainDriver(cfg, clock, self.terminals)
        self.stale = StaleNotices(self.writer, self.terminals.index, universe, clock)
        self._ids = {inst.key: inst.iid for inst in universe}
        self.rules = SessionRules(
            ids=self._ids,
            max_subscriptions=cfg.max_subscriptions,
            max_priority=cfg.max_priority,
            requests_per_s=cfg.requests_per_s,
            request_burst=cfg.request_burst,
            errors=self.terminals.stats.request_errors,
            glass=self.terminals.glass,
        )
        self._next_id = itertools.count(1)
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
        self.gate = UpgradeGate(
            cfg,
            clock,
            verifier=verifier,
            draining=lambda: self.drainer.drain is not None,
            overloaded=overloaded,
        )

    # -- what the node, the admin API and the collectors read ------------------------------------
    @property
    def connections(self) -> dict[int, Connection]:
        return self.terminals.connections

    @property
    def index(self) -> SubscriptionIndex:
        return self.terminals.index

    @property
    def stats(self) -> FanoutStats:
        return self.terminals.stats

    @property
    def glass(self) -> GlassLedger:
        """What terminals reported dropping (``report``): counters and the last offender."""
        return self.terminals.glass

    @property
    def cohort(self) -> set[int]:
        return self.terminals.cohort

    @property
    def failures(self) -> FailureSink | None:
        return self.writer.failures

    @failures.setter
    def failures(self, sink: FailureSink | None) -> None:
        self.writer.failures = sink
        if isinstance(self.snapshots, SnapshotCache):  # a symbol that cannot encode
            self.snapshots.failures = sink

    @property
    def written_iids(self) -> np.ndarray:
        return self.writer.written_iids

    @property
    def write_latencies_ns(self) -> list[int]:
        return self.writer.write_latencies_ns

    @property
    def drain(self) -> Drain | None:
        return self.drainer.drain

    def iid_of(self, key: str) -> int | None:
        return self._ids.get(key)

    def sent_totals(self) -> tuple[int, int]:
        return self.terminals.sent_totals()

    def slow_consumer_drops(self) -> int:
        return self.terminals.slow_consumer_drops()

    # -- the writer's ----------------------------------------------------------------------------
    def publish_frame(self, frame: Frame) -> int:
        return self.writer.publish_frame(frame)

    def publish_priority(self, applied: Sequence[Tick]) -> None:
        self.writer.publish_priority(applied)

    def flush_priority(self) -> int:
        return self.writer.flush_priority()

    def publish_heartbeat(self, wall_ms: int) -> None:
        self.writer.publish_heartbeat(wall_ms)

    # -- the loops ---------------------------------------------------------------------------
    async def keepalive_loop(self) -> None:
        await keepalive_loop(self.cfg, self.clock, self.terminals)

    async def glass_loop(self) -> None:
        assert self._glass is not None
        await glass_loop(self.cfg, self.terminals, self._glass)

    # -- drain -------------------------------------------------------------------------------
    def start_drain(self) -> bool:
        """Begin a staggered drain of every connection; False if one is already under way."""
        return self.drainer.start()

    async def wait_drained(self, timeout_s: float) -> bool:
        return await self.drainer.wait(timeout_s)

    def resume(self) -> bool:
        """Take new terminals again after a drain (POST /admin/resume): a finished drain leaves
        the node out of rotation (503 to upgrades, /readyz 503) until an operator says so.
        False if there was no drain; a drain still running is stopped where it is."""
        return self.drainer.resume()

    def drain_status(self) -> dict[str, Any]:
        return self.drainer.status()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> int:
        """Listen; returns the bound port (0 in the config picks a free one)."""
        self._server = await websockets.serve(
            self._serve_connection,
            self.cfg.host,
            self.cfg.ws_port,
            compression=None,  # measured: deflate costs 34 µs/frame and kills shared buffers
            process_request=self.gate,
            max_size=self.cfg.max_message_bytes,
            max_queue=16,
            ping_interval=None,  # keepalive_loop: one loop for every terminal, not a task each
            ping_timeout=None,
            backlog=self.cfg.listen_backlog,
            # control frames charged to a per-terminal budget where websockets parses them, and
            # a CLOSE message before every close frame of a failed connection (control.py)
            create_connection=TerminalSocket,
            # monotape.v2 when a browser offers it; its bearer.<jwt> entry is never echoed
            select_subprotocol=select_subprotocol,
            reuse_port=self._reuse_port or None,  # writer processes share the port
        )
        return int(next(iter(self._server.sockets)).getsockname()[1])

    def stop_listening(self) -> None:
        """No new terminals from here on (with SO_REUSEPORT the kernel sends them elsewhere)."""
        if self._server is not None:
            self._server.close(close_connections=False)

    async def stop(self, reason: Disconnect = Disconnect.SERVER_SHUTDOWN) -> None:
        """Stop accepting, close every terminal with a going-away code and a reconnect hint
        (a close already under way keeps its own reason), then finish the listener."""
        self.stop_listening()
        self.drainer.cancel()
        terminals = self.terminals
        for conn in list(terminals.connections.values()):
            if not conn.close_reason:
                terminals.close_later(conn, reason.close())
        await terminals.settle()
        for conn_id, left in list(terminals.connections.items()):
            terminals.teardown(conn_id, left.close_reason or reason)
        if self._server is not None:
            await self._server.wait_closed()

    # -- the one way out -------------------------------------------------------------------
    def teardown(self, conn_id: int, reason: Disconnect) -> bool:
        """Idempotent: cleans every index before it drops the connection entry."""
        return self.terminals.teardown(conn_id, reason)

    def _overrun(self, conn_id: int, overrun: Overrun) -> None:
        """A terminal went over its control-frame or queued-bytes budget (control.py)."""
        conn = self.terminals.connections.get(conn_id)
        if conn is not None:
            self.terminals.fail(conn, Disconnect.of_overrun(overrun).close())

    def _expire(self, conn_id: int) -> None:
        """The session's token expired: close with a reason and a reconnect hint."""
        conn = self.terminals.connections.get(conn_id)
        if conn is None or conn.closing or conn.session is None:
            return
        close = conn.session.expire(self.clock.wall_ns() / 1e9, self.clock.now_ns())
        if close is None:  # the timer ran ahead of the wall clock: look again (bounded)
            self._arm_expiry(conn, early=True)
            return
        self.terminals.close_later(conn, close)

    def _arm_expiry(self, conn: Connection, *, early: bool = False) -> None:
        """(Re)arm the timer that closes the session when its token expires (core/session.py
        says when: on the wall clock, bounded on the monotonic one)."""
        assert conn.session is not None
        if conn.expiry is not None:
            conn.expiry.cancel()  # a refresh moved the expiry
            conn.expiry = None
        wall_s = self.clock.wall_ns() / 1e9
        left = conn.session.expiry_timer_s(wall_s, self.clock.now_ns(), early=early)
        if left is not None:
            conn.expiry = asyncio.get_running_loop().call_later(left, self._expire, conn.conn_id)

    async def _refresh(self, conn: Connection, session: Session, request: Refresh) -> Received:
        """Verify a refresh's token off the loop (the upgrade's verifier and cache), let the
        session judge it, and re-arm the expiry timer if it was taken."""
        verifier = self.gate.verifier
        grant: Claims | str
        if verifier is None:
            grant = "no token on this session"
        else:
            try:
                grant = await verifier.verify(request.token)
            except AuthError as exc:
                grant = exc.reason
        before = session.expires_at_s
        received = session.refreshed(
            request.req, grant, self.clock.wall_ns() / 1e9, self.clock.now_ns()
        )
        if session.expires_at_s != before and conn.conn_id in self.terminals.connections:
            self._arm_expiry(conn)
        return received

    def _priority_changed(self, conn_id: int) -> None:
        """After a request: tell ``marks`` what this terminal marked or unmarked."""
        assert self._marks is not None
        before = self._marked.get(conn_id, frozenset())
        now = self.index.priority(conn_id) if conn_id in self.terminals.connections else before
        if now != before:
            self._marked[conn_id] = now
            self._marks(before ^ now)

    # -- per connection ------------------------------------------------------------------------
    async def _serve_connection(self, ws: ServerConnection) -> None:
        refusal = self.gate.refusal_for(ws)
        if refusal is not None:  # a browser's refused upgrade: told in-band, nothing else
            await refuse_in_band(ws, refusal)
            return
        conn_id = next(self._next_id)
        now = self.clock.now_ns()
        claims = self.gate.claims_for(ws)
        session = Session(
            conn_id,
            self.rules,
            self.terminals.index,
            opened_ns=now,
            opened_wall_s=self.clock.wall_ns() / 1e9,
            expires_at_s=claims.exp if claims is not None else None,
            subject=claims.sub if claims is not None else None,
            admin=claims.admin if claims is not None else False,
        )
        conn = Connection(
            conn_id,
            ws,
            outbox_frames=self.cfg.outbox_frames,
            high_water=self.cfg.write_high_water,
            opened_ns=now,
            session=session,
            so_sndbuf=self.cfg.so_sndbuf,
        )
        self._arm_expiry(conn)
        terminals = self.terminals
        terminals.admit(conn)
        if self._glass is not None and in_glass_cohort(conn_id, self.cfg.glass_share):
            terminals.cohort.add(conn_id)
        if isinstance(ws, TerminalSocket):
            ws.arm(
                self.writer.control_limits,
                self.clock.now_ns,
                functools.partial(self._overrun, conn_id),
            )
        reason = Disconnect.CLOSED
        writer = self.writer
        try:
            writer.answer(conn, self._hello)
            self.stale.greet(conn)
            async for message in ws:
                if conn_id not in terminals.connections:
                    break  # torn down under us (write error, kick): queued requests are moot
                # Taken before the session judges the request (it applies a subscribe to the
                # index): the ``hydrate`` stage is subscribe + snapshot build + delivery.
                started = self.clock.now_ns()
                received = session.receive(message, started, wall_s=self.clock.wall_ns() / 1e9)
                if received.refresh is not None:
                    received = await self._refresh(conn, session, received.refresh)
                    if conn_id not in terminals.connections:
                        break  # torn down while its token was verified
                if received.answer is not None:
                    writer.answer(conn, codec.ws_binary_frame(received.answer))
                if received.hydrate:
                    snapshot = self.snapshots.snapshot(writer.last_frame_no, received.hydrate)
                    writer.deliver(conn, snapshot)
                    if self._hydrate is not None:
                        self._hydrate.record_ns(self.clock.now_ns() - started)
                if received.ack is not None:
                    writer.answer(conn, codec.ws_binary_frame(received.ack))
                if self._marks is not None:
                    self._priority_changed(conn_id)
                if received.close is not None:
                    conn.close_reason = received.close.reason
                    await terminals.close(conn, received.close)
                    break
        except ConnectionClosedOK:
            reason = Disconnect.CLOSED
        except ConnectionClosed as exc:
            # websockets failed it itself (1002 protocol error, 1009 too big): say which.
            reason = Disconnect.of_library_close(exc.sent.code if exc.sent is not None else 0)
        finally:
            # A close the server started (shutdown, drain, kick) names itself; otherwise the
            # way the socket ended does.
            terminals.teardown(conn_id, conn.close_reason or reason)
            if (left := self._marked.pop(conn_id, None)) and self._marks is not None:
                self._marks(left)  # the index no longer holds them for this terminal
