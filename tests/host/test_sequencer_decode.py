"""The sequencer role records the ``decode`` stage of every bus batch (as the node's pipeline
does for its handlers' drains), so /admin/latency?stage=decode answers on a multi-process host:
the role is built in-process on a real ring segment, fed a batch a venue (read from its bytes,
as the IPC bus hands it over), and framed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from monotape.clock import FakeClock
from monotape.config import Config, SimulatorConfig
from monotape.platform.feeds.sources import universe_of
from monotape.platform.host.sequencer import SequencerRole
from monotape.platform.host.spec import RoleSpec
from monotape.platform.model import Tick
from monotape.platform.ring import RingConfig, ShmRing
from monotape.platform.wire.batch import batch_from_ticks, read_batch

RING = RingConfig(total_bytes=1 << 20, slot_bytes=32 * 1024, snapshot_iids=1024, max_readers=2)
DECODE_NS = 3_000_000  # venue stamp -> decoded by the handler, in these ticks


@pytest.fixture
def role(tmp_path: Path) -> Iterator[SequencerRole]:
    ring = ShmRing.create(RING, tag="t" + uuid.uuid4().hex[:12])
    cfg = Config(
        data_dir=str(tmp_path / "data"), simulator=SimulatorConfig(venues=2, instruments=8)
    )
    spec = RoleSpec(role="sequencer", name="sequencer", run_dir=str(tmp_path), ring=ring.name)
    r = SequencerRole(spec, cfg, clock=FakeClock())
    try:
        yield r
    finally:
        r.ring.close(unlink=False)
        r.histograms.writer.close()
        ring.close(unlink=True)


def test_every_bus_batch_is_recorded_in_the_decode_stage(role: SequencerRole) -> None:
    clock = role.clock
    assert isinstance(clock, FakeClock)
    universe = universe_of(role.cfg)
    venue_ts = clock.wall_ns() - DECODE_NS
    ticks = [
        Tick(i.iid, i.venue, 1, 1, venue_ts, 100, 110, 105, 1, "A", decoded_ns=clock.now_ns())
        for i in sorted(universe, key=lambda i: (i.venue, i.iid))
    ]
    batches = batch_from_ticks(ticks)  # one a venue, as a handler drains them
    assert len(batches) == 2
    clock.advance_ms(1)
    for batch in batches:
        role.on_batch(read_batch(batch.buffer))
    clock.advance_ms(40)
    role.frame(clock.now_ns())
    assert role.decoded_ticks == len(ticks)
    assert role.failures.counts == {}
    decode = role.stamps.recorders["decode"].rotate(clock.wall_ns() // 1_000_000)
    assert decode.count == len(ticks)
    assert decode.histogram.get_value_at_percentile(50) == pytest.approx(DECODE_NS / 1e3, rel=0.01)
    # the ticks were admitted too: sequence = decoded -> admitted (1 ms here)
    sequence = role.stamps.recorders["sequence"].rotate(clock.wall_ns() // 1_000_000)
    assert sequence.count == len(ticks)
    assert sequence.histogram.get_value_at_percentile(50) == pytest.approx(1_000, rel=0.01)
