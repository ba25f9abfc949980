"""Frame planning: what every terminal gets for one frame, decided once, before any write.

design (Fan-out and backpressure): per frame, each changed symbol that anyone watches is
encoded once; connections with the same subscription signature share one payload, built from
those chunks and WebSocket-framed once (server frames are unmasked, RFC 6455 §5.1, so the same
``bytes`` serve every connection of the signature). ``plan_frame`` is that decision as a pure
function of the frame and the subscription index; the server's writer (server/writer.py) only
writes the planned bytes. Watchlists are heavily shared (4,200 connections collapse to about
260 signatures), so a plan holds about 260 payloads whatever the connection count, and nothing
here runs per connection.

A gap (a connection's ring overflowed, core/outbox.py) ends in a snapshot of everything that
connection holds, joined from the snapshot cache (core/snapshots.py): ``gap_snapshot``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monotape.platform.core.conflation import Frame
from monotape.platform.core.fanout import SubscriptionIndex, plan_payloads
from monotape.platform.core.snapshots import FailureSink, SnapshotCache
from monotape.platform.wire import codec

__all__ = ["NO_IIDS", "FramePlan", "gap_snapshot", "plan_frame", "written_iids"]

NO_IIDS = np.empty(0, dtype=np.int64)
NO_IIDS.setflags(write=False)


@dataclass(slots=True)
class FramePlan:
    """One frame's writes: ``payloads`` holds, per signature with a changed member, the framed
    bytes, the connections that get them (a copy: a teardown may run while it is written) and
    the signature; ``chunks`` the changed, watched symbols' encoded records (iid -> chunk)."""

    frame_no: int
    chunks: dict[int, bytes]
    payloads: list[tuple[bytes, set[int], int]]


def plan_frame(
    frame: Frame, index: SubscriptionIndex, failures: FailureSink | None = None
) -> FramePlan:
    """Encode each changed symbol that anyone watches once, and one payload per signature.

    A symbol that cannot encode is left out and reported to ``failures`` (stage ``encode``): its
    terminals see a gap in that symbol's chain on the next frame and resubscribe; everything else
    in the frame goes out."""
    encode = codec.encode_delta_record
    subscribed = index.has_subscribers
    # Encoded once per changed symbol that anyone watches; nobody pays for the others.
    try:
        chunks = {
            rec.iid: encode(rec.base, rec.new) for rec in frame.records if subscribed(rec.iid)
        }
    except ValueError:  # a symbol that cannot encode: contained to that symbol
        chunks = _encode_each(frame, index, failures)
    frame_no = frame.frame_no
    connections = index.connections
    payloads = [
        (
            codec.ws_binary_frame(
                codec.frame_header(frame_no, len(sig_chunks)) + b"".join(sig_chunks)
            ),
            connections(sig),
            sig,
        )
        for sig, sig_chunks in plan_payloads(chunks, index).items()
    ]
    return FramePlan(frame_no, chunks, payloads)


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
        # (only symbols with subscribers are encoded), and every payload went out.
        return np.fromiter(chunks, dtype=np.int64, count=len(chunks))
    members = index.members
    watched: set[int] = set()
    for sig in written_sigs:
        watched.update(members(sig))
    iids = watched.intersection(chunks)
    return np.fromiter(iids, dtype=np.int64, count=len(iids))


def gap_snapshot(
    snapshots: SnapshotCache, index: SubscriptionIndex, frame_no: int, conn_id: int
) -> bytes:
    """What ends ``conn_id``'s gap: a snapshot of everything it subscribes to, at the versions
    the last frame (``frame_no``) showed."""
    return snapshots.snapshot(frame_no, index.subscriptions(conn_id))
