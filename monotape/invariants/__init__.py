"""Invariants: checks that a sound fan-out keeps, and the monitor that runs them every 30 s.

design (Observability): subscription cardinality and no index entry pointing at a dead
connection. ``checks`` holds the checks (no I/O), ``monitor`` runs them on a schedule and logs
transitions once; ``InvariantCollector`` (``monotape/platform/role/collectors.py``) exports
``monotape_invariant_violation{invariant}`` at scrape time.
"""

from __future__ import annotations

from monotape.invariants.checks import (
    MAX_OFFENDING,
    Invariant,
    InvariantResult,
    NativeEntries,
    NoDanglingEntries,
    SubscriptionBooks,
    SubscriptionCardinality,
)
from monotape.invariants.monitor import DEFAULT_INTERVAL_S, InvariantMonitor

__all__ = [
    "DEFAULT_INTERVAL_S",
    "MAX_OFFENDING",
    "Invariant",
    "InvariantMonitor",
    "InvariantResult",
    "NativeEntries",
    "NoDanglingEntries",
    "SubscriptionBooks",
    "SubscriptionCardinality",
]
