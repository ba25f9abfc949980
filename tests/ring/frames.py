"""Frames for the ring's tests: realistic records from the wire codec, and deterministic frames
any process can rebuild from a frame number (the spawned readers check exact bytes with them)."""

from __future__ import annotations

import random

from monotape.platform.model import Tick
from monotape.platform.ring import Entry, EntryKind
from monotape.platform.wire import codec

__all__ = ["expected_frame", "realistic_records"]


def realistic_records(count: int, seed: int = 0, first_iid: int = 0) -> dict[int, bytes]:
    """``count`` delta records as the encoder builds them (~20 bytes each: venue update ids,
    small price steps), keyed by ascending iid."""
    rng = random.Random(seed)
    out = {}
    for iid in range(first_iid, first_iid + count):
        price = rng.randrange(10_000, 5_000_000)
        seq = rng.randrange(1, 1 << 40)
        base = Tick(iid, "XNAS", 3, seq, 0, price, price + 100, price + 50, 100)
        step = rng.randrange(-500, 500)
        new = Tick(
            iid,
            "XNAS",
            3,
            seq + rng.randrange(1, 50),
            0,
            price + step,
            price + step + 100,
            price + step + 40,
            rng.randrange(1, 10_000),
        )
        out[iid] = codec.encode_delta_record(base, new)
    return out


def expected_frame(frame_no: int, records: int = 40) -> Entry:
    """The frame numbered ``frame_no`` of the multi-process tests: records and priority records
    depend only on the number, so a reader in another process checks every byte."""
    return Entry(
        EntryKind.FRAME,
        frame_no,
        frame_no * 40_000_000,
        frame_no * 40_000_000 + 1_000,
        realistic_records(records, seed=frame_no, first_iid=frame_no % 97),
        realistic_records(frame_no % 3, seed=-frame_no),
    )
