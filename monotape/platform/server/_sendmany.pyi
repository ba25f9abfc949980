# Stub of the C extension (_sendmany.c); the documented API is monotape.platform.server.sendmany.
from collections.abc import Iterable, Sequence

from _typeshed import ReadableBuffer

MAX_CHUNKS: int
SANITIZED: bool

def send_many(
    payload: ReadableBuffer | Sequence[ReadableBuffer],
    fds: Iterable[int],
    /,
) -> list[tuple[int, int, int]] | None: ...
