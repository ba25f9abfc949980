"""The terminal SDK: connect, subscribe, and render only what moves forward.

It runs the sequencer's own guard (``monotape.platform.admit``) in front of the glass: a record
at or below the version on screen is never rendered. The conflated stream is a base-chained
delta stream; priority updates are absolute records. The SDK keeps both:

- ``chain``: the values of the last conflated record per symbol, the base the next delta must
  name. A delta naming another base is a *gap*: it is not applied, and the SDK re-subscribes the
  symbol to get a snapshot (docs/wire.md).
- ``shown``: what is on the glass. Any record (frame, snapshot or priority) whose version is
  above the shown version is rendered; others are counted, never rendered.

``stats.regressions`` counts records a naive client would have rendered backwards: a conflated
record below its own chain, or a priority update below the previous one. It must stay 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import websockets
from websockets.asyncio.client import ClientConnection

from monotape.platform import codec
from monotape.platform.admit import APPLIED, DUPLICATE, VersionGuard
from monotape.platform.model import Instrument, Version
from monotape.platform.requests import Request, SetPriority, Subscribe, Unsubscribe, encode_request

__all__ = ["Quote", "SdkStats", "ServerError", "TerminalClient"]

SOURCE_SNAPSHOT = "snapshot"
SOURCE_FRAME = "frame"
SOURCE_PRIORITY = "priority"


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


class ServerError(Exception):
    def __init__(self, error: codec.Error) -> None:
        super().__init__(f"{codec.ErrorCode(error.code).name}: {error.message}")
        self.code = error.code
        self.message = error.message


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
    dropped_updates: int = 0  # iterator queue overflow (the view stays exact)
    last_frame_no: int = 0
    error_log: deque[str] = field(default_factory=lambda: deque(maxlen=32))


class TerminalClient:
    def __init__(
        self,
        url: str,
        *,
        on_render: Callable[[Quote], None] | None = None,
        queue_size: int = 10_000,
        open_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.on_render = on_render
        self.stats = SdkStats()
        self.view: dict[str, Quote] = {}
        self.instruments: dict[int, Instrument] = {}
        self.ids: dict[str, int] = {}
        self.hello: codec.Hello | None = None
        self.close_message: codec.Close | None = None
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._hello_ready: asyncio.Future[codec.Hello] | None = None
        self._pending: dict[int, asyncio.Future[codec.Ack]] = {}
        self._req = itertools.count(1)
        self._chain: dict[int, tuple[int, int, int, int, int, int]] = {}
        self._shown = VersionGuard()
        self._prio_last = VersionGuard()
        self._resyncing: set[int] = set()
        self._queue: asyncio.Queue[Quote] | None = None
        self._queue_size = queue_size

    # -- connection ---------------------------------------------------------------------------
    async def connect(self, **connect_kwargs: Any) -> codec.Hello:
        """Open the connection and wait for the hello (its dictionary names every symbol).
        ``connect_kwargs`` go to ``websockets.connect`` (e.g. ``sock=`` for a tuned socket)."""
        loop = asyncio.get_running_loop()
        self._hello_ready = loop.create_future()
        self._ws = await websockets.connect(
            self.url,
            compression=None,
            open_timeout=self._open_timeout,
            max_size=8 * 1024 * 1024,  # hello carries the whole dictionary
            max_queue=256,
            **connect_kwargs,
        )
        self._reader = asyncio.create_task(self._read_loop())
        return await asyncio.wait_for(self._hello_ready, self._open_timeout)

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    @property
    def connected(self) -> bool:
        return self._reader is not None and not self._reader.done()

    # -- requests -----------------------------------------------------------------------------
    async def _request(self, make: Callable[[int], Request], timeout: float = 10.0) -> codec.Ack:
        if self._ws is None:
            raise RuntimeError("not connected")
        req = next(self._req)
        fut: asyncio.Future[codec.Ack] = asyncio.get_running_loop().create_future()
        self._pending[req] = fut
        try:
            await self._ws.send(encode_request(make(req)))
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(req, None)

    async def subscribe(self, keys: Iterable[str]) -> codec.Ack:
        keys = list(keys)
        return await self._request(lambda r: Subscribe(req=r, keys=keys))

    async def unsubscribe(self, keys: Iterable[str]) -> codec.Ack:
        keys = list(keys)
        for k in keys:
            self.view.pop(k, None)
        return await self._request(lambda r: Unsubscribe(req=r, keys=keys))

    async def set_priority(self, keys: Iterable[str], on: bool = True) -> codec.Ack:
        keys = list(keys)
        return await self._request(lambda r: SetPriority(req=r, keys=keys, on=on))

    async def updates(self) -> AsyncIterator[Quote]:
        """Every rendered quote, in render order (bounded: overflow drops the oldest)."""
        if self._queue is None:
            self._queue = asyncio.Queue(self._queue_size)
        while True:
            if self._queue.empty() and not self.connected:
                return
            try:
                yield await asyncio.wait_for(self._queue.get(), 0.5)
            except TimeoutError:
                continue

    # -- receiving ----------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        assert self._ws is not None
        try:
            async for message in self._ws:
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

    def _on_message(self, msg: codec.ServerMessage) -> None:
        if isinstance(msg, codec.Frame):
            self.stats.frames += 1
            self.stats.last_frame_no = msg.frame_no
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
                self._resyncing.discard(rec.iid)
                self._on_chain_record(rec, SOURCE_SNAPSHOT)
        elif isinstance(msg, codec.Heartbeat):
            self.stats.heartbeats += 1
        elif isinstance(msg, codec.Ack):
            fut = self._pending.get(msg.req)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif isinstance(msg, codec.Error):
            self.stats.errors += 1
            self.stats.error_log.append(f"{msg.code}: {msg.message}")
            fut = self._pending.get(msg.req)
            if fut is not None and not fut.done():
                fut.set_exception(ServerError(msg))
        elif isinstance(msg, codec.Hello):
            self.hello = msg
            self.instruments = {i.iid: i for i in msg.instruments}
            self.ids = {i.key: i.iid for i in msg.instruments}
            if self._hello_ready is not None and not self._hello_ready.done():
                self._hello_ready.set_result(msg)
        elif isinstance(msg, codec.Close):
            self.close_message = msg

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
        """A delta on a base we do not hold: never apply it; ask for a snapshot of the symbol."""
        self.stats.gaps += 1
        self._resyncing.add(iid)
        self._chain.pop(iid, None)
        inst = self.instruments.get(iid)
        if inst is not None and self._ws is not None:
            req = next(self._req)
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().create_task(
                    self._ws.send(encode_request(Subscribe(req=req, keys=[inst.key])))
                )

    def _render(
        self, iid: int, version: Version, bid: int, ask: int, last: int, size: int, source: str
    ) -> None:
        verdict = self._shown.check(iid, version)
        if verdict is not APPLIED:
            if verdict is DUPLICATE:
                self.stats.duplicates += 1
            else:
                self.stats.stale += 1
            return
        inst = self.instruments.get(iid)
        key = inst.key if inst else str(iid)
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
