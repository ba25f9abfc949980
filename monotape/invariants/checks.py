"""The checks: each one compares two numbers that a sound system keeps equal.

design (Observability): every 30 s, subscription cardinality (Σ subscriber-set sizes = Σ
per-connection subscription counts) and no index entry pointing at a dead connection. The seed
system's abrupt disconnects (peer RST, ~6% of all) ran the error path first, which deleted the
connection entry, so the close path found nothing and skipped cleanup: after 60 hours 19% of hot
subscriber-set entries pointed at dead connections and p99 had doubled. These checks make that
class of bug visible at the next check instead of 60 hours later.

A check is a plain object with no I/O: it reads the index (through ``SubscriptionBooks``, the
few questions it asks of it, so invariants depend on no fan-out class) and answers with an
``InvariantResult`` that carries the numbers (expected, actual, up to 20 offenders), so an SRE
sees *how* wrong, not just *that* it is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from collections.abc import Set as AbstractSet
from typing import Final, Protocol

import msgspec

from monotape.clock import Clock, SystemClock

__all__ = [
    "MAX_OFFENDING",
    "Invariant",
    "InvariantResult",
    "NativeEntries",
    "NoDanglingEntries",
    "SubscriptionBooks",
    "SubscriptionCardinality",
]

MAX_OFFENDING: Final = 20  # a result names at most this many offenders (STYLE 7: bounded)


class InvariantResult(msgspec.Struct, frozen=True):
    """One check's verdict. ``ok`` is ``expected == actual`` for the checks here; ``actual`` is
    -1 when the check itself raised (``offending`` then holds the error)."""

    name: str
    ok: bool
    expected: int
    actual: int
    offending: list[str]
    checked_at_ms: int  # wall clock, for humans and the admin API
    duration_us: int  # monotonic clock: what the check cost the event loop


class Invariant(Protocol):
    """A named check. ``check`` is synchronous, bounded, and must not mutate what it reads."""

    name: str

    def check(self) -> InvariantResult: ...


class SubscriptionBooks(Protocol):
    """What the checks read of the fan-out's subscription index (``SubscriptionIndex`` in
    ``platform/core/fanout.py`` is the one implementation). Read-only: a check never mutates."""

    def cardinality(self) -> tuple[int, int]:
        """(Σ over signatures of members x connections, Σ over connections of subscriptions)."""
        ...

    def connection_ids(self) -> AbstractSet[int]: ...

    def subscriptions(self, conn: int) -> AbstractSet[int]: ...

    def signature(self, conn: int) -> int | None: ...

    def members(self, sig: int) -> AbstractSet[int]: ...

    def connections(self, sig: int) -> AbstractSet[int]: ...

    def priority(self, conn: int) -> AbstractSet[int]: ...

    def priority_connections(self, iid: int) -> AbstractSet[int]: ...

    def dangling(self) -> list[tuple[str, int]]:
        """(where, conn) of entries naming a connection the index itself has forgotten."""
        ...


def _stamp(
    name: str, clock: Clock, started_ns: int, expected: int, actual: int, offending: list[str]
) -> InvariantResult:
    return InvariantResult(
        name=name,
        ok=expected == actual,
        expected=expected,
        actual=actual,
        offending=offending[:MAX_OFFENDING],
        checked_at_ms=clock.wall_ns() // 1_000_000,
        duration_us=max(0, clock.now_ns() - started_ns) // 1_000,
    )


class SubscriptionCardinality:
    """Σ over signatures of members x connections == Σ over connections of subscription counts.

    ``expected`` is the per-connection sum (the truth the terminals asked for), ``actual`` the
    per-signature sum (what the fan-out writes to). When they differ, the offenders are the
    connections whose signature does not hold exactly their subscription set (computed only on
    failure: the diagnosis is O(connections x subscriptions), the check itself is not).
    """

    name = "subscription_cardinality"

    def __init__(self, index: SubscriptionBooks, *, clock: Clock | None = None) -> None:
        self._index = index
        self._clock: Clock = clock or SystemClock()

    def check(self) -> InvariantResult:
        started = self._clock.now_ns()
        by_sig, by_conn = self._index.cardinality()
        offending = [] if by_sig == by_conn else self._diagnose()
        return _stamp(self.name, self._clock, started, by_conn, by_sig, offending)

    def _diagnose(self) -> list[str]:
        index = self._index
        out: list[str] = []
        for conn in sorted(index.connection_ids()):
            subs = index.subscriptions(conn)
            sig = index.signature(conn)
            if sig is None:
                bad = bool(subs)
            else:
                bad = index.members(sig) != subs or conn not in index.connections(sig)
            if bad:
                out.append(f"conn:{conn}")
                if len(out) >= MAX_OFFENDING:
                    break
        return out


class NativeEntries:
    """The native writer's table agrees with the connections: no entry is clear (sendable
    behind its transport's back) for a terminal that is closing, not open, behind or whose
    transport holds bytes, and no entry outlives its connection (each holds a duplicate of
    its socket: a leak would keep sockets open).

    ``audit`` returns (count, offenders) (``SendLoop.audit``), or None when the native
    writer is not running (then there is nothing to disagree: 0). ``expected`` is 0."""

    name = "native_entries"

    def __init__(
        self,
        audit: Callable[[], tuple[int, list[str]] | None],
        *,
        clock: Clock | None = None,
    ) -> None:
        self._audit = audit
        self._clock: Clock = clock or SystemClock()

    def check(self) -> InvariantResult:
        started = self._clock.now_ns()
        found = self._audit()
        count, offending = found if found is not None else (0, [])
        return _stamp(self.name, self._clock, started, 0, count, offending)


class NoDanglingEntries:
    """No index entry names a connection that is not in the live connection registry.

    ``live`` returns the server's connection table (``FanoutServer.connections``: its keys are
    the live connection ids). Every place the index names a connection counts: its own registry,
    conn -> subscriptions, conn -> signature, signature -> connections, conn -> priority and
    iid -> priority connections. ``expected`` is 0; ``actual`` is the number of dangling entries;
    ``offending`` names them as ``"index:conn"``.

    The seed bug shape: the connection entry deleted without ``remove_connection``. The index
    still believes the connection is registered, so ``SubscriptionIndex.dangling()`` alone (which
    checks against the index's own registry) would not see it: that is why the live set comes
    from the server.
    """

    name = "no_dangling_entries"

    def __init__(
        self,
        index: SubscriptionBooks,
        live: Callable[[], Collection[int]],
        *,
        clock: Clock | None = None,
    ) -> None:
        self._index = index
        self._live = live
        self._clock: Clock = clock or SystemClock()

    def check(self) -> InvariantResult:
        started = self._clock.now_ns()
        index = self._index
        live = self._live()
        count = 0
        offending: list[str] = []

        def note(where: str, conn: int) -> None:
            nonlocal count
            count += 1
            if len(offending) < MAX_OFFENDING:
                offending.append(f"{where}:{conn}")

        # Entries whose connection the index itself has forgotten (it dangles for the index and,
        # unless the server still holds it, for the server too).
        for where, conn in index.dangling():
            if conn not in live:
                note(where, conn)
        # Connections the index still holds but the server has dropped: the seed's bug.
        for conn in sorted(c for c in index.connection_ids() if c not in live):
            note("registry", conn)
            note("conn->iids", conn)
            sig = index.signature(conn)
            if sig is not None:
                note("conn->sig", conn)
                if conn in index.connections(sig):
                    note("sig->conns", conn)
            prio = index.priority(conn)
            if prio:
                note("conn->priority", conn)
                for iid in sorted(prio):
                    if conn in index.priority_connections(iid):
                        note("iid->priority_conns", conn)
        return _stamp(self.name, self._clock, started, 0, count, offending)
