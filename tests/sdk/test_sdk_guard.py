"""The SDK's screen logic fed messages directly: gaps resync in batches and retry, and a
watchlist line comes back when a symbol is re-subscribed."""

from __future__ import annotations

import asyncio

import msgspec

from monotape.platform.model import Instrument
from monotape.platform.sdk.client import RESYNC_RETRY_S, TerminalClient
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Subscribe

KEYS = [f"XNAS:S{i}" for i in range(60)]


class RecordingSocket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(data)


def client() -> tuple[TerminalClient, RecordingSocket]:
    c = TerminalClient("ws://127.0.0.1:1/")
    instruments = [Instrument(i, k, "XNAS", k[5:], 2, 1) for i, k in enumerate(KEYS)]
    c._on_message(codec.Hello(1, "t", 40, 256, 8, instruments))
    ws = RecordingSocket()
    c._ws = ws  # type: ignore[assignment]
    for k in KEYS:
        c._held[k] = None
    return c, ws


def full(iid: int, seq: int, bid: int = 100) -> codec.Record:
    return codec.Record(iid, 1, seq, False, 0, 0, bid, bid + 1, bid, 10)


def delta(iid: int, base_seq: int, seq: int) -> codec.Record:
    return codec.Record(iid, 1, seq, True, 1, base_seq, 1, 1, 1, 10)


def subscribed_keys(ws: RecordingSocket) -> list[list[str]]:
    return [msgspec.msgpack.decode(m, type=Subscribe).keys for m in ws.sent]


async def test_gaps_are_asked_for_in_one_request_and_again_if_no_snapshot_comes() -> None:
    c, ws = client()
    c._on_message(codec.Snapshot(1, [full(i, 5) for i in range(60)]))
    # 50 deltas on a base nobody holds (seq 4, not 5): 50 gaps, never applied
    c._on_message(codec.Frame(2, [delta(i, 4, 6) for i in range(50)]))
    assert c.stats.gaps == 50 and c.stats.regressions == 0
    await asyncio.sleep(0.01)
    assert subscribed_keys(ws) == [KEYS[:50]]  # one request, not 50 (the rate limit is 20/s)
    # the snapshot for ten of them arrives; the others' request was lost
    c._on_message(codec.Snapshot(3, [full(i, 7) for i in range(10)]))
    c._resyncing.update({i: c._resyncing[i] - RESYNC_RETRY_S - 1 for i in c._resyncing})
    c._on_message(codec.Heartbeat(3, 0))
    await asyncio.sleep(0.01)
    assert subscribed_keys(ws)[-1] == KEYS[10:50]  # asked again, only for the missing ones
    assert c.view[KEYS[0]].seq == 7


async def test_resubscribing_puts_the_line_back() -> None:
    c, _ = client()
    c._on_message(codec.Snapshot(1, [full(0, 5)]))
    assert KEYS[0] in c.view
    c.view.pop(KEYS[0])
    c._held.pop(KEYS[0])  # what unsubscribe() does
    c._on_message(codec.Frame(2, [delta(0, 5, 6)]))  # in flight when it was unsubscribed
    assert KEYS[0] not in c.view
    c._held[KEYS[0]] = None  # subscribe again: the snapshot is what the screen last showed
    c._on_message(codec.Snapshot(3, [full(0, 6, bid=101)]))
    assert c.view[KEYS[0]].seq == 6
