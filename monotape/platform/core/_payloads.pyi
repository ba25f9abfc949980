# Stub of the C extension (_payloads.c); the documented API is monotape.platform.core.payloads.
from collections.abc import Callable, Mapping
from typing import Any

SANITIZED: bool

def frame_payloads(
    frame_no: int,
    chunks: Mapping[int, bytes],
    groups_of: Mapping[int, set[int] | frozenset[int]],
    /,
) -> dict[int, bytes]: ...
def bind(fallback: Callable[..., Any], /) -> None: ...
