# Stub of the C extension (_admit.c); the documented API is monotape.platform.core.admit_batch.
from typing import Any

SANITIZED: bool

def admit_run(
    epoch: int, seq: Any, iid: Any, held_epoch: Any, held_seq: Any, verdict: Any, seen: Any, /
) -> tuple[int, int, int]: ...
def admit_into(
    epoch: int,
    venue: int,
    handler: int,
    now: int,
    columns: tuple[Any, ...],
    state: tuple[Any, ...],
    /,
) -> tuple[int, int, int]: ...
def admit_batch(
    epoch: int,
    venue: int,
    handler: int,
    now: int,
    buffer: bytes,
    n: int,
    verdict: Any,
    state: tuple[Any, ...],
    /,
) -> tuple[int, int, int]: ...
def gate_passes(buffer: bytes, n: int, code_of: Any, code: int, /) -> bool: ...
def normalize(
    buffer: bytes,
    n: int,
    code_of: Any,
    code: int,
    need_id: bool,
    fence: int,
    epoch: int,
    header: bytes,
    now: int,
    held_epoch: Any,
    held_seq: Any,
    /,
) -> tuple[bytes, int] | None: ...
