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
