"""bus/nats_collector.py: the NATS bus's plain-int counters as metric families (no server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.bus.nats_collector import NatsBusCollector
from monotape.platform.model import Tick


def _tick(seq: int) -> Tick:
    return Tick(0, "XNAS", 3, seq, 1_700_000_000_000_000_000 + seq, 9_999, 10_001, 10_000, 100)


def test_collector_exports_counters() -> None:
    bus = NatsTickBus(max_pending_batches=1)
    bus.publish([_tick(1)])
    bus.publish([_tick(2)])
    reg = CollectorRegistry()
    reg.register(NatsBusCollector(bus))
    text = generate_latest(reg).decode()
    assert "monotape_bus_dropped_batches_total 1.0" in text
    assert "monotape_bus_pending_batches 1.0" in text
    assert "monotape_bus_connected 0.0" in text
