"""Fault injection for alert drills: a fault the invariants must catch, on purpose.

Off unless the node starts with ``--enable-fault-injection`` (``server.fault_injection``). The
one fault is the seed desk's leak in miniature: an index entry for a connection the server does
not hold (the error path deleted the connection before the close path cleaned the index). The
next invariant check reports it (``no_dangling_entries``), ``monotape_invariant_violation`` goes
to 1 and the InvariantViolated alert fires: the whole chain from node to pager, proven.
"""

from __future__ import annotations

from collections.abc import Collection

from monotape.platform.core.fanout import SubscriptionIndex

__all__ = ["PHANTOM_CONN_BASE", "inject_dangling_entry"]

# Real connection ids count up from 1; phantoms count down from here, so they never collide
# with one and are easy to tell apart in /admin/invariants ("registry:-1").
PHANTOM_CONN_BASE = -1


def inject_dangling_entry(
    index: SubscriptionIndex, live: Collection[int], iids: Collection[int]
) -> int:
    """Register a connection the server does not hold and subscribe it to ``iids`` (at most the
    first one, sorted); returns the phantom's id. The fan-out skips ids it has no connection
    for, so no terminal sees anything: only the books are wrong."""
    conn = PHANTOM_CONN_BASE
    while conn in live or conn in index.connection_ids():
        conn -= 1
    index.add_connection(conn)
    first = sorted(iids)[:1]
    if first:
        index.subscribe(conn, first)
    return conn
