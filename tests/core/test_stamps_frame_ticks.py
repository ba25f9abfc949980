"""A writer process records ``tick_to_write`` from the frame's tick ages (the host): for the same
ticks and the same writes it records exactly what the one-process node records from the ticks
themselves, through the ring's bytes, also when a record cannot encode; an instrument that is
not a wire id gives no ages."""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.histograms import Recorders
from monotape.platform.core.conflation import Frame, FrameRecord
from monotape.platform.core.stamps import StageStamps
from monotape.platform.host.publisher import Encoders, FramePublisher
from monotape.platform.host.ring_feed import ticks_of
from monotape.platform.model import Tick
from monotape.platform.ring import MemoryRing, RingConfig, RingFrame
from monotape.platform.ring.layout import Entry, decode_entry, encode_entry
from monotape.platform.wire import codec

MS = 1_000_000
OFFSET = 1_700_000_000 * 10**9
BOUNDARY = 40 * MS
PUBLISHED = 42 * MS


def _tick(iid: int, decoded: int, admitted: int) -> Tick:
    return Tick(iid, "XNAS", 1, 1, OFFSET + decoded - MS, 100, 101, 100, 1, "A", decoded, admitted)


# bus batches: (decoded ms, iids); each batch admitted 1 ms after its decode, in order
BATCHES = st.lists(
    st.tuples(st.integers(0, 30), st.lists(st.integers(0, 12), min_size=1, max_size=8)),
    max_size=6,
).map(sorted)


def _stamped(batches: list[tuple[int, list[int]]]) -> tuple[StageStamps, list[list[Tick]]]:
    stamps = StageStamps(Recorders(start_ms=0))
    ticks = [[_tick(i, d * MS, (d + 1) * MS) for i in iids] for d, iids in batches]
    for batch in ticks:
        stamps.decoded(batch)
        stamps.admitted(batch)
    return stamps, ticks


@settings(max_examples=150, deadline=None)
@given(
    batches=BATCHES,
    written=st.sets(st.integers(0, 12)),
    broken=st.sets(st.integers(0, 12), max_size=2),
    latencies=st.lists(st.integers(0, 20 * MS), max_size=6),
    direct=st.integers(0, 6),
)
def test_the_writer_records_what_the_node_records(
    batches: list[tuple[int, list[int]]],
    written: set[int],
    broken: set[int],
    latencies: list[int],
    direct: int,
) -> None:
    """``broken``: instruments whose record cannot encode (left out of the frame, so never in a
    payload): the node still counts them among the frame's records, the entry does not."""
    present = {i for _, iids in batches for i in iids}
    frame = Frame(1, BOUNDARY, [FrameRecord(i, None, _tick(i, 0, 0)) for i in sorted(present)])
    written_iids = np.array(sorted((written & present) - broken), dtype=np.int64)
    lat = np.array(latencies, dtype=np.int64)
    direct = min(direct, len(lat))

    node, _ = _stamped(batches)  # the one-process node: framed, then written
    node.framed(BOUNDARY, PUBLISHED, OFFSET, symbols=len(frame.records))
    node.written(lat, written_iids, direct)

    sequencer, _ = _stamped(batches)  # the host: the sequencer's ages through the ring's bytes
    ages = sequencer.frame_ticks()
    sequencer.framed(BOUNDARY, PUBLISHED, OFFSET, symbols=len(frame.records))
    ring = MemoryRing(RingConfig(total_bytes=1 << 24, slot_bytes=1 << 16, snapshot_iids=64))
    try:
        reader = ring.reader(0)
        publisher = FramePublisher(ring, lambda: PUBLISHED, encoders=_breaking(broken))
        publisher.publish_frame(frame, ages)
        read = reader.poll()
    finally:
        ring.close()
    assert isinstance(read, RingFrame) and publisher.left_out == len(broken & present)
    again = decode_entry(_reencoded(read))  # the views survive a second round trip
    writer = StageStamps(Recorders(start_ms=0))
    writer.written_frame(
        lat, direct, read.published_ns, written_iids, len(read.records), ticks_of(again.ages)
    )

    want = {iv.stage: iv.histogram for iv in node.rotate(1_000, OFFSET)}
    got = {iv.stage: iv.histogram for iv in writer.rotate(1_000, OFFSET)}
    for stage in ("write", "tick_to_write"):
        assert _values(got[stage]) == _values(want[stage]), stage
    if not batches:
        assert ages is None


def _breaking(broken: set[int]) -> Encoders:
    """The codec's encoders, refusing the ``broken`` instruments as a bad value would."""

    def delta(base: Tick | None, new: Tick) -> bytes:
        if new.iid in broken:
            raise ValueError(f"iid {new.iid} cannot encode")
        return codec.encode_delta_record(base, new)

    return codec.encode_full_record, delta


def test_an_instrument_past_the_wire_ids_gives_no_ages() -> None:
    stamps = StageStamps(Recorders(start_ms=0))
    batch = [_tick(1, MS, 2 * MS), _tick(70_000, MS, 2 * MS)]
    stamps.decoded(batch)
    stamps.admitted(batch)
    assert stamps.frame_ticks() is None  # the frame's writers record no end-to-end value
    stamps.framed(BOUNDARY, PUBLISHED, OFFSET)
    assert stamps.frame_ticks() is None  # taken: the next frame carries nothing yet


def _reencoded(read: RingFrame) -> bytes:
    """The entry a reader got, encoded again (what a restarted sequencer's seed reads back)."""
    return encode_entry(
        Entry(
            read.kind,
            read.frame_no,
            read.boundary_ns,
            read.published_ns,
            read.records.as_dict(),
            read.priority.as_dict(),
            read.ages,
        )
    )


def _values(h: HdrHistogram) -> list[tuple[int, int]]:
    return [(v.value_iterated_to, v.count_at_value_iterated_to) for v in h.get_recorded_iterator()]
