"""The benches' byte-counting WebSocket client: cheap enough not to be the bottleneck.

A terminal here is an ``asyncio.Protocol`` on a raw socket: it sends the upgrade by hand, then
its requests (masked client frames), and from then on only walks the frame headers of what
arrives: it counts bytes and messages per kind (the first payload byte, ``codec.Kind``), answers
pings (so the server's ``glass`` samples keep flowing) and never decodes a payload. With
``numbers`` it also reads the frame number after the kind of every FRAME and SNAPSHOT (a
uvarint: the 40 ms grid slot, docs/wire.md) and counts the distinct boundaries it was shown, so
bench_latency's frames per terminal are frame numbers, not messages (a terminal catching up
after a stall reads several messages a boundary, and a message count would say it got more
than 25 a second). The
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

from monotape.platform.wire.codes import Kind

__all__ = ["CountingClient", "Counts", "client_frame"]

KINDS = max(Kind) + 1  # one count per codec.Kind; index 0 counts payloads too short for one
FRAME, SNAPSHOT = int(Kind.FRAME), int(Kind.SNAPSHOT)  # the numbered messages, as plain ints
HEAD = 11  # a payload's kind and its frame number (a uvarint: at most 10 bytes)
FLOOR = 24.0  # boundaries/s a terminal must be shown to count as kept up (issue 35: >= 24)


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
        numbers: bool = False,
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
        self.numbers = numbers  # read the frame numbers (``_numbered``)
        self.head = b""  # the current message's first payload bytes, while it is split
        self.head_need = 0  # of those, how many are still to arrive
        self.partial = b""  # an incomplete frame header (or an incomplete control frame)
        self.frame_no = -1  # the highest frame number shown (FRAME or SNAPSHOT), -1: none yet
        self.boundaries = 0  # distinct frame numbers shown: each above the one before
        self.repeats = 0  # FRAMEs whose number was not above the last one shown (must stay 0)

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
        if self.head_need:  # the rest of a split payload's head (skip covers it)
            take = min(self.head_need, n)
            self.head += data[:take]
            self.head_need -= take
            if not self.head_need:
                self._read_head(self.head)
                self.head = b""
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
        numbers = self.numbers
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
                    start = pos + hl
                    want = (ln if ln < HEAD else HEAD) if numbers else 1
                    if start + want <= n:
                        k = data[start]
                        kinds[k if k < KINDS else 0] += 1
                        if numbers and k in (FRAME, SNAPSHOT):
                            self._numbered(k, data, start + 1, start + want)
                    else:  # the head goes on in the next read(s)
                        self.head = data[start:n]
                        self.head_need = want - (n - start)
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

    def _read_head(self, head: bytes) -> None:
        """A payload's head that arrived split over reads: count its kind (and number)."""
        k = head[0]
        self.counts.kinds[k if k < KINDS else 0] += 1
        if self.numbers and k in (FRAME, SNAPSHOT):
            self._numbered(k, head, 1, len(head))

    def _numbered(self, kind: int, buf: bytes, i: int, end: int) -> None:
        """The frame number at ``buf[i:end]`` (a uvarint): a new boundary if above the last one
        shown; a FRAME at or below it is a repeat. A number cut short is not counted."""
        no = shift = 0
        while i < end:
            b = buf[i]
            no |= (b & 0x7F) << shift
            if b < 0x80:
                if no > self.frame_no:
                    self.frame_no = no
                    self.boundaries += 1
                elif kind == FRAME:
                    self.repeats += 1
                return
            shift += 7
            i += 1

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


class _Marks:
    """Each open terminal's frame numbers at the last sample, so the next one reports the
    boundaries shown in between by the terminals open at both: no average over terminals
    that came or went, no message counted for a boundary twice."""

    def __init__(self) -> None:
        self._at: dict[CountingClient, tuple[int, int, int]] = {}
        self._t = 0.0  # when they were taken (this process's monotonic clock)
        # each held terminal's boundaries per second over the last interval (``rates``)
        self.per_terminal: list[float] = []

    def since(self, clients: list[CountingClient], now_s: float) -> dict[str, float]:
        """``held``: terminals open (and numbered) at both samples; ``boundaries``: distinct
        frame numbers they were shown in between; ``slots``: how far their frame numbers
        moved (the grid they saw pass: boundaries plus those they missed); ``repeats``;
        ``terminal_s``: held x the seconds between this process's two samples, its own
        interval (a busy process answers a sample late, and the bench's window is the last
        answer's: per-terminal rates over it would be off by the difference)."""
        out: dict[str, float] = {"held": 0, "boundaries": 0, "slots": 0, "repeats": 0}
        at: dict[CountingClient, tuple[int, int, int]] = {}
        span = now_s - self._t
        self.per_terminal = []
        for p in clients:
            if not p.is_open or p.frame_no < 0:
                continue
            now = at[p] = (p.boundaries, p.frame_no, p.repeats)
            before = self._at.get(p)
            if before is not None:
                out["held"] += 1
                out["boundaries"] += now[0] - before[0]
                out["slots"] += now[1] - before[1]
                out["repeats"] += now[2] - before[2]
                if span > 0:
                    self.per_terminal.append((now[0] - before[0]) / span)
        out["terminal_s"] = out["held"] * span
        self._at, self._t = at, now_s
        return out

    def rates(self, floor: float) -> dict[str, float]:
        """The last interval's slowest held terminal (boundaries/s; -1: none held) and how many
        held terminals were shown fewer than ``floor`` boundaries a second: whether *every*
        terminal kept up, which a mean over terminals cannot say."""
        rates = self.per_terminal
        return {
            "slowest": min(rates, default=-1.0),
            "below": sum(1 for r in rates if r < floor),
            "floor": floor,
        }


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
    ("sample") it prints a snapshot of its counts and its own CPU, with the frame numbers shown
    since the previous sample (``_Marks``) and the slowest terminal's rate against the job's
    ``floor`` (default ``FLOOR``); on "close" (or EOF) every terminal closes gracefully and
    the process exits."""
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
                proto = CountingClient(counts, host, requests, done, job["path"], numbers=True)
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
    marks = _Marks()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "sample":
            break
        # the process's own CPU clock: psutil's cpu_times counts 10 ms kernel ticks, and a
        # small population's client can spend less than one between two samples (it read 0)
        live = sum(1 for p in clients if p.is_open)
        snap = _snapshot(counts, time.process_time(), live)
        window = marks.since(clients, snap["t"])
        rates = marks.rates(float(job.get("floor", FLOOR)))
        _emit({**snap, "window": window, "rates": rates, "failures": failures})
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
