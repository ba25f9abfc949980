"""The priority interest segment: one row of bytes per writer, read by the sequencer."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.host.interest import HEAD_BYTES, INTEREST_IIDS, PriorityInterest
from monotape.platform.ring.segment import SHM_DIR


@pytest.fixture
def interest() -> Iterator[PriorityInterest]:
    seg = PriorityInterest.create(f"monotape-test-interest-{uuid.uuid4().hex[:12]}", writers=3)
    try:
        yield seg
    finally:
        seg.close()
        seg.unlink()


def test_created_empty_private_and_sized(interest: PriorityInterest) -> None:
    assert interest.path.parent == SHM_DIR and interest.path.exists()
    assert interest.path.stat().st_mode & 0o777 == 0o600
    assert interest.path.stat().st_size == HEAD_BYTES + 3 * INTEREST_IIDS
    assert not any(interest.wanted(i) for i in (0, 1, 65_535))
    with pytest.raises(FileExistsError):
        PriorityInterest.create(interest.name, writers=1)


def test_a_mark_by_any_writer_is_wanted_until_every_writer_unmarks(
    interest: PriorityInterest,
) -> None:
    other = PriorityInterest.attach(interest.name)  # the sequencer's mapping
    try:
        assert other.writers == 3 and other.iids == INTEREST_IIDS
        interest.set(0, 7, True)
        interest.set(2, 7, True)
        assert other.wanted(7) and not other.wanted(8)
        interest.set(0, 7, False)
        assert other.wanted(7)  # writer 2 still holds it
        interest.set(2, 7, False)
        assert not other.wanted(7)
        assert other.marked(2) == []
    finally:
        other.close()


def test_out_of_range_iids_are_never_wanted(interest: PriorityInterest) -> None:
    interest.set(1, INTEREST_IIDS, True)
    interest.set(1, -1, True)
    assert not interest.wanted(INTEREST_IIDS) and not interest.wanted(-1)
    assert interest.marked(1) == []


def test_clear_row_forgets_one_writer_only(interest: PriorityInterest) -> None:
    interest.set(0, 1, True)
    interest.set(1, 1, True)
    interest.set(1, 2, True)
    interest.clear_row(1)
    assert interest.marked(1) == [] and interest.marked(0) == [1]
    assert interest.wanted(1) and not interest.wanted(2)


def test_attach_refuses_a_foreign_file() -> None:
    path = SHM_DIR / f"monotape-test-foreign-{uuid.uuid4().hex[:12]}"
    path.write_bytes(b"x" * 4096)
    try:
        with pytest.raises(ValueError, match="not a priority-interest segment"):
            PriorityInterest.attach(path.name)
    finally:
        path.unlink()


def test_marks_cross_processes_and_survive_a_reader_that_exits(
    interest: PriorityInterest,
) -> None:
    code = (
        "from monotape.platform.host.interest import PriorityInterest as P;"
        f"p = P.attach({interest.name!r}); p.set(1, 4242, True); p.close()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert interest.path.exists()  # nothing but the creator unlinks
    assert interest.wanted(4242) and interest.marked(1) == [4242]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.booleans()), max_size=60))
def test_wanted_is_the_or_of_every_writers_last_word(
    ops: list[tuple[int, int, bool]],
) -> None:
    seg = PriorityInterest.create(
        f"monotape-test-interest-{uuid.uuid4().hex[:12]}", writers=3, iids=64
    )
    try:
        last: dict[tuple[int, int], bool] = {}
        for writer, iid, marked in ops:
            seg.set(writer, iid, marked)
            last[(writer, iid)] = marked
        for iid in range(64):
            assert seg.wanted(iid) == any(last.get((w, iid), False) for w in range(3))
    finally:
        seg.close()
        seg.unlink()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 40), st.booleans(), st.booleans()),
        max_size=60,
    )
)
def test_wanted_among_follows_every_mark_at_once(
    ops: list[tuple[int, int, bool, bool]],
) -> None:
    """The sequencer's mapping (its own cache) answers a batch exactly as ``wanted`` per iid,
    right after any writer's mark or unmark, a row cleared included."""
    seg = PriorityInterest.create(
        f"monotape-test-interest-{uuid.uuid4().hex[:12]}", writers=3, iids=64
    )
    reader = PriorityInterest.attach(seg.name)
    batch = list(range(-2, 70))  # out-of-range iids are never wanted
    try:
        assert reader.wanted_among(batch) == frozenset()
        for writer, iid, marked, clear in ops:
            if clear:
                seg.clear_row(writer)
            else:
                seg.set(writer, iid, marked)
            assert reader.wanted_among(batch) == {i for i in batch if seg.wanted(i)}
    finally:
        reader.close()
        seg.close()
        seg.unlink()
