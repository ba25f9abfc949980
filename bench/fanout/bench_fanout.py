"""Server CPU µs per delivered frame: monotape's FanoutServer vs a naive server vs the write floor.

Two processes per measurement, on loopback (127.0.0.1), bounded in time:

- the *server* (pinned to CPU 0) is one of three variants, all on uvloop, all fed the same
  pre-generated workload on the same 40 ms grid (25 Hz):
  - ``naive``: ``websockets.asyncio.server`` (compression=None); per frame, per connection, the
    changed symbols of its watchlist JSON-encoded with stdlib ``json`` and ``await ws.send()``
    (the seed team's first version);
  - ``monotape``: the real ``FanoutServer`` (``platform/server/``) with a real ``Sequencer``:
    per frame ``sequencer.on_batch(batch, now)`` for each venue's tick batch (built before the
    measurement, as the feed handlers build them), ``sequencer.take_frame(boundary)``,
    ``server.publish_frame(frame)``; clients subscribe with binary msgpack requests; the
    pure-Python writer (``server.native_writer = false``);
  - ``monotape-native``: the same with the native writer (the C send loop of
    ``platform/server/sendmany.py``, one call per payload group: the default);
  - ``floor``: the same websockets handshake, then per frame one bare ``transport.write`` per
    connection of a pre-framed ``bytes`` object, byte for byte monotape's payload for that
    connection's signature (built before the measurement), so no encode and no planning;
  - ``monotape-paced``: ``monotape`` with every tenth terminal at ``max_hz`` 5 (issue 15: a
    wallboard or a slow link; set through the same index call a ``rate`` request makes once
    every terminal has subscribed). Its row "server CPU per 40 ms frame" is compared with
    ``monotape``'s: a slower terminal must cost the server less, not more;
  - ``c-floor``: the same bytes on the same sockets, written by the extension itself
    (``send_many``: one call per signature group over fd lists built at subscribe time): the
    C send loop, the floor under ``monotape-native``.
- the *load client* (pinned to CPU 1) is the same for every variant: uvloop + raw sockets doing
  the RFC 6455 handshake, one masked binary subscribe request per connection, then counting
  every byte and every data message (frame headers parsed, payloads skipped) and answering pings.
  It reports its own CPU so a client-bound run is visible.

The workload: ``build_universe()`` (2,400 instruments, 6 venues); each frame a seeded random 25%
of the instruments change (a fresh tick each: the venue's update id or timestamp as ``seq``, a
small random price walk); one Zipf watchlist per connection from ``zipf_watchlists`` (seed 1).
The server waits until every connection has subscribed, starts the frames, warms up, then
measures its own CPU (psutil user+system) and the frames it delivered over the window; the
client counts the messages it received over the same monotonic window (CLOCK_MONOTONIC is
system-wide, so both processes share it).

    .venv/bin/python -m bench.fanout.bench_fanout [--quick] [--connections N] [--seconds S]
        [--runs R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Row, median_min_max, pin_to_cpu, raise_nofile, row
from bench.wsclient import CountingClient, Counts, client_frame
from monotape.platform.role.process_metrics import parse_schedstat

__all__ = ["Workload", "run"]

ROOT = Path(__file__).resolve().parents[2]
FRAME_NS = 40_000_000
SEED = 1
CHANGE_SHARE = 0.25  # of the instruments change in each frame
PY_VARIANTS = ("naive", "monotape", "monotape-native", "monotape-paced", "floor", "c-floor")
NODE_VARIANTS = {"node-ws-json": "json", "node-ws-shared": "shared"}  # bench/node/server.js
VARIANTS = (
    "naive",
    "node-ws-json",
    "node-ws-shared",
    "monotape",
    "monotape-native",
    "monotape-paced",
    "floor",
    "c-floor",
)
PACED_SHARE, PACED_HZ = 10, 5.0  # every tenth terminal at max_hz 5 (k = 5)
NATIVE_TARGET_VS_NODE = 1.4  # issue 13: >= 1.4x cheaper than node-ws-shared...
NATIVE_TARGET_VS_C = 1.15  # ...and within 1.15x of the C send loop
FULL_CONNECTIONS = (1000, 4200, 6000)
QUICK_CONNECTIONS = (200,)
NODE_DIR = ROOT / "bench" / "node"
NODE_SKIPPED = "skipped: node/ws not installed (npm ci --prefix bench/node)"
SERVER_CPU, CLIENT_CPU = 0, 1
TARGET_US = 5.0
CLIENT_BOUND = 0.90  # client CPU above this share of its core: the client may be the bottleneck
_WALL_BASE_NS = 1_764_460_800 * 10**9  # a fixed "venue wall clock": deterministic ts seqs


# --- the workload (identical in every process for a given seed) --------------------------------


class Workload:
    """Instruments, watchlists and the per-frame ticks, deterministic for ``seed``."""

    def __init__(self, connections: int, seed: int = SEED, change: float = CHANGE_SHARE) -> None:
        from monotape.loadgen.watchlists import zipf_watchlists
        from monotape.platform.feeds.simulator import build_universe, venues_with_update_ids

        self.universe = build_universe()
        self.keys = [inst.key for inst in self.universe]
        self.watchlists = zipf_watchlists(self.keys, connections, seed)
        iid_of = {k: i for i, k in enumerate(self.keys)}
        self.watch_iids = [sorted(iid_of[k] for k in wl) for wl in self.watchlists]
        n = len(self.universe)
        self._n = n
        self._per_frame = max(1, round(n * change))
        self._rng = np.random.default_rng(seed)
        ids = venues_with_update_ids(self.universe)
        self._has_ids = [inst.venue in ids for inst in self.universe]
        self._venue = [inst.venue for inst in self.universe]
        self._tick = np.array([inst.tick_size for inst in self.universe], dtype=np.int64)
        self._level = self._rng.integers(2_000, 40_000, size=n, dtype=np.int64)
        self._uid = self._rng.integers(1_000, 1_000_000, size=n, dtype=np.int64)
        self._k = 0

    def _ticks(self, iids: np.ndarray) -> list[Any]:
        from monotape.platform.model import Tick

        rng = self._rng
        m = len(iids)
        self._level[iids] = np.maximum(
            self._level[iids] + rng.integers(-3, 4, size=m, dtype=np.int64), 50
        )
        self._uid[iids] += rng.integers(1, 6, size=m, dtype=np.int64)
        ts0 = _WALL_BASE_NS + self._k * FRAME_NS
        ts = (ts0 + np.sort(rng.integers(0, FRAME_NS, size=m, dtype=np.int64))).tolist()
        tick = self._tick[iids]
        bid = (self._level[iids] * tick).tolist()
        spread = rng.integers(1, 4, size=m, dtype=np.int64)
        ask = ((self._level[iids] + spread) * tick).tolist()
        last = ((self._level[iids] + rng.integers(0, 2, size=m)) * tick).tolist()
        size = (rng.integers(1, 40, size=m, dtype=np.int64) * 100).tolist()
        uid = self._uid[iids].tolist()
        has_ids, venue = self._has_ids, self._venue
        out = []
        for j, i in enumerate(iids.tolist()):
            seq = uid[j] if has_ids[i] else ts[j]
            out.append(Tick(i, venue[i], 1, seq, ts[j], bid[j], ask[j], last[j], size[j], "A"))
        self._k += 1
        return out

    def initial(self) -> list[Any]:
        """One tick per instrument, published before anyone connects (so snapshots are real)."""
        return self._ticks(np.arange(self._n, dtype=np.int64))

    def next_frame(self) -> list[Any]:
        """The ticks of the next frame: a random ``change`` share of instruments, ascending iid."""
        iids = np.sort(self._rng.choice(self._n, size=self._per_frame, replace=False))
        return self._ticks(iids.astype(np.int64))


def venue_batches(ticks: list[Any]) -> list[Any]:
    """``ticks`` as the sequencer receives them: one tick batch a venue (``wire/batch.py``),
    each in ascending iid."""
    from monotape.platform.wire.batch import batch_from_ticks

    return batch_from_ticks(sorted(ticks, key=lambda t: t.venue))  # stable: iid order kept


# --- server side ------------------------------------------------------------------------------


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _Bench:
    """What every server variant exposes to the driver loop."""

    def __init__(self, connections: int, frames_needed: int) -> None:
        self.work = Workload(connections)
        self.initial = self.work.initial()  # first: every later tick must be newer
        self.frames: list[list[Any]] = [self.work.next_frame() for _ in range(frames_needed)]
        self.next = 0
        self.feed_ns = 0  # thread CPU in the feed step (sequencer), inside the window
        self.fan_ns = 0  # thread CPU in the fan-out step, inside the window
        self.measuring = False

    def frame_ticks(self) -> list[Any]:
        if self.next < len(self.frames):
            ticks = self.frames[self.next]
            self.frames[self.next] = []  # let it go
        else:  # ran past the pre-generated frames (a slow start): generate on the fly
            ticks = self.work.next_frame()
        self.next += 1
        return ticks

    async def start(self) -> int:
        raise NotImplementedError

    def subscribed(self) -> int:
        raise NotImplementedError

    def delivered(self) -> tuple[int, int]:
        """(frames, bytes) delivered to connections so far."""
        raise NotImplementedError

    async def step(self, boundary_ns: int) -> None:
        raise NotImplementedError


class _Monotape(_Bench):
    native = False

    async def start(self) -> int:
        from monotape.clock import SystemClock
        from monotape.config import ServerConfig
        from monotape.platform.core.sequencer import Sequencer
        from monotape.platform.server.endpoint import FanoutServer

        self.seq = Sequencer(lanes=4)
        cfg = ServerConfig(host="127.0.0.1", ws_port=0, native_writer=self.native)
        self.server = FanoutServer(cfg, self.work.universe, self.seq, SystemClock())
        if self.native and not self.server.writer.native:
            raise RuntimeError("monotape-native: the native extension is not built")
        now = time.monotonic_ns()
        for batch in venue_batches(self.initial):
            self.seq.on_batch(batch, now)
        self.server.publish_frame(self.seq.take_frame(now - now % FRAME_NS))
        # the bus batches of every frame, built before anything is measured
        self.batches: list[list[Any]] = [venue_batches(ticks) for ticks in self.frames]
        self.frames = []
        return await self.server.start()

    def frame_batches(self) -> list[Any]:
        if self.next < len(self.batches):
            batches = self.batches[self.next]
            self.batches[self.next] = []  # let it go
        else:  # ran past the pre-generated frames (a slow start): generate on the fly
            batches = venue_batches(self.work.next_frame())
        self.next += 1
        return batches

    def subscribed(self) -> int:
        sig = self.server.index.signature
        return sum(1 for cid in self.server.connections if sig(cid) is not None)

    def delivered(self) -> tuple[int, int]:
        return self.server.sent_totals()

    async def step(self, boundary_ns: int) -> None:
        batches = self.frame_batches()
        t0 = time.thread_time_ns()
        now = time.monotonic_ns()
        for batch in batches:
            self.seq.on_batch(batch, now)
        frame = self.seq.take_frame(boundary_ns)
        t1 = time.thread_time_ns()
        self.server.publish_frame(frame)
        if self.measuring:
            self.feed_ns += t1 - t0
            self.fan_ns += time.thread_time_ns() - t1


class _MonotapeNative(_Monotape):
    native = True


class _MonotapePaced(_Monotape):
    """Every ``PACED_SHARE``-th terminal moved to the k = 5 rate group once all have subscribed
    (what its ``rate`` request would do: ``Session._rate`` calls the same ``set_rate``)."""

    paced = False

    def subscribed(self) -> int:
        n = super().subscribed()
        if n >= len(self.work.watchlists) and not self.paced:
            k = round(25 / PACED_HZ)
            for cid in sorted(self.server.connections)[::PACED_SHARE]:
                self.server.index.set_rate(cid, k)
            self.paced = True
        return n


class _WsBench(_Bench):
    """The naive and floor servers: websockets does the handshake and reads the subscribe."""

    def __init__(self, connections: int, frames_needed: int) -> None:
        super().__init__(connections, frames_needed)
        self.conns: dict[int, Any] = {}
        self.sent = 0
        self.sent_bytes = 0
        self._ids = {k: i for i, k in enumerate(self.work.keys)}

    async def start(self) -> int:
        import websockets

        self._server = await websockets.serve(
            self._handler, "127.0.0.1", 0, compression=None, backlog=2048, max_queue=16
        )
        port: int = next(iter(self._server.sockets)).getsockname()[1]
        return port

    def _on_subscribe(self, ws: Any, iids: list[int]) -> None:
        raise NotImplementedError

    async def _handler(self, ws: Any) -> None:
        from monotape.platform.wire.requests import RequestError, Subscribe, decode_request

        key = id(ws)
        try:
            async for message in ws:
                try:
                    req = decode_request(message)
                except RequestError:
                    continue
                if isinstance(req, Subscribe):
                    iids = sorted({self._ids[k] for k in req.keys if k in self._ids})
                    self._on_subscribe(ws, iids)
        except Exception:
            pass
        finally:
            self.conns.pop(key, None)

    def subscribed(self) -> int:
        return len(self.conns)

    def delivered(self) -> tuple[int, int]:
        return self.sent, self.sent_bytes


class _Naive(_WsBench):
    """Per frame, per connection: stdlib json of its changed symbols, ``await ws.send()``."""

    def _on_subscribe(self, ws: Any, iids: list[int]) -> None:
        self.conns[id(ws)] = (ws, iids)

    async def start(self) -> int:
        self._scale = [10**inst.price_decimals for inst in self.work.universe]
        self._frame_no = 0
        return await super().start()

    async def step(self, boundary_ns: int) -> None:
        ticks = self.frame_ticks()
        t0 = time.thread_time_ns()
        latest = {t.iid: t for t in ticks}
        t1 = time.thread_time_ns()
        frame_no = boundary_ns // FRAME_NS
        keys, scale, dumps = self.work.keys, self._scale, json.dumps
        for ws, iids in list(self.conns.values()):
            updates = []
            for iid in iids:
                t = latest.get(iid)
                if t is not None:
                    s = scale[iid]
                    updates.append(
                        {
                            "key": keys[iid],
                            "epoch": t.epoch,
                            "seq": t.seq,
                            "bid": t.bid / s,
                            "ask": t.ask / s,
                            "last": t.last / s,
                            "size": t.size,
                        }
                    )
            if not updates:
                continue
            text = dumps({"type": "frame", "frame": frame_no, "updates": updates})
            try:
                await ws.send(text)
            except Exception:
                continue
            self.sent += 1
            self.sent_bytes += len(text) + (2 if len(text) < 126 else 4)
        if self.measuring:
            self.feed_ns += t1 - t0
            self.fan_ns += time.thread_time_ns() - t1


class _Floor(_WsBench):
    """One bare ``transport.write`` of monotape's own pre-framed payload per connection."""

    def _on_subscribe(self, ws: Any, iids: list[int]) -> None:
        from monotape.platform.core.fanout import subscription_signature

        self.conns[id(ws)] = (ws.transport, subscription_signature(iids))

    async def start(self) -> int:
        # Build, before anything is measured, the exact bytes monotape would write per frame
        # per signature (same sequencer, codec and plan_payloads as the real server).
        from monotape.platform.core.fanout import SubscriptionIndex, plan_payloads
        from monotape.platform.core.sequencer import Sequencer
        from monotape.platform.wire import codec

        seq = Sequencer(lanes=4)
        index = SubscriptionIndex()
        for cid, iids in enumerate(self.work.watch_iids):
            index.add_connection(cid)
            index.subscribe(cid, iids)
        now = time.monotonic_ns()
        for batch in venue_batches(self.initial):
            seq.on_batch(batch, now)
        seq.take_frame(now - now % FRAME_NS)
        frame_no = now // FRAME_NS + 100  # same varint width as the live frame numbers
        self.wires: list[dict[int, bytes]] = []
        for k, ticks in enumerate(self.frames):
            b = (frame_no + k) * FRAME_NS
            for batch in venue_batches(ticks):
                seq.on_batch(batch, b)
            frame = seq.take_frame(b)
            chunks = {r.iid: codec.encode_delta_record(r.base, r.new) for r in frame.records}
            self.wires.append(
                {
                    sig: codec.ws_binary_frame(
                        codec.frame_header(frame.frame_no, len(cs)) + b"".join(cs)
                    )
                    for sig, cs in plan_payloads(chunks, index).items()
                }
            )
        self.frames = []
        return await super().start()

    async def step(self, boundary_ns: int) -> None:
        k = self.next
        self.next += 1
        wires = self.wires[k % len(self.wires)]  # cycles only if the run outlives the plan
        t1 = time.thread_time_ns()
        n = 0
        nbytes = 0
        for transport, sig in list(self.conns.values()):
            wire = wires.get(sig)
            if wire is None or transport.is_closing():
                continue
            try:
                transport.write(wire)
            except Exception:
                continue
            n += 1
            nbytes += len(wire)
        self.sent += n
        self.sent_bytes += nbytes
        if self.measuring:
            self.fan_ns += time.thread_time_ns() - t1


class _CFloor(_Floor):
    """The floor's bytes on the same sockets, written by the C send loop: one ``send_many`` per
    signature group. A socket that takes less (never at this load unless the client stalls)
    gets the rest through its transport and leaves the fd lists until that has drained, so
    the client's framing stays whole."""

    def _on_subscribe(self, ws: Any, iids: list[int]) -> None:
        super()._on_subscribe(ws, iids)
        self._dirty = True

    async def start(self) -> int:
        from monotape.platform.server import sendmany

        native = sendmany.native(True)
        if native is None:
            raise RuntimeError(f"c-floor: native extension not built: {sendmany.NATIVE_ERROR}")
        self.send_many = native
        self._dirty = True
        self._seen = 0
        self.groups: dict[int, tuple[list[int], list[Any]]] = {}
        self.slow: set[Any] = set()  # transports holding a remainder
        return await super().start()

    def _regroup(self) -> None:
        groups: dict[int, tuple[list[int], list[Any]]] = {}
        for transport, sig in self.conns.values():
            if transport in self.slow or transport.is_closing():
                continue
            fds, transports = groups.setdefault(sig, ([], []))
            fds.append(transport.get_extra_info("socket").fileno())
            transports.append(transport)
        self.groups = groups
        self._seen = len(self.conns)
        self._dirty = False

    async def step(self, boundary_ns: int) -> None:
        k = self.next
        self.next += 1
        wires = self.wires[k % len(self.wires)]
        t1 = time.thread_time_ns()
        if self.slow:
            drained = {t for t in self.slow if not t.get_write_buffer_size()}
            if drained:
                self.slow -= drained
                self._dirty = True
        if self._dirty or self._seen != len(self.conns):
            self._regroup()
        send_many = self.send_many
        n = 0
        nbytes = 0
        for sig, (fds, transports) in self.groups.items():
            wire = wires.get(sig)
            if wire is None:
                continue
            short = send_many(wire, fds)
            got = len(fds)
            if short is not None:
                for i, sent, err in short:
                    if err and err != errno.EAGAIN:  # refused: not delivered
                        got -= 1
                        continue
                    transports[i].write(wire[sent:])
                    self.slow.add(transports[i])
                    self._dirty = True
            n += got
            nbytes += got * len(wire)
        self.sent += n
        self.sent_bytes += nbytes
        if self.measuring:
            self.fan_ns += time.thread_time_ns() - t1


async def _serve(args: argparse.Namespace) -> None:
    needed = frames_needed(args.seconds, args.warmup)
    cls: Callable[[int, int], _Bench] = {
        "naive": _Naive,
        "monotape": _Monotape,
        "monotape-native": _MonotapeNative,
        "monotape-paced": _MonotapePaced,
        "floor": _Floor,
        "c-floor": _CFloor,
    }[args.variant]
    bench = cls(args.connections, needed)
    port = await bench.start()
    _emit({"port": port})
    deadline = time.monotonic() + args.setup_timeout
    while bench.subscribed() < args.connections and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    subscribed = bench.subscribed()
    t_start = time.monotonic() + args.warmup
    t_end = t_start + args.seconds
    _emit({"window": [t_start, t_end], "subscribed": subscribed})

    stop = asyncio.Event()
    late = 0

    async def frames() -> None:
        nonlocal late
        while not stop.is_set():
            now = time.monotonic_ns()
            boundary = (now // FRAME_NS + 1) * FRAME_NS
            await asyncio.sleep((boundary - now) / 1e9)
            if time.monotonic_ns() - boundary > FRAME_NS:
                late += 1
            await bench.step(boundary)

    task = asyncio.create_task(frames())
    await asyncio.sleep(max(0.0, t_start - time.monotonic()))
    c0 = time.process_time()  # every thread, ns resolution (psutil's times are 10 ms ticks)
    w0 = time.monotonic()
    d0, b0 = bench.delivered()
    n0, late0 = bench.next, late
    bench.measuring = True
    await asyncio.sleep(max(0.0, t_end - time.monotonic()))
    c1 = time.process_time()
    w1 = time.monotonic()
    d1, b1 = bench.delivered()
    n1, late1 = bench.next, late
    bench.measuring = False
    stop.set()
    _emit(
        {
            "variant": args.variant,
            "connections": args.connections,
            "subscribed": subscribed,
            "cpu_s": c1 - c0,
            "wall_s": w1 - w0,
            "delivered": d1 - d0,
            "bytes": b1 - b0,
            "frames": n1 - n0,
            "late_frames": late1 - late0,
            "feed_s": bench.feed_ns / 1e9,
            "fanout_s": bench.fan_ns / 1e9,
        }
    )
    task.cancel()
    os._exit(0)  # 1,000 graceful closes are not part of the benchmark


# --- the load client --------------------------------------------------------------------------

# Each socket is read at most once per this long: one read and one callback carry ~5 frames
# instead of one each (the per-message callback, read syscall and loop wake-up were most of the
# client's CPU: 94% of its core against the C loop at 4,200 terminals). The kernel holds a few
# 120-byte frames per socket with room to spare, so the server's sends never meet a full buffer.
READ_EVERY_S = 0.2


class _BatchedClient(CountingClient):
    """``CountingClient`` that stops reading after each read until the next ``READ_EVERY_S``
    tick (``_resume_all``): bigger reads, fewer callbacks; what it counts is unchanged."""

    paused: list[asyncio.Transport] = []  # one client class per process

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()
            _BatchedClient.paused.append(transport)


async def _resume_all() -> None:
    while True:
        await asyncio.sleep(READ_EVERY_S)
        paused, _BatchedClient.paused = _BatchedClient.paused, []
        for transport in paused:
            with contextlib.suppress(Exception):  # closed meanwhile
                transport.resume_reading()


async def _client(args: argparse.Namespace) -> None:
    import psutil

    from monotape.platform.wire.requests import Subscribe, encode_request

    work = Workload(args.connections)
    loop = asyncio.get_running_loop()
    counts = Counts()
    gate = asyncio.Semaphore(64)
    host = f"127.0.0.1:{args.port}"
    protocols: list[CountingClient] = []
    resumer = asyncio.create_task(_resume_all())

    async def connect(i: int) -> bool:
        sub = client_frame(0x2, encode_request(Subscribe(req=i + 1, keys=work.watchlists[i])))
        async with gate:
            done: asyncio.Future[bool] = loop.create_future()
            try:
                _, proto = await loop.create_connection(
                    lambda: _BatchedClient(counts, host, sub, done), "127.0.0.1", args.port
                )
            except OSError:
                return False
            protocols.append(proto)
            try:
                return await asyncio.wait_for(done, 30.0)
            except TimeoutError:
                return False

    results = await asyncio.gather(*(connect(i) for i in range(args.connections)))
    ok = sum(results)
    line = await loop.run_in_executor(None, sys.stdin.readline)
    if not line:
        os._exit(1)
    t_start, t_end = json.loads(line)["window"]
    proc = psutil.Process()
    await asyncio.sleep(max(0.0, t_start - time.monotonic()))
    c0, m0, b0, w0 = proc.cpu_times(), counts.msgs, counts.bytes, time.monotonic()
    await asyncio.sleep(max(0.0, t_end - time.monotonic()))
    c1, m1, b1, w1 = proc.cpu_times(), counts.msgs, counts.bytes, time.monotonic()
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    _emit(
        {
            "connected": ok,
            "closed": counts.closed,
            "msgs": m1 - m0,
            "bytes": b1 - b0,
            "cpu_s": cpu,
            "wall_s": w1 - w0,
        }
    )
    # Stay connected a little: the server's window must not end in a storm of closes.
    await asyncio.sleep(0.5)
    resumer.cancel()
    os._exit(0)


def _child_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--role", choices=("server", "client"), required=True)
    p.add_argument("--variant", choices=PY_VARIANTS, default="monotape")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--setup-timeout", type=float, default=60.0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--no-pin", action="store_true")
    args = p.parse_args(argv)
    raise_nofile()
    pinned = False
    if not args.no_pin:
        pinned = pin_to_cpu(SERVER_CPU if args.role == "server" else CLIENT_CPU)
    try:
        import uvloop

        runner: Callable[[Awaitable[None]], None] = uvloop.run  # type: ignore[assignment]
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run  # type: ignore[assignment]
    if args.role == "server":
        sys.stderr.write(f"server pinned={pinned}\n")
        runner(_serve(args))
    else:
        sys.stderr.write(f"client pinned={pinned}\n")
        runner(_client(args))


# --- the driver -------------------------------------------------------------------------------


class _Lines:
    """A child's stdout lines, read by a thread so the driver can wait with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout

        def pump() -> None:
            for line in out:
                self.q.put(line)
            self.q.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def json(self, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {what} within {timeout:.0f} s")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty as exc:
                raise TimeoutError(f"no {what} within {timeout:.0f} s") from exc
            if line is None:
                raise RuntimeError(f"process exited before {what}")
            line = line.strip()
            if line.startswith("{"):
                obj: dict[str, Any] = json.loads(line)
                return obj


def _tail(path: str, n: int = 1500) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def node_available() -> bool:
    """``node`` on PATH and ``npm ci --prefix bench/node`` done (ws and @msgpack/msgpack)."""
    modules = NODE_DIR / "node_modules"
    return (
        shutil.which("node") is not None
        and (modules / "ws" / "package.json").is_file()
        and (modules / "@msgpack" / "msgpack" / "package.json").is_file()
    )


def frames_needed(seconds: float, warmup: float) -> int:
    return int((warmup + seconds + 2.0) * 1e9 / FRAME_NS)


def write_node_workload(path: str, frames: int) -> None:
    """The workload for bench/node/server.js: the same instruments and, frame for frame, the same
    ticks a Python server steps through (``Workload.initial()`` first, as ``_Bench`` does, so the
    random stream matches). Watchlists are not written: the node server learns each one from the
    client's Subscribe, like the Python servers. Ticks are [iid, seq, bid, ask, last, size]
    (scaled integers; epoch is 1). The ticks do not depend on the connection count."""
    work = Workload(1)
    work.initial()
    out = {
        "keys": work.keys,
        "decimals": [inst.price_decimals for inst in work.universe],
        "frames": [
            [[t.iid, t.seq, t.bid, t.ask, t.last, t.size] for t in work.next_frame()]
            for _ in range(frames)
        ],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))


def _pin_server() -> None:  # in the forked child, before exec: node's threads inherit it
    pin_to_cpu(SERVER_CPU)


def _schedstat(pid: int) -> tuple[float, float]:
    """(CPU s, run-queue wait s) of a process's main thread, from /proc/PID/schedstat (the
    format's one parser: ``process_metrics.parse_schedstat``)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            run_ns, wait_ns, _ = parse_schedstat(f.read())
        return run_ns / 1e9, wait_ns / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def _sample_window(window: list[float], server: int, client: int) -> tuple[float, float, float]:
    """From outside, over the measurement window: the server's CPU (psutil on its pid, every
    thread: a cross-check of what the server reports) and the time the server's and the client's
    main threads spent runnable but waiting for their CPU (other load on a shared machine)."""
    import psutil

    t_start, t_end = window
    time.sleep(max(0.0, t_start - time.monotonic()))
    try:
        ps = psutil.Process(server)
        c0 = ps.cpu_times()
        s0, k0 = _schedstat(server), _schedstat(client)
        time.sleep(max(0.0, t_end - time.monotonic() - 0.05))
        c1 = ps.cpu_times()
        s1, k1 = _schedstat(server), _schedstat(client)
    except psutil.Error:
        return 0.0, 0.0, 0.0
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    return cpu, s1[1] - s0[1], k1[1] - k0[1]


def measure_once(
    variant: str,
    connections: int,
    seconds: float,
    warmup: float,
    pin: bool = True,
    node_workload: str | None = None,
) -> dict[str, Any]:
    """One server process + one client process; returns the server's and the client's figures.

    Node variants need ``node_workload`` (a file from ``write_node_workload``)."""
    common = ["--connections", str(connections), "--seconds", str(seconds)]
    py_common = [*common, "--warmup", str(warmup)] + ([] if pin else ["--no-pin"])
    cmd = [sys.executable, "-m", "bench.fanout.bench_fanout"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    setup_timeout = 30.0 + connections / 50
    extra = ["--setup-timeout", str(setup_timeout)]
    if variant in NODE_VARIANTS:
        if node_workload is None:
            raise ValueError(f"{variant} needs a workload file")
        server_cmd = ["node", str(NODE_DIR / "server.js"), "--variant", NODE_VARIANTS[variant]]
        server_cmd += ["--workload", node_workload, *common, "--warmup", str(warmup), *extra]
    else:
        server_cmd = [*cmd, "--role", "server", "--variant", variant, *py_common, *extra]
    with tempfile.TemporaryDirectory() as tmp:
        s_err, c_err = os.path.join(tmp, "server.err"), os.path.join(tmp, "client.err")
        with open(s_err, "w") as se, open(c_err, "w") as ce:
            server = subprocess.Popen(
                server_cmd,
                stdout=subprocess.PIPE,
                stderr=se,
                stdin=subprocess.DEVNULL,
                text=True,
                cwd=ROOT,
                env=env,
                preexec_fn=_pin_server if pin and variant in NODE_VARIANTS else None,
            )
            client: subprocess.Popen[str] | None = None
            try:
                s_lines = _Lines(server)
                port = s_lines.json(60.0, "server port")["port"]
                client = subprocess.Popen(
                    [*cmd, "--role", "client", "--port", str(port), *py_common],
                    stdout=subprocess.PIPE,
                    stderr=ce,
                    stdin=subprocess.PIPE,
                    text=True,
                    cwd=ROOT,
                    env=env,
                )
                c_lines = _Lines(client)
                window = s_lines.json(setup_timeout + 30.0, "measurement window")
                assert client.stdin is not None
                client.stdin.write(json.dumps(window) + "\n")
                client.stdin.flush()
                sched = _sample_window(window["window"], server.pid, client.pid)
                budget = warmup + seconds + 30.0
                srv = s_lines.json(budget, "server result")
                cli = c_lines.json(budget, "client result")
            except (TimeoutError, RuntimeError) as exc:
                raise RuntimeError(
                    f"{variant}: {exc}\n--- server stderr:\n{_tail(s_err)}\n"
                    f"--- client stderr:\n{_tail(c_err)}"
                ) from exc
            finally:
                for p in (server, client):
                    if p is None:
                        continue
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
    srv["subscribed_at_start"] = window.get("subscribed")
    srv["psutil_cpu_s"], srv["runq_s"], cli["runq_s"] = sched
    return {"server": srv, "client": cli}


def _summarize(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    us = [r["server"]["cpu_s"] * 1e6 / max(1, r["server"]["delivered"]) for r in runs]
    fps = [r["server"]["delivered"] / r["server"]["wall_s"] for r in runs]
    client_fps = [r["client"]["msgs"] / r["client"]["wall_s"] for r in runs]
    srv_core = [r["server"]["cpu_s"] / r["server"]["wall_s"] for r in runs]
    cli_core = [r["client"]["cpu_s"] / r["client"]["wall_s"] for r in runs]
    srv_wait = [r["server"].get("runq_s", 0.0) / r["server"]["wall_s"] for r in runs]
    cli_wait = [r["client"].get("runq_s", 0.0) / r["client"]["wall_s"] for r in runs]
    feed_us = [r["server"]["feed_s"] * 1e6 / max(1, r["server"]["delivered"]) for r in runs]
    fan_us = [r["server"]["fanout_s"] * 1e6 / max(1, r["server"]["delivered"]) for r in runs]
    payload = [r["server"]["bytes"] / max(1, r["server"]["delivered"]) for r in runs]
    per_boundary = [r["server"]["cpu_s"] * 1e6 / max(1, r["server"]["frames"]) for r in runs]
    # publish_frame's thread CPU alone per 40 ms frame: the planner and the writes, without the
    # event loop's other work (reads, pings), which a busy machine inflates run to run
    fan_boundary = [r["server"]["fanout_s"] * 1e6 / max(1, r["server"]["frames"]) for r in runs]
    return {
        "boundary_us": median_min_max(per_boundary),
        "fan_boundary_us": statistics.median(fan_boundary),
        "variant": name,
        "us": median_min_max(us),
        "fps": median_min_max(fps),
        "client_fps": statistics.median(client_fps),
        "server_core": max(srv_core),
        "client_core": max(cli_core),
        "server_wait": max(srv_wait),
        "client_wait": max(cli_wait),
        "feed_us": statistics.median(feed_us),
        "fan_us": statistics.median(fan_us),
        "payload": statistics.median(payload),
        "late": max(r["server"]["late_frames"] for r in runs),
        "subscribed": min(r["server"]["subscribed"] for r in runs),
        "connected": min(r["client"]["connected"] for r in runs),
        "groups": max(int(r["server"].get("groups", 0)) for r in runs),
    }


def _native_targets(med: float, summary: dict[str, dict[str, Any]]) -> list[str]:
    """Issue 13's targets for the native writer, from the same run's peers."""
    out = []
    node = summary.get("node-ws-shared")
    if node:
        cheaper = node["us"][0] / med
        met = "met" if cheaper >= NATIVE_TARGET_VS_NODE else "NOT met"
        out.append(
            f"{cheaper:.2f}x cheaper than node-ws-shared (>= {NATIVE_TARGET_VS_NODE}: {met})"
        )
    floor = summary.get("c-floor")
    if floor:
        over = med / floor["us"][0]
        met = "met" if over <= NATIVE_TARGET_VS_C else "NOT met"
        out.append(f"{over:.2f}x c-floor (<= {NATIVE_TARGET_VS_C}: {met})")
    return out


def _skipped(benchmark: str, variant: str, unit: str) -> Row:
    return Row(benchmark, variant, None, unit, note=NODE_SKIPPED)


def _rows(
    conns: int,
    where: str,
    summary: dict[str, dict[str, Any]],
    skipped: list[str],
) -> list[Row]:
    at = f" @ {conns:,} conns"
    naive, floor = summary["naive"]["us"][0], summary["floor"]["us"][0]
    demand = conns * 1e9 / FRAME_NS
    out: list[Row] = []
    shown = [v for v in VARIANTS if v in summary or v in skipped]
    for v in shown:
        if v in skipped:
            out.append(_skipped("fanout CPU per delivered frame" + at, v, "µs/frame"))
            continue
        s = summary[v]
        med, lo, hi = s["us"]
        bound = s["client_core"] > CLIENT_BOUND
        parts = [
            where if v == "naive" else "",
            f"server CPU {s['server_core']:.0%} of its core",
            f"client CPU {s['client_core']:.0%}" + (" (CLIENT-BOUND)" if bound else ""),
            f"{med / floor:.2f}x floor" if v != "floor" and floor else "",
            f"{s['payload']:.0f} B/frame",
        ]
        if s["server_wait"] > 0.05 or s["client_wait"] > 0.05:
            parts.append(
                f"run-queue wait server {s['server_wait']:.0%}, client {s['client_wait']:.0%}"
            )
        if s["subscribed"] < conns or s["connected"] < conns:
            parts.append(f"only {min(s['subscribed'], s['connected'])} connections subscribed")
        if s["late"]:
            parts.append(f"{s['late']} frames > 40 ms late")
        if v in ("monotape", "monotape-native", "monotape-paced"):
            parts.append(f"target <= {TARGET_US:g} µs: {'met' if med <= TARGET_US else 'NOT met'}")
            parts.append(
                f"of which sequencer {s['feed_us']:.2f} µs, publish_frame {s['fan_us']:.2f} µs"
            )
        if v == "monotape-native":
            parts += _native_targets(med, summary)
        elif v in ("monotape", "monotape-paced"):
            pass
        elif v == "naive":
            parts.append(f"encode+send loop {s['fan_us']:.2f} µs")
        elif v == "node-ws-json":
            parts.append(f"step (process CPU) {s['fan_us']:.2f} µs")
        elif v == "node-ws-shared":
            parts.append(f"{s['groups']} watchlist groups; step (process CPU) {s['fan_us']:.2f} µs")
        else:
            parts.append(f"write loop {s['fan_us']:.2f} µs")
        out.append(
            row(
                "fanout CPU per delivered frame" + at,
                v,
                med,
                "µs/frame",
                lo=lo,
                hi=hi,
                ratio=med / naive if naive else None,
                peer="naive",
                note="; ".join(p for p in parts if p),
            )
        )
    naive_fps = summary["naive"]["fps"][0]
    for v in shown:
        if v in skipped:
            out.append(_skipped("fanout delivered frames/s" + at, v, "frames/s"))
            continue
        s = summary[v]
        med, lo, hi = s["fps"]
        out.append(
            row(
                "fanout delivered frames/s" + at,
                v,
                med,
                "frames/s",
                lo=lo,
                hi=hi,
                ratio=med / naive_fps if naive_fps else None,
                peer="naive",
                note=f"client counted {s['client_fps']:,.0f}/s; 25 Hz demand {demand:,.0f}/s",
            )
        )
    if "monotape-paced" in summary and "monotape" in summary:
        # Issue 15: the same terminals with every tenth at max_hz 5 must cost the server less
        # per 40 ms frame (not per delivered frame: the paced ones are delivered fewer frames).
        base = summary["monotape"]["boundary_us"][0]
        fan_base = summary["monotape"]["fan_boundary_us"]
        for v in ("monotape", "monotape-paced"):
            med, lo, hi = summary[v]["boundary_us"]
            fan = summary[v]["fan_boundary_us"]
            note = (
                (
                    "the peer: every terminal at 25 Hz"
                    if v == "monotape"
                    else (
                        f"1 in {PACED_SHARE} terminals at max_hz {PACED_HZ:g}; "
                        + ("costs less: met" if med < base else "costs less: NOT met")
                    )
                )
                + f"; publish_frame {fan:,.0f} µs/boundary"
                + (f" (x{fan / fan_base:.2f})" if v != "monotape" and fan_base else "")
            )
            out.append(
                row(
                    "fanout server CPU per 40 ms frame" + at,
                    v,
                    med,
                    "µs/boundary",
                    lo=lo,
                    hi=hi,
                    ratio=med / base if base else None,
                    peer="monotape",
                    note=note,
                )
            )
    return out


def run(
    quick: bool = False,
    *,
    connections: int | None = None,
    seconds: float | None = None,
    warmup: float | None = None,
    runs: int | None = None,
    variants: tuple[str, ...] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Rows per connection count (full: 1,000 / 4,200 / 6,000; quick: 200; or ``connections``).

    ``variants`` defaults to all; naive and floor always run (they are the peers). The node
    variants need ``node`` and ``npm ci --prefix bench/node``; without them their rows say
    skipped."""
    counts = (connections,) if connections else (QUICK_CONNECTIONS if quick else FULL_CONNECTIONS)
    secs = seconds or (3.0 if quick else 8.0)
    warm = warmup if warmup is not None else (1.0 if quick else 2.0)
    repeats = runs or (1 if quick else 3)
    pin = len(os.sched_getaffinity(0)) >= 2 if hasattr(os, "sched_getaffinity") else False
    raise_nofile()
    wanted = set(variants or VARIANTS) | {"naive", "floor"}
    skipped = [v for v in NODE_VARIANTS if v in wanted and not node_available()]
    active = [v for v in VARIANTS if v in wanted and v not in skipped]
    shown = [v for v in VARIANTS if v in wanted]
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fanout-node-") as tmp:
        node_workload = None
        if any(v in NODE_VARIANTS for v in active):
            node_workload = os.path.join(tmp, "workload.json")
            write_node_workload(node_workload, frames_needed(secs, warm))
        for conns in counts:
            results: dict[str, list[dict[str, Any]]] = {v: [] for v in active}
            for i in range(repeats):  # interleaved, so drift on a shared machine hits every one
                for v in active:
                    r = measure_once(v, conns, secs, warm, pin, node_workload)
                    results[v].append(r)
                    if progress:
                        s, c = r["server"], r["client"]
                        progress(
                            f"fanout {conns} conns run {i + 1}/{repeats} {v}: "
                            f"{s['cpu_s'] * 1e6 / max(1, s['delivered']):.2f} µs/frame, "
                            f"{s['delivered'] / s['wall_s']:,.0f} frames/s, client saw "
                            f"{c['msgs'] / c['wall_s']:,.0f}/s, server CPU "
                            f"{s['cpu_s'] / s['wall_s']:.0%} (psutil "
                            f"{s['psutil_cpu_s'] / s['wall_s']:.0%}), client CPU "
                            f"{c['cpu_s'] / c['wall_s']:.0%}, run-queue wait server "
                            f"{s['runq_s'] / s['wall_s']:.0%} "
                            f"client {c['runq_s'] / c['wall_s']:.0%}"
                        )
            summary = {v: _summarize(v, results[v]) for v in active}
            where = f"{conns:,} conns, {secs:g} s window after {warm:g} s warm-up, {repeats} run(s)"
            rows = _rows(conns, where, summary, skipped)
            out += [r for r in rows if r.variant in shown]
    return out


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--connections", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--warmup", type=float)
    p.add_argument("--runs", type=int)
    p.add_argument("--variants", nargs="*", choices=VARIANTS)
    args = p.parse_args(argv)
    rows = run(
        args.quick,
        connections=args.connections,
        seconds=args.seconds,
        warmup=args.warmup,
        runs=args.runs,
        variants=tuple(args.variants) if args.variants else None,
        progress=lambda m: print(m, file=sys.stderr, flush=True),
    )
    for r in rows:
        if r.value is None:
            print(f"{r.benchmark:44} {r.variant:>14} {r.note}")
            continue
        print(
            f"{r.benchmark:44} {r.variant:>14} {r.value:10.2f} {r.unit:9} "
            f"[{r.min:.2f}-{r.max:.2f}] x{(r.ratio or 0):.2f}  {r.note}"
        )


if __name__ == "__main__":
    if "--role" in sys.argv:
        with contextlib.suppress(KeyboardInterrupt):
            _child_main(sys.argv[1:])
    else:
        main(sys.argv[1:])
