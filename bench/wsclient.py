"""The benches' byte-counting WebSocket client: cheap enough not to be the bottleneck.

A terminal here is an ``asyncio.Protocol`` on a raw socket: it sends the upgrade by hand, then
its requests (masked client frames), and from then on only walks the frame headers of what
arrives: it counts bytes and messages per kind (the first payload byte, ``codec.Kind``), answers
pings (so the server's ``glass`` samples keep flowing) and never decodes a payload. The
``websockets`` client costs ~15-25 µs per message in Python, which at 4,200 terminals x 25 Hz is
more than a core; this costs a small fraction of that (the benches report its own CPU).

``bench_fanout`` uses it for every server variant (the same load client for every peer);
``bench_latency`` runs it in separate processes through ``python -m bench.wsclient`` (the job on
stdin, see ``_main``).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import sys
import time
from typing import Any, cast

__all__ = ["CountingClient", "Counts", "client_frame"]

KINDS = 9  # codec.Kind values are 1..8; index 0 counts payloads too short to carry one


class Counts:
    """Totals over every terminal of one process."""

    __slots__ = ("bytes", "closed", "kinds", "msgs", "open")

    def __init__(self) -> None:
        self.bytes = 0
        self.msgs = 0
        self.open = 0
        self.closed = 0
        self.kinds = [0] * KINDS  # data messages by first payload byte


def client_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame with an all-zero masking key (the payload is sent as is)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 0x10000:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    return head + b"\x00\x00\x00\x00" + payload


class CountingClient(asyncio.Protocol):
    """Raw-socket WebSocket client: handshake, its requests, then count bytes and messages."""

    def __init__(
        self,
        counts: Counts,
        host: str,
        requests: bytes,
        done: asyncio.Future[bool],
        path: str = "/",
    ) -> None:
        self.counts = counts
        self.host = host
        self.path = path
        self.requests = requests  # client frames, written as soon as the upgrade is answered
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.handshake = b""
        self.status = b""  # the upgrade's status line, for the error report
        self.is_open = False
        self.skip = 0  # payload bytes of the current message still to arrive
        self.need_kind = False  # the current data message's first payload byte not seen yet
        self.partial = b""  # an incomplete frame header (or an incomplete control frame)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        key = base64.b64encode(os.urandom(16)).decode()
        self.transport.write(
            (
                f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if self.is_open:
            self.counts.closed += 1
        self.is_open = False
        if not self.done.done():
            self.done.set_result(False)

    def data_received(self, data: bytes) -> None:
        counts = self.counts
        counts.bytes += len(data)
        if not self.is_open:
            self.handshake += data
            end = self.handshake.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.handshake[:end], self.handshake[end + 4 :]
            self.handshake = b""
            self.status = head.split(b"\r\n", 1)[0]
            assert self.transport is not None
            if not head.startswith(b"HTTP/1.1 101"):
                self.transport.abort()
                return
            self.is_open = True
            counts.open += 1
            if self.requests:
                self.transport.write(self.requests)
            if not self.done.done():
                self.done.set_result(True)
            if not data:
                return
        n = len(data)
        skip = self.skip
        if self.need_kind and skip:  # a message whose payload starts in this chunk
            counts.kinds[data[0] if data[0] < KINDS else 0] += 1
            self.need_kind = False
        if skip >= n:
            self.skip = skip - n
            return
        if self.partial:
            data = self.partial + data
            self.partial = b""
            n = len(data)
        pos = skip
        msgs = 0
        kinds = counts.kinds
        while n - pos >= 2:
            b0 = data[pos]
            ln = data[pos + 1] & 0x7F
            hl = 2
            if ln == 126:
                if n - pos < 4:
                    break
                ln = int.from_bytes(data[pos + 2 : pos + 4], "big")
                hl = 4
            elif ln == 127:
                if n - pos < 10:
                    break
                ln = int.from_bytes(data[pos + 2 : pos + 10], "big")
                hl = 10
            op = b0 & 0x0F
            if op <= 2:  # data (the server never fragments, so FIN is set on every message)
                if b0 & 0x80:
                    msgs += 1
                if ln:
                    if pos + hl < n:
                        k = data[pos + hl]
                        kinds[k if k < KINDS else 0] += 1
                    else:
                        self.need_kind = True
                else:
                    kinds[0] += 1
            elif pos + hl + ln > n:
                break  # a control frame split across reads: keep it whole for the pong
            elif op == 9 and self.transport is not None:
                self.transport.write(client_frame(0xA, data[pos + hl : pos + hl + ln]))
            pos += hl + ln
        counts.msgs += msgs
        if pos >= n:
            self.skip = pos - n
        else:
            self.partial = data[pos:]
            self.skip = 0

    def close(self) -> None:
        """A graceful close (1000): the server answers and drops the socket."""
        if self.transport is not None and self.is_open:
            self.transport.write(client_frame(0x8, (1000).to_bytes(2, "big")))


# -- the process that bench_latency starts ----------------------------------------------------
def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _same(proto: CountingClient) -> CountingClient:
    return proto


def _snapshot(counts: Counts, cpu: float, live: int) -> dict[str, Any]:
    return {
        "t": time.monotonic(),
        "cpu_s": cpu,
        "bytes": counts.bytes,
        "msgs": counts.msgs,
        "kinds": list(counts.kinds),
        "open": counts.open,
        "closed": counts.closed,
        "live": live,
    }


async def _run(job: dict[str, Any]) -> None:
    """The job: ``port``, ``path``, and ``terminals``: [{"at": monotonic s, "requests": hex}].

    Each terminal connects at its ``at`` (a failed or refused upgrade retries after 1 s, while
    the job's ``until`` has not passed), writes its requests, then stays. On every stdin line
    ("sample") it prints a snapshot of its counts and its own CPU; on "close" (or EOF) every
    terminal closes gracefully and the process exits."""
    import psutil

    loop = asyncio.get_running_loop()
    counts = Counts()
    host = f"127.0.0.1:{job['port']}"
    clients: list[CountingClient] = []
    failures: list[str] = []
    until = float(job["until"])

    async def terminal(at: float, requests: bytes) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        while time.monotonic() < until:
            done: asyncio.Future[bool] = loop.create_future()
            try:
                proto = CountingClient(counts, host, requests, done, job["path"])
                factory = functools.partial(_same, proto)
                await loop.create_connection(factory, "127.0.0.1", job["port"])
                ok = await asyncio.wait_for(done, 30.0)
            except (OSError, TimeoutError) as exc:
                ok = False
                if proto.transport is not None:  # a late upgrade must not count as a terminal
                    proto.transport.abort()
                if len(failures) < 5:
                    failures.append(f"{type(exc).__name__}: {exc}")
            if ok:
                clients.append(proto)
                return
            if proto.status and len(failures) < 5:
                failures.append(proto.status.decode(errors="replace") or "closed")
            await asyncio.sleep(1.0)

    tasks = [
        asyncio.ensure_future(terminal(float(t["at"]), bytes.fromhex(t["requests"])))
        for t in job["terminals"]
    ]
    proc = psutil.Process()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "sample":
            break
        c = proc.cpu_times()
        live = sum(1 for p in clients if p.is_open)
        _emit({**_snapshot(counts, c.user + c.system, live), "failures": failures})
    for t in tasks:
        t.cancel()
    for p in clients:
        p.close()
    await asyncio.sleep(0.5)
    os._exit(0)


def _main() -> None:
    from bench.common import raise_nofile

    raise_nofile()
    job = json.loads(sys.stdin.readline())
    try:
        import uvloop

        uvloop.run(_run(job))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(_run(job))


if __name__ == "__main__":
    _main()
