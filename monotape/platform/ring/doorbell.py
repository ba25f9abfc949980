"""Doorbells: how the producer wakes a reader that sleeps in its event loop, without spinning.

A reader sleeps on a file descriptor (``loop.add_reader``); the producer, after publishing, makes
it readable with one non-blocking write. A write that would block means the reader already has
a wake-up pending (it is stopped, or busy catching up): dropped and counted, never waited on, so
a SIGSTOPped writer cannot hold the sequencer back; it catches up or is lapped.

- ``EventfdBell``: an eventfd (EFD_NONBLOCK), for readers in the producer's own process
  (``memory.MemoryRing``): the producer holds the fd.
- ``SocketBell``: a Unix datagram socket bound to an abstract name derived from the segment and
  the reader's index (``shm.ShmRing``). Chosen over an eventfd or a pipe because it is reached by
  name: a writer that restarts binds its index again and the sequencer rings it without passing
  descriptors through the supervisor; the bind is also the claim on the index (a second reader on
  a live index fails with EADDRINUSE; the kernel releases it when the owner dies, kill -9
  included); and an abstract name leaves nothing on the filesystem to clean up. A full receive
  queue answers EAGAIN to a non-blocking ``sendto``, a dead reader ECONNREFUSED: both counted.
"""

from __future__ import annotations

import os
import socket

__all__ = ["EventfdBell", "SocketBell", "SocketBells", "bell_address"]

_ONE = b"\x01"


class EventfdBell:
    """Reader and producer side in one process: ``ring`` adds one, ``drain`` reads the count."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def fileno(self) -> int:
        return self._fd

    def ring(self) -> bool:
        """False when it could not be rung (closed, or the counter full: a wake-up pending)."""
        if self._fd < 0:
            return False
        try:
            os.eventfd_write(self._fd, 1)
        except (BlockingIOError, OSError):
            return False
        return True

    def drain(self) -> int:
        if self._fd < 0:
            return 0
        try:
            return os.eventfd_read(self._fd)
        except BlockingIOError:
            return 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def bell_address(segment: str, index: int) -> str:
    """The abstract socket name of reader ``index`` of ``segment`` (a leading NUL: abstract)."""
    return f"\0{segment}.bell.{index}"


class SocketBell:
    """A reader's doorbell: binding the name claims the reader index for this process."""

    def __init__(self, segment: str, index: int) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            self._sock.bind(bell_address(segment, index))
        except OSError as exc:
            self._sock.close()
            raise OSError(
                exc.errno, f"reader {index} of {segment} is taken by a live reader: {exc}"
            ) from exc
        self._sock.setblocking(False)

    def fileno(self) -> int:
        return self._sock.fileno()

    def drain(self) -> int:
        """Read every pending ring (they coalesce: one wake-up reads all that is published)."""
        n = 0
        recv = self._sock.recv
        try:
            while True:
                recv(16)
                n += 1
        except (BlockingIOError, OSError):
            return n

    def close(self) -> None:
        self._sock.close()


class SocketBells:
    """The producer's side: one non-blocking datagram to each reader that registered a pid."""

    def __init__(self, segment: str, max_readers: int) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.setblocking(False)
        self._addresses = [bell_address(segment, i) for i in range(max_readers)]

    def ring(self, pids: tuple[int, ...]) -> int:
        """Ring every reader whose table word is set; returns how many could not be rung."""
        dropped = 0
        send = self._sock.sendto
        for address, pid in zip(self._addresses, pids, strict=False):
            if pid:
                try:
                    send(_ONE, address)
                except OSError:  # EAGAIN (a wake-up pending), ECONNREFUSED (reader gone)
                    dropped += 1
        return dropped

    def close(self) -> None:
        self._sock.close()
