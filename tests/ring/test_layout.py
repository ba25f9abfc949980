"""The ring's bytes: entries round-trip exactly, sizes follow from the byte budget, a slot's
sequence word says what a reader may do, and bytes that are not an entry never crash a reader."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.model import Tick
from monotape.platform.ring.layout import (
    ENTRY_HEAD,
    Entry,
    EntryKind,
    LayoutError,
    RingConfig,
    SlotState,
    TickAges,
    decode_entry,
    encode_entry,
    gap_entry,
    slot_state,
)
from monotape.platform.wire import codec
from tests.ring.frames import realistic_records

U32 = st.integers(0, 2**32 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
SECTION = st.dictionaries(U32, st.binary(max_size=80), max_size=40)


@st.composite
def tick_ages(draw: st.DrawFn) -> TickAges | None:
    """None, or runs of ticks (each run's count, its decoded time) with a u16 iid per tick."""
    counts = draw(st.lists(st.integers(1, 30), max_size=8))
    if not counts and draw(st.booleans()):
        return None
    decoded = b"".join(draw(I64).to_bytes(8, "little", signed=True) for _ in counts)
    ticks = b"".join(c.to_bytes(4, "little") for c in counts)
    return TickAges(
        decoded, ticks, draw(st.binary(min_size=2 * sum(counts), max_size=2 * sum(counts)))
    )


@given(
    kind=st.sampled_from(EntryKind),
    frame_no=I64,
    boundary=I64,
    published=I64,
    records=SECTION,
    priority=SECTION,
    ages=tick_ages(),
    no=st.integers(0, 2**62),
)
def test_entry_round_trip(
    kind: EntryKind,
    frame_no: int,
    boundary: int,
    published: int,
    records: dict[int, bytes],
    priority: dict[int, bytes],
    ages: TickAges | None,
    no: int,
) -> None:
    entry = Entry(kind, frame_no, boundary, published, records, priority, ages)
    data = encode_entry(entry)
    aged = 0 if ages is None else ages.nbytes
    assert len(data) == ENTRY_HEAD.size + 8 * (len(records) + len(priority)) + aged + sum(
        map(len, [*records.values(), *priority.values()])
    )
    got = decode_entry(data, no)
    assert (got.no, got.kind, got.frame_no, got.boundary_ns, got.published_ns) == (
        no,
        kind,
        frame_no,
        boundary,
        published,
    )
    for section, sent in ((got.records, records), (got.priority, priority)):
        assert len(section) == len(sent)
        assert section.as_dict() == sent
        assert list(section.items()) == list(sent.items())  # order kept
        assert [section.chunk(i) for i in range(len(section))] == list(sent.values())
        assert list(section.iids) == list(sent)
        assert section.body == b"".join(sent.values())
    if ages is None or not ages.runs:  # no runs: nothing to say, read as no ages
        assert got.ages is None
    else:
        assert got.ages is not None
        assert (bytes(got.ages.decoded), bytes(got.ages.ticks), bytes(got.ages.iids)) == (
            ages.decoded,
            ages.ticks,
            ages.iids,
        )


def test_realistic_frame_slices_without_decoding() -> None:
    """1,000 records from the wire codec: the index slices each one back, byte for byte."""
    records = realistic_records(1000)
    got = decode_entry(encode_entry(Entry(EntryKind.FRAME, 7, 280, 281, records)))
    assert got.records.as_dict() == records
    assert got.records.chunk(999) == records[999] and len(got.priority) == 0


@given(data=st.binary(max_size=200))
def test_foreign_bytes_are_a_layout_error_never_a_crash(data: bytes) -> None:
    try:
        got = decode_entry(data)
    except LayoutError:
        return
    got.records.as_dict()  # whatever decoded is sliceable
    got.priority.as_dict()


@given(records=SECTION.filter(bool), cut=st.integers(1, 1000))
def test_truncated_entry_is_refused(records: dict[int, bytes], cut: int) -> None:
    data = encode_entry(Entry(EntryKind.FRAME, 1, 2, 3, records))
    with pytest.raises(LayoutError):
        decode_entry(data[: max(0, len(data) - cut)])


def test_values_out_of_range_are_layout_errors() -> None:
    with pytest.raises(LayoutError):
        encode_entry(Entry(EntryKind.FRAME, 1, 2, 3, {2**32: b"x"}))
    with pytest.raises(LayoutError):
        encode_entry(Entry(EntryKind.FRAME, 2**63, 2, 3))


def test_tick_ages_that_do_not_add_up_are_layout_errors() -> None:
    one_run = (0).to_bytes(8, "little")
    with pytest.raises(LayoutError):  # a run's count is a u32
        encode_entry(Entry(EntryKind.FRAME, 1, 2, 3, ages=TickAges(one_run, b"\x01", b"\0\0")))
    data = bytearray(
        encode_entry(
            Entry(
                EntryKind.FRAME, 1, 2, 3, ages=TickAges(one_run, (1).to_bytes(4, "little"), b"ab")
            )
        )
    )
    data[ENTRY_HEAD.size + 8] = 2  # the run now claims 2 ticks; the entry carries 1
    with pytest.raises(LayoutError, match="do not add up"):
        decode_entry(bytes(data))
    data[ENTRY_HEAD.size + 8] = 0  # an empty run
    with pytest.raises(LayoutError, match="empty"):
        decode_entry(bytes(data))
    for counts, iids in (((0,), b""), ((2,), b"ab"), ((1, 0), b"ab")):  # refused at the source
        ticks = b"".join(c.to_bytes(4, "little") for c in counts)
        with pytest.raises(LayoutError):
            encode_entry(
                Entry(EntryKind.FRAME, 1, 2, 3, ages=TickAges(one_run * len(counts), ticks, iids))
            )


def test_gap_entry_names_its_frame() -> None:
    got = decode_entry(gap_entry(41, 1640, 1641))
    assert got.kind is EntryKind.GAP and got.frame_no == 41
    assert len(got.records) == 0 and len(got.priority) == 0


def test_default_geometry() -> None:
    g = RingConfig().geometry()
    assert g.total_bytes == 64 << 20
    assert g.slots == (g.total_bytes - g.slots_offset) // g.slot_bytes
    assert g.slots_offset + g.slots * g.slot_bytes <= g.total_bytes
    assert g.snapshot_offset(65_535) + g.snapshot_slot_bytes <= g.slots_offset
    # ~9 s of frames at 25 Hz: a 3 s SIGSTOP of a writer is not a lap at the default size
    assert g.slots >= 200
    assert all(o % 8 == 0 for o in (g.slots_offset, g.slot_bytes, g.snapshot_slot_bytes))


@given(
    total=st.integers(0, 1 << 24),
    slot=st.integers(1, 1 << 16).map(lambda k: k * 64),
    iids=st.integers(1, 5000),
    chunk=st.integers(8, 300),
)
def test_geometry_fits_the_budget_or_refuses(total: int, slot: int, iids: int, chunk: int) -> None:
    config = RingConfig(total, slot, iids, chunk)
    try:
        g = config.geometry()
    except ValueError:
        return
    assert g.slots >= 2 and g.max_chunk >= chunk
    assert g.slot_offset(g.slots) + g.slot_bytes <= total  # the last slot ends inside
    assert g.slot_offset(g.slots + 1) == g.slot_offset(1)  # entry n + slots reuses n's slot


def test_a_ring_too_small_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        RingConfig(total_bytes=1 << 20, slot_bytes=1 << 20).geometry()
    with pytest.raises(ValueError, match="max_readers"):
        RingConfig(max_readers=0).geometry()


def test_the_largest_full_record_fits_a_snapshot_slot() -> None:
    """Every field at its widest (u64 epoch, seq and size; int64 minimum prices)."""
    low = -(2**63)
    widest = Tick(65_535, "X", 2**64 - 1, 2**64 - 1, 0, low, low, low, 2**64 - 1)
    assert len(codec.encode_full_record(widest)) <= RingConfig().geometry().max_chunk


@given(want=st.integers(1, 2**40), seq=st.integers(0, 2**42))
def test_slot_state(want: int, seq: int) -> None:
    state = slot_state(want, seq)
    if seq == 2 * want:
        assert state is SlotState.READY
    elif seq > 2 * want:
        assert state is SlotState.LAPPED
    else:  # an older entry, or the wanted one half-written (2 * want - 1)
        assert state is SlotState.NOT_YET
