"""The load terminals' receive path against websockets' client: client CPU per message read.

Why the load workers hand-write what they receive (``monotape/loadgen/frame_walk.py``): a
storm's steady state is every terminal shown a FRAME every 40 ms, so the load generator's cost
per message decides whether it can load the server at all. Here one client process holds
``terminals`` connections on uvloop to a websockets server in another process, which
broadcasts a 301-byte binary message to all of them at 25 Hz. The client's CPU
(``time.process_time``) over a window after a warm-up, divided by the messages it read:

- ``websockets``: ``websockets.connect`` (compression off, no pings) and ``async for``;
- ``walk``: ``loadgen/ws_terminal.connect`` with the message's kind reported to a callback
  (a storm terminal's IGNORE would cost a little less);
- ``counting``: bench/wsclient.py's ``CountingClient``, the benches' own raw client.

The server is pinned to ``SERVER_CPU`` and the client to ``LOAD_CPU`` where both exist. The
variants alternate; each row is the median of ``repeats`` with min-max, and the ratio is
against websockets' client in the same runs. A client whose core was full is at its limit (a
larger population would fall behind), and its note says so.

A second pair of rows times the parsing alone, in this process, on the same one-frame read:
``FrameWalk.feed`` (the kind ignored, as a streaming storm terminal's) against websockets'
Sans-I/O parser (``ClientProtocol.receive_data`` and ``events_received``: what its asyncio
client does per read before the queue and the task).

    .venv/bin/python -m bench.e2e.bench_load_client [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Row, median_min_max, print_rows, raise_nofile, row
from bench.e2e.pinned import LOAD_CPU, SERVER_CPU, affinity, can_pin

__all__ = ["VARIANTS", "Size", "measure", "parse_costs", "parse_rows", "run"]

ROOT = Path(__file__).resolve().parents[2]
BENCH = "load client: CPU per message read"
BENCH_PARSE = "load client: parsing one frame read"
VARIANTS = ("websockets", "walk", "counting")
PAYLOAD = bytes([3]) + bytes(300)  # a FRAME's kind byte, then a frame's worth of records
HZ = 25.0


@dataclass(frozen=True)
class Size:
    terminals: int
    warm_s: float
    window_s: float
    repeats: int


FULL = Size(terminals=2_000, warm_s=3.0, window_s=8.0, repeats=3)
QUICK = Size(terminals=200, warm_s=1.5, window_s=3.0, repeats=1)
PARSE_READS = {False: 200_000, True: 20_000}  # one-frame reads timed per repeat (full, quick)


# -- the two processes ------------------------------------------------------------------------
async def _serve(hz: float) -> None:
    from websockets.asyncio.server import ServerConnection, broadcast, serve

    conns: set[ServerConnection] = set()

    async def handler(ws: ServerConnection) -> None:
        conns.add(ws)
        try:
            await ws.wait_closed()
        finally:
            conns.discard(ws)

    async with serve(handler, "127.0.0.1", 0, compression=None, ping_interval=None) as server:
        print(next(iter(server.sockets)).getsockname()[1], flush=True)  # the port, to the bench
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += 1 / hz
            await asyncio.sleep(max(0.0, due - loop.time()))
            broadcast(conns, PAYLOAD)


async def _client(variant: str, port: int, terminals: int, warm_s: float, window_s: float) -> None:
    read = [0]

    async def with_websockets() -> None:
        import websockets

        url = f"ws://127.0.0.1:{port}/"
        async with websockets.connect(url, compression=None, ping_interval=None) as ws:
            async for _ in ws:
                read[0] += 1

    async def with_walk() -> None:
        from monotape.loadgen.frame_walk import KIND, Event
        from monotape.loadgen.ws_terminal import connect

        t = await connect(f"ws://127.0.0.1:{port}/", open_timeout_s=30, close_timeout_s=2)
        t.walk.watch[PAYLOAD[0]] = KIND

        def on_event(ev: Event) -> None:
            read[0] += 1

        t.start(on_event)
        await t.closed

    from bench.wsclient import CountingClient, Counts

    counts = Counts()

    async def with_counting() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        proto = CountingClient(counts, f"127.0.0.1:{port}", b"", done)
        await loop.create_connection(lambda: proto, "127.0.0.1", port)
        await done

    run: dict[str, Callable[[], Any]] = {
        "websockets": with_websockets,
        "walk": with_walk,
        "counting": with_counting,
    }
    tasks = [asyncio.ensure_future(run[variant]()) for _ in range(terminals)]
    await asyncio.sleep(warm_s)

    def now_read() -> int:
        return counts.msgs if variant == "counting" else read[0]

    failed = sum(1 for t in tasks if t.done() and t.exception() is not None)
    c0, n0, w0 = time.process_time(), now_read(), time.monotonic()
    await asyncio.sleep(window_s)
    c1, n1, w1 = time.process_time(), now_read(), time.monotonic()
    out = {"cpu_s": c1 - c0, "wall_s": w1 - w0, "messages": n1 - n0, "failed": failed}
    print(json.dumps(out), flush=True)
    os._exit(0)  # thousands of sockets: no orderly close needed to report


def _main_process(argv: list[str]) -> None:
    import uvloop

    raise_nofile()
    if argv[0] == "--serve":
        uvloop.run(_serve(float(argv[1])))
    else:
        variant, port, n, warm, window = argv[1], int(argv[2]), int(argv[3]), *map(float, argv[4:6])
        uvloop.run(_client(variant, port, n, warm, window))


# -- the bench ---------------------------------------------------------------------------------
def _python(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "bench.e2e.bench_load_client", *args]


def measure(size: Size, log: Callable[[str], None] = print) -> dict[str, list[dict[str, Any]]]:
    """Every variant ``size.repeats`` times, alternated, against one server."""
    pin = can_pin(SERVER_CPU, LOAD_CPU)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with affinity(SERVER_CPU if pin else None):
        server = subprocess.Popen(_python(["--serve", str(HZ)]), stdout=subprocess.PIPE, env=env)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline() or b"0")
        if not port:
            raise RuntimeError("the broadcast server did not start")
        out: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
        for i in range(size.repeats):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                args = [variant, port, size.terminals, size.warm_s, size.window_s]
                with affinity(LOAD_CPU if pin else None):
                    done = subprocess.run(
                        _python(["--client", *map(str, args)]),
                        capture_output=True,
                        text=True,
                        env=env,
                        timeout=size.warm_s + size.window_s + 120,
                    )
                if done.returncode != 0 or not done.stdout.strip():
                    raise RuntimeError(f"{variant} client failed: {done.stderr[-500:]}")
                got = json.loads(done.stdout.strip().splitlines()[-1])
                got["pinned"] = pin
                out[variant].append(got)
                log(
                    f"  {variant}: {got['cpu_s'] / got['wall_s']:.3f} cores, "
                    f"{got['messages'] / got['wall_s']:,.0f} messages/s"
                )
    finally:
        server.kill()
        server.wait()
    return out


def parse_costs(reads: int, repeats: int) -> dict[str, list[float]]:
    """µs per one-frame read for each parser, ``repeats`` timings alternated, the same bytes."""
    import timeit

    from websockets.client import ClientProtocol
    from websockets.protocol import State
    from websockets.uri import parse_uri

    from monotape.loadgen.frame_walk import FrameWalk
    from monotape.platform.wire.framing import ws_binary_frame

    frame = ws_binary_frame(PAYLOAD)
    walk = FrameWalk(bytearray(256))  # every kind IGNORE
    lib = ClientProtocol(parse_uri("ws://127.0.0.1/"), state=State.OPEN)

    def with_websockets() -> None:
        lib.receive_data(frame)
        lib.events_received()

    timed: dict[str, Callable[[], object]] = {
        "walk": lambda: walk.feed(frame),
        "websockets": with_websockets,
    }
    out: dict[str, list[float]] = {name: [] for name in timed}
    for i in range(repeats):
        for name in timed if i % 2 == 0 else reversed(timed):
            out[name].append(timeit.timeit(timed[name], number=reads) * 1e6 / reads)
    return out


def parse_rows(costs: dict[str, list[float]], reads: int) -> list[Row]:
    lib, _, _ = median_min_max(costs["websockets"])
    out = []
    for name, what in (
        ("walk", "FrameWalk.feed, the kind ignored"),
        ("websockets", "ClientProtocol.receive_data + events_received"),
    ):
        med, lo, hi = median_min_max(costs[name])
        note = (
            f"{what}; a {len(PAYLOAD)}-byte binary frame per read, {reads:,} reads per timing, "
            f"{len(costs[name])} timing(s) alternated, in this process"
        )
        out.append(
            row(BENCH_PARSE, name, med, "µs", lo=lo, hi=hi, ratio=med / lib, peer="websockets",
                note=note)
        )  # fmt: skip
    return out


def _us(r: dict[str, Any]) -> float:
    return float(r["cpu_s"]) * 1e6 / max(1, int(r["messages"]))


def rows_of(runs: dict[str, list[dict[str, Any]]], size: Size) -> list[Row]:
    sent = size.terminals * HZ
    ws, _, _ = median_min_max([_us(r) for r in runs["websockets"]])
    out = []
    for variant in VARIANTS:
        rs = runs[variant]
        med, lo, hi = median_min_max([_us(r) for r in rs])
        rates = [r["messages"] / r["wall_s"] for r in rs]
        cores = [r["cpu_s"] / r["wall_s"] for r in rs]
        full = [c > 0.95 for c in cores]
        fell = [f and m < 0.97 * sent for f, m in zip(full, rates, strict=True)]
        failed = sum(int(r["failed"]) for r in rs)  # the population was smaller by as many
        behind = f"; its core full in {sum(full)} run(s)" + (
            f", reading less than was sent in {sum(fell)}" if any(fell) else ": at its limit"
        )
        note = (
            f"{size.terminals:,} connections x {HZ:g} Hz = {sent:,.0f} messages/s sent; read "
            + " / ".join(f"{m:,.0f}" for m in rates)
            + " messages/s on "
            + " / ".join(f"{c:.2f}" for c in cores)
            + " cores"
            + (behind if any(full) else "")
            + (f"; connections that failed {failed}" if failed else "")
            + f"; {len(rs)} run(s) alternated; server and client pinned: {rs[0]['pinned']}"
        )  # fmt: skip
        out.append(
            row(
                BENCH,
                variant,
                med,
                "µs",
                lo=lo,
                hi=hi,
                ratio=med / ws if ws else None,
                peer="websockets",
                note=note,
            )
        )
    return out


def run(quick: bool = False) -> list[Row]:
    size = QUICK if quick else FULL
    reads = PARSE_READS[quick]
    return rows_of(measure(size), size) + parse_rows(parse_costs(reads, size.repeats), reads)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--serve", "--client"):
        _main_process(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 connections, one run each")
    args = parser.parse_args()
    print_rows(run(args.quick))


if __name__ == "__main__":
    main()
