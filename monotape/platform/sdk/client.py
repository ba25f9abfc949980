"""The terminal SDK: connect, subscribe, and render only what moves forward.

It runs the sequencer's own guard (``monotape.platform.core.admit``) in front of the glass: a record
at or below the version on screen is never rendered. The conflated stream is a base-chained
delta stream; priority updates are absolute records. The SDK keeps both:

- ``chain``: the values of the last conflated record per symbol, the base the next delta must
  name. A delta naming another base is a *gap*: it is not applied, and the SDK re-subscribes the
  symbol to get a snapshot (docs/wire.md).
- ``shown``: what is on the glass. Any record (frame, snapshot or priority) whose version is
  above the shown version is rendered; others are counted, never rendered.

Requests are answered key by key (docs/wire.md, "How a request is answered"): ``subscribe``
returns an ``Answer`` naming the keys applied and the keys refused with why; refused keys are
never held (so never restored), and ``KeysRefused`` is raised only when nothing was applied.

``stats.regressions`` counts records a naive client would have rendered backwards: a conflated
record below its own chain, or a priority update below the previous one. It must stay 0.

With ``reconnect=True`` a supervisor task owns the connection (docs/sdk.md): when it ends for
any reason but our own ``close()``, the client waits (``next_delay``: the server's
``reconnect_after_ms`` hint, an HTTP 503's Retry-After, full-jitter exponential backoff,
whichever is longest), reconnects, re-subscribes every held key, re-applies priority and
re-hydrates from the server's snapshots. ``shown`` is held *across* reconnects, so a snapshot
older than the screen is never rendered; ``chain`` starts afresh with each connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import itertools
import random
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec
import websockets
from websockets.asyncio.client import ClientConnection

from monotape.platform.core.admit import APPLIED, DUPLICATE, VersionGuard
from monotape.platform.model import Instrument, Version
from monotape.platform.wire import codec
from monotape.platform.wire.requests import (
    MAX_KEYS,
    MAX_PRIORITY_KEYS,
    Request,
    SetPriority,
    Subscribe,
    Unsubscribe,
    encode_request,
)

__all__ = [
    "PROTOCOLS",
    "STATES",
    "Answer",
    "KeysRefused",
    "NotConnectedError",
    "Quote",
    "SdkStats",
    "ServerError",
    "State",
    "TerminalClient",
    "hint_from_reason",
    "next_delay",
    "parse_retry_after",
    "with_token",
]

# Protocol 1 servers refuse a request whole (ERROR); 2 adds REFUSED, per key. Both are
# understood: an ERROR is a ServerError either way.
PROTOCOLS: Final = frozenset({1, 2})
RESYNC_RETRY_S = 2.0  # a gapped symbol's snapshot not here by then is asked for again
SOURCE_SNAPSHOT = "snapshot"
SOURCE_FRAME = "frame"
SOURCE_PRIORITY = "priority"

State = Literal["idle", "connecting", "connected", "backoff", "closed"]
STATES: Final[tuple[State, ...]] = ("idle", "connecting", "connected", "backoff", "closed")

HISTORY: Final = 100  # per-attempt timings kept in the stats lists
MAX_HINT_S: Final = 600.0  # a server hint (or Retry-After) longer than this is clamped
_MAX_EXP: Final = 62  # 2**attempt beyond this is past any cap; avoids float overflow
_HINT_RE: Final = re.compile(r"reconnect_after_ms=(\d+)")


class Quote(msgspec.Struct, frozen=True, gc=False):
    """One rendered line of a watchlist. Prices are scaled ints; ``price()`` gives decimals."""

    key: str
    iid: int
    epoch: int
    seq: int
    bid: int
    ask: int
    last: int
    size: int
    source: str
    decimals: int

    @property
    def version(self) -> Version:
        return (self.epoch, self.seq)

    def price(self, scaled: int) -> float:
        return scaled / float(10**self.decimals)


def _code_name(code: int) -> str:
    """An ErrorCode's name; a code from a newer server is shown as its number, never a crash."""
    member = codec.ErrorCode._value2member_map_.get(code)
    return member.name if member is not None else f"code {code}"


class ServerError(Exception):
    """The server refused a request whole (an ERROR message); ``code``, ``message``."""

    def __init__(self, error: codec.Error) -> None:
        super().__init__(f"{_code_name(error.code)}: {error.message}")
        self.code = error.code
        self.message = error.message


class Answer(msgspec.Struct, frozen=True):
    """The server's answer to a request that it applied (wholly or in part).

    ``subscribed`` and ``priority`` are the connection's counts after the request (as in the
    ACK); ``applied`` the request's keys that took effect (each once, in request order);
    ``refused`` the others, each with its ``codec.ErrorCode`` and the server's reason."""

    req: int
    subscribed: int
    priority: int
    applied: list[str]
    refused: list[codec.Refusal]


class KeysRefused(ServerError):
    """Every key of the request was refused, so nothing was applied. ``answer.refused`` says
    why for each; ``code`` is the first key's."""

    def __init__(self, answer: Answer) -> None:
        first = answer.refused[0]
        shown = "; ".join(f"{r.key}: {r.reason} ({_code_name(r.code)})" for r in answer.refused[:5])
        more = len(answer.refused) - 5
        super().__init__(
            codec.Error(first.code, shown + (f" (+{more} more)" if more > 0 else ""), answer.req)
        )
        self.answer = answer


class NotConnectedError(ConnectionError):
    """A request while a reconnecting client is between connections. The request's intent is
    kept (held keys, priority) and applied on the next connection."""


# -- the reconnect policy, pure ---------------------------------------------------------------


def next_delay(
    attempt: int,
    hint_ms: int | None,
    retry_after_s: float | None,
    base: float,
    cap: float,
    rng: random.Random,
    *,
    unauthorized: bool = False,
) -> float:
    """Seconds to wait before connection attempt ``attempt + 1``.

    The longest of: the server's ``reconnect_after_ms`` hint, an HTTP 503's Retry-After, and a
    full-jitter exponential backoff ``uniform(0, min(cap, base * 2**attempt))``. Hints are
    honoured above the cap (the server knows its own load) but clamped to ``MAX_HINT_S``.
    ``unauthorized`` (HTTP 401): retrying soon cannot help, so wait at the cap
    (``uniform(cap / 2, cap)``: still jittered, so expired desks do not come back in lockstep).
    """
    attempt = min(max(0, attempt), _MAX_EXP)
    base = max(0.0, base)
    cap = max(0.0, cap)
    floor = 0.0
    if hint_ms is not None and hint_ms > 0:
        floor = min(hint_ms / 1000.0, MAX_HINT_S)
    if retry_after_s is not None and retry_after_s > 0:
        floor = max(floor, min(float(retry_after_s), MAX_HINT_S))
    if unauthorized:
        backoff = rng.uniform(cap / 2, cap)
    else:
        backoff = rng.uniform(0.0, min(cap, base * 2.0**attempt))
    return max(floor, backoff)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date; None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def hint_from_reason(reason: str | None) -> int | None:
    """The ``reconnect_after_ms=N`` the server puts in its WebSocket close reason."""
    if not reason:
        return None
    m = _HINT_RE.search(reason)
    return int(m.group(1)) if m else None


def with_token(url: str, token: str) -> str:
    """``url`` with its ``token`` query parameter set to ``token`` (appended if absent)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    query.append(("token", token))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def _subscribe(keys: list[str], req: int) -> Request:
    return Subscribe(req=req, keys=keys)


def _priority(keys: list[str], req: int) -> Request:
    return SetPriority(req=req, keys=keys)


@dataclass
class SdkStats:
    frames: int = 0
    snapshots: int = 0
    priority: int = 0
    heartbeats: int = 0
    records: int = 0
    rendered: int = 0
    duplicates: int = 0  # already on screen (e.g. via the priority path)
    stale: int = 0  # older than the screen: discarded by the guard
    gaps: int = 0
    regressions: int = 0  # must stay 0
    errors: int = 0
    refused_keys: int = 0  # keys of our requests the server refused (REFUSED), each with why
    dropped_updates: int = 0  # iterator queue overflow (the view stays exact)
    last_frame_no: int = 0
    error_log: deque[str] = field(default_factory=lambda: deque(maxlen=32))
    # -- connection lifecycle (docs/sdk.md, "Stats") -----------------------------------------
    connects: int = 0  # connections that got a hello
    reconnects: int = 0  # of which after the first
    refused_503: int = 0  # upgrades refused with 503 (draining / over the admission rate)
    refused_401: int = 0  # upgrades refused with 401 (bad or expired token)
    connect_errors: int = 0  # any other failed attempt (refused socket, timeout, no hello)
    closes: int = 0  # connections that ended (not by our close())
    closes_with_hint: int = 0  # ... whose close carried reconnect_after_ms
    last_close_code: int | None = None
    last_close_hint_ms: int | None = None
    resubscribed: int = 0  # keys re-subscribed on reconnects
    backoff_attempt: int = 0  # the backoff exponent of the next wait (0 after a stable connection)
    last_backoff_s: float = 0.0
    connect_seconds: float | None = None  # latest connection: attempt start -> hello
    first_frame_seconds: float | None = None  # latest connection: hello -> first FRAME
    connect_seconds_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    first_frame_seconds_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    # (attempt, delay_s, why) of each wait; why: "close", "503", "401", "error"
    backoff_history: deque[tuple[int, float, str]] = field(
        default_factory=lambda: deque(maxlen=HISTORY)
    )


class TerminalClient:
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
    ) -> None:
        if backoff_base_s < 0 or backoff_cap_s < 0:
            raise ValueError("backoff_base_s and backoff_cap_s must be >= 0")
        self.url = url
        self.reconnect = reconnect
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.stable_after_s = stable_after_s
        self.token_provider = token_provider
        self.on_render = on_render
        self.on_state = on_state
        self.stats = SdkStats()
        self.view: dict[str, Quote] = {}
        self.instruments: dict[int, Instrument] = {}
        self.ids: dict[str, int] = {}
        self.hello: codec.Hello | None = None
        self.close_message: codec.Close | None = None
        self.state: State = "idle"
        self._rng = rng or random.Random()
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._hello_ready: asyncio.Future[codec.Hello] | None = None
        self._first_hello: asyncio.Future[codec.Hello] | None = None
        self._pending: dict[int, asyncio.Future[codec.Ack]] = {}
        self._refusals: dict[int, list[codec.Refusal]] = {}  # REFUSED ahead of its ACK, by req
        self._req = itertools.count(1)
        self._chain: dict[int, tuple[int, int, int, int, int, int]] = {}
        self._shown = VersionGuard()
        self._prio_last = VersionGuard()
        self._resyncing: dict[int, float] = {}  # gapped iid -> when its snapshot was asked for
        self._resync_scheduled = False
        self._queue: asyncio.Queue[Quote] | None = None
        self._queue_size = queue_size
        # what the caller holds: restored on every reconnect (dicts keep the caller's order)
        self._held: dict[str, None] = {}
        self._prio: dict[str, None] = {}
        self._closing = False
        self._wake: asyncio.Event | None = None
        self._connected_evt: asyncio.Event | None = None
        self._attempt_started = 0.0
        self._hello_at: float | None = None
        self._conn_close: codec.Close | None = None  # the CLOSE message of this connection
        self._bg: set[asyncio.Task[Any]] = set()

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

    # -- connection ---------------------------------------------------------------------------
    def _attempt_url(self) -> str:
        if self.token_provider is None:
            return self.url
        return with_token(self.url, self.token_provider())

    async def _open(self, url: str, connect_kwargs: dict[str, Any]) -> ClientConnection:
        self._attempt_started = time.monotonic()
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
        ``connect_kwargs`` go to ``websockets.connect`` (e.g. ``sock=`` for a tuned socket).

        With ``reconnect=True`` this starts the supervisor and returns the first connection's
        hello; failed attempts are retried by the policy, so bound it with
        ``asyncio.wait_for`` if need be (a ``connect()`` that is cancelled closes the client).
        A ``sock=`` is used for the first attempt only."""
        if self.reconnect:
            return await self._start_supervisor(connect_kwargs)
        self._events()
        loop = asyncio.get_running_loop()
        self._hello_ready = loop.create_future()
        self._set_state("connecting")
        try:
            self._ws = await self._open(self._attempt_url(), connect_kwargs)
        except BaseException:
            self._set_state("closed")
            raise
        self._reset_connection()
        self._reader = asyncio.create_task(self._read_loop(self._ws))
        try:
            hello = await asyncio.wait_for(self._hello_ready, self._open_timeout)
        except BaseException:  # no hello, or one this client cannot speak: nothing to keep
            await self.close()
            raise
        if self._reader is not None and not self._reader.done():
            self._set_state("connected")
        return hello

    async def _start_supervisor(self, connect_kwargs: dict[str, Any]) -> codec.Hello:
        if self._supervisor is not None:
            raise RuntimeError("already started")
        self._events()
        loop = asyncio.get_running_loop()
        self._closing = False
        self._wake = asyncio.Event()
        first: asyncio.Future[codec.Hello] = loop.create_future()
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
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self._set_state("closed")

    @property
    def connected(self) -> bool:
        if self.reconnect:
            return self.state == "connected"
        return self._reader is not None and not self._reader.done()

    def _alive(self) -> bool:
        """Anything more may still be rendered."""
        if self.reconnect:
            return self._supervisor is not None and not self._supervisor.done()
        return self.connected

    def _reset_connection(self) -> None:
        """A new connection: its frames chain from its own snapshots. ``_shown`` (the glass)
        and ``_prio_last`` are deliberately kept: versions on screen never go backwards."""
        self._chain.clear()
        self._resyncing.clear()
        self._hello_at = None
        self._conn_close = None

    # -- the supervisor (reconnect=True) ------------------------------------------------------
    async def _supervise(self, connect_kwargs: dict[str, Any]) -> None:
        attempt = 0
        try:
            while not self._closing:
                self._set_state("connecting")
                hint_ms: int | None = None
                retry_after: float | None = None
                why = "error"
                try:
                    ws = await self._open(self._attempt_url(), connect_kwargs)
                except websockets.InvalidURI:
                    raise
                except websockets.InvalidStatus as exc:
                    status = exc.response.status_code
                    retry_after = parse_retry_after(exc.response.headers.get("Retry-After"))
                    if status == 503:
                        self.stats.refused_503 += 1
                        why = "503"
                    elif status == 401:
                        self.stats.refused_401 += 1
                        why = "401"
                    else:
                        self.stats.connect_errors += 1
                    self.stats.error_log.append(f"upgrade refused: HTTP {status}")
                except Exception as exc:  # refused socket, timeout, handshake failure
                    self.stats.connect_errors += 1
                    self.stats.error_log.append(f"connect failed: {exc!r}")
                else:
                    if self._closing:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(ws.close(), 2.0)
                        break
                    got_hello, uptime, hint_ms = await self._run_connection(ws)
                    why = "close" if got_hello else "error"
                    if got_hello and uptime >= self.stable_after_s:
                        attempt = 0
                finally:
                    connect_kwargs.pop("sock", None)  # a socket serves one attempt only
                if self._closing:
                    break
                delay = next_delay(
                    attempt,
                    hint_ms,
                    retry_after,
                    self.backoff_base_s,
                    self.backoff_cap_s,
                    self._rng,
                    unauthorized=why == "401",
                )
                self.stats.backoff_history.append((attempt, delay, why))
                attempt += 1
                self.stats.backoff_attempt = attempt
                self.stats.last_backoff_s = delay
                self._set_state("backoff")
                assert self._wake is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
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

    async def _run_connection(self, ws: ClientConnection) -> tuple[bool, float, int | None]:
        """Serve one connection to its end: (got a hello, seconds up, the close's hint)."""
        loop = asyncio.get_running_loop()
        hello_fut: asyncio.Future[codec.Hello] = loop.create_future()
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
            if not reader.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 2.0)
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if hello_fut.done() and not hello_fut.cancelled():
                hello_fut.exception()  # retrieved: a connection that died before its hello
        uptime = time.monotonic() - self._hello_at if self._hello_at is not None else 0.0
        hint_ms: int | None = None
        if self._conn_close is not None:
            hint_ms = self._conn_close.reconnect_after_ms
        else:
            hint_ms = hint_from_reason(ws.close_reason)
        if not self._closing:
            self.stats.closes += 1
            self.stats.last_close_code = ws.close_code
            self.stats.last_close_hint_ms = hint_ms
            if hint_ms is not None:
                self.stats.closes_with_hint += 1
        return got_hello, uptime, hint_ms

    async def _restore(self) -> None:
        """Re-subscribe every held key (its snapshot re-hydrates the glass through the guard),
        then re-apply priority. Keys the new dictionary does not know are dropped."""
        unknown = [k for k in self._held if k not in self.ids]
        for k in unknown:
            self._held.pop(k, None)
            self._prio.pop(k, None)
        if unknown:
            self.stats.error_log.append(f"dropped on reconnect (unknown): {unknown[:5]}")
        try:
            for chunk in _chunks(list(self._held), MAX_KEYS):
                try:
                    answer = await self._request(functools.partial(_subscribe, chunk), chunk)
                except KeysRefused as exc:
                    self._forget(exc.answer.refused)
                except ServerError as exc:
                    self.stats.error_log.append(f"re-subscribe refused: {exc}")
                else:
                    self._forget(answer.refused)  # e.g. over a lower limit on this server
                    self.stats.resubscribed += len(answer.applied)
            prio = [k for k in self._prio if k in self._held]
            for chunk in _chunks(prio, MAX_PRIORITY_KEYS):
                try:
                    answer = await self._request(functools.partial(_priority, chunk), chunk)
                except KeysRefused as exc:
                    self._unmark(exc.answer.refused, {}, True)
                except ServerError as exc:
                    self.stats.error_log.append(f"priority refused: {exc}")
                else:
                    self._unmark(answer.refused, {}, True)
        except (ConnectionError, TimeoutError, websockets.ConnectionClosed) as exc:
            self.stats.error_log.append(f"restore interrupted: {exc!r}")

    # -- requests -----------------------------------------------------------------------------
    async def _request(
        self, make: Callable[[int], Request], keys: Sequence[str], timeout: float = 10.0
    ) -> Answer:
        """Send one request for ``keys``; its Answer once the ACK comes (REFUSED, if any, comes
        first). ServerError if the server refused it whole; KeysRefused if it refused every
        key."""
        if self._ws is None:
            if self.reconnect:
                raise NotConnectedError("not connected (restored on the next connection)")
            raise RuntimeError("not connected")
        req = next(self._req)
        fut: asyncio.Future[codec.Ack] = asyncio.get_running_loop().create_future()
        self._pending[req] = fut
        try:
            await self._ws.send(encode_request(make(req)))
            ack = await asyncio.wait_for(fut, timeout)
            refused = self._refusals.get(req, [])
        finally:
            self._pending.pop(req, None)
            self._refusals.pop(req, None)
        gone = {r.key for r in refused}
        applied = [k for k in dict.fromkeys(keys) if k not in gone]
        answer = Answer(ack.req, ack.subscribed, ack.priority, applied, refused)
        if refused and not applied:
            raise KeysRefused(answer)
        return answer

    def _forget(self, refused: Iterable[codec.Refusal]) -> None:
        """A refused key is not held: it is neither shown nor restored on a reconnect."""
        for r in refused:
            self._held.pop(r.key, None)
            self._prio.pop(r.key, None)
            self.view.pop(r.key, None)
            self.stats.refused_keys += 1
            self.stats.error_log.append(f"refused {r.key}: {r.reason} ({_code_name(r.code)})")

    async def subscribe(self, keys: Iterable[str]) -> Answer:
        """Subscribe ``keys``: the Answer lists what was applied and what was refused and why
        (a malformed or unknown key, over the limit). Refused keys are not held."""
        keys = list(keys)
        new = [k for k in keys if k not in self._held]
        for k in keys:
            self._held[k] = None
        try:
            answer = await self._request(lambda r: Subscribe(req=r, keys=keys), keys)
        except KeysRefused as exc:
            self._forget(exc.answer.refused)
            raise
        except ServerError:
            for k in new:  # refused whole: nothing of it is held
                self._held.pop(k, None)
            raise
        self._forget(answer.refused)
        return answer

    async def unsubscribe(self, keys: Iterable[str]) -> Answer:
        keys = list(keys)
        for k in keys:
            self.view.pop(k, None)
            self._held.pop(k, None)
            self._prio.pop(k, None)
        return await self._request(lambda r: Unsubscribe(req=r, keys=keys), keys)

    async def set_priority(self, keys: Iterable[str], on: bool = True) -> Answer:
        """Mark (``on``) or unmark ``keys`` as order-ticket symbols; keys refused (not
        subscribed, over the limit, unknown) are not marked."""
        keys = list(keys)
        before = dict(self._prio)
        for k in keys:
            if on:
                self._prio[k] = None
            else:
                self._prio.pop(k, None)
        try:
            answer = await self._request(lambda r: SetPriority(req=r, keys=keys, on=on), keys)
        except KeysRefused as exc:
            self._unmark(exc.answer.refused, before, on)
            raise
        except ServerError:
            self._prio = before
            raise
        self._unmark(answer.refused, before, on)
        return answer

    def _unmark(self, refused: Iterable[codec.Refusal], before: dict[str, None], on: bool) -> None:
        """Priority refused for a key: the subscription stands, only the mark is undone."""
        for r in refused:
            if on and r.key not in before:
                self._prio.pop(r.key, None)
            self.stats.refused_keys += 1
            self.stats.error_log.append(f"refused {r.key}: {r.reason} ({_code_name(r.code)})")

    @property
    def held_keys(self) -> list[str]:
        """The keys this client holds (restored on reconnect), in subscription order."""
        return list(self._held)

    @property
    def priority_keys(self) -> list[str]:
        return list(self._prio)

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
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))
            if self._hello_ready is not None and not self._hello_ready.done():
                self._hello_ready.set_exception(ConnectionError("closed before hello"))
            if not self.reconnect:
                self._set_state("closed")

    def _on_message(self, msg: codec.ServerMessage) -> None:
        if isinstance(msg, codec.Frame):
            self.stats.frames += 1
            self.stats.last_frame_no = msg.frame_no
            if self._hello_at is not None and self.stats.first_frame_seconds is None:
                took = time.monotonic() - self._hello_at
                self.stats.first_frame_seconds = took
                self.stats.first_frame_seconds_history.append(took)
            for rec in msg.records:
                self._on_chain_record(rec, SOURCE_FRAME)
        elif isinstance(msg, codec.PriorityUpdate):
            self.stats.priority += 1
            rec = msg.record
            version = (rec.epoch, rec.seq)
            if self._prio_last.check(rec.iid, version) is not APPLIED:
                self.stats.regressions += 1
            self._render(rec.iid, version, rec.bid, rec.ask, rec.last, rec.size, SOURCE_PRIORITY)
        elif isinstance(msg, codec.Snapshot):
            self.stats.snapshots += 1
            for rec in msg.records:
                self._resyncing.pop(rec.iid, None)
                self._on_chain_record(rec, SOURCE_SNAPSHOT)
        elif isinstance(msg, codec.Heartbeat):
            self.stats.heartbeats += 1
            if self._resyncing and not self._resync_scheduled:
                self._request_resync()  # once a second: ask again for snapshots that never came
        elif isinstance(msg, codec.Ack):
            fut = self._pending.get(msg.req)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif isinstance(msg, codec.Refused):
            if msg.req in self._pending:  # its ACK follows and completes the request
                self._refusals.setdefault(msg.req, []).extend(msg.keys)
        elif isinstance(msg, codec.Error):
            self.stats.errors += 1
            self.stats.error_log.append(f"{msg.code}: {msg.message}")
            fut = self._pending.get(msg.req)
            if fut is not None and not fut.done():
                fut.set_exception(ServerError(msg))
        elif isinstance(msg, codec.Hello):
            self._on_hello(msg)
        elif isinstance(msg, codec.Close):
            self.close_message = msg
            self._conn_close = msg

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
        now = time.monotonic()
        old_ids = self.ids
        self.hello = msg
        self.instruments = {i.iid: i for i in msg.instruments}
        self.ids = {i.key: i.iid for i in msg.instruments}
        if old_ids and old_ids != self.ids:
            self._remap_guards(old_ids)
        self._hello_at = now
        self.stats.connects += 1
        if self.stats.connects > 1:
            self.stats.reconnects += 1
        took = now - self._attempt_started
        self.stats.connect_seconds = took
        self.stats.connect_seconds_history.append(took)
        self.stats.first_frame_seconds = None
        if self._hello_ready is not None and not self._hello_ready.done():
            self._hello_ready.set_result(msg)

    def _remap_guards(self, old_ids: dict[str, int]) -> None:
        """Another node's dictionary may number symbols differently: carry what is on screen
        over by key, so the guard still holds across the reconnect."""
        for name in ("_shown", "_prio_last"):
            old: VersionGuard = getattr(self, name)
            new = VersionGuard()
            for key, old_iid in old_ids.items():
                held = old.held(old_iid)
                new_iid = self.ids.get(key)
                if held is not None and new_iid is not None:
                    new.check(new_iid, held)
            setattr(self, name, new)

    def _on_chain_record(self, rec: codec.Record, source: str) -> None:
        self.stats.records += 1
        iid = rec.iid
        version = (rec.epoch, rec.seq)
        held = self._chain.get(iid)
        if rec.has_base and (held is None or (held[0], held[1]) != (rec.base_epoch, rec.base_seq)):
            if held is not None and version <= (held[0], held[1]):
                self.stats.regressions += 1  # stale data on the chain: a server bug
            elif iid not in self._resyncing:
                self._gap(iid)
            return
        # int64 wrap-around arithmetic, as docs/wire.md specifies for every client.
        bid, ask, last = codec.apply_record(held[2:5] if held is not None else None, rec)
        if held is not None and version < (held[0], held[1]):
            self.stats.regressions += 1
        if held is not None and version <= (held[0], held[1]) and source == SOURCE_FRAME:
            return
        self._chain[iid] = (rec.epoch, rec.seq, bid, ask, last, rec.size)
        self._render(iid, version, bid, ask, last, rec.size, source)

    def _gap(self, iid: int) -> None:
        """A delta on a base we do not hold: never apply it; ask for a snapshot of the symbol.

        Gapped symbols are gathered and asked for in one Subscribe per loop turn (a burst of
        gaps must not trip the server's request rate limit), and asked again if no snapshot
        came within RESYNC_RETRY_S: a refused or lost request never freezes a symbol."""
        self.stats.gaps += 1
        self._resyncing[iid] = 0.0  # not asked yet
        self._chain.pop(iid, None)
        if not self._resync_scheduled:
            self._resync_scheduled = True
            asyncio.get_running_loop().call_soon(self._request_resync)

    def _request_resync(self) -> None:
        self._resync_scheduled = False
        if self._ws is None:
            return  # the reconnect re-subscribes everything
        now = asyncio.get_running_loop().time()
        due = [
            i for i, asked in self._resyncing.items() if not asked or now - asked > RESYNC_RETRY_S
        ]
        keys = [self.instruments[i].key for i in due if i in self.instruments]
        for i in due:
            self._resyncing[i] = now
        for chunk in _chunks(keys, MAX_KEYS):
            req = next(self._req)
            task = asyncio.get_running_loop().create_task(
                self._ws.send(encode_request(Subscribe(req=req, keys=chunk)))
            )
            self._bg.add(task)
            task.add_done_callback(self._bg_done)

    def _bg_done(self, task: asyncio.Task[Any]) -> None:
        self._bg.discard(task)
        if not task.cancelled():
            task.exception()  # a send on a closing socket: the reconnect restores it

    def _render(
        self, iid: int, version: Version, bid: int, ask: int, last: int, size: int, source: str
    ) -> None:
        verdict = self._shown.check(iid, version)
        inst = self.instruments.get(iid)
        key = inst.key if inst else str(iid)
        if verdict is not APPLIED:
            if verdict is DUPLICATE:
                self.stats.duplicates += 1
                if key in self._held and key not in self.view:
                    # re-subscribed to what the screen last showed: put the line back, quietly
                    self.view[key] = Quote(
                        key, iid, version[0], version[1], bid, ask, last, size, source,
                        inst.price_decimals if inst else 0,
                    )  # fmt: skip
            else:
                self.stats.stale += 1
            return
        if key not in self._held:
            return  # a frame in flight when the symbol was unsubscribed: not on the watchlist
        quote = Quote(
            key,
            iid,
            version[0],
            version[1],
            bid,
            ask,
            last,
            size,
            source,
            inst.price_decimals if inst else 0,
        )
        self.view[key] = quote
        self.stats.rendered += 1
        if self.on_render is not None:
            self.on_render(quote)
        queue = self._queue
        if queue is not None:
            if queue.full():
                queue.get_nowait()
                self.stats.dropped_updates += 1
            queue.put_nowait(quote)
