"""The stage names, in one place (issue 3).

The five measured stages of the pipeline come first, in pipeline order; ``glass`` (terminal
RTT/2 samples: an explicit upper bound on glass-to-glass latency), ``hydrate``, ``priority``
(the order-ticket path: admitted → handed to the kernel) and ``tick_to_write`` (one value per
tick, decoded → its frame handed to the kernel: the end-to-end figure a tick-to-glass alert
reads, never a sum of stage p99s) are extra names the recorders, the log and the report accept
like any other stage.
"""

from __future__ import annotations

__all__ = ["ALL_STAGES", "EXTRA_STAGES", "STAGES", "check_stage"]

STAGES: tuple[str, ...] = ("decode", "sequence", "conflate", "encode", "write")
EXTRA_STAGES: tuple[str, ...] = ("glass", "hydrate", "priority", "tick_to_write")
ALL_STAGES: tuple[str, ...] = STAGES + EXTRA_STAGES


def check_stage(stage: str) -> str:
    """``stage`` if it is a known stage name, else ``ValueError`` naming the choices."""
    if stage not in ALL_STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(ALL_STAGES)}")
    return stage
