"""The reader's asyncio driver: sleep on the doorbell, read what is published, hand it on.

Thin on purpose (values are decided in the reader and in whoever consumes ``on_read``): the
loop wakes only when the producer rang (``loop.add_reader`` on the doorbell; no timer, no
spinning), drains the bell first and then polls until nothing is new, so a publish that lands
after the drain rings again and is never missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from monotape.platform.ring.protocol import RingRead, RingReader

__all__ = ["RingFollower"]

READS_PER_WAKE = 64  # then yield to the loop: catching up after a pause never starves it


class RingFollower:
    """Follows ``reader`` on ``loop``, calling ``on_read`` with every outcome in ring order."""

    def __init__(
        self,
        reader: RingReader,
        on_read: Callable[[RingRead], None],
        loop: asyncio.AbstractEventLoop,
        reads_per_wake: int = READS_PER_WAKE,
    ) -> None:
        self._reader = reader
        self._on_read = on_read
        self._loop = loop
        self._per_wake = reads_per_wake
        self.wakes = 0  # doorbell wake-ups (a test tells them from polling)
        self._running = False

    def start(self) -> None:
        if not self._running:
            self._running = True
            self._loop.add_reader(self._reader.fileno(), self._wake)
            self._loop.call_soon(self._read)  # anything published before we slept

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._loop.remove_reader(self._reader.fileno())

    def _wake(self) -> None:
        self.wakes += 1
        self._reader.drain_bell()
        self._read()

    def _read(self) -> None:
        if not self._running:
            return
        poll, on_read = self._reader.poll, self._on_read
        for _ in range(self._per_wake):
            read = poll()
            if read is None:
                return
            on_read(read)
        self._loop.call_soon(self._read)  # more to read: continue after others had a turn
