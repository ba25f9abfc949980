"""Frame planning: what every terminal gets for one frame, decided once, before any write.

design (Fan-out and backpressure): per frame, each changed symbol that anyone watches is
encoded once; connections with the same subscription signature share one payload, built from
those chunks and WebSocket-framed once (server frames are unmasked, RFC 6455 §5.1, so the same
``bytes`` serve every connection of the signature). ``plan_frame`` is that decision as a pure
function of the frame and the subscription index; the server's writer (server/writer.py) only
writes the planned bytes. Watchlists are heavily shared (4,200 connections collapse to about
260 signatures), so a plan holds about 260 payloads whatever the connection count, and nothing
here runs per connection.

A terminal at max_hz < 25 (rate k = 25 / max_hz, docs/wire.md) is in a rate group (core/fanout.py)
and is left out of those payloads. ``Pacer`` gathers, per k, the records of the symbols changed
since that rate's previous boundary; at a boundary with frame_no % k == 0 each (signature, k)
group gets one payload of its changed members: a symbol changed once goes as the record the
25 Hz terminals got (its base is what the group was sent at the previous boundary), one changed
more than once as a FULL record of its latest version from the snapshot cache (encoded once per
version, shared by every group and rate): never a delta against a version a k terminal skipped.
Terminals new to the group, or sent a snapshot since, get full records of everything they watch
in a payload of their own. Never older than a 25 Hz terminal's at the same boundary: the records
are this frame's latest. What a boundary walks (the groups, their connection sets, the symbols
they watch, the symbols only slower terminals watch) the index keeps between changes
(``SubscriptionIndex.rate_groups``, ``slow_only``), so a boundary costs one lookup per owed
symbol and one pass per group, and a frame between boundaries two set operations. (Measured at
1,000 terminals, one in ten at k = 5: about half the records of a boundary are reused bytes;
the ~350 full records of the symbols changed more than once are most of what is left;
docs/benchmarks.md, "max_hz".)

A gap (a connection's ring overflowed, core/outbox.py) ends in a snapshot of everything that
connection holds, joined from the snapshot cache (core/snapshots.py): ``gap_snapshot``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from monotape.platform.core.conflation import Frame
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.snapshots import FailureSink, SnapshotCache, Snapshots
from monotape.platform.wire import codec

__all__ = [
    "NO_IIDS",
    "FramePlan",
    "Pacer",
    "encode_frame",
    "gap_snapshot",
    "plan_chunks",
    "plan_frame",
    "written_iids",
]

NO_IIDS = np.empty(0, dtype=np.int64)
NO_IIDS.setflags(write=False)


@dataclass(slots=True)
class FramePlan:
    """One frame's writes: ``payloads`` holds, per signature with a changed member, the framed
    bytes, the connections that get them and the signature; ``chunks`` the changed, watched
    symbols' encoded records (iid -> chunk). The connection sets are the index's own frozensets
    (``shared_connections``: a change replaces them, so the plan stays a value without a copy
    per signature per frame), or, with rate groups, ``paced_connections``' (kept the same way).
    The 25 Hz payloads come first, then those of the rate groups due at this boundary (keyed by
    (signature, k): one signature may appear once per rate, twice when some of its terminals
    are new to the group: they get full records). ``whole``: every chunk is in some
    25 Hz payload; otherwise ``unsent`` names the chunks that are in none (their symbols are
    watched only by slower terminals, which get them at their own boundary)."""

    frame_no: int
    chunks: dict[int, bytes]
    payloads: list[tuple[bytes, AbstractSet[int], int]]
    whole: bool = True
    unsent: frozenset[int] = frozenset()  # chunks in no 25 Hz payload (only slower terminals)


class _Window:
    """What rate k's terminals have not been sent since its previous boundary: per symbol the
    record of its last change (``last``), the symbols whose record cannot go as it is
    (``again``: changed more than once, so the record's base is a version they skipped), and
    those a previous boundary owed a full record the snapshots did not have (``retry``)."""

    __slots__ = ("again", "last", "retry")

    def __init__(self) -> None:
        self.last: dict[int, bytes] = {}
        self.again: set[int] = set()
        self.retry: set[int] = set()


class Pacer:
    """Per rate k > 1, what changed since that rate's previous boundary: the state that lets a
    k terminal get everything it skipped, and only that, at its next boundary.

    What the boundary sends a group's terminals for each changed member it watches:
    - changed once since the rate's previous boundary: the very record the 25 Hz terminals got
      for that change (a delta whose base is what the rate's terminals were sent at the previous
      boundary, or a full record), reused as bytes: nothing encoded;
    - changed more than once: a full record of the latest version (the cache's chunk, encoded
      once per version and shared by every group and rate). Never a delta against a version
      the k terminal skipped;
    - to a terminal that joined the group or was sent a snapshot since the previous boundary
      (``SubscriptionIndex.take_fresh``): full records of everything it watches. It may hold
      something newer than the rest of the group (a snapshot, the 25 Hz frames it had), or
      older (a slower rate's last boundary), so no delta can name its base; a record of the
      version it holds is dropped by its guard as a duplicate, never one older.

    The rest of a group (it got the previous boundary and nothing since) holds exactly what the
    previous boundary sent it, the base of every record of a symbol that changed once: proved
    by the property tests in tests/core/test_planner_rates.py.

    That needs full records of exactly what the last frame published: ``SnapshotCache``. The
    frame ring's shared table (a writer process's ``Snapshots``) may be newer than the frame
    being planned, and a terminal sent a record from it may hold a version that no later
    frame's delta names as its base: with any other source every record is a full one.

    A symbol that could not encode in some frame (``encode_frame``) is in no window: its next
    record names a base the group does not hold, and its k terminals see the gap its 25 Hz
    terminals see, and resubscribe. A rate starts gathering at the first frame planned while
    some connection has it; one that no connection has any more is forgotten.

    A full record the snapshots do not have at a boundary (the ring's table holds only a
    symbol's last two records, both newer than a writer process two frames behind) cannot be
    replaced by the symbol's delta, whose base the group may not hold: the symbol stays owed,
    is asked for again at the rate's next boundary, and each such miss counts in ``retried``.
    Dropping it would leave its k terminals on a stale price with no gap to resubscribe on."""

    __slots__ = ("_reuse", "_windows", "retried", "snapshots")

    def __init__(self, snapshots: Snapshots) -> None:
        self.snapshots = snapshots
        self._windows: dict[int, _Window] = {}  # k -> what changed since its last boundary
        self._reuse = isinstance(snapshots, SnapshotCache)  # exact: see above
        self.retried = 0  # owed full records the snapshots lacked, put off to the next boundary

    def due(
        self, frame_no: int, chunks: Mapping[int, bytes], index: SubscriptionIndex
    ) -> list[tuple[bytes, AbstractSet[int], int]]:
        """The payloads of the rate groups whose boundary ``frame_no`` is (none between them);
        ``chunks``: this frame's records of the symbols it changed (iid -> record)."""
        rates = index.rates()
        windows = self._windows
        for k in [k for k in windows if k not in rates]:
            del windows[k]
        if not rates:
            return []
        payloads: list[tuple[bytes, AbstractSet[int], int]] = []
        for k in sorted(rates):
            window = windows.get(k)
            if window is None:
                window = windows[k] = _Window()
            last = window.last
            if chunks:
                # Two set operations in C per frame and rate, whatever the symbol count.
                if self._reuse:
                    window.again |= last.keys() & chunks.keys()
                last.update(chunks)
            if frame_no % k == 0:
                self._boundary(frame_no, k, window, index, payloads)
        return payloads

    def _boundary(
        self,
        frame_no: int,
        k: int,
        window: _Window,
        index: SubscriptionIndex,
        payloads: list[tuple[bytes, AbstractSet[int], int]],
    ) -> None:
        # Per boundary: one set operation for what is owed in full, one lookup per owed symbol,
        # then per group one pass over its members and one payload: nothing per terminal, and
        # the groups' connection sets are the index's own (``rate_groups``), not copies.
        last = window.last
        view = index.rate_groups(k)
        fresh = index.take_fresh(k)
        # The full records the groups' steady terminals get (changed more than once and some
        # group watches it, or owed since an earlier boundary): each looked up once.
        owed = (window.again if self._reuse else last.keys()) & view.watched
        if window.retry:
            owed |= window.retry & view.watched
        chunk = self.snapshots.chunk
        # iterated in C (~350 a boundary at 1,000 terminals, one in ten at k = 5)
        full = dict(zip(owed, map(chunk, owed), strict=True))
        send: Mapping[int, bytes | None] = last
        if full:
            send = dict(last)
            send.update(full)  # a None: the snapshots lacked it; it stays owed (below)
        get = send.get
        for sig, conns, members in view.groups:
            joined = conns & fresh if fresh else None
            steady = set(conns - joined) if joined else conns  # a one-off set, not a group
            if steady and send:
                # the members that changed (or are owed), ascending; a None (not in the
                # snapshots) left out. One pass in C, not a Python loop per member.
                _append(payloads, frame_no, list(filter(None, map(get, members))), steady, sig)
            if joined:
                # Everything it watches in full; a symbol the snapshots lack reaches it with
                # the group's next record of that symbol (it is steady from now on).
                found = list(filter(None, map(chunk, members)))
                _append(payloads, frame_no, found, set(joined), sig)
        last.clear()
        window.again.clear()
        # Kept, not dropped: the next boundary asks the snapshots again (see the class doc).
        if None in full.values():
            missed = {iid for iid, record in full.items() if record is None}
            window.retry = missed
            self.retried += len(missed)
        elif window.retry:
            window.retry = set()


def _append(
    payloads: list[tuple[bytes, AbstractSet[int], int]],
    frame_no: int,
    records: list[bytes],
    conns: AbstractSet[int],
    sig: int,
) -> None:
    """One FRAME of ``records`` (a symbol with no state, or one that cannot encode, already
    left out: the cache reports its own failures) for ``conns``, if it carries any."""
    if records:
        header = codec.frame_header(frame_no, len(records))
        payloads.append((codec.ws_binary_frame(header + b"".join(records)), conns, sig))


def plan_frame(
    frame: Frame,
    index: SubscriptionIndex,
    failures: FailureSink | None = None,
    pacer: Pacer | None = None,
) -> FramePlan:
    """Encode each changed symbol that anyone watches once (``encode_frame``), then plan the
    payloads from those chunks (``plan_chunks``)."""
    return plan_chunks(frame.frame_no, encode_frame(frame, index, failures), index, pacer)


def encode_frame(
    frame: Frame, index: SubscriptionIndex, failures: FailureSink | None = None
) -> dict[int, bytes]:
    """The frame's changed symbols that anyone watches, each encoded once (iid -> delta record).

    A symbol that cannot encode is left out and reported to ``failures`` (stage ``encode``): its
    terminals see a gap in that symbol's chain on the next frame and resubscribe; everything else
    in the frame goes out."""
    encode = codec.encode_delta_record
    subscribed = index.has_subscribers
    encoded = frame.encoded
    if encoded is not None and not encoded[2]:
        # the sequencer encoded every record from its state arrays (encode_rows): keep those
        # anyone watches
        return {iid: chunk for iid, chunk in encoded[0].items() if subscribed(iid)}
    # Encoded once per changed symbol that anyone watches; nobody pays for the others.
    try:
        return {rec.iid: encode(rec.base, rec.new) for rec in frame.records if subscribed(rec.iid)}
    except ValueError:  # a symbol that cannot encode: contained to that symbol
        return _encode_each(frame, index, failures)


def plan_chunks(
    frame_no: int,
    chunks: dict[int, bytes],
    index: SubscriptionIndex,
    pacer: Pacer | None = None,
) -> FramePlan:
    """One payload per signature from a frame's encoded ``chunks`` (iid -> delta record of a
    symbol someone watches: ``written_iids`` counts every chunk as written); with a ``pacer``,
    the payloads of the rate groups due at this boundary after them (a rate group's full record
    comes from the snapshot cache, which reports its own failures). A writer process plans from
    the chunks the sequencer encoded and published in the frame ring, keeping those its
    terminals watch."""
    # Without rate groups the index's own frozenset (replaced, never edited, on a change): no
    # copy per signature per frame, and the writer knows it unchanged by identity.
    paced = bool(index.rates())
    connections = index.paced_connections if paced else index.shared_connections
    payloads: list[tuple[bytes, AbstractSet[int], int]] = []
    for sig, payload in index.frame_payloads(frame_no, chunks).items():
        conns = connections(sig)
        if conns:  # else held only by slower terminals: their k-boundary serves it
            payloads.append((payload, conns, sig))
    # The chunks in no 25 Hz payload: one set operation against what the index keeps of the
    # symbols only slower terminals watch (measured before: 36 µs a frame walking the
    # left-out signatures at 1,000 terminals, one in ten paced).
    unsent = frozenset(chunks.keys() & index.slow_only()) if paced else frozenset()
    if pacer is not None:
        payloads += pacer.due(frame_no, chunks, index)
    return FramePlan(frame_no, chunks, payloads, whole=not unsent, unsent=unsent)


def _encode_each(
    frame: Frame, index: SubscriptionIndex, failures: FailureSink | None
) -> dict[int, bytes]:
    """The frame's chunks symbol by symbol; one that raises is left out and counted."""
    chunks: dict[int, bytes] = {}
    subscribed = index.has_subscribers
    for rec in frame.records:
        if subscribed(rec.iid):
            try:
                chunks[rec.iid] = codec.encode_delta_record(rec.base, rec.new)
            except ValueError as exc:
                if failures is not None:
                    failures.record("encode", exc, iid=rec.iid)
    return chunks


def written_iids(
    plan: FramePlan, written_sigs: Sequence[int], index: SubscriptionIndex
) -> np.ndarray:
    """The instruments of the payloads (signatures) that reached at least one terminal: the
    ticks that get a tick_to_write value (core/stamps.py)."""
    if not written_sigs:
        return NO_IIDS
    chunks = plan.chunks
    if len(written_sigs) == len(plan.payloads):
        # The common case, at no per-signature cost: every encoded chunk is in some payload
        # (only symbols with subscribers are encoded) but the ``unsent`` few, and every payload
        # went out.
        if plan.whole:
            return np.fromiter(chunks, dtype=np.int64, count=len(chunks))
        sent = chunks.keys() - plan.unsent  # one set operation, not a loop per chunk
        return np.fromiter(sent, dtype=np.int64, count=len(sent))
    members = index.members
    watched: set[int] = set()
    for sig in written_sigs:
        watched.update(members(sig))
    iids = watched.intersection(chunks)
    return np.fromiter(iids, dtype=np.int64, count=len(iids))


def gap_snapshot(
    snapshots: Snapshots, index: SubscriptionIndex, frame_no: int, conn_id: int
) -> bytes:
    """What ends ``conn_id``'s gap: a snapshot of everything it subscribes to, at the versions
    the last frame (``frame_no``) showed. A slower terminal's next boundary then sends it full
    records (``SubscriptionIndex.resync``): it may now hold newer than its rate group."""
    index.resync(conn_id)
    return snapshots.snapshot(frame_no, index.subscriptions(conn_id))
