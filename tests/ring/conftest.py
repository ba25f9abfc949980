"""Both rings behind one fixture: the protocol tests run against each."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from monotape.platform.ring import MemoryRing, RingConfig, ShmReader, ShmRing
from monotape.platform.ring.protocol import RingProducer, RingReader

# Small enough to lap in a few dozen publishes: 59 slots of 8 KiB, a 256-iid snapshot table.
SMALL = RingConfig(total_bytes=512 * 1024, slot_bytes=8192, snapshot_iids=256, max_readers=4)

RingPair = tuple[RingProducer, Callable[[int], RingReader]]


def unique_tag() -> str:
    return "t" + uuid.uuid4().hex[:16]


@contextmanager
def open_ring(kind: str, config: RingConfig = SMALL) -> Iterator[RingPair]:
    """(producer, reader factory) of a fresh ring; everything closed (and unlinked) after."""
    readers: list[RingReader] = []
    if kind == "memory":
        mem = MemoryRing(config)

        def memory_reader(index: int) -> RingReader:
            readers.append(mem.reader(index))
            return readers[-1]

        try:
            yield mem, memory_reader
        finally:
            for r in readers:
                r.close()
            mem.close()
        return
    shm = ShmRing.create(config, tag=unique_tag())

    def shm_reader(index: int) -> RingReader:
        readers.append(ShmReader.attach(shm.name, index))
        return readers[-1]

    try:
        yield shm, shm_reader
    finally:
        for r in readers:
            r.close()
        shm.close()


@pytest.fixture(params=["memory", "shm"])
def ring(request: pytest.FixtureRequest) -> Iterator[RingPair]:
    with open_ring(request.param) as pair:
        yield pair
