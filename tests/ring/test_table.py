"""The snapshot table's batch put (ring/_table.c) against its pure-Python twin
(``table.python_put_many``): the same words in the segment, the same refused count and the same
error with nothing written, whatever the batches hold. ``make native-sanitize`` runs this module
against an AddressSanitizer + UndefinedBehaviorSanitizer build named by TABLE_SANITIZED_BUILD (a
test-tool hook, not a setting of the node)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monotape.platform.ring import RingConfig, table
from monotape.platform.ring.protocol import Put, SnapshotChunk
from monotape.platform.ring.segment import Segment
from tests.sanitized import load_sanitized

SANITIZED_BUILD = os.environ.get("TABLE_SANITIZED_BUILD", "")
# 16 iids of two 56-byte slots (chunks up to 16 bytes): small enough to collide often
CONFIG = RingConfig(
    total_bytes=256 * 1024, slot_bytes=4096, snapshot_iids=16, snapshot_chunk_bytes=16,
    max_readers=2,
)  # fmt: skip
GEOMETRY = CONFIG.geometry()
assert GEOMETRY.max_chunk == 16


def _native() -> ModuleType | None:
    if SANITIZED_BUILD:
        return load_sanitized("sanitized._table", SANITIZED_BUILD)
    return table.native_module()


NATIVE = _native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="ring/_table.c not built")
PutMany = Callable[[Segment, int, Sequence[Put]], int]


def native_put_many(seg: Segment, tag: int, puts: Sequence[Any]) -> int:
    assert NATIVE is not None
    g = seg.geometry
    return int(
        NATIVE.put_many(
            seg.mm, g.table_offset, g.snapshot_slot_bytes, g.snapshot_iids, g.max_chunk, tag, puts
        )
    )


@pytest.fixture
def segments(tmp_path: Path) -> Iterator[tuple[Segment, Segment]]:
    """Two fresh segments of one geometry: one for each twin."""
    a = Segment.create(tmp_path / "native", GEOMETRY)
    b = Segment.create(tmp_path / "python", GEOMETRY)
    yield a, b
    a.close()
    b.close()


def table_span(seg: Segment) -> slice:
    g = seg.geometry
    return slice(g.table_offset, g.table_offset + 2 * g.snapshot_slot_bytes * g.snapshot_iids)


def table_bytes(seg: Segment) -> bytes:
    return bytes(seg.mm[table_span(seg)])


def test_the_native_put_is_built_and_in_use() -> None:
    if NATIVE is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("monotape.platform.ring._table was not built")
        pytest.skip("monotape.platform.ring._table not built (no C compiler at install)")
    if not SANITIZED_BUILD:
        assert table.NATIVE and table.native_module() is NATIVE


U64 = st.integers(0, (1 << 64) - 1)
a_put = st.tuples(
    st.integers(-2, GEOMETRY.snapshot_iids + 1),  # out of the table at both ends
    st.one_of(st.integers(0, 3), U64),
    st.one_of(st.integers(0, 300), U64),
    st.binary(max_size=GEOMETRY.max_chunk + 3),  # too large now and then; empty too
)
# batches with their tags: a tag stays (the same frame's records again) or moves on
batches = st.lists(
    st.tuples(st.integers(0, 2), st.lists(a_put, max_size=24)), min_size=1, max_size=12
)


@needs_native
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=batches)
def test_native_and_python_write_the_same_words(
    segments: tuple[Segment, Segment], batches: list[tuple[int, list[Put]]]
) -> None:
    a, b = segments
    for seg in (a, b):  # a fresh table for each example
        span = table_span(seg)
        seg.mm[span] = bytes(span.stop - span.start)
    tag = 1
    for step, puts in batches:
        tag += step
        assert native_put_many(a, tag, puts) == table.python_put_many(b, tag, puts)
        assert table_bytes(a) == table_bytes(b)
    assert list(table.newest(a)) == list(table.newest(b))


def test_a_batch_is_what_its_puts_one_by_one_would_be(segments: tuple[Segment, Segment]) -> None:
    """``put_many`` against the single ``put`` it batches, whichever runs (native or twin)."""
    a, b = segments
    cap = GEOMETRY.max_chunk
    puts: list[Put] = [
        (3, 1, 10, b"three"),
        (3, 1, 11, b"three again"[:cap]),  # the same tag: replaces the first
        (4, 2, 1, b"x" * (cap + 1)),  # too large: stored as absent, refused
        (GEOMETRY.snapshot_iids, 1, 1, b"y"),  # out of range: refused, nothing written
        (1 << 70, 1, 1, b"y"),  # past any index: refused too
        (0, 0, 0, b""),
    ]
    assert table.put_many(a, 7, puts) == 3
    for iid, epoch, seq, chunk in puts:
        if 0 <= iid < GEOMETRY.snapshot_iids:
            table.put(b, iid, 7, (epoch, seq), None if len(chunk) > cap else chunk)
    assert table_bytes(a) == table_bytes(b)
    assert dict(table.newest(a)) == {3: SnapshotChunk((1, 11), b"three again"[:cap])}


BAD: list[tuple[str, Any, type[Exception]]] = [
    ("negative epoch", (1, -1, 0, b"c"), ValueError),
    ("seq past u64", (1, 0, 1 << 64, b"c"), ValueError),
    ("epoch not an int", (1, "1", 0, b"c"), TypeError),
    ("iid not an int", ("1", 0, 0, b"c"), TypeError),
    ("chunk not a buffer", (1, 0, 0, "chunk"), TypeError),
    ("not a 4-tuple", (1, 0, 0), TypeError),
]


@pytest.mark.parametrize(("what", "bad", "error"), BAD, ids=[b[0] for b in BAD])
def test_a_malformed_put_raises_and_writes_nothing(
    segments: tuple[Segment, Segment], what: str, bad: Any, error: type[Exception]
) -> None:
    twins: list[PutMany] = [table.python_put_many]
    if NATIVE is not None:
        twins.append(native_put_many)
    for seg, put_many in zip(segments, twins, strict=False):  # the native one when built
        before = table_bytes(seg)
        with pytest.raises(error):
            put_many(seg, 1, [(2, 1, 1, b"good"), bad, (3, 1, 1, b"good")])
        assert table_bytes(seg) == before, what


@needs_native
def test_the_native_put_refuses_another_geometry(segments: tuple[Segment, Segment]) -> None:
    assert NATIVE is not None
    seg = segments[0]
    g = seg.geometry
    args = [seg.mm, g.table_offset, g.snapshot_slot_bytes, g.snapshot_iids, g.max_chunk, 1, []]
    for index, value in (
        (1, g.table_offset + 4),  # a misaligned table
        (2, 16),  # a slot smaller than its head
        (3, 1 << 40),  # more iids than the buffer holds
        (4, g.snapshot_slot_bytes),  # chunks larger than a slot
        (1, -8),
    ):
        with pytest.raises(ValueError):
            NATIVE.put_many(*args[:index], value, *args[index + 1 :])
    with pytest.raises(BufferError):
        NATIVE.put_many(bytes(64), 0, 48, 0, 8, 1, [])  # not writable
    with pytest.raises(TypeError):
        NATIVE.put_many(seg.mm, 0)


@needs_native
def test_a_list_edited_while_it_is_read_is_refused(segments: tuple[Segment, Segment]) -> None:
    """An iid whose ``__index__`` shrinks the list of puts: a RuntimeError, nothing written,
    no read past the list (the sanitizer run checks that too)."""
    seg = segments[0]
    puts: list[Any] = []

    class Shrinking:
        def __index__(self) -> int:
            puts.clear()
            return 1

    puts += [(Shrinking(), 1, 1, b"a"), (2, 1, 1, b"b")]
    before = table_bytes(seg)
    with pytest.raises(RuntimeError):
        native_put_many(seg, 1, puts)
    assert table_bytes(seg) == before
