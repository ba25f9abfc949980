"""The max_hz path in the server: a rate group's connection set (``RateGroup``) keeps its native
connection tuple from boundary to boundary, apart from the 25 Hz one of the same signature; and
its counters reach /metrics: ``Pacer.retried`` as monotape_max_hz_retried_total (node and writer
processes: both export FanoutCollector), the ring reader's snapshot_busy as
monotape_ring_snapshots_busy_total{writer} (a writer process on a host)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from monotape import metric_names as m
from monotape.clock import FakeClock
from monotape.config import ServerConfig
from monotape.platform.core.fanout import RateGroup
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.host.writer import RingReaderCollector
from monotape.platform.ring.protocol import ReaderCounters
from monotape.platform.role.collectors import FanoutCollector
from monotape.platform.server.endpoint import FanoutServer
from tests.server.test_sendloop import CountingDict, _server


def test_a_rate_group_s_tuple_is_built_once_and_kept_apart_from_the_25_hz_one() -> None:
    server, _ = _server(True, [1 << 20] * 4, [[1, 2]] * 4)
    loop = server.writer.sendloop
    assert loop is not None
    counting = CountingDict(server.terminals.connections)
    server.terminals.connections = counting
    sig, wire = 7, b"\x82\x01x"
    fast = frozenset({1, 2})  # the index's 25 Hz set for the signature
    group = RateGroup({3, 4})  # the index's k = 5 set for it: the same object until a change
    for _boundary in range(3):
        for _ in range(5):
            assert loop.send_frame(wire, fast, sig, []) == 2
            loop.end_frame()
        assert loop.send_frame(wire, group, sig, []) == 2
    assert counting.gets == 4  # each tuple built once: 2 + 2 connections looked up


def test_the_pacer_s_retried_full_records_are_a_counter() -> None:
    universe = build_universe(venues=1, instruments=4, seed=1)
    server = FanoutServer(ServerConfig(), universe, Sequencer(1), FakeClock())
    registry = CollectorRegistry()
    registry.register(FanoutCollector(server))
    assert registry.get_sample_value(m.MAX_HZ_RETRIED) == 0.0
    pacer = server.terminals.pacer
    assert pacer is not None
    pacer.retried += 3
    assert registry.get_sample_value(m.MAX_HZ_RETRIED) == 3.0


def test_a_writer_s_busy_snapshot_reads_are_a_counter_per_writer() -> None:
    counters = ReaderCounters()
    registry = CollectorRegistry()
    registry.register(RingReaderCollector(counters, "1"))
    assert registry.get_sample_value(m.RING_SNAPSHOTS_BUSY, {"writer": "1"}) == 0.0
    counters.snapshot_busy = 2
    assert registry.get_sample_value(m.RING_SNAPSHOTS_BUSY, {"writer": "1"}) == 2.0
