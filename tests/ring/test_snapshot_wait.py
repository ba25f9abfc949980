"""A snapshot read of the newest record (``at_most=None``) that meets a put in progress waits
for the producer to finish it (the producer may be descheduled mid-put for milliseconds on a
busy box): a symbol read as absent would be left out of a terminal's snapshot while the next
frames carry deltas on a base that terminal never got (found by tests/e2e/test_host_chaos.py).
A slot that stays odd (a stopped or dead producer) costs one wait only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from monotape.platform.ring import ShmReader, ShmRing
from monotape.platform.ring.protocol import SnapshotChunk
from tests.ring.conftest import SMALL, unique_tag

SLEEP = "monotape.platform.ring.shm.time.sleep"  # the reader's nap while a put is in progress
WAIT = "monotape.platform.ring.shm._SNAPSHOT_WAIT_S"  # how long the reader waits for a put


class TornSlot:
    """A shared-memory ring, a reader on it, and the ring's words as the producer writes them:
    ``tear`` puts a symbol's chunk, then leaves the symbol's slot word odd, as a producer
    preempted (or killed) in the middle of its next put."""

    def __init__(self) -> None:
        self.ring = ShmRing.create(SMALL, tag=unique_tag())
        self.reader = ShmReader.attach(self.ring.name, 0)
        self.words = memoryview(self.ring._seg.mm).cast("Q")

    def tear(self, iid: int, version: tuple[int, int], chunk: bytes) -> int:
        """The index in ``words`` of the slot's sequence word, now odd."""
        self.ring.put_snapshot(iid, version, chunk)
        k = self.ring.geometry.snapshot_offset(iid) >> 3
        self.words[k] += 1
        return k

    def close(self) -> None:
        self.words.release()
        self.reader.close()
        self.ring.close()


@pytest.fixture
def torn() -> Iterator[TornSlot]:
    slot = TornSlot()
    try:
        yield slot
    finally:
        slot.close()


def record_naps(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[list[float]], None] = lambda _: None
) -> list[float]:
    """The reader's naps, each recorded, ``then`` called, and slept for real."""
    naps: list[float] = []
    real_sleep = time.sleep

    def nap(seconds: float) -> None:
        naps.append(seconds)
        then(naps)
        real_sleep(seconds)

    monkeypatch.setattr(SLEEP, nap)
    return naps


def test_a_put_the_producer_finishes_late_is_read_not_left_out(
    torn: TornSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = torn.tear(7, (1, 1), b"old chunk")

    def third_nap(naps: list[float]) -> None:
        if len(naps) == 3:  # the producer runs again and completes the put
            torn.words[k] -= 1
            torn.ring.put_snapshot(7, (1, 2), b"new chunk")

    naps = record_naps(monkeypatch, third_nap)
    assert torn.reader.snapshot(7) == SnapshotChunk((1, 2), b"new chunk")
    assert torn.reader.counters.snapshot_busy == 0
    assert len(naps) == 3


def test_a_slot_left_odd_costs_one_wait_then_reads_as_absent_at_once(
    torn: TornSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = torn.tear(7, (1, 1), b"old chunk")  # odd for good: the producer stopped (or died)
    monkeypatch.setattr(WAIT, 0.02)
    naps = record_naps(monkeypatch)
    reader = torn.reader
    assert reader.snapshot(7) is None
    waited = len(naps)
    assert waited >= 1 and reader.counters.snapshot_busy == 1
    assert reader.snapshot(7) is None  # the same odd word: no second wait
    assert len(naps) == waited
    torn.words[k] += 1  # a restarted producer's put (or reopen) moves the word on
    torn.ring.put_snapshot(7, (1, 3), b"newer")
    assert reader.snapshot(7) == SnapshotChunk((1, 3), b"newer")


def test_a_put_finished_by_another_thread_is_waited_for(
    torn: TornSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real thing: the reader's naps let a producer thread complete the put. The wait is
    10 s here, not 0.1 s: with both cores busy the thread may not run within 0.1 s, and this
    test is about the wait seeing the put, not about how long it lasts."""
    monkeypatch.setattr(WAIT, 10.0)
    k = torn.tear(9, (2, 1), b"first")
    started = threading.Event()

    def finish() -> None:
        started.wait(10)
        torn.words[k] -= 1  # back to the even word the put started from
        torn.ring.put_snapshot(9, (2, 2), b"second")

    thread = threading.Thread(target=finish)
    thread.start()
    try:
        started.set()
        got = torn.reader.snapshot(9)
    finally:
        thread.join(10)
    # whichever moment the thread ran, never absent, never half-written
    assert got in (SnapshotChunk((2, 1), b"first"), SnapshotChunk((2, 2), b"second"))
    assert torn.reader.counters.snapshot_busy == 0
