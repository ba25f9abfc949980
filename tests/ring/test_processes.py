"""The ring across processes (multiprocessing spawn, the real /dev/shm segment): a producer and
two readers that follow with the asyncio driver, a stopped reader that is lapped while the other
misses nothing, a doorbell that wakes a blocked process, and a reader racing a producer that
laps it without end. No timing assertions: frames and entry numbers are counted."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Any

import pytest

from monotape.platform.ring import Lapped, RingConfig, RingFrame, ShmReader, ShmRing
from tests.ring import procs
from tests.ring.conftest import unique_tag
from tests.ring.frames import expected_frame

CTX = multiprocessing.get_context("spawn")
TIMEOUT_S = 120  # generous: both cores may be busy


def _wait_until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not reached within {TIMEOUT_S} s"
        time.sleep(0.005)


def _start_followers(
    ring: ShmRing, last_frame: int, records: int
) -> tuple[list[Any], Any, list[Any]]:
    ready, out = CTX.Queue(), CTX.Queue()
    seen = [CTX.Value("q", 0, lock=False) for _ in range(2)]
    children = [
        CTX.Process(
            target=procs.follow, args=(ring.name, i, last_frame, records, ready, out, seen[i])
        )
        for i in range(2)
    ]
    for c in children:
        c.start()
    assert sorted(ready.get(timeout=TIMEOUT_S) for _ in children) == [0, 1]
    return children, out, seen


def _results(children: list[Any], out: Any) -> dict[int, dict[str, Any]]:
    results = [out.get(timeout=TIMEOUT_S) for _ in children]
    for c in children:
        c.join(TIMEOUT_S)
        assert c.exitcode == 0
    return {r["index"]: r for r in results}


@pytest.mark.slow
def test_two_reader_processes_read_every_frame_in_order_with_exact_bytes() -> None:
    frames, records = 200, 300  # a ring of 250 slots: nobody can be lapped, however slow
    ring = ShmRing.create(
        RingConfig(total_bytes=4 << 20, slot_bytes=16384, snapshot_iids=64), tag=unique_tag()
    )
    children: list[Any] = []
    try:
        assert ring.geometry.slots > frames
        children, out, _ = _start_followers(ring, frames, records)
        for k in range(1, frames + 1):
            ring.publish(expected_frame(k, records))
        results = _results(children, out)
    finally:
        for c in children:
            if c.is_alive():
                c.kill()
        ring.close()
    for r in results.values():
        assert r["frames"] == list(range(1, frames + 1))
        assert r["bad"] == [] and r["laps"] == [] and r["gaps"] == []
        assert r["wakes"] >= 1  # woken by the doorbell: the driver has no timer


@pytest.mark.slow
def test_a_stopped_reader_is_lapped_and_the_other_misses_nothing() -> None:
    """Reader 1 is SIGSTOPped while the producer runs on: the producer never waits for it (its
    doorbell fills and is dropped), reader 0 reads every frame (the test paces the producer on
    reader 0 only), and reader 1, continued, reports the lap and follows from the newest."""
    records = 20
    ring = ShmRing.create(
        RingConfig(total_bytes=256 * 1024, slot_bytes=8192, snapshot_iids=64), tag=unique_tag()
    )
    slots = ring.geometry.slots
    with open("/proc/sys/net/unix/max_dgram_qlen") as f:
        qlen = int(f.read())
    total = max(3 * slots, qlen + 50)  # past a full doorbell queue and several laps
    children: list[Any] = []
    try:
        children, out, seen = _start_followers(ring, total, records)
        stopped = children[1]
        assert stopped.pid is not None
        os.kill(stopped.pid, signal.SIGSTOP)
        batch = slots // 2
        for k in range(1, total + 1):
            ring.publish(expected_frame(k, records))
            if k % batch == 0 or k == total:  # never more than half a ring ahead of reader 0
                _wait_until(lambda k=k: seen[0].value >= k, f"reader 0 at frame {k}")
        assert ring.counters.bells_dropped >= 1  # reader 1's doorbell was full, not waited on
        os.kill(stopped.pid, signal.SIGCONT)
        results = _results(children, out)
    finally:
        for c in children:
            if c.is_alive():
                assert c.pid is not None
                os.kill(c.pid, signal.SIGCONT)
                c.kill()
        ring.close()
    steady, lapped = results[0], results[1]
    assert steady["frames"] == list(range(1, total + 1)) and steady["bad"] == []
    assert steady["laps"] == [] and steady["counted_laps"] == 0
    assert lapped["bad"] == [] and lapped["counted_laps"] >= 1
    first, resume = lapped["laps"][0]
    assert first == 1 and resume > slots  # it had read nothing when it was stopped
    # after each lap it reads on from the resume point, in order, to the last frame
    read = lapped["frames"]
    assert read[-1] == total and read == sorted(read) and read[0] == resume
    assert lapped["missed"] == sum(r - f for f, r in lapped["laps"])


@pytest.mark.slow
def test_the_doorbell_wakes_a_reader_blocked_in_another_process() -> None:
    ring = ShmRing.create(
        RingConfig(total_bytes=256 * 1024, slot_bytes=8192, snapshot_iids=64), tag=unique_tag()
    )
    ready, out = CTX.Queue(), CTX.Queue()
    child = CTX.Process(target=procs.wait_for_one, args=(ring.name, ready, out))
    child.start()
    try:
        assert ready.get(timeout=TIMEOUT_S)
        ring.publish(expected_frame(42))
        assert out.get(timeout=TIMEOUT_S) == (True, 42)
        child.join(TIMEOUT_S)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
        ring.close()


@pytest.mark.slow
def test_a_reader_racing_a_producer_that_laps_it_never_returns_torn_bytes() -> None:
    """Three slots of ~10 KB frames published flat out by another process: whatever the
    interleaving, every frame this reader returns is byte-exact, and every loss is a Lapped."""
    frames, records = 400, 500
    go, done = CTX.Event(), CTX.Event()
    q = CTX.Queue()
    child = CTX.Process(target=procs.hammer, args=(unique_tag(), frames, records, q, go, done))
    child.start()
    reader = None
    try:
        name = q.get(timeout=TIMEOUT_S)
        reader = ShmReader.attach(name, 0)
        expected = {k: expected_frame(k, records) for k in range(1, frames + 1)}
        go.set()
        last, laps, read = 0, 0, 0
        deadline = time.monotonic() + TIMEOUT_S
        while last < frames:
            assert time.monotonic() < deadline, "the last frame was never read"
            got = reader.poll()
            if got is None:
                continue
            if isinstance(got, Lapped):
                laps += 1
                continue
            assert isinstance(got, RingFrame)
            sent = expected[got.frame_no]
            assert got.records.as_dict() == sent.records
            assert got.priority.as_dict() == sent.priority
            assert got.frame_no > last
            last, read = got.frame_no, read + 1
        done.set()
        assert read >= 1
        assert reader.counters.laps == laps
        assert reader.counters.torn <= laps  # a torn copy is always reported as a lap
    finally:
        done.set()
        child.join(TIMEOUT_S)
        if child.is_alive():
            child.kill()
        if reader is not None:
            reader.close()
