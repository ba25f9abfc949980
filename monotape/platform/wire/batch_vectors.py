"""Test vectors for the columnar tick batch and the bundle of batches (docs/batches.md).

The bytes are packed here with ``struct`` from the inputs, column by column as the layout says,
not by ``batch.batch_of``: a vector checks the codec, it is not made by it. Bad cases name the
reason ``read_batch`` must refuse them with.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["bad_batch_cases", "batch_cases", "bundle_cases"]

_HEAD = struct.Struct("<3sBHHIIQQ16s8sQ")
_COLUMNS = (
    ("seq", "Q"), ("update_id", "Q"), ("bid", "q"), ("ask", "q"), ("last", "q"), ("size", "Q"),
    ("venue_ts", "q"), ("recv_ts", "q"), ("iid", "H"), ("flags", "B"),
)  # fmt: skip


def _pack(header: dict[str, Any], columns: dict[str, list[int]], **over: Any) -> bytes:
    n = len(columns["iid"])
    fields = {"magic": b"MTB", "version": 1, "header_len": 64, "flags": 0, "count": n}
    fields.update(over)
    head = _HEAD.pack(
        fields["magic"], fields["version"], fields["header_len"], fields["flags"],
        fields["count"], 0, header["epoch"], header["batch_seq"],
        header["venue"].encode("ascii"), header["handler"].encode("ascii"), 0,
    )  # fmt: skip
    body = b"".join(struct.pack(f"<{n}{code}", *columns[name]) for name, code in _COLUMNS)
    return head + body


_ONE: dict[str, Any] = {
    "header": {"venue": "XNAS", "handler": "A", "epoch": 3, "batch_seq": 17},
    "columns": {
        "seq": [1001], "update_id": [1001], "bid": [1_234_500], "ask": [1_234_600],
        "last": [1_234_500], "size": [200], "venue_ts": [1_765_000_000_123_456_789],
        "recv_ts": [5_000_000_000], "iid": [42], "flags": [1],
    },
}  # fmt: skip
_THREE: dict[str, Any] = {
    "header": {"venue": "XLON", "handler": "B", "epoch": 0, "batch_seq": 0},
    "columns": {
        "seq": [1_765_000_000_000_000_001, 1_765_000_000_000_000_002, 2**64 - 1],
        "update_id": [0, 0, 0],
        "bid": [-5, 0, 2**63 - 1], "ask": [-3, 1, -(2**63)], "last": [-4, 0, 7],
        "size": [0, 1, 2**64 - 1],
        "venue_ts": [1_765_000_000_000_000_001, 1_765_000_000_000_000_002, 2**63 - 1],
        "recv_ts": [9, 9, 9], "iid": [0, 65_535, 7], "flags": [0, 0, 0],
    },
}  # fmt: skip
_EMPTY: dict[str, Any] = {
    "header": {"venue": "XTKS", "handler": "A", "epoch": 2**64 - 1, "batch_seq": 2**64 - 1},
    "columns": {name: [] for name, _ in _COLUMNS},
}


def batch_cases() -> list[dict[str, Any]]:
    """Good batches: the header and columns, and the bytes as hex."""
    out = []
    for name, case in (("one_tick", _ONE), ("three_ticks_edges", _THREE), ("empty", _EMPTY)):
        data = _pack(case["header"], case["columns"])
        out.append({"name": name, **case, "hex": data.hex()})
    return out


def bad_batch_cases() -> list[dict[str, Any]]:
    """Buffers ``read_batch`` refuses whole, each with its reason."""
    good = _pack(_ONE["header"], _ONE["columns"])
    cases = [
        ("short", good[:40], "short"),
        ("not_a_batch", b"XYZ" + good[3:], "not_a_batch"),
        ("unknown_version", _pack(_ONE["header"], _ONE["columns"], version=2), "unknown_version"),
        ("header_flags", _pack(_ONE["header"], _ONE["columns"], flags=1), "bad_header"),
        ("torn_tail", good[:-1], "length_mismatch"),
        ("padded", good + b"\0", "length_mismatch"),
        ("count_too_big", _pack(_ONE["header"], _ONE["columns"], count=2), "length_mismatch"),
    ]
    return [{"name": n, "hex": d.hex(), "reason": r} for n, d, r in cases]


def _bundle(parts: list[bytes], **over: Any) -> bytes:
    """A bundle as docs/batches.md lays it out: header, lengths, padding, padded batches."""
    count = over.get("count", len(parts))
    lengths = over.get("lengths", [len(p) for p in parts])
    head = struct.pack("<3sBHH", b"MTK", over.get("version", 1), count, 0)
    table = b"".join(struct.pack("<I", n) for n in lengths)
    table += bytes(-len(table) % 8)
    return head + table + b"".join(p + bytes(-len(p) % 8) for p in parts)


def bundle_cases() -> list[dict[str, Any]]:
    """Bundles: each with what ``read_bundle`` makes of its batches, in order (a case name
    of ``batch_cases``, or the reason that batch alone is refused with), or the reason the
    whole bundle is refused."""
    one = _pack(_ONE["header"], _ONE["columns"])
    three = _pack(_THREE["header"], _THREE["columns"])
    empty = _pack(_EMPTY["header"], _EMPTY["columns"])
    miscounted = _pack(_ONE["header"], _ONE["columns"], count=2)
    cases: list[tuple[str, bytes, list[str] | None, str | None]] = [
        ("one_and_three", _bundle([one, three]), ["one_tick", "three_ticks_edges"], None),
        ("with_an_empty_beat", _bundle([empty, one, empty]), ["empty", "one_tick", "empty"], None),
        ("a_miscounted_batch_alone_refused", _bundle([one, miscounted, three]),
         ["one_tick", "length_mismatch", "three_ticks_edges"], None),
        ("torn_tail", _bundle([one, three])[:-9], None, "length_mismatch"),
        ("a_length_past_the_end", _bundle([one, three], lengths=[len(one), len(three) + 8]),
         None, "length_mismatch"),
        ("unknown_version", _bundle([one, three], version=2), None, "unknown_version"),
        ("a_bundle_of_one", _bundle([one]), None, "bad_header"),
        ("short", _bundle([one, three])[:5], None, "short"),
    ]  # fmt: skip
    return [{"name": n, "hex": d.hex(), "batches": b, "refused": r} for n, d, b, r in cases]
