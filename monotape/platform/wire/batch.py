"""The columnar tick batch: one buffer per batch, fixed-width columns read in place.

What a feed handler hands the sequencer, by reference in one process and as these same bytes on
the Unix-socket bus and on NATS (docs/wire.md, "Tick batches", gives the layout and the test
vectors). A batch is one handler's ticks of one venue at one epoch; ``TickBatch`` views the
columns without copying them (``numpy.frombuffer``), so no Python object per tick is built
between the venue's wire and the frame (issue 35: a tick was rebuilt ~6 times on the host).

``read_batch`` refuses a buffer whole, with a ``BatchRefusal`` reason, when it is not a batch of
this format: an unknown version, a short or torn buffer, a count its length disagrees with.
Per-tick range checks are the gate's (``validate.TickGate.gate_batch``), in bulk.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from monotape.platform.model import Tick

__all__ = [
    "COLUMNS",
    "FORMAT_VERSION",
    "HAS_UPDATE_ID",
    "HEADER",
    "MAGIC",
    "ROW_BYTES",
    "BatchError",
    "BatchRefusal",
    "TickBatch",
    "batch_from_ticks",
    "batch_of",
    "column_bytes",
    "column_ends",
    "concat",
    "pack_header",
    "read_batch",
    "restamp",
    "split",
    "take",
]

MAGIC = b"MTB"
FORMAT_VERSION = 1
# magic(3) version(u8) header_len(u16) flags(u16) count(u32) reserved(u32) epoch(u64)
# batch_seq(u64) venue(16 bytes ASCII, NUL-padded) handler(8 bytes ASCII, NUL-padded)
# reserved(u64): 64 bytes, so every 8-byte column starts 8-aligned.
HEADER = struct.Struct("<3sBHHIIQQ16s8sQ")
assert HEADER.size == 64
VENUE_BYTES = 16
HANDLER_BYTES = 8
HAS_UPDATE_ID = 0x01  # flags bit 0: the venue numbered this update (update_id is its id)
KNOWN_FLAGS = HAS_UPDATE_ID

# (name, dtype), in buffer order: the 8-byte columns first, then iid (u16), then flags (u8).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "<u8"),  # the version's seq: the venue's update id, else its timestamp
    ("update_id", "<u8"),  # the venue's own update id (0 without HAS_UPDATE_ID)
    ("bid", "<i8"),  # prices scaled by the instrument's price_decimals
    ("ask", "<i8"),
    ("last", "<i8"),
    ("size", "<u8"),
    ("venue_ts", "<i8"),  # the venue's wall clock, ns since 1970
    ("recv_ts", "<i8"),  # the handler's monotonic clock when it decoded the tick (decoded_ns)
    ("iid", "<u2"),  # the instrument's wire id
    ("flags", "u1"),
)
ROW_BYTES = sum(np.dtype(d).itemsize for _, d in COLUMNS)  # 67

I64 = npt.NDArray[np.int64]


class BatchRefusal(enum.StrEnum):
    """Why a buffer was refused whole: ``monotape_batches_refused_total{reason}``."""

    SHORT = "short"  # shorter than a header
    MAGIC = "not_a_batch"
    VERSION = "unknown_version"
    HEADER = "bad_header"  # a header length or flag this version does not define
    LENGTH = "length_mismatch"  # the columns disagree with the count (torn or padded)


class BatchError(ValueError):
    """A buffer that is not a tick batch of this format; ``reason`` says which way."""

    def __init__(self, reason: BatchRefusal, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


_ScalarT = TypeVar("_ScalarT", bound=np.generic)


class _Column(Generic[_ScalarT]):
    """A column of a ``TickBatch``, viewed over its buffer the first time it is read: a batch
    that crosses a hop reading four of its ten columns builds four views (a ``frombuffer`` is
    ~0.5 us, and a handler drains a batch per venue every millisecond)."""

    __slots__ = ("before", "dtype", "index")

    def __init__(self, index: int) -> None:
        self.index = index
        self.dtype = np.dtype(COLUMNS[index][1])
        self.before = sum(np.dtype(d).itemsize for _, d in COLUMNS[:index])

    def __get__(self, batch: TickBatch, owner: type | None = None) -> npt.NDArray[_ScalarT]:
        views = batch._views
        view = views[self.index]
        if view is None:
            n = batch.count
            view = views[self.index] = np.frombuffer(
                batch.buffer, self.dtype, n, HEADER.size + self.before * n
            )
        return view


class TickBatch:
    """One handler's ticks of one venue at one epoch, as columns over ``buffer``.

    The columns (as ``COLUMNS`` names them) are read-only views into ``buffer``, made when first
    read; ``buffer`` is what the bus carries."""

    __slots__ = ("_views", "batch_seq", "buffer", "count", "epoch", "handler", "venue")

    seq = _Column[np.uint64](0)
    update_id = _Column[np.uint64](1)
    bid = _Column[np.int64](2)
    ask = _Column[np.int64](3)
    last = _Column[np.int64](4)
    size = _Column[np.uint64](5)
    venue_ts = _Column[np.int64](6)
    recv_ts = _Column[np.int64](7)
    iid = _Column[np.uint16](8)
    flags = _Column[np.uint8](9)

    def __init__(
        self, buffer: bytes, venue: str, handler: str, epoch: int, batch_seq: int, n: int
    ) -> None:
        self.buffer = buffer
        self.venue = venue
        self.handler = handler
        self.epoch = epoch
        self.batch_seq = batch_seq
        self.count = n
        self._views: list[np.ndarray[Any, Any] | None] = [None] * len(COLUMNS)

    def __repr__(self) -> str:
        return (
            f"TickBatch(venue={self.venue!r}, handler={self.handler!r}, epoch={self.epoch}, "
            f"batch_seq={self.batch_seq}, ticks={self.count})"
        )

    def ticks(self, index: npt.ArrayLike | None = None) -> list[Tick]:
        """The batch's ticks (or those at ``index``) as ``Tick`` objects: for the few places
        that want objects (a priority record, a test's reference model), never the hot path."""
        cols: list[npt.NDArray[Any]] = [self.iid, self.seq, self.venue_ts, self.bid, self.ask,
                                         self.last, self.size, self.recv_ts]  # fmt: skip
        if index is not None:
            at = np.asarray(index, dtype=np.int64)
            cols = [c[at] for c in cols]
        lists = [c.tolist() for c in cols]
        venue, epoch, handler = self.venue, self.epoch, self.handler
        return [
            Tick(iid, venue, epoch, seq, ts, bid, ask, last, size, handler, recv)
            for iid, seq, ts, bid, ask, last, size, recv in zip(*lists, strict=True)
        ]


def _encode_name(text: str, width: int, what: str) -> bytes:
    raw = text.encode("ascii")
    if len(raw) > width:
        raise ValueError(f"a batch's {what} is at most {width} ASCII bytes, got {text!r}")
    return raw


def pack_header(count: int, epoch: int, batch_seq: int, venue: str, handler: str) -> bytes:
    """A batch's 64-byte header. Raises ``ValueError`` on a name longer than its field."""
    return HEADER.pack(
        MAGIC, FORMAT_VERSION, HEADER.size, 0, count, 0, epoch, batch_seq,
        _encode_name(venue, VENUE_BYTES, "venue"), _encode_name(handler, HANDLER_BYTES, "handler"),
        0,
    )  # fmt: skip


def batch_of(
    venue: str,
    handler: str,
    epoch: int,
    batch_seq: int,
    columns: Mapping[str, npt.ArrayLike],
) -> TickBatch:
    """Build a batch (and its buffer) from column arrays named as ``COLUMNS``; every column
    must have the same length. Raises ``ValueError`` on a header value out of its range."""
    if not 0 <= epoch < 1 << 64 or not 0 <= batch_seq < 1 << 64:
        raise ValueError(f"epoch and batch_seq are uint64, got {epoch}, {batch_seq}")
    arrays = [np.ascontiguousarray(columns[name], dtype=dtype) for name, dtype in COLUMNS]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("every column of a batch has the same length")
    head = pack_header(n, epoch, batch_seq, venue, handler)
    buffer = b"".join([head, *(a.tobytes() for a in arrays)])
    return TickBatch(buffer, venue, handler, epoch, batch_seq, n)


_OFFSETS: dict[str, tuple[int, int]] = {}  # column -> (bytes before it per tick, itemsize)
_before = 0
for _name, _dtype in COLUMNS:
    _OFFSETS[_name] = (_before, np.dtype(_dtype).itemsize)
    _before += np.dtype(_dtype).itemsize
_DTYPES = dict(COLUMNS)
del _before, _name, _dtype


_ENDS = {"<i8": struct.Struct("<q"), "<u8": struct.Struct("<Q")}


def column_bytes(batch: TickBatch, name: str) -> bytes:
    """Column ``name`` of ``batch`` as bytes, sliced off its buffer (no view built)."""
    before, width = _OFFSETS[name]
    start = HEADER.size + before * batch.count
    return bytes(batch.buffer[start : start + width * batch.count])


def column_ends(batch: TickBatch, name: str) -> tuple[int, int]:
    """The first and the last value of the 8-byte column ``name`` (``batch`` not empty)."""
    before, _ = _OFFSETS[name]
    n = batch.count
    if not n:
        raise ValueError("an empty batch has no first or last value")
    unpack = _ENDS[_DTYPES[name]].unpack_from
    start = HEADER.size + before * n
    return unpack(batch.buffer, start)[0], unpack(batch.buffer, start + 8 * (n - 1))[0]


def restamp(
    batch: TickBatch, handler: str, epoch: int, batch_seq: int, recv_ts: int, seq_from: str | None
) -> TickBatch:
    """``batch`` as a handler delivers it: its bytes with a new header (``handler``, ``epoch``,
    ``batch_seq``), every ``recv_ts`` set to ``recv_ts``, and ``seq`` copied from the column
    ``seq_from`` (None: kept). One copy of the buffer and three in-place writes: the feed
    handler's common case costs no column rebuilt (issue 35)."""
    n = batch.count
    out = bytearray(batch.buffer)
    out[: HEADER.size] = pack_header(n, epoch, batch_seq, batch.venue, handler)
    at, _ = _OFFSETS["recv_ts"]
    np.frombuffer(out, np.int64, n, HEADER.size + at * n).fill(recv_ts)
    if seq_from is not None and seq_from != "seq":
        src, width = _OFFSETS[seq_from]
        dst, _ = _OFFSETS["seq"]
        if width != 8:
            raise ValueError(f"seq is 8 bytes wide; {seq_from} is not")
        start = HEADER.size + src * n
        out[HEADER.size + dst * n : HEADER.size + (dst + 8) * n] = out[start : start + 8 * n]
    return TickBatch(bytes(out), batch.venue, handler, epoch, batch_seq, n)


def read_batch(buffer: bytes) -> TickBatch:
    """The batch in ``buffer``, read in place; ``BatchError`` (with its reason) when the buffer
    is not one: refused whole, never half-read."""
    if len(buffer) < HEADER.size:
        raise BatchError(BatchRefusal.SHORT, f"{len(buffer)} bytes, a header is {HEADER.size}")
    magic, version, header_len, flags, n, _, epoch, batch_seq, venue, handler, _ = (
        HEADER.unpack_from(buffer)
    )
    if magic != MAGIC:
        raise BatchError(BatchRefusal.MAGIC, f"starts {bytes(buffer[:3])!r}, not {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise BatchError(BatchRefusal.VERSION, f"version {version}, this reads {FORMAT_VERSION}")
    if header_len != HEADER.size or flags != 0:
        raise BatchError(BatchRefusal.HEADER, f"header_len {header_len}, flags {flags:#x}")
    if len(buffer) != HEADER.size + n * ROW_BYTES:
        raise BatchError(
            BatchRefusal.LENGTH,
            f"{len(buffer)} bytes for {n} ticks (want {HEADER.size + n * ROW_BYTES})",
        )
    names = _NAMES.get((venue, handler))
    if names is None:
        try:
            names = (venue.rstrip(b"\0").decode("ascii"), handler.rstrip(b"\0").decode("ascii"))
        except UnicodeDecodeError as exc:
            raise BatchError(BatchRefusal.HEADER, "venue or handler is not ASCII") from exc
        if len(_NAMES) < _NAMES_KEPT:
            _NAMES[venue, handler] = names
    return TickBatch(bytes(buffer), names[0], names[1], epoch, batch_seq, n)


# The (venue, handler) names of headers read so far: a bus carries a dozen pairs, each read
# ~1,000 times a second. Bounded: a stream of garbage names is decoded each time, not kept.
_NAMES: dict[tuple[bytes, bytes], tuple[str, str]] = {}
_NAMES_KEPT = 1024


def batch_from_ticks(ticks: Sequence[Tick], batch_seq: int = 0) -> list[TickBatch]:
    """``ticks`` as batches, one per stretch of equal (venue, handler, epoch), in order: how a
    caller with ``Tick`` objects (a replay, a test) enters the batch path. Raises
    ``ValueError``/``OverflowError`` on a value no column can hold (the replay's own gate
    refuses those first)."""
    out: list[TickBatch] = []
    start = 0
    n = len(ticks)
    while start < n:
        first = ticks[start]
        end = start + 1
        while end < n:
            t = ticks[end]
            if t.venue != first.venue or t.handler != first.handler or t.epoch != first.epoch:
                break
            end += 1
        run = ticks[start:end]
        out.append(
            batch_of(
                first.venue,
                first.handler,
                first.epoch,
                batch_seq + len(out),
                {
                    "seq": [t.seq for t in run],
                    "update_id": np.zeros(len(run), dtype=np.uint64),
                    "bid": [t.bid for t in run],
                    "ask": [t.ask for t in run],
                    "last": [t.last for t in run],
                    "size": [t.size for t in run],
                    "venue_ts": [t.venue_ts_ns for t in run],
                    "recv_ts": [t.decoded_ns for t in run],
                    "iid": [t.iid for t in run],
                    "flags": np.zeros(len(run), dtype=np.uint8),
                },
            )
        )
        start = end
    return out


def _header(batch: TickBatch, header: Mapping[str, int | str]) -> tuple[str, str, int, int]:
    """``batch``'s header, with what ``header`` names (``epoch=``, ``batch_seq=``...) instead."""
    fields: dict[str, int | str] = {
        "venue": batch.venue,
        "handler": batch.handler,
        "epoch": batch.epoch,
        "batch_seq": batch.batch_seq,
    }
    fields.update(header)
    venue, handler = str(fields["venue"]), str(fields["handler"])
    return venue, handler, int(fields["epoch"]), int(fields["batch_seq"])


def take(batch: TickBatch, index: npt.ArrayLike, **header: int | str) -> TickBatch:
    """The ticks of ``batch`` at ``index`` (positions or a mask) as a batch of their own, with
    the header of ``batch`` unless ``header`` says otherwise (``epoch=``, ``batch_seq=``...)."""
    at = np.asarray(index)
    columns = {name: getattr(batch, name)[at] for name, _ in COLUMNS}
    return batch_of(*_header(batch, header), columns)


def concat(batches: Sequence[TickBatch], **header: int | str) -> TickBatch:
    """Several batches of one venue as one (in order), with the first one's header unless
    ``header`` says otherwise."""
    if len(batches) == 1 and not header:
        return batches[0]
    columns = {name: np.concatenate([getattr(b, name) for b in batches]) for name, _ in COLUMNS}
    return batch_of(*_header(batches[0], header), columns)


def split(batch: TickBatch, max_bytes: int) -> list[TickBatch]:
    """``batch`` as batches whose buffers are at most ``max_bytes`` each, in order (the common
    case: itself). Raises ``ValueError`` when not even one tick fits."""
    if len(batch.buffer) <= max_bytes:
        return [batch]
    rows = (max_bytes - HEADER.size) // ROW_BYTES
    if rows < 1:
        raise ValueError(f"{max_bytes} bytes hold no tick of a batch ({HEADER.size + ROW_BYTES})")
    return [
        take(batch, np.arange(start, min(start + rows, batch.count)), batch_seq=batch.batch_seq + k)
        for k, start in enumerate(range(0, batch.count, rows))
    ]
