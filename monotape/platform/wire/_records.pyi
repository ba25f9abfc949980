# Stub of the C extension (_records.c); the documented API is monotape.platform.wire.records.
from collections.abc import Callable
from typing import Any

SANITIZED: bool

def encode_full_record(tick: Any, /) -> bytes: ...
def encode_delta_record(base: Any, new: Any, /) -> bytes: ...
def bind(
    tick_type: type,
    full_checked: Callable[[Any], bytes],
    delta_checked: Callable[[Any, Any], bytes],
    /,
) -> None: ...
def encode_rows(
    iids: Any, new: tuple[Any, ...], base: tuple[Any, ...], /
) -> tuple[dict[int, bytes], list[tuple[int, int, int, bytes]], list[int]]: ...
