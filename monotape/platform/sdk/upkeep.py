"""The session's own requests, one connection at a time: its rate, its token refresh, its glass
report (docs/sdk.md). The asyncio driver of ``refresh.RefreshPlan`` and ``glass.GlassReport``.

After each HELLO (the first connection's and every reconnect's) ``open`` sends ``rate`` when the
terminal asked for less than 25 Hz and starts two timers: the token refresh (with a
``refresh_token`` callback) and the glass report. ``close`` at the connection's end cancels them
and fails what is in flight: nothing of one connection outlives it. Their answers (ACK, ERROR)
come back through ``answer``; the watchlist's requests are the intent's (``intent.py``), these
are not, so a terminal never confuses the two.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

import websockets

from monotape.clock import Clock
from monotape.platform.sdk.answers import ServerError
from monotape.platform.sdk.glass import REPORT_EVERY_S, GlassReport
from monotape.platform.sdk.reconnect import RandomSource
from monotape.platform.sdk.refresh import RefreshPlan
from monotape.platform.sdk.stats import SdkStats
from monotape.platform.sdk.view import TerminalView
from monotape.platform.wire import codec
from monotape.platform.wire.codes import ErrorCode
from monotape.platform.wire.requests import MAX_HZ, Rate, Refresh, Request, encode_request

__all__ = ["FULL_RATE_HZ", "RefreshToken", "Upkeep", "check_max_hz"]

FULL_RATE_HZ: Final = 25.0  # the 40 ms frame grid: no ``rate`` request is sent for it
ANSWER_TIMEOUT_S: Final = 10.0
NS: Final = 1e9

RefreshToken = Callable[[], Awaitable[str]]
Send = Callable[[bytes], Awaitable[None]]
# The connection is gone (or going): what was in flight on it has no answer to wait for.
_GONE: Final = (ConnectionError, websockets.ConnectionClosed)


def check_max_hz(max_hz: float) -> float:
    """``max_hz`` as the node takes it, or ValueError: one of 25, 12.5, 5, 2.5, 1 (every k-th
    boundary of the 40 ms grid, k in 1, 2, 5, 10, 25)."""
    if isinstance(max_hz, bool) or not isinstance(max_hz, int | float) or max_hz not in MAX_HZ:
        raise ValueError(
            f"max_hz must be one of 25, 12.5, 5, 2.5, 1 (every 1st, 2nd, 5th, 10th or 25th "
            f"boundary of the 40 ms frame grid); got {max_hz!r}"
        )
    return float(max_hz)


class Upkeep:
    """The rate, token refresh and glass report of a terminal's current connection."""

    def __init__(
        self,
        view: TerminalView,
        stats: SdkStats,
        *,
        clock: Clock,
        rng: RandomSource,
        next_req: Callable[[], int],
        max_hz: float = FULL_RATE_HZ,
        refresh_token: RefreshToken | None = None,
    ) -> None:
        self.view = view
        self.stats = stats
        self.clock = clock
        self.next_req = next_req
        self.max_hz = check_max_hz(max_hz)
        self.refresh_token = refresh_token
        self.refresh = RefreshPlan(clock, rng)
        self.glass = GlassReport(stats)
        self.report_every_s = REPORT_EVERY_S
        self.token: str | None = None  # the latest token the node took in-band (reconnects use it)
        self._send: Send | None = None
        self._pending: dict[int, asyncio.Future[codec.Ack]] = {}
        self._timers: set[asyncio.Task[None]] = set()

    # -- one connection -----------------------------------------------------------------------
    async def open(self, send: Send, token: str | None) -> None:
        """A connection got its HELLO: ``send`` writes to it, ``token`` is the one it opened
        with. Sends ``rate`` (awaited: the terminal's frames are at its rate before it
        subscribes) and starts the timers."""
        self.close()
        self._send = send
        self.glass = GlassReport(self.stats)
        if self.max_hz != FULL_RATE_HZ:
            await self._set_rate()
        loop = asyncio.get_running_loop()
        if self.refresh_token is not None and token is not None:
            self._timers.add(loop.create_task(self._refresh_loop(token)))
        self._timers.add(loop.create_task(self._report_loop()))

    def close(self) -> None:
        """The connection ended: the timers stop, requests in flight fail, nothing is due."""
        self._send = None
        self.refresh.stop()
        for task in self._timers:
            task.cancel()
        self._timers.clear()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection closed"))
        self._pending.clear()

    def answer(self, msg: codec.Ack | codec.Error) -> bool:
        """An ACK or ERROR: True when it answers one of these requests (then it is consumed)."""
        fut = self._pending.pop(msg.req, None)
        if fut is None:
            return False
        if not fut.done():
            if isinstance(msg, codec.Ack):
                fut.set_result(msg)
            else:
                fut.set_exception(ServerError(msg))
        return True

    # -- the requests -------------------------------------------------------------------------
    async def _ask(self, request: Request) -> codec.Ack:
        send = self._send
        if send is None:
            raise ConnectionError("not connected")
        fut: asyncio.Future[codec.Ack] = asyncio.get_running_loop().create_future()
        self._pending[request.req] = fut
        try:
            await send(encode_request(request))
            return await asyncio.wait_for(fut, ANSWER_TIMEOUT_S)
        finally:
            self._pending.pop(request.req, None)

    async def _set_rate(self) -> None:
        try:
            await self._ask(Rate(req=self.next_req(), max_hz=self.max_hz))
        except ServerError as exc:  # an older node: it knows no rate, frames come at 25 Hz
            self.stats.rate_refused += 1
            self.stats.error_log.append(f"max_hz {self.max_hz:g} refused: {exc}")
        except (*_GONE, TimeoutError) as exc:
            self.stats.error_log.append(f"rate interrupted: {exc!r}")

    async def _refresh_loop(self, token: str) -> None:
        plan = self.refresh
        plan.start(token)
        while plan.due_ns is not None:
            await asyncio.sleep(max(0.0, (plan.due_ns - self.clock.now_ns()) / NS))
            plan.begin()
            assert self.refresh_token is not None
            try:
                fresh = await self.refresh_token()
                await self._ask(Refresh(req=self.next_req(), token=fresh))
            except _GONE:
                return  # the connection is ending; the next one starts its own plan
            except Exception as exc:  # TOKEN_REJECTED, no answer, the callback failed
                self.stats.refresh_failures += 1
                self.stats.error_log.append(f"token refresh failed: {_why(exc)}")
                plan.failed()
            else:
                self.stats.refreshes += 1
                self.token = fresh
                plan.accepted(fresh)

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.report_every_s)
            view = self.view
            report = self.glass.due(self.stats, view.last_regression, view.last_gap, self.next_req)
            if report is None:
                continue
            try:
                await self._ask(report)
            except _GONE:
                return
            except ServerError as exc:  # RATE_LIMITED: the next turn sends it again
                if exc.code == ErrorCode.INVALID_REQUEST:
                    self.glass.unsupported()  # an older node: it knows no report
            except TimeoutError:
                pass
            else:
                self.stats.glass_reports += 1
                self.glass.accepted(report)

    async def wait_closed(self) -> None:
        """Let cancelled timers finish (the client's ``close()``)."""
        tasks = list(self._timers)
        self.close()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, ServerError) else repr(exc)
