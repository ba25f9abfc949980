"""The churn driver behind ``monotape load churn``: terminals that come, change and go.

It replays a base arrival trace at a multiple (1.3x by default): sessions arrive as a Poisson
process (``arrival_rate_per_s`` x ``rate_multiple``), last an exponentially distributed time
(mean ``mean_session_s``), subscribe to a Zipf watchlist (``watchlists.zipf_watchlists``, the
workload's sharing), change subscriptions now and then (swap to another desk's list, or drop a
few symbols), and leave either gracefully (a WebSocket close handshake) or abruptly (an RST:
``SO_LINGER (1, 0)`` then close, ~6% of disconnects in the workload, docs/design.md). The
abrupt leavers are the ones that exposed the seed's teardown bug (the error path ran first and
the close path skipped cleanup), so the driver exists to pair with the invariants.

Bounded everywhere (STYLE 7): in time (``duration_s``, then at most ``drain_s`` for stragglers),
in concurrency (``max_connections``: an arrival over the cap is counted as ``skipped``, never
queued) and in total (``max_total``). Loopback only: it refuses any other host, since an RST
storm aimed at a production endpoint is exactly what it must never be.

Plain ``websockets`` clients with binary requests (``requests.encode_request``), not the SDK:
the driver needs connection churn, not a rendered view. Every task it starts is finished or
cancelled, and every socket closed, before ``run_churn`` returns.

A node that sheds load answers an upgrade with HTTP 503 and ``Retry-After`` (admission control,
by design): a session so refused waits that long (plus up to a second of jitter, so the retries
do not come back as one wave) and tries again until its planned end; an opening handshake that
times out (a node starved of CPU answers late) is retried the same way. Those are counted apart
(``rejected``, ``timeouts``, ``gave_up``, out of ``attempts``), never as errors: an error is
what a healthy node should not do. Many of them is what a node that stopped answering does, so
the soak's verdict bounds their share of the attempts (``soak.judge``). The token, when the
node wants one, travels in an ``Authorization`` header; the report never carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from typing import Final

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from monotape.loadgen.churn_plan import ChurnConfig, ChurnFailed, ChurnRefused, check_loopback
from monotape.loadgen.churn_report import ChurnProgress, ChurnReport, Tally, print_progress
from monotape.loadgen.rst import reset
from monotape.loadgen.watchlists import zipf_watchlists
from monotape.log import redact
from monotape.platform.sdk.reconnect import parse_retry_after
from monotape.platform.wire import codec
from monotape.platform.wire.requests import MAX_KEYS, Subscribe, Unsubscribe, encode_request

__all__ = [
    "ChurnConfig",
    "ChurnFailed",
    "ChurnProgress",
    "ChurnRefused",
    "ChurnReport",
    "check_loopback",
    "print_progress",
    "run_churn",
]

_WATCHLIST_POOL: Final = 4_200  # the workload's observed peak; sessions draw from this pool


class _Churn:
    """One run: the arrival loop, the sessions and their counters."""

    def __init__(self, url: str, cfg: ChurnConfig, token: str | None = None) -> None:
        self.url = url
        self.cfg = cfg
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.rng = random.Random(cfg.seed)
        self.tally = Tally()
        self.watchlists: list[list[str]] = []
        self.sessions: set[asyncio.Task[None]] = set()
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.t_end = self.t0 + cfg.duration_s

    def progress(self) -> ChurnProgress:
        t = self.tally
        return ChurnProgress(
            elapsed_s=round(self.loop.time() - self.t0, 3),
            open=t.open,
            opened=t.opened,
            closed=t.closed,
            rst=t.rst,
            errors=t.errors,
            skipped=t.skipped,
        )

    async def _connect(self) -> ClientConnection:
        return await websockets.connect(
            self.url,
            compression=None,  # as the terminals: the market-data path is never deflated
            open_timeout=self.cfg.open_timeout_s,
            close_timeout=self.cfg.close_timeout_s,
            max_size=8 * 1024 * 1024,  # the hello carries the whole dictionary
            max_queue=64,
            ping_interval=None,
            additional_headers=self.headers,
        )

    async def _probe(self) -> ClientConnection:
        """The probe's connection: a 503 is retried after its Retry-After (for up to
        ``open_timeout_s`` x 4); any other refusal is a ChurnFailed naming the server's reason."""
        deadline = self.loop.time() + 4 * self.cfg.open_timeout_s
        while True:
            try:
                return await self._connect()
            except InvalidStatus as exc:
                r = exc.response
                wait = parse_retry_after(r.headers.get("Retry-After"))
                designed = r.status_code == 503 and wait is not None
                if designed and wait is not None and self.loop.time() + wait < deadline:
                    await asyncio.sleep(min(wait, self.cfg.retry_cap_s))
                    continue
                body = (r.body or b"").decode(errors="replace").strip()[:200]
                raise ChurnFailed(
                    f"the node refused the probe: HTTP {r.status_code} {body}", exc
                ) from None
            except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                why = getattr(exc, "strerror", None) or repr(exc)
                raise ChurnFailed(f"cannot connect to {redact(self.url)}: {why}", exc) from None

    async def load_keys(self) -> None:
        """One probe session reads the hello: the dictionary names every symbol."""
        ws = await self._probe()
        try:
            msg = codec.decode_message(bytes(await ws.recv(decode=False)))
        finally:
            await ws.close()
        if not isinstance(msg, codec.Hello):
            raise RuntimeError(f"expected hello as the first message, got {type(msg).__name__}")
        keys = [inst.key for inst in msg.instruments]
        self.watchlists = zipf_watchlists(keys, _WATCHLIST_POOL, self.cfg.seed)

    # -- arrivals ------------------------------------------------------------------------------
    async def arrivals(self) -> None:
        cfg, t = self.cfg, self.tally
        rate = cfg.arrival_rate_per_s * cfg.rate_multiple
        next_at = self.t0 + self.rng.expovariate(rate)
        while next_at < self.t_end and t.started < cfg.max_total:
            delay = next_at - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = self.loop.time()
            # Every arrival due by now (a late wake-up starts them all: the rate holds).
            while next_at <= now and next_at < self.t_end and t.started < cfg.max_total:
                next_at += self.rng.expovariate(rate)
                if t.open + t.pending >= cfg.max_connections:
                    t.skipped += 1
                    continue
                self._start_session(now)

    def _start_session(self, now: float) -> None:
        cfg, t = self.cfg, self.tally
        t.started += 1
        t.pending += 1
        leave_at = min(now + self.rng.expovariate(1.0 / cfg.mean_session_s), self.t_end)
        rst = self.rng.random() < cfg.rst_share
        seed = self.rng.getrandbits(32)
        task = asyncio.create_task(self._session(leave_at, rst, random.Random(seed)))
        self.sessions.add(task)
        task.add_done_callback(self.sessions.discard)

    # -- one session ---------------------------------------------------------------------------
    async def _session(self, leave_at: float, rst: bool, rng: random.Random) -> None:
        t = self.tally
        ws: ClientConnection | None = None
        try:
            try:
                ws = await self._open(leave_at, rng)
            finally:
                t.pending -= 1
            if ws is None:
                return
            t.opened += 1
            t.open += 1
            t.peak_open = max(t.peak_open, t.open)
            try:
                await self._converse(ws, leave_at, rst, rng)
            finally:
                t.open -= 1
        finally:
            if ws is not None:
                ws.transport.abort()  # no-op after a clean close; frees the socket otherwise

    async def _open(self, leave_at: float, rng: random.Random) -> ClientConnection | None:
        """The session's connection, retrying a 503 after its Retry-After until ``leave_at``;
        None if it never opened (counted: an error, or ``gave_up`` after designed refusals)."""
        t = self.tally
        while True:
            t.attempts += 1
            try:
                return await self._connect()
            except InvalidStatus as exc:
                r = exc.response
                wait = parse_retry_after(r.headers.get("Retry-After"))
                if r.status_code != 503 or wait is None:
                    body = (r.body or b"").decode(errors="replace").strip()[:100]
                    t.error(f"upgrade refused: HTTP {r.status_code} {body}".rstrip())
                    return None
                t.rejected += 1
                # Honour Retry-After, plus jitter so the refused do not return as one wave.
                wait = min(wait, self.cfg.retry_cap_s) + rng.random()
                if self.loop.time() + wait >= leave_at:
                    t.gave_up += 1
                    return None
                await asyncio.sleep(wait)
            except TimeoutError:
                # No answer within open_timeout_s: a node whose loop is starved (a busy machine)
                # answers late, not wrongly. A terminal backs off and tries again; so does this.
                t.timeouts += 1
                wait = 0.5 + rng.random()
                if self.loop.time() + wait >= leave_at:
                    t.gave_up += 1
                    return None
                await asyncio.sleep(wait)
            except (OSError, websockets.InvalidHandshake) as exc:
                t.error(f"connect failed: {exc!r}")
                return None

    async def _converse(
        self, ws: ClientConnection, leave_at: float, rst: bool, rng: random.Random
    ) -> None:
        t = self.tally
        reader = asyncio.create_task(self._read(ws))
        try:
            req = 0
            held = self._pick(rng)
            req += 1
            await ws.send(encode_request(Subscribe(req=req, keys=held)))
            t.subscribes += 1
            while True:
                left = leave_at - self.loop.time()
                if left <= 0:
                    break
                wait = min(rng.expovariate(1.0 / self.cfg.mean_change_interval_s), left)
                done, _ = await asyncio.wait({reader}, timeout=wait)
                if done:  # the server left first (or the socket died): not what we planned
                    t.server_closed += 1
                    t.error(f"server closed the session: {_closed_why(reader)}")
                    return
                if self.loop.time() >= leave_at:
                    break
                req, held = await self._change(ws, req, held, rng)
            if rst:
                reset(ws.transport)
                t.rst += 1
            else:
                await ws.close()
                t.closed += 1
        except ConnectionClosed as exc:
            t.server_closed += 1
            t.error(f"connection lost while sending: {exc!r}")
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    def _pick(self, rng: random.Random) -> list[str]:
        return list(self.watchlists[rng.randrange(len(self.watchlists))][:MAX_KEYS])

    async def _change(
        self, ws: ClientConnection, req: int, held: list[str], rng: random.Random
    ) -> tuple[int, list[str]]:
        """Switch to another desk's list (70%) or drop a few symbols (30%)."""
        if rng.random() < 0.7 or len(held) <= 3:
            new = self._pick(rng)
        else:
            new = sorted(rng.sample(held, len(held) - rng.randint(1, 3)))
        gone = sorted(set(held) - set(new))
        if gone:
            req += 1
            await ws.send(encode_request(Unsubscribe(req=req, keys=gone[:MAX_KEYS])))
        added = sorted(set(new) - set(held))
        if added:
            req += 1
            await ws.send(encode_request(Subscribe(req=req, keys=added[:MAX_KEYS])))
            self.tally.subscribes += 1
        self.tally.changes += 1
        return req, new

    async def _read(self, ws: ClientConnection) -> None:
        t = self.tally
        async for _ in ws:  # frames are counted, not decoded: the driver loads the server
            t.messages += 1

    # -- the end ---------------------------------------------------------------------------------
    async def drain(self) -> None:
        if self.sessions:
            await asyncio.wait(set(self.sessions), timeout=self.cfg.drain_s)
        leftover = set(self.sessions)
        self.tally.cancelled += len(leftover)
        for task in leftover:
            task.cancel()
        for task in leftover:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def report(self) -> ChurnReport:
        t, cfg = self.tally, self.cfg
        return ChurnReport(
            url=redact(self.url),  # a report never carries a token
            elapsed_s=round(self.loop.time() - self.t0, 3),
            target_arrivals_per_s=cfg.arrival_rate_per_s * cfg.rate_multiple,
            started=t.started,
            opened=t.opened,
            closed=t.closed,
            rst=t.rst,
            errors=t.errors,
            attempts=t.attempts,
            rejected=t.rejected,
            gave_up=t.gave_up,
            timeouts=t.timeouts,
            server_closed=t.server_closed,
            skipped=t.skipped,
            cancelled=t.cancelled,
            peak_open=t.peak_open,
            subscribes=t.subscribes,
            changes=t.changes,
            messages=t.messages,
            error_samples=list(t.error_samples),
        )


def _closed_why(reader: asyncio.Task[None]) -> str:
    if reader.cancelled():
        return "cancelled"
    exc = reader.exception()
    return repr(exc) if exc is not None else "close handshake"


async def _tick_progress(churn: _Churn, progress: Callable[[ChurnProgress], None]) -> None:
    while True:
        await asyncio.sleep(churn.cfg.progress_interval_s)
        progress(churn.progress())


async def run_churn(
    url: str,
    cfg: ChurnConfig,
    progress: Callable[[ChurnProgress], None] | None = None,
    *,
    token: str | None = None,
) -> ChurnReport:
    """Run one churn against ``url`` (loopback only) and report what happened.

    Returns after ``cfg.duration_s`` plus at most ``cfg.drain_s``; raises ChurnRefused for a
    non-loopback URL and ChurnFailed if the probe connection (which reads the dictionary)
    fails. ``token`` goes in every session's ``Authorization`` header.
    """
    check_loopback(url)
    churn = _Churn(url, cfg, token)
    await churn.load_keys()
    churn.t0 = churn.loop.time()
    churn.t_end = churn.t0 + cfg.duration_s
    ticker = asyncio.create_task(_tick_progress(churn, progress)) if progress else None
    try:
        await churn.arrivals()
        await churn.drain()
    finally:
        # Cancelled from outside (Ctrl-C): still leave nothing behind.
        for task in set(churn.sessions):
            task.cancel()
        for task in set(churn.sessions):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
    if progress is not None:
        progress(churn.progress())
    return churn.report()
