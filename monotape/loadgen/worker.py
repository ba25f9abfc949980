"""One load worker process: an asyncio loop (uvloop) replaying its share of the terminals.

Started by ``harness.run_load`` with the 'spawn' context. Each terminal waits for its scheduled
second, connects (no extensions offered, like the terminals; ``ws_terminal.py``: websockets'
Sans-I/O client for the upgrade and what it sends, a frame walk for what it receives), waits
for the hello, subscribes to its watchlist (one binary ``subscribe``), waits for the first
FRAME, then stays until its scheduled end and leaves gracefully or with an RST. The messages
reach ``session.Session.on_event`` from the socket's ``data_received``: no task wakes per
message. A 503 or a failed connect backs off by the SDK's own policy (``sdk.next_delay``: full
jitter, Retry-After and reconnect hints honoured).
Everything is bounded by the trace's end plus ``drain_s``; every task is finished or cancelled
and every socket closed before the worker reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import resource
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from typing import Any, Final

import msgspec
from websockets.exceptions import InvalidHandshake, InvalidStatus

from monotape.loadgen.session import UNTIL_HELLO, Session
from monotape.loadgen.trace import SessionPlan
from monotape.loadgen.worker_job import Job, Knobs, WorkerResult, last_gap
from monotape.loadgen.ws_terminal import TerminalSocket, connect
from monotape.platform.sdk.reconnect import hint_from_reason, next_delay, parse_retry_after

__all__ = ["Job", "Knobs", "WorkerResult", "last_gap", "worker_main"]

_MAX_ERROR_SAMPLES: Final = 20
_WAVES: Final = 16  # attempt numbers tracked separately; later ones land in the last bucket


class _Worker:
    def __init__(self, job: Job, t0: float) -> None:
        self.job = job
        self.k = job.knobs
        self.loop = asyncio.get_running_loop()
        self.t0 = t0  # loop time of second 0 of the trace
        self.end = float(job.duration_s)
        n_seconds = job.duration_s + math.ceil(job.knobs.drain_s) + 2
        self.seconds = [[0, 0, 0, 0, 0] for _ in range(n_seconds)]
        self.connect_ms: list[float] = []
        self.first_frame_ms: list[float] = []
        self.waves = [0] * _WAVES
        self.attempts = self.rejected = self.retries = self.connect_failures = 0
        self.graceful = self.abrupt = self.closed_at_end = self.lost = self.abandoned = 0
        self.errors = self.connected_sessions = self.first_frame_sessions = 0
        self.connected = self.connecting = self.backing_off = self.first_frames = 0
        self.peak = self.cancelled = 0
        self.error_samples: list[str] = []
        self.last_gap = -1
        self.due_at_end = self.up_at_end = 0

    def now(self) -> float:
        return self.loop.time() - self.t0

    def _sec(self) -> list[int]:
        i = min(max(0, int(self.now())), len(self.seconds) - 1)
        return self.seconds[i]

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < _MAX_ERROR_SAMPLES:
            self.error_samples.append(what[:200])

    def framed(self, wanted_at: float, first_of_terminal: bool) -> None:
        """A session's first FRAME (``first_of_terminal``: the terminal's first ever)."""
        if first_of_terminal:
            self.first_frame_sessions += 1
        self.first_frame_ms.append((self.now() - wanted_at) * 1000)
        self.first_frames += 1
        self._sec()[3] += 1

    def progress(self) -> tuple[int, ...]:
        return (
            self.connected,
            self.connecting,
            self.backing_off,
            self.rejected,
            self.retries,
            self.first_frames,
            self.errors,
        )

    async def _connect(self) -> TerminalSocket:
        # no extensions offered: as the terminals, the market-data path is never deflated
        return await connect(
            self.job.url,
            open_timeout_s=self.k.open_timeout_s,
            close_timeout_s=self.k.close_timeout_s,
            watch=bytearray(UNTIL_HELLO),
        )

    # -- one terminal --------------------------------------------------------------------------
    async def terminal(self, plan: SessionPlan, watchlist: list[str]) -> None:
        rng = random.Random((self.k.seed << 32) ^ plan.sid)
        end_at = self.end if plan.disconnect_at is None else min(plan.disconnect_at, self.end)
        ups: list[tuple[float, float]] = []  # hydrated (snapshot or frame) -> gone
        session_framed = [False]
        await asyncio.sleep(max(0.0, plan.connect_at - self.now()))
        wanted_at = plan.connect_at
        attempt = 0
        delay = 0.0
        hint_ms: int | None = None
        retry_after: float | None = None
        ever = False
        while True:
            if delay > 0:
                self.backing_off += 1
                try:
                    await asyncio.sleep(min(delay, max(0.0, end_at - self.now())))
                finally:
                    self.backing_off -= 1
            if self.now() >= end_at:
                if not ever:
                    self.abandoned += 1
                break
            ws: TerminalSocket | None = None
            self.attempts += 1
            self.waves[min(attempt, _WAVES - 1)] += 1
            self._sec()[0] += 1
            self.connecting += 1
            fatal = False
            try:
                ws = await self._connect()
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status == 503:
                    self.rejected += 1
                    self._sec()[1] += 1
                    retry_after = parse_retry_after(exc.response.headers.get("Retry-After"))
                else:
                    self.error(f"upgrade refused: HTTP {status}")
                    fatal = status in (401, 403)  # a bad token does not get better by retrying
            except (OSError, TimeoutError, InvalidHandshake) as exc:
                self.connect_failures += 1
                if len(self.error_samples) < _MAX_ERROR_SAMPLES:
                    self.error_samples.append(f"connect failed: {exc!r}"[:200])
            finally:
                self.connecting -= 1
            if fatal:
                break
            if ws is None:
                delay = next_delay(
                    attempt,
                    hint_ms,
                    retry_after,
                    self.k.backoff_base_s,
                    self.k.backoff_cap_s,
                    rng,
                )
                hint_ms = retry_after = None
                attempt += 1
                self.retries += 1
                continue
            opened = self.now()
            self.connect_ms.append((opened - wanted_at) * 1000)
            self._sec()[2] += 1
            if not ever:
                ever = True
                self.connected_sessions += 1
            self.connected += 1
            self.peak = max(self.peak, self.connected)
            try:
                hint_ms = await self._session(
                    ws, plan, watchlist, end_at, wanted_at, ups, session_framed
                )
            finally:
                self.connected -= 1
                if ws.transport is not None:
                    ws.transport.abort()  # no-op after a clean close; frees the socket otherwise
            if hint_ms is None:
                break
            # lost early: back off (the server's hint honoured) and come back
            self.lost += 1
            wanted_at = self.now()
            attempt = 0
            delay = next_delay(0, hint_ms, None, self.k.backoff_base_s, self.k.backoff_cap_s, rng)
            hint_ms = None
        self._settle(plan, end_at, ups)

    def _settle(self, plan: SessionPlan, end_at: float, ups: list[tuple[float, float]]) -> None:
        due_lo = plan.connect_at + self.k.settle_s
        gap = last_gap(due_lo, end_at, ups) if due_lo < end_at else -1
        self.last_gap = max(self.last_gap, gap)
        at = self.end - 0.01
        if plan.disconnect_at is None and due_lo <= at:
            self.due_at_end += 1
            if any(start <= at < end for start, end in ups):
                self.up_at_end += 1

    async def _session(
        self,
        ws: TerminalSocket,
        plan: SessionPlan,
        watchlist: list[str],
        end_at: float,
        wanted_at: float,
        ups: list[tuple[float, float]],
        session_framed: list[bool],
    ) -> int | None:
        """Hello, subscribe, first frame, stay. None when it ended as planned; the reconnect
        hint (ms, 0 without one) when the server or the network ended it early."""
        s = Session(self, ws, watchlist, wanted_at, session_framed)
        late = self.loop.call_later(
            self.k.first_frame_timeout_s, s.late, self.k.first_frame_timeout_s
        )
        try:
            async with asyncio.timeout_at(self.t0 + end_at):
                await asyncio.shield(ws.closed)
        except TimeoutError:
            pass  # the scheduled end: leave as planned
        else:  # the server, the network or a broken session ended it
            if s.up_since is not None:
                ups.append((s.up_since, self.now()))
            if ws.failure is not None and s.hint is None:
                self.error(f"connection failed: {ws.failure}")  # broken framing: say so
            if s.hint is not None:
                return s.hint
            return hint_from_reason(ws.close_reason) or 0
        finally:
            late.cancel()
        if s.up_since is not None:
            ups.append((s.up_since, self.now()))
        if plan.disconnect_at is None or plan.disconnect_at >= self.end:
            await self._close(ws)
            self.closed_at_end += 1
        elif plan.abrupt:
            ws.reset()
            self.abrupt += 1
        else:
            await self._close(ws)
            self.graceful += 1
        return None

    async def _close(self, ws: TerminalSocket) -> None:
        ws.close()  # the closing handshake; aborted after close_timeout_s
        await ws.closed  # resolved by connection_lost, whichever way the socket ends

    async def ticker(self, report: Callable[[tuple[int, ...]], None]) -> None:
        k = 1
        while True:
            await asyncio.sleep(max(0.0, k - self.now()))
            i = min(k - 1, len(self.seconds) - 1)
            self.seconds[i][4] = self.connected
            report(self.progress())
            k += 1

    def result(self) -> WorkerResult:
        return WorkerResult(
            wid=self.job.wid,
            connect_ms=self.connect_ms,
            first_frame_ms=self.first_frame_ms,
            attempts=self.attempts,
            rejected=self.rejected,
            retries=self.retries,
            waves=self.waves,
            connect_failures=self.connect_failures,
            graceful=self.graceful,
            abrupt=self.abrupt,
            closed_at_end=self.closed_at_end,
            lost=self.lost,
            abandoned=self.abandoned,
            errors=self.errors,
            error_samples=self.error_samples,
            connected_sessions=self.connected_sessions,
            first_frame_sessions=self.first_frame_sessions,
            peak=self.peak,
            last_gap=self.last_gap,
            due_at_end=self.due_at_end,
            up_at_end=self.up_at_end,
            seconds=self.seconds,
            cancelled=self.cancelled,
        )


async def _run(job: Job, t0_wall: float, results: Queue[Any]) -> WorkerResult:
    loop = asyncio.get_running_loop()
    t0 = loop.time() + (t0_wall - time.time())
    w = _Worker(job, t0)
    tasks = [
        asyncio.create_task(w.terminal(plan, wl))
        for plan, wl in zip(job.plans, job.watchlists, strict=True)
    ]
    ticker = asyncio.create_task(w.ticker(lambda p: results.put(("progress", job.wid, p))))
    try:
        if tasks:
            deadline = t0 + job.duration_s + job.knobs.drain_s
            await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
    finally:
        leftover = [t for t in tasks if not t.done()]
        w.cancelled = len(leftover)
        for t in leftover:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    for t in tasks:  # a bug in the harness must show, not vanish
        if not t.cancelled() and t.exception() is not None:
            w.error(f"harness: {t.exception()!r}")
    return w.result()


def _raise_nofile(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def worker_main(job_bytes: bytes, results: Queue[Any], start: Queue[Any]) -> None:
    """The process entry point: decode the job, say ready, wait for the start time, run."""
    job = msgspec.msgpack.decode(job_bytes, type=Job)
    _raise_nofile(len(job.plans) + 256)
    results.put(("ready", job.wid, None))
    t0_wall = start.get()
    if t0_wall is None:  # the parent gave up before starting
        return
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        factory = None
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(_run(job, float(t0_wall), results))
    except BaseException as exc:
        results.put(("failed", job.wid, repr(exc)[:500]))
        raise
    results.put(("done", job.wid, msgspec.msgpack.encode(result)))
