"""The /dev/shm ring's own duties: names, create / attach / close / unlink, leftovers of dead
nodes, a torn copy detected, a half-written slot never read, a producer that restarts."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from monotape.platform.ring import (
    Gap,
    GapCause,
    Lapped,
    RingFrame,
    ShmReader,
    ShmRing,
    SnapshotChunk,
    SnapshotPut,
    segment_name,
    sweep_leftovers,
)
from monotape.platform.ring.segment import SHM_DIR, W_PRODUCER
from monotape.platform.ring.shm import ProducerFenced
from tests.ring import procs
from tests.ring.conftest import SMALL, unique_tag
from tests.ring.frames import expected_frame


def test_the_name_carries_the_node_pid() -> None:
    tag = unique_tag()
    ring = ShmRing.create(SMALL, tag=tag)
    try:
        assert ring.name == f"monotape-{os.getpid()}-{tag}" == segment_name(os.getpid(), tag)
        assert ring.path == SHM_DIR / ring.name and ring.path.exists()
        assert ring.path.stat().st_size == SMALL.total_bytes
        assert ring.path.stat().st_mode & 0o777 == 0o600
        other = ShmRing.create(SMALL, node_pid=os.getpid() + 1, tag=tag)  # another node
        other.close()
        with pytest.raises(FileExistsError):
            ShmRing.create(SMALL, tag=tag)
    finally:
        ring.close()
    assert not ring.path.exists()  # the producer unlinks


def test_bad_names_are_refused() -> None:
    for tag in ("", "UPPER", "a/b", "x" * 41):
        with pytest.raises(ValueError):
            segment_name(1, tag)


def test_attach_checks_the_segment(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ShmReader.attach("monotape-1-missing", 0, directory=tmp_path)
    (tmp_path / "monotape-1-junk").write_bytes(b"\0" * 8192)
    with pytest.raises(ValueError, match="not a ring segment"):
        ShmReader.attach("monotape-1-junk", 0, directory=tmp_path)


def test_a_reader_index_is_claimed_once_and_released_on_close() -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    try:
        first = ShmReader.attach(ring.name, 1)
        with pytest.raises(OSError, match="taken"):
            ShmReader.attach(ring.name, 1)
        with pytest.raises(ValueError):
            ShmReader.attach(ring.name, SMALL.max_readers)
        first.close()
        again = ShmReader.attach(ring.name, 1)
        again.close()
        assert ring.path.exists()  # readers never unlink
    finally:
        ring.close()


def test_a_reader_keeps_its_frames_after_the_producer_unlinks() -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    ring.publish(expected_frame(1))
    ring.close()
    assert not ring.path.exists()
    got = reader.poll()
    assert isinstance(got, RingFrame) and got.records.as_dict() == expected_frame(1).records
    reader.close()


def test_a_torn_copy_is_a_lap() -> None:
    """A reader whose copy is slow enough that the producer laps the slot meanwhile: the
    re-check after the copy sees a newer sequence word, the bytes are dropped."""
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    try:
        ring.publish(expected_frame(1))
        fast_copy = reader.copy
        slots = ring.geometry.slots

        def slow_copy(start: int, end: int) -> bytes:
            data = fast_copy(start, end)  # copied the published entry 1 ...
            for no in range(2, slots + 3):  # ... while the producer wrapped over its slot
                ring.publish(expected_frame(no))
            return data

        reader.copy = slow_copy
        got = reader.poll()
        assert got == Lapped(first=1, resume=slots + 2)
        assert reader.counters.torn == 1 and reader.counters.laps == 1
        reader.copy = fast_copy
        nxt = reader.poll()
        assert isinstance(nxt, RingFrame) and nxt.no == slots + 2
        assert nxt.records.as_dict() == expected_frame(slots + 2).records
    finally:
        reader.close()
        ring.close()


def test_a_half_written_slot_is_never_read() -> None:
    """Crafted: the slot's word odd (the producer died or is mid-write): nothing to read, and
    the entry is read once it is published."""
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    try:
        words = memoryview(ring._seg.mm).cast("Q")
        k = ring.geometry.slot_offset(1) >> 3
        words[k] = 2 * 1 - 1
        assert reader.poll() is None
        words.release()
        ring.publish(expected_frame(1))
        assert isinstance(reader.poll(), RingFrame)
    finally:
        reader.close()
        ring.close()


def test_a_snapshot_put_in_progress_is_never_read() -> None:
    """Crafted: an iid's word odd (a put mid-copy): the reader retries, yields, then reads the
    symbol as absent and counts it, never a half-written chunk; the next put is read."""
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    try:
        ring.put_snapshot(7, (1, 1), b"old chunk")
        words = memoryview(ring._seg.mm).cast("Q")
        k = ring.geometry.snapshot_offset(7) >> 3
        words[k] += 1  # odd: writing
        words[k + 4] = 3  # a length already changed under the reader
        assert reader.snapshot(7) is None
        assert reader.counters.snapshot_busy == 1
        words.release()
        ring.put_snapshot(7, (1, 2), b"new chunk")  # the next put from an odd word ends even
        assert reader.snapshot(7) == SnapshotChunk((1, 2), b"new chunk")
    finally:
        reader.close()
        ring.close()


class _PutWhileCopying:
    """The reader's words, with the producer's ``put`` run when the reader first reads the
    copied slot's length word: a put racing the copy, as another process does."""

    def __init__(self, words: memoryview, length_word: int, put: Callable[[], object]) -> None:
        self._words, self._at = words, length_word
        self._put: Callable[[], object] | None = put

    def __getitem__(self, i: int) -> int:
        if i == self._at and self._put is not None:
            put, self._put = self._put, None
            put()
        return int(self._words[i])


def test_a_put_into_the_slot_being_copied_is_read_again_never_mixed() -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    seg = reader._seg
    real = seg.words
    try:
        ring.put_snapshot(7, (1, 1), b"first")  # entry 1's record, slot 0
        k = ring.geometry.snapshot_offset(7) >> 3
        seg.words = _PutWhileCopying(  # type: ignore[assignment]
            real,
            k + 4,
            lambda: ring.put_snapshot(7, (1, 2), b"second!"),  # same entry: slot 0
        )
        assert reader.snapshot(7) == SnapshotChunk((1, 2), b"second!")
        # a reader at entry 1 while entry 3 is put: a put into the other slot changes nothing
        ring.publish(expected_frame(1))
        ring.publish(expected_frame(2))
        ring.put_snapshot(7, (1, 3), b"third")  # entry 3, slot 1: entry 1's stays in slot 0
        seg.words = _PutWhileCopying(  # type: ignore[assignment]
            real,
            k + 4,
            lambda: ring.put_snapshot(7, (1, 4), b"fourth"),  # entry 3 again: slot 1
        )
        assert reader.snapshot(7, at_most=1) == SnapshotChunk((1, 2), b"second!")
        # then two frames behind: the put for entry 4 takes the older slot, the one it was
        # copying; read again, and what is left is too new for it
        ring.publish(expected_frame(3))
        seg.words = _PutWhileCopying(  # type: ignore[assignment]
            real,
            k + 4,
            lambda: ring.put_snapshot(7, (1, 5), b"fifth"),  # entry 4: slot 0
        )
        assert reader.snapshot(7, at_most=1) is None  # never entry 1's bytes under entry 4's
        assert reader.counters.snapshot_ahead == 1 and reader.counters.snapshot_busy == 0
        seg.words = real
        assert reader.snapshot(7, at_most=3) == SnapshotChunk((1, 4), b"fourth")
        assert reader.snapshot(7, at_most=4) == SnapshotChunk((1, 5), b"fifth")
    finally:
        seg.words = real
        reader.close()
        ring.close()


def test_a_put_in_progress_does_not_hold_up_a_reader_at_its_position(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The put under way is for the frame after the head: a reader asking for the frames it
    has read takes the other slot at once, even from a producer stopped mid-put."""
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    words = memoryview(ring._seg.mm).cast("Q")
    naps: list[float] = []
    monkeypatch.setattr("monotape.platform.ring.shm.time.sleep", naps.append)
    try:
        ring.put_snapshot(7, (1, 1), b"one")
        ring.publish(expected_frame(1))
        ring.put_snapshot(7, (1, 2), b"two")  # entry 2: slot 1
        k1 = ring.geometry.snapshot_offset(7, 1) >> 3
        words[k1] += 1  # stopped in the middle of it
        assert reader.snapshot(7, at_most=1) == SnapshotChunk((1, 1), b"one")
        assert naps == [] and reader.counters.snapshot_busy == 0
    finally:
        words.release()
        reader.close()
        ring.close()


def test_the_two_slots_sit_inside_the_table_and_refuse_what_does_not_fit() -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    g = ring.geometry
    try:
        last = g.snapshot_iids - 1
        assert g.snapshot_offset(last, 1) + g.snapshot_slot_bytes <= g.slots_offset
        assert g.snapshot_offset(1, 0) == g.snapshot_offset(0, 1) + g.snapshot_slot_bytes
        assert ring.put_snapshot(last, (1, 1), b"z" * g.max_chunk) is SnapshotPut.STORED
        ring.publish(expected_frame(1))
        assert ring.put_snapshot(last, (1, 2), b"z" * (g.max_chunk + 1)) is SnapshotPut.TOO_LARGE
        assert ring.put_snapshot(last + 1, (1, 2), b"z") is SnapshotPut.OUT_OF_RANGE
        assert reader.snapshot(last + 1) is None and reader.snapshot(-1, at_most=5) is None
        assert reader.snapshot(last, at_most=1) == SnapshotChunk((1, 1), b"z" * g.max_chunk)
        assert reader.snapshot(last, at_most=2) is None  # the refused record: absent
        assert ring.counters.snapshots_refused == 2
        assert reader.snapshot(last - 1, at_most=2) is None  # its neighbour untouched
    finally:
        reader.close()
        ring.close()


def test_a_restarted_producer_is_a_gap_and_numbering_continues() -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    try:
        ring.publish(expected_frame(1))
        ring.put_snapshot(3, (1, 5), b"three")
        assert isinstance(reader.poll(), RingFrame)
        # the dead producer left entry 2 and iid 4's snapshot half-written
        words = memoryview(ring._seg.mm).cast("Q")
        words[ring.geometry.slot_offset(2) >> 3] = 3
        words[ring.geometry.snapshot_offset(4) >> 3] = 1
        words.release()
        ring.close(unlink=False)
        restarted = ShmRing.reopen(reader.name)
        assert reader.poll() == Gap(GapCause.RESTARTED)
        assert reader.snapshot(3) == SnapshotChunk((1, 5), b"three")
        assert reader.snapshot(4) is None and reader.counters.snapshot_busy == 0
        # what the restarted producer seeds from: the dead one's table, the torn slot left out
        assert list(restarted.table()) == [(3, SnapshotChunk((1, 5), b"three"))]
        restarted.publish(expected_frame(2))
        got = reader.poll()
        assert isinstance(got, RingFrame) and got.no == 2 and got.frame_no == 2
        ring = restarted
    finally:
        reader.close()
        ring.close()


def test_a_producer_another_process_took_over_is_fenced_and_never_writes_again() -> None:
    """A sequencer stopped (SIGSTOP) and replaced resumes after SIGCONT: its next publish or
    put must not reach the ring (issue 40), whatever it was doing when it was stopped."""
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    try:
        ring.publish(expected_frame(1))
        assert isinstance(reader.poll(), RingFrame)
        # what ShmRing.reopen in the successor's process does first: the producer word moves
        ring._seg.words[W_PRODUCER] = os.getpid() + 1
        head = ring.head
        with pytest.raises(ProducerFenced, match="belongs to pid"):
            ring.publish(expected_frame(2))
        with pytest.raises(ProducerFenced):
            ring.put_snapshot(3, (1, 5), b"three")
        with pytest.raises(ProducerFenced):
            ring.put_snapshots([(3, 1, 5, b"three")])
        assert ring.head == head and reader.poll() is None
        assert reader.snapshot(3) is None
    finally:
        reader.close()
        ring.close()


def test_leftovers_of_dead_nodes_are_swept(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    (tmp_path / f"monotape-{dead_pid}-ring").write_bytes(b"")
    (tmp_path / f"monotape-{os.getpid()}-ring").write_bytes(b"")
    (tmp_path / "other-file").write_bytes(b"")
    assert sweep_leftovers(tmp_path) == [f"monotape-{dead_pid}-ring"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"monotape-{os.getpid()}-ring",
        "other-file",
    ]


def test_a_producer_killed_hard_leaves_a_segment_the_sweep_removes() -> None:
    """kill -9: nothing unlinks; the next node's start does (docs/ring.md, Lifecycle)."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    tag = unique_tag()
    child = ctx.Process(target=procs.create_and_wait, args=(tag, q))
    child.start()
    try:
        name = q.get(timeout=60)
        assert (SHM_DIR / name).exists()
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(60)
        assert (SHM_DIR / name).exists()
        assert name in sweep_leftovers()
        assert not (SHM_DIR / name).exists()
    finally:
        if child.is_alive():
            child.kill()
        child.join(60)


def test_a_reader_process_that_exits_leaves_the_segment_alone() -> None:
    """The resource-tracker trap (multiprocessing.shared_memory on 3.11 unlinks a segment when
    any process that attached it exits): a reader that attaches and exits removes nothing."""
    ring = ShmRing.create(SMALL, tag=unique_tag())
    try:
        ctx = multiprocessing.get_context("spawn")
        child = ctx.Process(target=procs.attach_and_exit, args=(ring.name,))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert ring.path.exists()
        reader = ShmReader.attach(ring.name, 0)  # its index was released with the process
        reader.close()
    finally:
        ring.close()
