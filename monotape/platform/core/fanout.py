"""Fan-out: subscription signatures, the subscription index, and shared payloads per frame.

design (Fan-out and backpressure): a connection's subscription signature is a hash of its sorted
subscription set, computed when it (un)subscribes. Per frame, connections with the same signature
share one payload, built once from per-symbol encoded chunks and written to each of them.
Watchlists are heavily shared: 4,200 connections collapse to about 260 distinct sets, so a frame
needs about 260 payloads, not 4,200 (measured: per-connection encode + send saturates a core at
2,000 connections; pre-framed shared writes serve 4,200 at 72% of one).

Rate groups (docs/wire.md, rate): terminals at max_hz < 25 (every k-th boundary) are kept by
(k, signature), so terminals of one rate and one subscription set share one payload; nothing is
kept for 25 Hz terminals, so a node with none slower pays nothing.

``SubscriptionIndex`` has one owner, the connection registry, and one idempotent teardown path
(``remove_connection``) that cleans every index (design: Connections, "it cleans every index
before it drops the connection entry"). ``cardinality`` and ``dangling`` feed the 30 s
invariants (design: Observability).

Size: one index, kept consistent on every change; its writes, queries and invariants share the
private dicts, so they stay in one class.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from monotape.platform.core.payloads import FramePayloads, frame_payloads, group_chunks

__all__ = [
    "RateGroup",
    "RateGroups",
    "SubscriptionIndex",
    "plan_payloads",
    "subscription_signature",
]

_IID_MAX = 0xFFFF  # iids are uint16 on the wire (design: Wire, the static dictionary)


def _sorted_iids(iids: Iterable[int]) -> list[int]:
    out = sorted(set(iids))
    if out and (out[0] < 0 or out[-1] > _IID_MAX):
        raise ValueError(f"iids must be uint16, got {out[0]}..{out[-1]}")
    return out


def _signature_of_sorted(sorted_iids: list[int]) -> int:
    # Little-endian uint16s, explicitly: the value must match across processes and hosts.
    packed = struct.pack(f"<{len(sorted_iids)}H", *sorted_iids)
    return int.from_bytes(hashlib.blake2b(packed, digest_size=8).digest(), "big")


def subscription_signature(iids: Iterable[int]) -> int:
    """A stable 64-bit hash of the *set* ``iids`` (order and repeats do not matter).

    blake2b (digest_size=8) of the sorted, de-duplicated iids packed as little-endian uint16s,
    read as a big-endian unsigned int. Stable across processes (unlike ``hash()``, which is
    salted per process), so writer processes agree on signatures.
    """
    return _signature_of_sorted(_sorted_iids(iids))


class RateGroup(frozenset[int]):
    """One (signature, k) group's connections, as ``SubscriptionIndex.rate_groups`` keeps them:
    the same object at every boundary until the group changes (then a new one), so the native
    writer keeps its connection tuple under it (server/sendloop.py) instead of rebuilding one
    per boundary; its own type, so the 25 Hz tuple of the same signature is kept apart."""

    __slots__ = ()


class RateGroups(NamedTuple):
    """Rate k's groups as one boundary needs them, kept until a signature's connections or rate
    groups change: (signature, its k connections, its members ascending) per group, and every
    symbol some group of k watches (``watched``)."""

    groups: tuple[tuple[int, RateGroup, tuple[int, ...]], ...]
    watched: frozenset[int]


class SubscriptionIndex:
    """Who subscribes to what, indexed every way the writer needs, kept consistent on every change.

    Indexes: conn -> set[iid]; conn -> sig; sig -> set[conn]; sig -> members (frozenset and an
    ascending tuple); iid -> set[sig]; priority: conn -> set[iid] and iid -> set[conn]. A
    connection with no subscriptions has no signature. Connections must be added
    (``add_connection``) before they subscribe.

    Query methods return copies or frozensets: a caller may change the index while it iterates
    a result (the writer's loops need not: they defer teardowns until the loop is over).
    """

    __slots__ = (
        "_conns",
        "_conns_of_sig",
        "_fresh",
        "_members",
        "_paced",
        "_prio",
        "_prio_conns",
        "_rate",
        "_rated",
        "_sig_of",
        "_sigs_of_iid",
        "_slow_only",
        "_sorted_members",
        "_subs",
        "_views",
    )

    def __init__(self) -> None:
        self._conns: set[int] = set()  # the registry: live connections
        self._subs: dict[int, set[int]] = {}
        self._sig_of: dict[int, int] = {}
        # replaced, never edited: a plan holds one as a value (``shared_connections``)
        self._conns_of_sig: dict[int, frozenset[int]] = {}
        self._members: dict[int, frozenset[int]] = {}
        self._sorted_members: dict[int, tuple[int, ...]] = {}
        self._sigs_of_iid: dict[int, set[int]] = {}
        self._prio: dict[int, set[int]] = {}
        self._prio_conns: dict[int, set[int]] = {}
        self._rate: dict[int, int] = {}  # conn -> k, for k > 1 only (25 Hz is the default)
        self._rated: dict[int, dict[int, set[int]]] = {}  # k -> sig -> conns, k > 1
        # k -> conns owed full records of everything they watch at k's next boundary: they
        # joined a group of k, or were sent a snapshot, since its last one (``take_fresh``)
        self._fresh: dict[int, set[int]] = {}
        # sig -> its 25 Hz connections, while it has slower ones too: ``paced_connections``,
        # dropped on any change of the signature's connections or rate groups
        self._paced: dict[int, frozenset[int]] = {}
        # Both dropped, like ``_paced``, on any change of a signature's connections or rate
        # groups (``_regrouped``), rebuilt on first use: k -> ``rate_groups(k)``, and the
        # symbols no 25 Hz terminal watches (``slow_only``).
        self._views: dict[int, RateGroups] = {}
        self._slow_only: frozenset[int] | None = None

    # -- registry ---------------------------------------------------------------------------

    def add_connection(self, conn: int) -> None:
        self._conns.add(conn)
        self._subs.setdefault(conn, set())

    def remove_connection(self, conn: int) -> None:
        """Clean every index entry of ``conn``. Idempotent; unknown connections are a no-op."""
        for iid in self._prio.pop(conn, ()):
            self._discard(self._prio_conns, iid, conn)
        self._unlink_signature(conn)
        self._rate.pop(conn, None)
        self._subs.pop(conn, None)
        self._conns.discard(conn)

    # -- subscriptions ----------------------------------------------------------------------

    def subscribe(self, conn: int, iids: Iterable[int]) -> frozenset[int]:
        """Add ``iids`` to ``conn``'s set; return the ones newly added (to hydrate)."""
        subs = self._require(conn)
        added = frozenset(_sorted_iids(iids)) - subs
        if added:
            subs |= added
            self._relink_signature(conn, subs)
        self.resync(conn)  # a subscribe is answered with a snapshot (held symbols too)
        return added

    def unsubscribe(self, conn: int, iids: Iterable[int]) -> frozenset[int]:
        """Remove ``iids`` from ``conn``'s set (and from its priority set); return the removed."""
        subs = self._require(conn)
        removed = frozenset(iids) & subs
        if removed:
            subs -= removed
            prio = self._prio.get(conn)
            if prio:
                for iid in removed & prio:
                    prio.discard(iid)
                    self._discard(self._prio_conns, iid, conn)
                if not prio:
                    del self._prio[conn]
            self._relink_signature(conn, subs)
        return removed

    def set_priority(self, conn: int, iids: Iterable[int], on: bool) -> None:
        """Mark (``on``) or unmark ``iids`` as priority for ``conn`` (its open order ticket).

        Only subscribed iids may be priority: ``ValueError`` otherwise, and nothing changes.
        """
        subs = self._require(conn)
        wanted = frozenset(iids)
        if on:
            missing = wanted - subs
            if missing:
                raise ValueError(f"not subscribed, cannot be priority: {sorted(missing)}")
            if not wanted:
                return
            prio = self._prio.setdefault(conn, set())
            for iid in wanted:
                prio.add(iid)
                self._prio_conns.setdefault(iid, set()).add(conn)
        else:
            held = self._prio.get(conn)
            if not held:
                return
            prio = held
            for iid in wanted & prio:
                prio.discard(iid)
                self._discard(self._prio_conns, iid, conn)
            if not prio:
                del self._prio[conn]

    def set_rate(self, conn: int, k: int) -> int:
        """Give ``conn`` every ``k``-th boundary (k = 25 / max_hz); returns its previous k."""
        self._require(conn)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        before = self._rate.get(conn, 1)
        if k == before:
            return before
        sig = self._sig_of.get(conn)
        if sig is not None and before > 1:
            self._leave_group(conn, before, sig)
        if k == 1:
            del self._rate[conn]
        else:
            self._rate[conn] = k
            if sig is not None:
                self._join_group(conn, k, sig)
        return before

    # -- queries ----------------------------------------------------------------------------

    def subscriptions(self, conn: int) -> frozenset[int]:
        return frozenset(self._subs.get(conn, ()))

    def priority(self, conn: int) -> frozenset[int]:
        return frozenset(self._prio.get(conn, ()))

    def signature(self, conn: int) -> int | None:
        return self._sig_of.get(conn)

    def members(self, sig: int) -> frozenset[int]:
        """The iids of signature ``sig`` (empty if no connection has it)."""
        return self._members.get(sig, frozenset())

    def frame_payloads(
        self, frame_no: int, chunks: Mapping[int, bytes], plan: FramePayloads = frame_payloads
    ) -> dict[int, bytes]:
        """Signature -> its framed FRAME of ``chunks`` (iid -> encoded record), for every
        signature watching one of them, by ``plan`` over the index's own sets
        (``core/payloads.py``: native when built; its twin in tests and benches)."""
        return plan(frame_no, chunks, self._sigs_of_iid)

    def connections(self, sig: int) -> set[int]:
        """The connections with signature ``sig`` (a copy)."""
        return set(self._conns_of_sig.get(sig, ()))

    def shared_connections(self, sig: int) -> frozenset[int]:
        """The connections with signature ``sig``, not a copy: a change replaces the set, so a
        frame plan holds it as a value and the writer knows it unchanged by identity."""
        return self._conns_of_sig.get(sig, frozenset())

    def paced_connections(self, sig: int) -> frozenset[int]:
        """The connections with signature ``sig`` that get every boundary. Not a copy: kept until
        the signature's connections or rate groups change (then replaced, like
        ``shared_connections``), so a frame costs no set per signature (~260 a frame)."""
        conns = self._paced.get(sig)
        if conns is not None:
            return conns
        conns = self._conns_of_sig.get(sig)
        if conns is None:
            return frozenset()
        for groups in self._rated.values():  # at most four rates
            slower = groups.get(sig)
            if slower:
                conns = conns - slower
        self._paced[sig] = conns
        return conns

    def rate(self, conn: int) -> int:
        """``conn``'s k: it gets the boundaries with frame_no % k == 0."""
        return self._rate.get(conn, 1)

    def rates(self) -> frozenset[int]:
        """The k > 1 some subscribed connection has now."""
        return frozenset(self._rated)

    def rated_groups(self, k: int) -> list[tuple[int, set[int]]]:
        """(signature, its connections of rate ``k``: a copy) for every such group."""
        return [(sig, set(conns)) for sig, conns in self._rated.get(k, {}).items()]

    def rate_groups(self, k: int) -> RateGroups:
        """Rate ``k``'s groups and the symbols they watch, not copies: built once per change of
        the index, so a boundary costs no set per group (``RateGroup``)."""
        view = self._views.get(k)
        if view is None:
            groups = self._rated.get(k, {})
            members = self._members
            view = RateGroups(
                tuple(
                    (sig, RateGroup(conns), self._sorted_members[sig])
                    for sig, conns in groups.items()
                ),
                frozenset().union(*(members[sig] for sig in groups)),
            )
            self._views[k] = view
        return view

    def slow_only(self) -> frozenset[int]:
        """The symbols only slower terminals watch (every signature holding them has no 25 Hz
        connection): a frame's records of them are in no 25 Hz payload. Kept until a change."""
        slow = self._slow_only
        if slow is None:
            out = {sig for groups in self._rated.values() for sig in groups}
            out = {sig for sig in out if not self.paced_connections(sig)}
            sigs_of, members = self._sigs_of_iid, self._members
            slow = frozenset(iid for sig in out for iid in members[sig] if sigs_of[iid] <= out)
            self._slow_only = slow
        return slow

    def sorted_members(self, sig: int) -> tuple[int, ...]:
        """The iids of signature ``sig``, ascending (empty if no connection has it)."""
        return self._sorted_members.get(sig, ())

    def resync(self, conn: int) -> None:
        """``conn`` was sent a snapshot: what it holds may be newer than what its rate's other
        terminals hold, so its next boundary must not send it deltas (``take_fresh``). A no-op
        for a 25 Hz terminal (its next frame's deltas name the bases the snapshot showed)."""
        k = self._rate.get(conn, 1)
        if k > 1 and conn in self._sig_of:
            self._fresh.setdefault(k, set()).add(conn)

    def take_fresh(self, k: int) -> set[int]:
        """The connections of rate ``k`` that joined a group of it, or were sent a snapshot,
        since the last call (its pacer calls it at each of k's boundaries), forgotten here."""
        return self._fresh.pop(k, set())

    def priority_connections(self, iid: int) -> set[int]:
        """The connections holding ``iid`` as priority (a copy; empty if none). Per applied tick."""
        conns = self._prio_conns.get(iid)
        return set(conns) if conns else set()

    def priority_among(self, iids: npt.NDArray[np.integer[Any]]) -> list[int]:
        """The distinct ids among ``iids`` some order ticket holds, ascending: one question per
        admitted batch (with no ticket anywhere, the batch is not even read)."""
        marked = self._prio_conns
        if not marked or not len(iids):
            return []
        return sorted(marked.keys() & set(np.unique(iids).tolist()))

    def has_priority(self, iid: int) -> bool:
        """Cheaper than ``priority_connections`` when most ticks have no priority subscriber."""
        return iid in self._prio_conns

    def has_subscribers(self, iid: int) -> bool:
        """True when some subscription set holds ``iid`` (no allocation: called per record)."""
        return iid in self._sigs_of_iid

    def signatures_of(self, iid: int) -> frozenset[int]:
        return frozenset(self._sigs_of_iid.get(iid, ()))

    def signatures(self) -> int:
        """Distinct non-empty signatures: the payloads a frame touching every symbol needs."""
        return len(self._members)

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    def connection_ids(self) -> frozenset[int]:
        return frozenset(self._conns)

    # -- invariants (design: Observability, every 30 s) -------------------------------------

    def cardinality(self) -> tuple[int, int]:
        """(Σ per-signature members x connections, Σ per-connection subscription counts).

        Equal when the index is sound (design: "subscription cardinality").
        """
        by_sig = sum(len(self._members[s]) * len(c) for s, c in self._conns_of_sig.items())
        by_conn = sum(len(s) for s in self._subs.values())
        return by_sig, by_conn

    def dangling(self) -> list[tuple[str, int]]:
        """(index, connection) for every index entry naming a connection not in the registry."""
        live = self._conns
        out: list[tuple[str, int]] = []
        out += [("conn->iids", c) for c in self._subs if c not in live]
        out += [("conn->sig", c) for c in self._sig_of if c not in live]
        for sig_conns in self._conns_of_sig.values():
            out += [("sig->conns", c) for c in sig_conns if c not in live]
        out += [("conn->priority", c) for c in self._prio if c not in live]
        for conns in self._prio_conns.values():
            out += [("iid->priority_conns", c) for c in conns if c not in live]
        out += [("conn->rate", c) for c in self._rate if c not in live]
        for groups in self._rated.values():
            for conns in groups.values():
                out += [("rate->conns", c) for c in conns if c not in live]
        for conns in self._fresh.values():
            out += [("rate->fresh", c) for c in conns if c not in live]
        return out

    def sizes(self) -> dict[str, int]:
        """Entries per index, for the soak report and monotape_index_entries{index}: after every
        terminal has left, each must be exactly 0."""
        return {
            "connections": len(self._conns),
            "conn_subscriptions": len(self._subs),
            "conn_signature": len(self._sig_of),
            "signature_conns": len(self._conns_of_sig),
            "signature_members": len(self._members),
            "symbol_signatures": len(self._sigs_of_iid),
            "conn_priority": len(self._prio),
            "symbol_priority_conns": len(self._prio_conns),
            "conn_rate": len(self._rate),
            "rate_groups": sum(len(groups) for groups in self._rated.values()),
        }

    def is_empty(self) -> bool:
        """True when every index is empty (after every connection is removed)."""
        return not (
            self._conns
            or self._subs
            or self._sig_of
            or self._conns_of_sig
            or self._members
            or self._sorted_members
            or self._sigs_of_iid
            or self._prio
            or self._prio_conns
            or self._rate
            or self._rated
            or self._fresh
            or self._paced
        )

    # -- internals --------------------------------------------------------------------------

    def _require(self, conn: int) -> set[int]:
        if conn not in self._conns:
            raise KeyError(f"connection {conn} is not registered (add_connection first)")
        return self._subs[conn]

    @staticmethod
    def _discard(index: dict[int, set[int]], key: int, value: int) -> None:
        s = index.get(key)
        if s is not None:
            s.discard(value)
            if not s:
                del index[key]

    def _regrouped(self, sig: int) -> None:
        """``sig``'s connections or rate groups changed: what is kept of them goes."""
        self._paced.pop(sig, None)
        if self._views:
            self._views.clear()
        self._slow_only = None

    def _join_group(self, conn: int, k: int, sig: int) -> None:
        self._regrouped(sig)
        self._rated.setdefault(k, {}).setdefault(sig, set()).add(conn)
        self._fresh.setdefault(k, set()).add(conn)  # it holds what it had, not what k last sent

    def _leave_group(self, conn: int, k: int, sig: int) -> None:
        self._regrouped(sig)
        self._discard(self._fresh, k, conn)
        groups = self._rated.get(k)
        if groups is None:
            return
        self._discard(groups, sig, conn)
        if not groups:
            del self._rated[k]

    def _unlink_signature(self, conn: int) -> None:
        sig = self._sig_of.pop(conn, None)
        if sig is None:
            return
        self._regrouped(sig)
        k = self._rate.get(conn, 1)
        if k > 1:
            self._leave_group(conn, k, sig)
        conns = self._conns_of_sig.get(sig)
        if conns is not None:
            if conns := conns - {conn}:
                self._conns_of_sig[sig] = conns
                return
            del self._conns_of_sig[sig]
        # Last holder gone: the signature and its iid -> sig links go with it.
        for iid in self._members.pop(sig, ()):
            self._discard(self._sigs_of_iid, iid, sig)
        self._sorted_members.pop(sig, None)

    def _relink_signature(self, conn: int, subs: set[int]) -> None:
        self._unlink_signature(conn)
        if not subs:
            return
        ordered = sorted(subs)
        sig = _signature_of_sorted(ordered)
        members = self._members.get(sig)
        if members is None:
            members = frozenset(ordered)
            self._members[sig] = members
            self._sorted_members[sig] = tuple(ordered)
            for iid in ordered:
                self._sigs_of_iid.setdefault(iid, set()).add(sig)
        elif members != subs:
            # 64-bit collision: ~2e-15 for 260 sets. Sharing the payload would show one desk
            # another desk's symbols, so refuse loudly rather than fan out the wrong bytes.
            raise RuntimeError(f"subscription signature collision on {sig:#x}")
        self._sig_of[conn] = sig
        self._conns_of_sig[sig] = self._conns_of_sig.get(sig, frozenset()) | {conn}
        self._regrouped(sig)
        k = self._rate.get(conn, 1)
        if k > 1:
            self._join_group(conn, k, sig)


def plan_payloads(chunks: Mapping[int, bytes], index: SubscriptionIndex) -> dict[int, list[bytes]]:
    """For one frame: per signature with at least one changed member, its changed members' chunks
    in ascending iid order.

    ``chunks`` maps each iid changed in the frame to its encoded chunk (encoded once, design:
    "built once from per-symbol encoded chunks"). Iterates the dirty side (changed iid -> its
    signatures), so the cost is Σ over changed iids of the signatures holding them: no
    per-connection work, whatever the connection count.
    """
    return group_chunks(chunks, index._sigs_of_iid)
