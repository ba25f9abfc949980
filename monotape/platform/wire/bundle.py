"""Several tick batches in one bus message: a feed process's whole wake-up in one send.

A feed process wakes about once a millisecond with a batch due for each of its venues; sent one
message a batch, that was 12,000 Unix-socket receives a second for the sequencer at 120k ticks/s,
most of its cost per tick (docs/benchmarks.md, "Ingest per role with ticks as columns"). A bundle
carries them in one message (docs/batches.md, "Bundles", gives the layout):

    magic "MTK" | version u8 | count u16 | reserved u16   (8 bytes)
    count x u32: each batch's length in bytes, then zero padding to a multiple of 8
    the batches, back to back, each padded with zeros to a multiple of 8

The framing is the point. Each batch is cut out by the length the bundle says, never by the
count its own header says, and is then read as a batch on its own (``read_batch``): a batch whose
header miscounts its ticks disagrees with its length and is refused whole, by reason, while the
batches around it are read as usual. A bundle whose length table disagrees with the message
(torn, padded, a length past the end) is refused whole. A message that is a single batch (magic
"MTB") is still a message of its own: a bundle of one is never built.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from monotape.platform.wire.batch import (
    HEADER,
    MAGIC,
    BatchError,
    BatchRefusal,
    TickBatch,
    read_batch,
)

__all__ = ["BUNDLE", "BUNDLE_MAGIC", "BUNDLE_VERSION", "bundles", "is_bundle", "read_bundle"]

BUNDLE_MAGIC = b"MTK"
BUNDLE_VERSION = 1
BUNDLE = struct.Struct("<3sBHH")  # magic, version, count, reserved: 8 bytes
MAX_BATCHES = 0xFFFF
_LENGTH = struct.Struct("<I")


def _pad(n: int) -> int:
    return -n % 8


def _overhead(count: int) -> int:
    """Bytes of a bundle of ``count`` batches that are not the batches' own (padding aside)."""
    table = 4 * count
    return BUNDLE.size + table + _pad(table)


def pack(batches: Sequence[TickBatch]) -> bytes:
    """One bundle of ``batches`` (at least two), in order."""
    if not 2 <= len(batches) <= MAX_BATCHES:
        raise ValueError(f"a bundle holds 2..{MAX_BATCHES} batches, got {len(batches)}")
    lengths = [len(b.buffer) for b in batches]
    parts = [BUNDLE.pack(BUNDLE_MAGIC, BUNDLE_VERSION, len(batches), 0)]
    parts += [_LENGTH.pack(n) for n in lengths]
    parts.append(bytes(_pad(4 * len(batches))))
    for batch, n in zip(batches, lengths, strict=True):
        parts.append(bytes(batch.buffer))
        parts.append(bytes(_pad(n)))
    return b"".join(parts)


def bundles(batches: Sequence[TickBatch], max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """``batches`` as messages of at most ``max_bytes`` each, in order, with the ticks each
    carries: as many batches per message as fit, one bare batch where only one does. Every
    batch must fit a message alone (``wire.batch.split`` cuts the larger ones first)."""
    group: list[TickBatch] = []
    size = 0
    for batch in batches:
        n = len(batch.buffer)
        if n > max_bytes:
            raise ValueError(f"a batch of {n} bytes is larger than a message ({max_bytes})")
        grown = size + n + _pad(n)
        if group and _overhead(len(group) + 1) + grown > max_bytes:
            yield _message(group)
            group, grown = [], n + _pad(n)
        group.append(batch)
        size = grown
    if group:
        yield _message(group)


def _message(group: list[TickBatch]) -> tuple[bytes, int]:
    ticks = sum(b.count for b in group)
    return (bytes(group[0].buffer) if len(group) == 1 else pack(group)), ticks


def is_bundle(data: bytes) -> bool:
    return data[:3] == BUNDLE_MAGIC


def read_bundle(data: bytes) -> list[TickBatch | BatchError]:
    """Each batch of the bundle ``data``, in order, read on its own: a ``TickBatch``, or the
    ``BatchError`` that refused it. Raises ``BatchError`` when the bundle itself does not read
    (short, not a bundle, an unknown version, a length table the message disagrees with)."""
    if len(data) < BUNDLE.size:
        raise BatchError(BatchRefusal.SHORT, f"{len(data)} bytes, a bundle header is {BUNDLE.size}")
    magic, version, count, reserved = BUNDLE.unpack_from(data)
    if magic != BUNDLE_MAGIC:
        raise BatchError(BatchRefusal.MAGIC, f"starts {bytes(data[:3])!r}, not {BUNDLE_MAGIC!r}")
    if version != BUNDLE_VERSION:
        raise BatchError(BatchRefusal.VERSION, f"bundle version {version}, this reads 1")
    if reserved != 0 or count < 2:
        raise BatchError(BatchRefusal.HEADER, f"bundle of {count} batches, reserved {reserved}")
    at = _overhead(count)
    if len(data) < at:
        raise BatchError(BatchRefusal.LENGTH, f"{len(data)} bytes, its length table ends at {at}")
    lengths = struct.unpack_from(f"<{count}I", data, BUNDLE.size)
    expected = at + sum(n + _pad(n) for n in lengths)
    if expected != len(data):
        raise BatchError(
            BatchRefusal.LENGTH, f"{len(data)} bytes, its table of {count} batches says {expected}"
        )
    out: list[TickBatch | BatchError] = []
    for n in lengths:
        part = data[at : at + n]
        at += n + _pad(n)
        try:
            out.append(read_batch(part))
        except BatchError as exc:
            out.append(exc)
    return out


assert len(MAGIC) == len(BUNDLE_MAGIC) and HEADER.size % 8 == 0
