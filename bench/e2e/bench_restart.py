"""Kill to the first frame at the terminals, for the sequencer and for a writer (issue 40).

One ``monotape run --writers 2`` host (the launcher's: loopback, free ports, a temporary data
dir; not pinned, its roles spread over both cores) at ``--rate`` ticks/s, ``TERMINALS``
terminals in this process (raw WebSocket clients, 64 symbols each, reconnecting at once when a
connection ends, as an SDK does), then:

- ``sequencer``: ``kill -9`` of the sequencer ``kills`` times (20; quick 4), each once the host
  has a warm standby again and every terminal has had frames since the last kill; the figure
  of one kill is the time from the kill to the first frame at the *last* terminal to get one
  (every terminal back);
- ``writer``: ``kill -9`` of writer-0 and writer-1 in turn, as many times: the figure is the
  time from the kill to the first frame at the last of the killed writer's terminals, which
  reconnect to the other writer (or to the restarted one) and are hydrated first.

Rows: p50 and p99 of each (nearest rank: over 20 kills the p99 is the worst one), min and max
in the row; and the worst beat silence the host saw of each role over the whole run
(``monotape_process_beat_silence_max_seconds``: what the liveness limits are chosen against,
docs/processes.md), with the worst GC pause of that role beside it in the note.

    .venv/bin/python -m bench.e2e.bench_restart [--quick] [--rate N] [--kills N]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import websockets

from bench.common import Row, row
from monotape import metric_names as m
from monotape.loadgen.launch import RunningNode, launch, parse_samples
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Subscribe, encode_request

__all__ = ["main", "run"]

TERMINALS = 20
KEYS = 64
GAP_S = 3.0  # between kills, as the test
RATE = 20_000


class Screen:
    """One terminal: which writer it is on, when each frame came."""

    def __init__(self) -> None:
        self.server = ""
        self.frames: list[float] = []

    def first_after(self, t0: float) -> float | None:
        i = bisect.bisect_left(self.frames, t0)
        return self.frames[i] if i < len(self.frames) else None


async def _screen(node: RunningNode, n: int, s: Screen) -> None:
    while True:
        try:
            async with websockets.connect(node.url, compression=None, max_size=None) as ws:
                async for data in ws:
                    msg = codec.decode_message(data if isinstance(data, bytes) else data.encode())
                    if isinstance(msg, codec.Hello):
                        s.server = msg.server_id
                        keys = [i.key for i in msg.instruments][n::TERMINALS][:KEYS]
                        await ws.send(encode_request(Subscribe(req=1, keys=keys)))
                    elif isinstance(msg, codec.Frame):
                        s.frames.append(time.monotonic())
        except (OSError, websockets.ConnectionClosed, websockets.InvalidHandshake):
            await asyncio.sleep(0.01)


def _processes(node: RunningNode) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(node.http("/admin/processes", node.admin_token, timeout=30))
    return body


async def _until(ok: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError("not reached")
        await asyncio.sleep(0.02)


def _ready(node: RunningNode, standby: bool) -> bool:
    body = _processes(node)
    up = all(r["state"] == "running" and r["ready"] for r in body["processes"])
    return up and (not standby or bool(body["host"].get("standby")))


async def _kills(node: RunningNode, screens: list[Screen], role: str, kills: int) -> list[float]:
    out: list[float] = []
    for i in range(kills):
        await _until(lambda: _ready(node, standby=role == "sequencer"))
        name = role if role == "sequencer" else f"writer-{i % 2}"
        pid = next(r["pid"] for r in _processes(node)["processes"] if r["name"] == name)
        watched = [s for s in screens if role == "sequencer" or s.server == name]
        await asyncio.sleep(GAP_S)
        t_kill = time.monotonic()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it died meanwhile (the note counts the host's hung kills)
            continue
        await _until(_all_back(watched, t_kill))
        out.append(max((s.first_after(t_kill) or 0.0) - t_kill for s in watched))
    return out


def _all_back(screens: list[Screen], t0: float) -> Callable[[], bool]:
    return lambda: all(s.first_after(t0) is not None for s in screens)


def _rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def _measure(rate: int, kills: int) -> tuple[dict[str, list[float]], dict[str, float], str]:
    node = launch(
        None,
        "--writers",
        "2",
        "--rate",
        str(rate),
        timeout_s=120,
        env={"MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "0"},
    )
    try:
        await _until(lambda: _ready(node, standby=True), 120)
        screens = [Screen() for _ in range(TERMINALS)]
        tasks = [asyncio.create_task(_screen(node, i, s)) for i, s in enumerate(screens)]
        await _until(lambda: all(len(s.frames) >= 25 for s in screens), 120)
        got = {
            "sequencer": await _kills(node, screens, "sequencer", kills),
            "writer": await _kills(node, screens, "writer", kills),
        }
        samples = parse_samples(node.http("/metrics", timeout=30))
        hung_lines = [line for line in node.output if '"event": "role_hung"' in line]
        for line in hung_lines:
            print(line.rstrip(), file=sys.stderr)
        hung = len(hung_lines)
        silence_note = f"; {hung} roles killed as hung during the run"
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        node.stop()
    silence: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == m.PROCESS_BEAT_SILENCE_MAX:
            silence[dict(labels)["process"]] = value
    return got, silence, silence_note


def run(quick: bool, rate: int = RATE, kills: int | None = None) -> list[Row]:
    n = kills or (4 if quick else 20)
    got, silence, silence_note = asyncio.run(_measure(rate, n))
    rows = []
    for role, values in got.items():
        ms = [v * 1e3 for v in values]
        note = f"{len(values)} kills, {GAP_S:.0f} s apart, {TERMINALS} terminals, {rate} ticks/s"
        lo, hi = min(ms), max(ms)
        rows.append(
            row("kill to first frame", f"{role} p50", _rank(ms, 0.5), "ms", lo=lo, hi=hi, note=note)
        )
        rows.append(
            row(
                "kill to first frame", f"{role} p99", _rank(ms, 0.99), "ms", lo=lo, hi=hi, note=note
            )
        )
    for name, value in sorted(silence.items()):
        rows.append(
            row(
                "worst beat silence",
                name,
                value * 1e3,
                "ms",
                note=f"over the run above (its kills included), {rate} ticks/s{silence_note}",
            )
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", type=int, default=RATE)
    ap.add_argument("--kills", type=int, default=None)
    args = ap.parse_args()
    for r in run(args.quick, args.rate, args.kills):
        print(json.dumps(r.as_dict()))


if __name__ == "__main__":
    main()
