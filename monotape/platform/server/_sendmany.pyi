# Stub of the C extension (_sendmany.c); the documented API is monotape.platform.server.sendmany.
from array import array
from collections.abc import Iterable, Sequence

from _typeshed import ReadableBuffer

MAX_CHUNKS: int
NOT_ELIGIBLE: int
SANITIZED: bool
FLAG_CLOSING: int
FLAG_NOT_OPEN: int
FLAG_BEHIND: int
FLAG_QUEUED: int

class SendTable:
    def __len__(self) -> int: ...
    def add(self, fd: int, flags: int, /) -> int: ...
    def remove(self, handle: int, /) -> tuple[int, int]: ...
    def set(self, handle: int, bits: int, on: bool, /) -> bool: ...
    def counts(self, handle: int, /) -> tuple[int, int]: ...
    def flags(self, handle: int, /) -> int: ...
    def send(self, payload: bytes, handles: array[int], /) -> list[tuple[int, int, int]] | None: ...

def send_many(
    payload: ReadableBuffer | Sequence[ReadableBuffer],
    fds: Iterable[int],
    /,
) -> list[tuple[int, int, int]] | None: ...
