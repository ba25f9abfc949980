"""SendTable.send against send_many on the same sockets, in one process: what the writer's
per-terminal pass costs on top of the C send loop (issue 13: monotape-native within 1.15x of
c-floor).

bench_fanout's figures carry every stage of a frame and the whole process, so on a shared box a
change to the C pass drowns in the noise. Here the two loops run over the same loopback TCP
sockets (accepted by real uvloop transports), in groups the size of the bench's signature
groups, alternating rep by rep: ``send_many`` over each group's fds, and the table's ``send``
over each group's handles (an entry per socket, its flags clear, its counts kept: what the
writer's frame path does per terminal). The figure is thread CPU per terminal send (kernel
included, as in bench_fanout), median over reps, and the ratio of the two from the same reps.
The peers read between reps (not timed).

    .venv/bin/python -m bench.fanout.bench_sendtable [--connections 4200] [--reps 40]
    [--build PATH ...]   # other builds of _sendmany.so to compare (an A/B of a C change)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import socket
import statistics
import sys
import time
from array import array
from types import ModuleType
from typing import Any

from bench.common import Row, raise_nofile, row
from monotape.platform.server import _sendmany

GROUP = 16  # ~4,200 terminals over ~260 signatures
PAYLOAD = b"\x82\x76" + bytes(118)  # a 120-byte framed payload, the bench's size


class _Sink(asyncio.Protocol):
    made: list[Any] = []  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _Sink.made.append(transport)


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"build{abs(hash(path))}._sendmany", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _connect(n: int) -> tuple[list[Any], list[socket.socket], Any]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Sink, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    peers = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        peers.append(s)
        if len(peers) % 200 == 0:
            await asyncio.sleep(0)
    while len(_Sink.made) < n:
        await asyncio.sleep(0.01)
    return _Sink.made[:n], peers, server


def _drain(peers: list[socket.socket]) -> None:
    for s in peers:
        with contextlib.suppress(BlockingIOError):
            while s.recv(1 << 16):
                pass


def measure(connections: int, reps: int, builds: dict[str, Any]) -> dict[str, list[float]]:
    """Thread CPU µs per terminal send, per rep: ``send_many`` over the groups' fds, then each
    build's ``SendTable.send`` over the same sockets' entries, alternating; the peers read in
    between."""
    raise_nofile()
    loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
    with contextlib.suppress(ImportError):
        import uvloop

        loop.close()
        loop = uvloop.new_event_loop()
    _Sink.made = []
    transports, peers, server = loop.run_until_complete(_connect(connections))
    try:
        fds = [t.get_extra_info("socket").fileno() for t in transports]
        fd_groups = [fds[i : i + GROUP] for i in range(0, len(fds), GROUP)]
        tables = {name: module.SendTable() for name, module in builds.items()}
        handle_groups = {
            name: [array("q", [table.add(fd, 0) for fd in group]) for group in fd_groups]
            for name, table in tables.items()
        }
        times: dict[str, list[float]] = {"send_many": [], **{f"table {k}": [] for k in builds}}
        for _ in range(reps):
            t0 = time.thread_time_ns()
            for group in fd_groups:
                if _sendmany.send_many(PAYLOAD, group) is not None:
                    raise RuntimeError("a peer fell behind: its socket buffer is full")
            times["send_many"].append((time.thread_time_ns() - t0) / len(fds) / 1e3)
            _drain(peers)
            for name, table in tables.items():
                groups = handle_groups[name]
                t0 = time.thread_time_ns()
                for handles in groups:
                    if table.send(PAYLOAD, handles) is not None:
                        raise RuntimeError("a peer fell behind: its socket buffer is full")
                times[f"table {name}"].append((time.thread_time_ns() - t0) / len(fds) / 1e3)
                _drain(peers)
        return times
    finally:
        for s in peers:
            s.close()
        server.close()
        loop.close()


def run(quick: bool = False) -> list[Row]:
    """Quick: 200 connections, 5 reps; full: 4,200 connections, 30 reps."""
    connections, reps = (200, 5) if quick else (4200, 30)
    times = measure(connections, reps, {"installed": _sendmany})
    base = statistics.median(times["send_many"])
    out = []
    for name, xs in times.items():
        med = statistics.median(xs)
        out.append(
            row(
                f"SendTable.send vs send_many @ {connections:,} conns",
                name.removesuffix(" installed"),
                med,
                "µs/send",
                lo=min(xs),
                hi=max(xs),
                ratio=med / base,
                peer="send_many",
                note=f"{reps} reps alternating, groups of {GROUP}, {len(PAYLOAD)}-byte payload",
            )
        )
    return out


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--connections", type=int, default=4200)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--build", action="append", default=[], help="another _sendmany build")
    args = p.parse_args(argv)
    builds: dict[str, Any] = {"installed": _sendmany}
    for path in args.build:
        builds[path] = _load(path)
    times = measure(args.connections, args.reps, builds)
    base = statistics.median(times["send_many"])
    for name, xs in times.items():
        med = statistics.median(xs)
        print(
            f"{name:40} {med:6.3f} µs/send (min {min(xs):.3f}) x{med / base:.3f} vs send_many"
            f"  [{args.connections} conns, {args.reps} reps]"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
