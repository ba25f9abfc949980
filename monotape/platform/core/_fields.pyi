# Stub of the C extension (_fields.c); the documented API is monotape.platform.core.fields.
from collections.abc import Iterable, Sequence
from typing import Any

SANITIZED: bool

def int64_field(items: Iterable[Any], member: Any, /) -> bytes: ...
def in_range_prefix(
    items: Sequence[Any],
    table: tuple[object, ...],
    key: Any,
    value: Any,
    signed: tuple[Any, ...],
    unsigned: tuple[Any, ...],
    /,
) -> int: ...
