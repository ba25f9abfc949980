"""One frame's payloads, one per subscription signature, each framed once for every terminal
holding that signature (design: a frame is built once from per-symbol encoded chunks).

``frame_payloads(frame_no, chunks, groups_of)`` takes the frame's encoded chunks (iid -> record
bytes) and, per iid, the signatures holding it (``SubscriptionIndex``'s own sets), and returns
signature -> the RFC 6455 server frame of ``FRAME(frame_no, its chunks in ascending iid)``,
ordered as the walk over ascending iids first meets each signature. The cost is the sum over
changed iids of the signatures holding them: nothing per terminal.

Native (``_payloads.c``) when it was built: at 4,200 terminals the Python planning (a dict of
chunk lists, then a header, a join and a frame per signature) was ~1 ms of every 40 ms frame
here, the writer's largest cost above its send loop (docs/benchmarks.md, "The payloads planned
in C"). ``python_frame_payloads`` is the pure-Python twin with the same results, run when the
extension is missing, for anything the native one does not cover, and by the tests beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

from monotape.platform.wire.framing import ws_binary_frame
from monotape.platform.wire.messages import frame_header

__all__ = ["NATIVE", "FramePayloads", "frame_payloads", "group_chunks", "python_frame_payloads"]

FramePayloads: TypeAlias = Callable[
    [int, Mapping[int, bytes], Mapping[int, "set[int] | frozenset[int]"]], dict[int, bytes]
]


def group_chunks(
    chunks: Mapping[int, bytes], groups_of: Mapping[int, set[int] | frozenset[int]]
) -> dict[int, list[bytes]]:
    """Per signature holding a changed iid, its chunks in ascending iid (the walk both
    ``plan_payloads`` and the twin below make)."""
    grouped: dict[int, list[bytes]] = {}
    for iid in sorted(chunks):
        sigs = groups_of.get(iid)
        if not sigs:
            continue
        chunk = chunks[iid]
        for sig in sigs:
            records = grouped.get(sig)
            if records is None:
                grouped[sig] = [chunk]
            else:
                records.append(chunk)
    return grouped


def python_frame_payloads(
    frame_no: int,
    chunks: Mapping[int, bytes],
    groups_of: Mapping[int, set[int] | frozenset[int]],
    /,
) -> dict[int, bytes]:
    """The pure-Python ``frame_payloads``: same (positional) arguments, same results, same
    exceptions."""
    return {
        sig: ws_binary_frame(frame_header(frame_no, len(records)) + b"".join(records))
        for sig, records in group_chunks(chunks, groups_of).items()
    }


frame_payloads: FramePayloads
try:
    from monotape.platform.core import _payloads
except ImportError:  # built without a C compiler: the pure-Python twin
    frame_payloads = python_frame_payloads
else:
    _payloads.bind(python_frame_payloads)
    frame_payloads = _payloads.frame_payloads

NATIVE: bool = frame_payloads is not python_frame_payloads
