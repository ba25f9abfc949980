"""bus/nats_collector.py: the NATS bus's plain-int counters as metric families (no server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch, batch_from_ticks


def _batch(*seqs: int) -> TickBatch:
    ticks = [
        Tick(0, "XNAS", 3, s, 1_700_000_000_000_000_000 + s, 9_999, 10_001, 10_000, 100)
        for s in seqs
    ]
    (batch,) = batch_from_ticks(ticks)
    return batch


def test_collector_exports_counters() -> None:
    bus = NatsTickBus(max_pending_batches=1)
    bus.publish(_batch(1))
    bus.publish(_batch(2, 3))  # the outbox is full: dropped, counted with its ticks
    reg = CollectorRegistry()
    reg.register(NatsBusCollector(bus))
    text = generate_latest(reg).decode()
    assert "monotape_bus_dropped_batches_total 1.0" in text
    assert "monotape_bus_pending_batches 1.0" in text
    assert "monotape_bus_connected 0.0" in text
    assert bus.dropped_ticks == 2 and bus.published_ticks == 1
