"""Snapshots: one pre-encoded full record per symbol, reused until the symbol's version moves.

design (Fan-out and backpressure): hydrating a (re)subscription, or ending a connection's gap,
joins cached chunks; it encodes nothing per connection. A chunk stays valid while the published
tick is the same object: a symbol's published tick is replaced only by an admitted tick, whose
version is strictly higher (core/admit.py), so the identity check is a version check that costs
one pointer compare.

Pure: the published state comes in as a function (``Sequencer.published``), a symbol that cannot
encode is reported to an injected ``FailureSink`` and left out of the snapshot (not the snapshot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from monotape.platform.model import Tick
from monotape.platform.wire import codec

__all__ = ["FailureSink", "SnapshotCache", "Snapshots"]


class FailureSink(Protocol):
    """Where a stage's contained failures are counted (the node's ``StageFailures``)."""

    def record(self, stage: str, exc: BaseException, **context: Any) -> None: ...


class Snapshots(Protocol):
    """Where hydration and gap snapshots get their pre-encoded full records: ``SnapshotCache``
    in the process that holds the sequencer, the frame ring's shared table in a writer process
    (host/ring_feed.py ``RingSnapshots``). Either way a snapshot joins bytes encoded once per
    symbol version; nothing is encoded per connection."""

    def chunk(self, iid: int) -> bytes | None: ...

    def snapshot(self, frame_no: int, iids: Iterable[int]) -> bytes: ...


class SnapshotCache:
    """One pre-encoded full record per symbol, valid while the published tick is the same object."""

    def __init__(self, published: Callable[[int], Tick | None]) -> None:
        self._published = published
        self._chunks: dict[int, tuple[Tick, bytes]] = {}
        self.encodes = 0
        self.failures: FailureSink | None = None  # the node's: a symbol that cannot encode

    def chunk(self, iid: int) -> bytes | None:
        published = self._published(iid)
        if published is None:
            return None
        cached = self._chunks.get(iid)
        if cached is not None and cached[0] is published:
            return cached[1]
        try:
            chunk = codec.encode_full_record(published)
        except ValueError as exc:  # one symbol left out of the snapshot, not the snapshot
            if self.failures is not None:
                self.failures.record("snapshot", exc, iid=iid)
            return None
        self._chunks[iid] = (published, chunk)
        self.encodes += 1
        return chunk

    def snapshot(self, frame_no: int, iids: Iterable[int]) -> bytes:
        """A WebSocket-framed SNAPSHOT of ``iids`` (ascending, symbols with no state left out)."""
        chunks = [c for c in (self.chunk(i) for i in sorted(iids)) if c is not None]
        return codec.ws_binary_frame(
            codec.snapshot_header(frame_no, len(chunks)) + b"".join(chunks)
        )
