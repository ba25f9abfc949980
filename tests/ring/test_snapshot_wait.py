"""A snapshot read of the newest record (``at_most=None``) that meets a put in progress waits
for the producer to finish it (the producer may be descheduled mid-put for milliseconds on a
busy box): a symbol read as absent would be left out of a terminal's snapshot while the next
frames carry deltas on a base that terminal never got (found by tests/e2e/test_host_chaos.py).
A slot that stays odd (a stopped or dead producer) costs one wait only."""

from __future__ import annotations

import threading
import time

import pytest

from monotape.platform.ring import ShmReader, ShmRing
from monotape.platform.ring.protocol import SnapshotChunk
from tests.ring.conftest import SMALL, unique_tag

SLEEP = "monotape.platform.ring.shm.time.sleep"  # the reader's nap while a put is in progress
WAIT = "monotape.platform.ring.shm._SNAPSHOT_WAIT_S"  # how long the reader waits for a put


def test_a_put_the_producer_finishes_late_is_read_not_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    words = memoryview(ring._seg.mm).cast("Q")
    try:
        ring.put_snapshot(7, (1, 1), b"old chunk")
        k = ring.geometry.snapshot_offset(7) >> 3
        words[k] += 1  # odd: the producer was preempted in the middle of its next put
        naps: list[float] = []
        real_sleep = time.sleep

        def nap(seconds: float) -> None:
            naps.append(seconds)
            if len(naps) == 3:  # the producer runs again and completes the put
                words[k] -= 1
                ring.put_snapshot(7, (1, 2), b"new chunk")
            real_sleep(seconds)

        monkeypatch.setattr(SLEEP, nap)
        assert reader.snapshot(7) == SnapshotChunk((1, 2), b"new chunk")
        assert reader.counters.snapshot_busy == 0
        assert len(naps) == 3
    finally:
        words.release()
        reader.close()
        ring.close()


def test_a_slot_left_odd_costs_one_wait_then_reads_as_absent_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    words = memoryview(ring._seg.mm).cast("Q")
    try:
        ring.put_snapshot(7, (1, 1), b"old chunk")
        k = ring.geometry.snapshot_offset(7) >> 3
        words[k] += 1  # odd for good: the producer stopped (or died) mid-put
        naps: list[float] = []
        monkeypatch.setattr("monotape.platform.ring.shm._SNAPSHOT_WAIT_S", 0.02)
        real_sleep = time.sleep

        def nap(seconds: float) -> None:
            naps.append(seconds)
            real_sleep(seconds)

        monkeypatch.setattr(SLEEP, nap)
        assert reader.snapshot(7) is None
        waited = len(naps)
        assert waited >= 1 and reader.counters.snapshot_busy == 1
        assert reader.snapshot(7) is None  # the same odd word: no second wait
        assert len(naps) == waited
        words[k] += 1  # a restarted producer's put (or reopen) moves the word on
        ring.put_snapshot(7, (1, 3), b"newer")
        assert reader.snapshot(7) == SnapshotChunk((1, 3), b"newer")
    finally:
        words.release()
        reader.close()
        ring.close()


def test_a_put_finished_by_another_thread_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real thing: the reader's naps let a producer thread complete the put. The wait is
    10 s here, not 0.1 s: with both cores busy the thread may not run within 0.1 s, and this
    test is about the wait seeing the put, not about how long it lasts."""
    monkeypatch.setattr(WAIT, 10.0)
    ring = ShmRing.create(SMALL, tag=unique_tag())
    reader = ShmReader.attach(ring.name, 0)
    words = memoryview(ring._seg.mm).cast("Q")
    try:
        ring.put_snapshot(9, (2, 1), b"first")
        k = ring.geometry.snapshot_offset(9) >> 3
        words[k] += 1
        started = threading.Event()

        def finish() -> None:
            started.wait(10)
            words[k] -= 1  # back to the even word the put started from
            ring.put_snapshot(9, (2, 2), b"second")

        thread = threading.Thread(target=finish)
        thread.start()
        started.set()
        got = reader.snapshot(9)
        thread.join(10)
        # whichever moment the thread ran, never absent, never half-written
        assert got in (SnapshotChunk((2, 1), b"first"), SnapshotChunk((2, 2), b"second"))
        assert reader.counters.snapshot_busy == 0
    finally:
        words.release()
        reader.close()
        ring.close()
