"""The terminal SDK's client: connect, subscribe, and render only what moves forward.

``TerminalClient`` is the public face of the SDK (docs/sdk.md). Every decision lives in a
Sans-I/O piece it drives: ``view.TerminalView`` decides what reaches the glass (the ordering
guard, the delta chain, gaps and their resyncs), ``intent.Intent`` what the terminal holds and
how the node's answers settle it, ``reconnect.ReconnectPolicy`` how long to wait before trying
again. ``connection.TerminalConnection`` moves bytes for one connection; this module adds the
supervisor.

With ``reconnect=True`` a supervisor task owns the connection: when it ends for any reason but
our own ``close()``, the client waits what the policy says (the server's ``reconnect_after_ms``
hint, an HTTP 503's Retry-After, full-jitter exponential backoff, whichever is longest),
reconnects, re-subscribes every held key, re-applies priority and re-hydrates from the server's
snapshots. The glass is held *across* reconnects, so a snapshot older than the screen is never
rendered; the chain starts afresh with each connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from monotape.clock import Clock
from monotape.platform.sdk.answers import (
    Answer,
    KeysRefused,
    NotConnectedError,
    ServerError,
)
from monotape.platform.sdk.connection import NS, STATES, State, TerminalConnection
from monotape.platform.sdk.reconnect import ReconnectPolicy, hint_from_reason, parse_retry_after
from monotape.platform.sdk.staleness import STALE_AFTER_MS
from monotape.platform.sdk.stats import SdkStats
from monotape.platform.sdk.upkeep import FULL_RATE_HZ, RefreshToken
from monotape.platform.sdk.view import Quote
from monotape.platform.wire import codec

# The names a terminal's code needs, in one import (tape, the tests and docs/sdk.md use them).
__all__ = [
    "STATES",
    "Answer",
    "KeysRefused",
    "NotConnectedError",
    "Quote",
    "SdkStats",
    "ServerError",
    "State",
    "TerminalClient",
]


class TerminalClient(TerminalConnection):
    """A terminal: one connection, or (``reconnect=True``) a supervised succession of them."""

    def __init__(
        self,
        url: str,
        *,
        reconnect: bool = False,
        backoff_base_s: float = 0.25,
        backoff_cap_s: float = 15.0,
        rng: random.Random | None = None,
        token_provider: Callable[[], str] | None = None,
        on_render: Callable[[Quote], None] | None = None,
        on_state: Callable[[State], None] | None = None,
        queue_size: int = 10_000,
        open_timeout: float = 10.0,
        stable_after_s: float = 1.0,
        clock: Clock | None = None,
        max_hz: float = FULL_RATE_HZ,
        refresh_token: RefreshToken | None = None,
        stale_after_ms: int = STALE_AFTER_MS,
    ) -> None:
        rng = rng or random.Random()
        self.policy = ReconnectPolicy(
            base_s=backoff_base_s,
            cap_s=backoff_cap_s,
            stable_after_s=stable_after_s,
            rng=rng,
        )
        super().__init__(
            url,
            token_provider=token_provider,
            on_render=on_render,
            on_state=on_state,
            queue_size=queue_size,
            open_timeout=open_timeout,
            clock=clock,
            max_hz=max_hz,
            refresh_token=refresh_token,
            rng=rng,
        )
        self.screen.staleness.stale_after_ns = stale_after_ms * 1_000_000  # the watchdog
        self.reconnect = reconnect
        self._supervisor: asyncio.Task[None] | None = None
        self._first_hello: asyncio.Future[codec.Hello] | None = None
        self._closing = False
        self._wake: asyncio.Event | None = None

    def stale(self, key: str) -> bool:
        """Whether ``key``'s price on screen is stale now: no message for ``stale_after_ms``
        (the SDK's own watchdog), or the server said STALE (grid stalled, venue down)."""
        return self.screen.stale(key)

    def stale_since_ms(self, key: str) -> int | None:
        """Since when ``key`` is stale (wall ms), None while it is live."""
        return self.screen.staleness.since_ms(key)

    @property
    def connected(self) -> bool:
        if self.reconnect:
            return self.state == "connected"
        return super().connected

    def _alive(self) -> bool:
        if self.reconnect:
            return self._supervisor is not None and not self._supervisor.done()
        return super()._alive()

    async def connect(self, **connect_kwargs: Any) -> codec.Hello:
        """Open the connection and wait for the hello (its dictionary names every symbol).
        ``connect_kwargs`` go to ``websockets.connect`` (e.g. ``sock=`` for a tuned socket).

        With ``reconnect=True`` this starts the supervisor and returns the first connection's
        hello; failed attempts are retried by the policy, so bound it with
        ``asyncio.wait_for`` if need be (a ``connect()`` that is cancelled closes the client).
        A ``sock=`` is used for the first attempt only."""
        if not self.reconnect:
            return await super().connect(**connect_kwargs)
        if self._supervisor is not None:
            raise RuntimeError("already started")
        self._events()
        self._closing = False
        self._wake = asyncio.Event()
        first: asyncio.Future[codec.Hello] = asyncio.get_running_loop().create_future()
        self._first_hello = first
        self._supervisor = asyncio.create_task(self._supervise(dict(connect_kwargs)))
        try:
            return await asyncio.shield(first)
        except asyncio.CancelledError:
            await self.close()
            raise

    async def close(self) -> None:
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        sup = self._supervisor
        if sup is not None and not sup.done():
            try:  # a graceful end first; a supervisor inside a slow handshake is cancelled
                await asyncio.wait_for(asyncio.shield(sup), 3.0)
            except (TimeoutError, Exception):
                sup.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sup
        await super().close()

    # -- the supervisor (reconnect=True) ------------------------------------------------------
    async def _supervise(self, connect_kwargs: dict[str, Any]) -> None:
        policy = self.policy
        try:
            while not self._closing:
                self._set_state("connecting")
                try:
                    ws = await self._open(connect_kwargs)
                except websockets.InvalidURI:
                    raise
                except websockets.InvalidStatus as exc:
                    status = exc.response.status_code
                    header = exc.response.headers.get("Retry-After")
                    retry_after = parse_retry_after(header, self.clock.wall_ns() / NS)
                    wait = policy.refused(status, retry_after)
                    if status == 503:
                        self.stats.refused_503 += 1
                    elif status == 401:
                        self.stats.refused_401 += 1
                    else:
                        self.stats.connect_errors += 1
                    self.stats.error_log.append(f"upgrade refused: HTTP {status}")
                except Exception as exc:  # refused socket, timeout, handshake failure
                    self.stats.connect_errors += 1
                    self.stats.error_log.append(f"connect failed: {exc!r}")
                    wait = policy.failed()
                else:
                    if self._closing:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(ws.close(), 2.0)
                        break
                    up_s, hint_ms = await self._run_connection(ws)
                    wait = policy.ended(up_s, hint_ms)
                finally:
                    connect_kwargs.pop("sock", None)  # a socket serves one attempt only
                if self._closing:
                    break
                self.stats.backoff_history.append((wait.attempt, wait.delay_s, wait.why))
                self.stats.backoff_attempt = policy.attempt
                self.stats.last_backoff_s = wait.delay_s
                self._set_state("backoff")
                assert self._wake is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait.delay_s)
        except Exception as exc:  # InvalidURI: a configuration error, retrying cannot help
            self.stats.error_log.append(f"supervisor stopped: {exc!r}")
            first = self._first_hello
            if first is not None and not first.done():
                first.set_exception(exc)
        finally:
            first = self._first_hello
            if first is not None and not first.done():
                first.set_exception(ConnectionError("client closed"))
            self._set_state("closed")

    async def _run_connection(self, ws: ClientConnection) -> tuple[float | None, int | None]:
        """Serve one connection to its end: (seconds from its hello to its end, None if it
        never got one; the reconnect_after_ms hint its close carried)."""
        hello_fut: asyncio.Future[codec.Hello] = asyncio.get_running_loop().create_future()
        self._hello_ready = hello_fut
        self._reset_connection()
        self._ws = ws
        reader = asyncio.create_task(self._read_loop(ws))
        self._reader = reader
        got_hello = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(hello_fut), self._open_timeout)
                got_hello = True
            except (TimeoutError, ConnectionError) as exc:
                self.stats.connect_errors += 1
                self.stats.error_log.append(f"no hello: {exc!r}")
            if got_hello:
                if not self._closing:
                    await self.upkeep.open(ws.send, self._token)  # max_hz, then the timers
                    await self._restore()
                if not reader.done() and not self._closing:
                    self._set_state("connected")
                    first = self._first_hello
                    if first is not None and not first.done():
                        first.set_result(hello_fut.result())
                if not self._closing:
                    await asyncio.wait({reader})
        finally:
            self._ws = None
            self.upkeep.close()
            if not reader.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 2.0)
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if hello_fut.done() and not hello_fut.cancelled():
                hello_fut.exception()  # retrieved: a connection that died before its hello
        up_s: float | None = None
        if got_hello:
            hello_at = self._hello_at_ns
            up_s = (self.clock.now_ns() - hello_at) / NS if hello_at is not None else 0.0
        if self._conn_close is not None:
            hint_ms: int | None = self._conn_close.reconnect_after_ms
        else:
            hint_ms = hint_from_reason(ws.close_reason)
        if not self._closing:
            self.stats.closes += 1
            self.stats.last_close_code = ws.close_code
            self.stats.last_close_hint_ms = hint_ms
            if hint_ms is not None:
                self.stats.closes_with_hint += 1
        return up_s, hint_ms

    async def _restore(self) -> None:
        """Re-subscribe every held key, then re-apply priority (the intent settles what the
        node refuses: a key past a lower limit on this node is dropped and logged)."""
        intent = self.intent
        try:
            for chunk in intent.restore_watchlist():
                with contextlib.suppress(ServerError):
                    await self._ask(intent.resubscribe(chunk))
            for chunk in intent.restore_marks():
                with contextlib.suppress(ServerError):
                    await self._ask(intent.remark(chunk))
        except (ConnectionError, TimeoutError, websockets.ConnectionClosed) as exc:
            self.stats.error_log.append(f"restore interrupted: {exc!r}")
