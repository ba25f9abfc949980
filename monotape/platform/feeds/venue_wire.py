"""What a venue sends its handlers: each venue's updates of one step, as one columnar batch.

The multi-process host runs the simulated venues in a process of their own that sends each
venue's stream to both of its handlers, as a real venue's multicast feed does (issue 12): the
same bytes to both, so both hear the same updates with the same venue timestamps and update ids,
and derive the same versions. The bytes are a tick batch (``wire/batch.py``: epoch 0, no
handler, ``seq`` = ``update_id`` where the venue numbers its updates, flag ``HAS_UPDATE_ID``), so
a handler reads the venue's columns in place and never builds an object per update (issue 35).
``per_venue`` splits a simulator step the way the one-process pump does; ``venue_batch`` turns
one venue's updates into columns. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.wire.batch import HAS_UPDATE_ID, TickBatch, batch_of

__all__ = ["per_venue", "venue_batch"]


def per_venue(updates: Sequence[VenueUpdate]) -> dict[str, list[VenueUpdate]]:
    """One step's updates by venue, each venue's in step order (a venue's own stream order)."""
    out: dict[str, list[VenueUpdate]] = {}
    for u in updates:
        batch = out.get(u.venue)
        if batch is None:
            out[u.venue] = [u]
        else:
            batch.append(u)
    return out


def venue_batch(venue: str, updates: Sequence[VenueUpdate], batch_seq: int = 0) -> TickBatch:
    """One venue's updates as its columns. Raises ``OverflowError``/``TypeError`` on a value
    a column cannot hold (the caller's door refuses such updates one by one)."""
    ids = [u.update_id for u in updates]
    has_id = np.array([i is not None for i in ids], dtype=np.bool_)
    update_id = np.array([i or 0 for i in ids], dtype=np.uint64)
    return batch_of(
        venue,
        "",
        0,
        batch_seq,
        {
            "seq": update_id,
            "update_id": update_id,
            "bid": np.array([u.bid for u in updates], dtype=np.int64),
            "ask": np.array([u.ask for u in updates], dtype=np.int64),
            "last": np.array([u.last for u in updates], dtype=np.int64),
            "size": np.array([u.size for u in updates], dtype=np.uint64),
            "venue_ts": np.array([u.venue_ts_ns for u in updates], dtype=np.int64),
            "recv_ts": np.zeros(len(updates), dtype=np.int64),
            "iid": np.array([u.iid for u in updates], dtype=np.uint16),
            "flags": np.where(has_id, HAS_UPDATE_ID, 0).astype(np.uint8),
        },
    )
