"""The node under an end-to-end bench: the launcher's ``monotape run``, pinned to one CPU.

The storm and latency benches start the node here (``monotape.loadgen.launch``: free ports, a
temporary data dir, tokens, ``/metrics`` parsed by Prometheus' own parser), pinned to
``SERVER_CPU`` from its first instruction (``preexec_fn``, so every thread it starts inherits
it), and pin their own load to ``LOAD_CPU`` (``affinity``), so the two never share a core.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Final

from monotape.loadgen.launch import RunningNode, launch

__all__ = ["LOAD_CPU", "SERVER_CPU", "affinity", "can_pin", "start_pinned"]

SERVER_CPU: Final = 0
LOAD_CPU: Final = 1


def can_pin(*cpus: int) -> bool:
    try:
        available = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return False
    return all(c in available for c in cpus)


def start_pinned(
    rate: int,
    env: dict[str, str],
    *,
    cpu: int | None,
    sub: str = "bench",
    writers: int | None = None,
) -> RunningNode:
    """``monotape run --rate RATE`` in a temporary data dir (removed at its stop), pinned to
    ``cpu`` unless None. ``writers`` N > 0 starts the multi-process host (``--writers N``);
    pass ``cpu=None`` for it: its roles are meant to spread over every core."""

    def pin() -> None:  # in the child, before exec: every thread of the server inherits it
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return launch(
        None, "--rate", str(rate), env=env,
        preexec_fn=pin if cpu is not None else None, keep_lines=2_000, sub=sub,
        writers=writers or 0,  # None: the one-process node (the default is now the host)
    )  # fmt: skip


@contextlib.contextmanager
def affinity(cpu: int | None) -> Iterator[None]:
    """Pin this process (and the 'spawn' workers it starts) to ``cpu``; restore on exit."""
    before = os.sched_getaffinity(0) if cpu is not None else None
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        yield
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
