# Stub of the C extension (_table.c); the documented API is monotape.platform.ring.table.
from collections.abc import Sequence

from _typeshed import ReadableBuffer, WriteableBuffer

SANITIZED: bool

def put_many(
    table: WriteableBuffer,
    table_offset: int,
    slot_bytes: int,
    iids: int,
    max_chunk: int,
    tag: int,
    puts: Sequence[tuple[int, int, int, ReadableBuffer]],
    /,
) -> int: ...
