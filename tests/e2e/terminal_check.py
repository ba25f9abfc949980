"""An independent terminal for the multi-process host's end-to-end tests
(test_host_chaos.py): a raw WebSocket client that checks what it is shown frame by frame.

- no version lower than one it holds; a delta only on the base it holds, or else a gap: a
  delta newer than what it holds on a base it lacks is never applied, the terminal asks for the
  symbol's snapshot again (as an SDK does) and a test says where gaps may happen;
- never one version of a symbol with two different prices: ``Prices`` records (iid, version) ->
  (bid, ask, last) for every record a terminal is shown, shared by every terminal of a test, so
  the check holds per terminal and across terminals (writers);
- what it got, to compare frame numbers among terminals with the same watchlist (``missed``),
  with the time each thing came, so a test can ask what happened after a kill.

``run_terminal`` keeps one connection; with ``reconnect=True`` it connects again whenever the
connection ends (a killed writer), keeping what the terminal holds, as an SDK terminal does.
"""

from __future__ import annotations

import asyncio
import time

import websockets

from monotape.platform.wire import codec
from monotape.platform.wire.records import apply_record
from monotape.platform.wire.requests import Subscribe, encode_request

__all__ = ["Prices", "Terminal", "Version", "run_terminal"]

Version = tuple[int, int]
Quote = tuple[int, int, int]  # bid, ask, last


class Prices:
    """Every (iid, version) any terminal of a test was shown, with its prices."""

    def __init__(self) -> None:
        self.shown: dict[tuple[int, Version], Quote] = {}
        self.faults: list[str] = []

    def check(self, iid: int, v: Version, quote: Quote, where: str) -> None:
        seen = self.shown.setdefault((iid, v), quote)
        if seen != quote:
            self.faults.append(f"{where}: {iid} {v} shown as {quote}, elsewhere as {seen}")

    def quote(self, iid: int, v: Version) -> Quote | None:
        return self.shown.get((iid, v))


class Terminal:
    """One raw terminal checking frame by frame: no version ever lower than one held, a delta
    only on the base held, one price per version (``prices``, shared); and what it got, to
    compare every terminal's frame numbers."""

    def __init__(self, prices: Prices | None = None, name: str = "") -> None:
        self.name = name
        self.prices = prices if prices is not None else Prices()
        self.frames: list[int] = []
        # ("hello" | "frame" | "snapshot", frame_no) or ("close", reconnect_after_ms)
        self.log: list[tuple[str, int]] = []
        self.closes: list[codec.Close] = []  # the wire's CLOSE messages (their hints)
        self.times: list[float] = []  # time.monotonic() of each log entry
        self.servers: list[str] = []  # the hello's server_id of every connection, in order
        self.held: dict[int, Version] = {}
        self.quotes: dict[int, Quote] = {}  # the prices of the held version, when known
        self.advanced: dict[int, float] = {}  # iid -> when its held version last went up
        self.faults: list[str] = []
        # A delta on a base this terminal does not hold, newer than what it holds: a gap (the
        # writer left the symbol out of a snapshot it could not make at that frame), never
        # applied; the terminal asks for the symbol's snapshot again, as an SDK does
        # (sdk/view.py ``_gap``). A test says where gaps may happen; every one must resolve.
        self.gaps: list[str] = []
        self.gap_times: list[float] = []  # time.monotonic() of each gap
        self.resyncing: set[int] = set()
        self._to_ask: list[int] = []
        self.keys: dict[int, str] = {}
        # symbols whose held version a snapshot set and no frame has moved since: the shared
        # table may be a few frames ahead of the writer's frames, so frames may still bring
        # versions at or below it (dropped, as an SDK's guard drops them), never for others
        self._from_snapshot: set[int] = set()

    # -- what came ---------------------------------------------------------------------------
    def on(self, msg: codec.ServerMessage) -> None:
        now = time.monotonic()
        if isinstance(msg, codec.Hello):
            self.keys = {i.iid: i.key for i in msg.instruments}
            self.servers.append(msg.server_id)
            self._log("hello", len(self.servers), now)
        elif isinstance(msg, codec.Snapshot):
            self._log("snapshot", msg.frame_no, now)
            for r in msg.records:
                v, held = (r.epoch, r.seq), self.held.get(r.iid, (0, 0))
                quote = (r.bid, r.ask, r.last)
                self.prices.check(r.iid, v, quote, f"{self.name} snapshot {msg.frame_no}")
                if v < held:
                    self.faults.append(f"snapshot {r.iid} {v} below held {held}")
                if v >= held:
                    self._hold(r.iid, v, quote, now)
                    self._from_snapshot.add(r.iid)
                    self.resyncing.discard(r.iid)
        elif isinstance(msg, codec.Close):
            self._log("close", msg.reconnect_after_ms, now)
            self.closes.append(msg)
        elif isinstance(msg, codec.Frame):
            self._log("frame", msg.frame_no, now)
            self.frames.append(msg.frame_no)
            for r in msg.records:
                self._on_record(msg.frame_no, r, now)

    def _log(self, kind: str, n: int, now: float) -> None:
        self.log.append((kind, n))
        self.times.append(now)

    def _on_record(self, frame_no: int, r: codec.Record, now: float) -> None:
        v, held = (r.epoch, r.seq), self.held.get(r.iid, (0, 0))
        base: Quote | None = None
        if r.has_base:
            b = (r.base_epoch, r.base_seq)
            base = self.quotes.get(r.iid) if b == held else self.prices.quote(r.iid, b)
        quote = apply_record(base, r) if base is not None or not r.has_base else None
        if quote is not None:  # a dropped duplicate too: it must carry the same prices
            self.prices.check(r.iid, v, quote, f"{self.name} frame {frame_no}")
        if v <= held:
            if r.iid not in self._from_snapshot:
                self.faults.append(f"frame {frame_no}: {r.iid} {v} <= held {held}")
            return
        if r.has_base and (r.base_epoch, r.base_seq) != held:
            if r.iid not in self.resyncing:
                self.gaps.append(
                    f"frame {frame_no}: {r.iid} base {(r.base_epoch, r.base_seq)} != held {held}"
                    f" (on {self.servers[-1:]}, after {self._last('snapshot')})"
                )
                self.gap_times.append(now)
                self.resyncing.add(r.iid)
                self._to_ask.append(r.iid)
            return
        self.resyncing.discard(r.iid)
        self._hold(r.iid, v, quote, now)
        self._from_snapshot.discard(r.iid)

    def _hold(self, iid: int, v: Version, quote: Quote | None, now: float) -> None:
        if v > self.held.get(iid, (0, 0)):
            self.advanced[iid] = now
        self.held[iid] = v
        if quote is None:
            self.quotes.pop(iid, None)
        else:
            self.quotes[iid] = quote

    def _last(self, kind: str) -> str:
        """Where the last ``kind`` entry was: for a fault's message."""
        n = sum(1 for k, _ in self.log if k == kind)
        last = next((f for k, f in reversed(self.log) if k == kind), None)
        return f"{n} {kind}s, the last at {last}"

    def take_resyncs(self) -> list[str]:
        """The keys of the symbols gapped since the last call: their snapshot is to be asked
        for (a Subscribe of a key already held snapshots it again)."""
        due, self._to_ask = self._to_ask, []
        return [self.keys[i] for i in due if i in self.keys]

    # -- questions ---------------------------------------------------------------------------
    def since(self, t0: float, kind: str) -> list[int]:
        """Frame numbers of the ``kind`` entries that came at or after ``t0`` (monotonic)."""
        return [n for (k, n), t in zip(self.log, self.times, strict=True) if k == kind and t >= t0]

    def first(self, kind: str, after: float) -> float | None:
        """When the first ``kind`` entry at or after ``after`` (monotonic) came, or None."""
        return next((t for (k, _), t in zip(self.log, self.times, strict=True)
                     if k == kind and t >= after), None)  # fmt: skip

    def last(self, kind: str, before: float) -> float | None:
        """When the last ``kind`` entry before ``before`` (monotonic) came, or None."""
        return next((t for (k, _), t in zip(reversed(self.log), reversed(self.times), strict=True)
                     if k == kind and t < before), None)  # fmt: skip

    def between(self, t0: float, t1: float, kind: str = "frame") -> list[int]:
        return [
            n for (k, n), t in zip(self.log, self.times, strict=True) if k == kind and t0 <= t < t1
        ]

    def missed(self, published: set[int]) -> list[int]:
        """Frame numbers in ``published`` within this terminal's span that it did not get,
        other than where a snapshot announced a gap (the frames before a snapshot may be lost:
        the snapshot replaces them)."""
        got = set(self.frames)
        lo, hi = self.frames[0], self.frames[-1]
        out = []
        for f in sorted(published):
            if lo <= f <= hi and f not in got and not self._snapshot_after(f):
                out.append(f)
        return out

    def _snapshot_after(self, frame_no: int) -> bool:
        """A snapshot came between the last frame before ``frame_no`` and the first after."""
        seen_before = False
        for kind, n in self.log:
            if kind == "frame" and n < frame_no:
                seen_before = True
            elif kind == "snapshot" and seen_before:
                return True
            elif kind == "frame" and n > frame_no:
                return False
        return False


async def run_terminal(
    url: str, token: str, keys: list[str], t: Terminal, *, reconnect: bool = False
) -> None:
    """Connect, subscribe to ``keys`` and feed every message to ``t``; with ``reconnect`` connect
    again (at once, then every 0.1 s while refused) whenever the connection ends."""
    while True:
        try:
            async with websockets.connect(
                url,
                additional_headers={"Authorization": f"Bearer {token}"},
                compression=None,
                max_size=None,
                open_timeout=60,
            ) as ws:
                req = 1
                await ws.send(encode_request(Subscribe(req=req, keys=keys)))
                async for data in ws:
                    assert isinstance(data, bytes)
                    t.on(codec.decode_message(data))
                    if resync := t.take_resyncs():
                        req += 1
                        await ws.send(encode_request(Subscribe(req=req, keys=resync)))
        except (OSError, websockets.ConnectionClosed, websockets.InvalidHandshake):
            if not reconnect:
                raise
            await asyncio.sleep(0.1)
            continue
        if not reconnect:
            return
