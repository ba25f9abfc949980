"""One terminal on one WebSocket: the asyncio driver of the screen and the intent.

It only moves data: bytes from the socket are decoded and handed to ``view.TerminalView``
(frames, snapshots, priority updates, heartbeats, hello) or to ``intent.Intent`` (ACK, REFUSED,
ERROR); what they answer goes out again: rendered quotes to the caller (``on_render``, then the
bounded ``updates()`` queue), requests and due resyncs to the socket, answers to the futures of
the requests in flight. The session's own requests (its rate, token refresh and glass report)
are ``upkeep.Upkeep``'s, opened after each HELLO and closed with the connection.
``client.TerminalClient`` adds the reconnecting supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final, Literal

import websockets
from websockets.asyncio.client import ClientConnection

from monotape.clock import Clock, SystemClock
from monotape.platform.model import Instrument
from monotape.platform.sdk.answers import PROTOCOLS, Answer, NotConnectedError
from monotape.platform.sdk.credentials import presented_token, with_bearer, with_token
from monotape.platform.sdk.intent import Intent, chunks
from monotape.platform.sdk.reconnect import RandomSource
from monotape.platform.sdk.stats import SdkStats
from monotape.platform.sdk.upkeep import FULL_RATE_HZ, RefreshToken, Upkeep
from monotape.platform.sdk.view import Quote, TerminalView
from monotape.platform.wire import codec
from monotape.platform.wire.requests import MAX_KEYS, Request, Subscribe, encode_request

__all__ = ["STATES", "State", "TerminalConnection", "with_token"]

State = Literal["idle", "connecting", "connected", "backoff", "closed"]
STATES: Final[tuple[State, ...]] = ("idle", "connecting", "connected", "backoff", "closed")

NS: Final = 1e9  # nanoseconds per second: the clock reads ns, the stats speak seconds
REQUEST_TIMEOUT_S: Final = 10.0  # an ACK not here by then: the request is abandoned


class TerminalConnection:
    """The terminal's screen, intent and one connection at a time (see ``TerminalClient``)."""

    def __init__(
        self,
        url: str,
        *,
        token_provider: Callable[[], str] | None = None,
        on_render: Callable[[Quote], None] | None = None,
        on_state: Callable[[State], None] | None = None,
        queue_size: int = 10_000,
        open_timeout: float = 10.0,
        clock: Clock | None = None,
        max_hz: float = FULL_RATE_HZ,
        refresh_token: RefreshToken | None = None,
        rng: RandomSource | None = None,
    ) -> None:
        self.url = url
        self.reconnect = False
        self.token_provider = token_provider
        self.on_render = on_render
        self.on_state = on_state
        self.clock: Clock = clock or SystemClock()
        self.stats = SdkStats()
        self.screen = TerminalView(self.clock, self.stats)  # what reaches the glass
        self.intent = Intent(self.screen, self.stats)  # what the terminal means to hold
        # the session's own requests: rate, token refresh, glass report (ValueError: bad max_hz)
        self.upkeep = Upkeep(
            self.screen,
            self.stats,
            clock=self.clock,
            rng=rng or random.Random(),
            next_req=self.intent.next_req,
            max_hz=max_hz,
            refresh_token=refresh_token,
        )
        self._token: str | None = None  # the token the current connection presented
        self.close_message: codec.Close | None = None
        self.state: State = "idle"
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._hello_ready: asyncio.Future[codec.Hello] | None = None
        self._pending: dict[int, asyncio.Future[Answer]] = {}  # request number -> its answer
        self._resync_scheduled = False
        self._queue: asyncio.Queue[Quote] | None = None
        self._queue_size = queue_size
        self._connected_evt: asyncio.Event | None = None
        self._attempt_started_ns = 0
        self._hello_at_ns: int | None = None
        self._conn_close: codec.Close | None = None  # the CLOSE message of this connection
        self._bg: set[asyncio.Task[Any]] = set()

    # -- what the screen holds ----------------------------------------------------------------
    @property
    def view(self) -> dict[str, Quote]:
        """What is on the glass now, by key."""
        return self.screen.quotes

    @property
    def hello(self) -> codec.Hello | None:
        return self.screen.hello

    @property
    def instruments(self) -> dict[int, Instrument]:
        return self.screen.instruments

    @property
    def ids(self) -> dict[str, int]:
        return self.screen.ids

    @property
    def held_keys(self) -> list[str]:
        """The keys this client holds (restored on reconnect), in subscription order."""
        return list(self.screen.watchlist)

    @property
    def priority_keys(self) -> list[str]:
        return list(self.intent.priority)

    # -- state --------------------------------------------------------------------------------
    def _set_state(self, state: State) -> None:
        if state == self.state:
            return
        self.state = state
        evt = self._connected_evt
        if evt is not None:
            if state == "connected":
                evt.set()
            else:
                evt.clear()
        if self.on_state is not None:
            try:
                self.on_state(state)
            except Exception as exc:  # a callback bug must not kill the supervisor
                self.stats.error_log.append(f"on_state raised {exc!r}")

    def _events(self) -> asyncio.Event:
        if self._connected_evt is None:
            self._connected_evt = asyncio.Event()
            if self.state == "connected":
                self._connected_evt.set()
        return self._connected_evt

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """True once connected (and, when reconnecting, restored); False after ``timeout`` s."""
        try:
            await asyncio.wait_for(self._events().wait(), timeout)
        except TimeoutError:
            return False
        return True

    @property
    def connected(self) -> bool:
        return self._reader is not None and not self._reader.done()

    def _alive(self) -> bool:
        """Anything more may still be rendered."""
        return self.connected

    # -- one connection -----------------------------------------------------------------------
    def _attempt(self, connect_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The URL and ``websockets.connect`` arguments of the next attempt, with the latest
        token: the provider's, else the one the node last took in-band, else the first."""
        url = self.url
        if self.token_provider is not None:
            url = with_token(url, self.token_provider())
        elif self.upkeep.token is not None:
            url, connect_kwargs = with_bearer(url, connect_kwargs, self.upkeep.token)
        self._token = presented_token(url, connect_kwargs)
        return url, connect_kwargs

    async def _open(self, connect_kwargs: dict[str, Any]) -> ClientConnection:
        url, connect_kwargs = self._attempt(connect_kwargs)
        self._attempt_started_ns = self.clock.now_ns()
        return await websockets.connect(
            url,
            compression=None,
            open_timeout=self._open_timeout,
            max_size=8 * 1024 * 1024,  # hello carries the whole dictionary
            max_queue=256,
            **connect_kwargs,
        )

    async def connect(self, **connect_kwargs: Any) -> codec.Hello:
        """Open the connection and wait for the hello (its dictionary names every symbol).
        ``connect_kwargs`` go to ``websockets.connect`` (e.g. ``sock=`` for a tuned socket)."""
        self._events()
        self._hello_ready = asyncio.get_running_loop().create_future()
        self._set_state("connecting")
        try:
            self._ws = ws = await self._open(connect_kwargs)
        except BaseException:
            self._set_state("closed")
            raise
        self._reset_connection()
        self._reader = asyncio.create_task(self._read_loop(ws))
        try:
            hello = await asyncio.wait_for(self._hello_ready, self._open_timeout)
        except BaseException:  # no hello, or one this client cannot speak: nothing to keep
            await self.close()
            raise
        await self.upkeep.open(ws.send, self._token)  # max_hz first, then the timers
        if self._reader is not None and not self._reader.done():
            self._set_state("connected")
        return hello

    async def close(self) -> None:
        await self.upkeep.wait_closed()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._set_state("closed")

    def _reset_connection(self) -> None:
        """A new connection: the screen's chain starts afresh (its glass is kept)."""
        self.screen.new_connection()
        self._hello_at_ns = None
        self._conn_close = None

    # -- requests -----------------------------------------------------------------------------
    async def _ask(self, request: Request, timeout: float = REQUEST_TIMEOUT_S) -> Answer:
        """Send ``request`` (built by the intent); its Answer once the ACK comes (REFUSED, if
        any, comes first). ServerError if the node refused it whole; KeysRefused if it refused
        every key. Between connections the intent stands and the request is not sent."""
        req = request.req
        try:
            ws = self._ws
            if ws is None:
                if self.reconnect:
                    raise NotConnectedError("not connected (restored on the next connection)")
                raise RuntimeError("not connected")
            fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            self._pending[req] = fut
            await ws.send(encode_request(request))
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(req, None)
            self.intent.abandon(req)

    async def subscribe(self, keys: Iterable[str]) -> Answer:
        """Subscribe ``keys``: the Answer lists what was applied and what was refused and why
        (a malformed or unknown key, over the limit). Refused keys are not held."""
        return await self._ask(self.intent.subscribe(list(keys)))

    async def unsubscribe(self, keys: Iterable[str]) -> Answer:
        return await self._ask(self.intent.unsubscribe(list(keys)))

    async def set_priority(self, keys: Iterable[str], on: bool = True) -> Answer:
        """Mark (``on``) or unmark ``keys`` as order-ticket symbols; keys refused (not
        subscribed, over the limit, unknown) are not marked."""
        return await self._ask(self.intent.set_priority(list(keys), on))

    async def updates(self) -> AsyncIterator[Quote]:
        """Every rendered quote, in render order (bounded: overflow drops the oldest). With
        ``reconnect=True`` it spans reconnects and ends only after ``close()``."""
        if self._queue is None:
            self._queue = asyncio.Queue(self._queue_size)
        while True:
            if self._queue.empty() and not self._alive():
                return
            try:
                yield await asyncio.wait_for(self._queue.get(), 0.5)
            except TimeoutError:
                continue

    # -- receiving ----------------------------------------------------------------------------
    async def _read_loop(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                if isinstance(message, str):
                    self.stats.errors += 1
                    continue
                try:
                    msg = codec.decode_message(message)
                except codec.CodecError as exc:
                    self.stats.errors += 1
                    self.stats.error_log.append(f"undecodable message: {exc}")
                    continue
                self._on_message(msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.upkeep.close()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))
            if self._hello_ready is not None and not self._hello_ready.done():
                self._hello_ready.set_exception(ConnectionError("closed before hello"))
            if not self.reconnect:
                self._set_state("closed")

    def _on_message(self, msg: codec.ServerMessage) -> None:
        self.screen.staleness.heard()  # every kind feeds the watchdog; the view reads the rest
        if isinstance(msg, codec.Ack):
            if not self.upkeep.answer(msg):
                self._answer(msg.req, self.intent.acked(msg))
        elif isinstance(msg, codec.Refused):
            self.intent.refused(msg)  # its ACK follows and completes the request
        elif isinstance(msg, codec.Error):
            self.stats.errors += 1
            self.stats.error_log.append(f"{msg.code}: {msg.message}")
            if not self.upkeep.answer(msg):
                self._answer(msg.req, self.intent.errored(msg))
        elif isinstance(msg, codec.Close):
            self.close_message = msg
            self._conn_close = msg
        elif isinstance(msg, codec.Hello):
            self._on_hello(msg)
        else:
            if isinstance(msg, codec.Frame):
                self._first_frame()
            step = self.screen.receive(msg)
            for quote in step.rendered:
                self._show(quote)
            if step.resync and not self._resync_scheduled and self._ws is not None:
                # One Subscribe per loop turn for every gap found in it: a burst of gaps must
                # not trip the node's request rate limit (20/s).
                self._resync_scheduled = True
                asyncio.get_running_loop().call_soon(self._request_resync)

    def _answer(self, req: int, outcome: Answer | Exception | None) -> None:
        fut = self._pending.get(req)
        if outcome is None or fut is None or fut.done():
            return
        if isinstance(outcome, Exception):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)

    def _first_frame(self) -> None:
        if self._hello_at_ns is not None and self.stats.first_frame_seconds is None:
            took = (self.clock.now_ns() - self._hello_at_ns) / NS
            self.stats.first_frame_seconds = took
            self.stats.first_frame_seconds_history.append(took)

    def _on_hello(self, msg: codec.Hello) -> None:
        if msg.protocol not in PROTOCOLS:
            # docs/wire.md: a client closes on a protocol it does not implement, rather than
            # misreading messages whose meaning changed.
            why = f"the server speaks wire protocol {msg.protocol}; this SDK {sorted(PROTOCOLS)}"
            self.stats.errors += 1
            self.stats.error_log.append(why)
            if self._hello_ready is not None and not self._hello_ready.done():
                self._hello_ready.set_exception(ConnectionError(why))
            return
        now = self.clock.now_ns()
        self.screen.adopt(msg)
        self._hello_at_ns = now
        self.stats.connects += 1
        if self.stats.connects > 1:
            self.stats.reconnects += 1
        took = (now - self._attempt_started_ns) / NS
        self.stats.connect_seconds = took
        self.stats.connect_seconds_history.append(took)
        self.stats.first_frame_seconds = None
        if self._hello_ready is not None and not self._hello_ready.done():
            self._hello_ready.set_result(msg)

    def _request_resync(self) -> None:
        """Ask for the snapshots the screen says are due (gapped, or asked long ago)."""
        self._resync_scheduled = False
        ws = self._ws
        if ws is None:
            return  # the reconnect re-subscribes everything
        for chunk in chunks(self.screen.take_resyncs(), MAX_KEYS):
            request = Subscribe(req=self.intent.next_req(), keys=chunk)
            task = asyncio.get_running_loop().create_task(ws.send(encode_request(request)))
            self._bg.add(task)
            task.add_done_callback(self._bg_done)

    def _bg_done(self, task: asyncio.Task[Any]) -> None:
        self._bg.discard(task)
        if not task.cancelled():
            task.exception()  # a send on a closing socket: the reconnect restores it

    def _show(self, quote: Quote) -> None:
        """A rendered quote to the caller: the callback, then the bounded queue. The callback
        runs once per quote after the whole message is applied: one that raises must not cost
        the rest of the message's quotes their callback and their place in the queue."""
        if self.on_render is not None:
            try:
                self.on_render(quote)
            except Exception as exc:  # a callback bug must not lose quotes (as on_state)
                self.stats.error_log.append(f"on_render raised {exc!r}")
        queue = self._queue
        if queue is not None:
            if queue.full():
                queue.get_nowait()
                self.stats.dropped_updates += 1
            queue.put_nowait(quote)
