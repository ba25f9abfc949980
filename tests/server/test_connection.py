"""The per-connection writer: bounded frames that may gap, answers that never drop."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from monotape.platform.server.connection import MAX_CONTROL_QUEUED, Connection, WriteFailed
from tests.server.fakes import fake_ws


class StuckTransport(asyncio.Transport):
    """A socket whose peer stopped reading: everything written stays buffered."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0
        self.writes: list[bytes] = []
        self.room = False

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        assert isinstance(data, bytes)
        self.writes.append(data)
        if not self.room:
            self.buffered += len(data)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def connection(transport: StuckTransport) -> Connection:
    return Connection(1, fake_ws(transport, None), outbox_frames=4, high_water=10, opened_ns=0)


def test_a_terminal_in_a_gap_still_gets_its_answers_in_order() -> None:
    t = StuckTransport()
    c = connection(t)
    assert c.deliver(b"frame-0" * 2)  # fills the buffer past the high-water mark
    for i in range(10):  # the ring overflows: a gap
        c.deliver(b"frame-%d" % i)
    assert c.outbox.gap
    assert not c.deliver_control(b"ack-1") and not c.deliver_control(b"ack-2")
    assert not c.deliver(b"frame-late")  # never overtakes a queued answer
    t.buffered, t.room = 0, True  # the terminal reads again
    resolved = c.flush(lambda: b"snapshot")
    assert resolved
    assert t.writes[1:] == [b"ack-1", b"ack-2", b"snapshot"]  # answers first, then the base


def test_a_terminal_that_never_reads_overflows_its_answers_and_is_torn_down() -> None:
    c = connection(StuckTransport())
    c.deliver(b"x" * 20)
    for _ in range(MAX_CONTROL_QUEUED):
        c.deliver_control(b"ack")
    with pytest.raises(WriteFailed, match="not reading"):
        c.deliver_control(b"ack")


class _Entries:
    """The counts part of a send table: one entry per live handle."""

    def __init__(self) -> None:
        self.live = {7: (3, 300)}

    def counts(self, handle: int) -> tuple[int, int]:
        if handle not in self.live:
            raise KeyError(handle)  # as SendTable's for a stale handle
        return self.live[handle]


def test_counts_read_from_a_scrape_thread_survive_the_entry_leaving() -> None:
    """/metrics reads these off the loop's thread: the loop's detach can remove the entry
    between the read of ``table`` and of its counts; that is the Python counts, not a 500."""
    conn = connection(StuckTransport())
    entries = _Entries()
    conn.table, conn.handle = cast(Any, entries), 7
    conn.count(1, 100)
    assert (conn.frames_sent, conn.bytes_sent) == (4, 400)
    del entries.live[7]  # detach's first step, its counts not yet moved
    assert (conn.frames_sent, conn.bytes_sent) == (1, 100)
