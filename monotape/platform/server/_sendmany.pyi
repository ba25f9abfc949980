# Stub of the C extension (_sendmany.c); the documented API is monotape.platform.server.sendmany.
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from _typeshed import ReadableBuffer

MAX_CHUNKS: int
NOT_ELIGIBLE: int
SANITIZED: bool

def send_many(
    payload: ReadableBuffer | Sequence[ReadableBuffer],
    fds: Iterable[int],
    /,
) -> list[tuple[int, int, int]] | None: ...
def send_group(
    payload: bytes,
    conns: Sequence[Any],
    behind: AbstractSet[int],
    open_state: object,
    /,
) -> list[tuple[int, int, int]] | None: ...
