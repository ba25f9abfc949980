"""The gate where ticks enter: refuse what the pipeline cannot carry, count it, keep going.

Ticks enter at three doors: the replay loader, the NATS decoder and the feed handlers. A value
that is valid JSON or msgpack but out of the wire's range (a price that overflows int64 once
scaled, an id, epoch, size or timestamp at or above 2**64) used to sail through a loader that
checked types only and raise in the encoder of the first frame with a subscriber, far from its
source (issue 10: the frame loop died and the node exited 1). So every door checks ranges:

| field | admitted range | why |
|---|---|---|
| iid | an instrument of the universe | the wire dictionary names it |
| venue | the instrument's own venue | counters are per venue |
| bid, ask, last | int64 | wire prices are zigzag int64 |
| seq, size | 0 .. 2**64-1 | wire varints are uint64 |
| epoch | 0 .. 2**63-1 | the sequencer holds versions as int64 (an epoch grows by one a restart) |
| venue_ts_ns | 0 .. 2**63-1 | ns since 1970; stage stamps: int64 |
| decoded_ns, admitted_ns | 0 .. 2**63-1 | this host's clock; stamps: int64 |

A refused tick is counted per ``(venue, reason)`` (``monotape_ticks_rejected_total``) and logged
with where it came from (the replay line, the NATS subject, the handler), at most once per
reason every 10 s. Any tick the gate admits encodes as a full record and as a delta against any
admitted tick of the same symbol with a lower version (tests/node/test_poison_ticks.py proves it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from monotape.log import LOG_EVERY_S, LogFn, Throttle, log_event
from monotape.platform.core.fields import in_range_prefix
from monotape.platform.model import Instrument, Tick
from monotape.platform.wire.batch import (
    COLUMNS,
    HEADER,
    ROW_BYTES,
    BatchRefusal,
    TickBatch,
    batch_of,
)

_BATCH_LOG_EVERY_NS = 1_000_000_000  # a refused batch is logged at most once a second

__all__ = [
    "UNKNOWN_VENUE",
    "WIRE_IIDS",
    "BatchProblem",
    "Refusal",
    "TickGate",
    "carried",
    "tick_problem",
]

_U64: int = 1 << 64
_I64_MIN: int = -(1 << 63)
_I64_MAX: int = (1 << 63) - 1


def python_gate_passes(buffer: bytes, n: int, code_of: npt.NDArray[np.uint16], code: int) -> bool:
    """The native ``gate_passes`` (``core/_admit.c``): every tick of the batch in ``buffer``
    is an instrument of venue ``code`` (``code_of``: the venue of each wire id) and both its
    stamps are >= 0."""
    if n < 0 or len(buffer) != HEADER.size + n * ROW_BYTES or code_of.dtype != np.uint16:
        raise ValueError("gate_passes: a buffer disagrees with its length")
    if not code:
        return False
    if not n:
        return True
    base = HEADER.size
    iids = np.frombuffer(buffer, np.uint16, n, base + 64 * n).astype(np.int64)
    inside = iids < len(code_of)
    known = np.where(inside, code_of[np.where(inside, iids, 0)], 0)
    return bool(
        (known == code).all()
        and int(np.frombuffer(buffer, np.int64, n, base + 48 * n).min()) >= 0
        and int(np.frombuffer(buffer, np.int64, n, base + 56 * n).min()) >= 0
    )


GatePasses = Callable[[bytes, int, npt.NDArray[np.uint16], int], bool]
try:
    from monotape.platform.core import _admit
except ImportError:  # no compiler at install time: the twin runs
    gate_passes: GatePasses = python_gate_passes
    NATIVE_GATE = False
else:
    gate_passes = _admit.gate_passes
    NATIVE_GATE = True
UNKNOWN_VENUE = "unknown"  # the label of a refused tick whose venue is not one of ours
WIRE_IIDS = 1 << 16  # the wire dictionary's ids are uint16


class Refusal(enum.StrEnum):
    """Why a tick was refused: the ``reason`` label of ``monotape_ticks_rejected_total``."""

    UNKNOWN_IID = "unknown_iid"
    WRONG_VENUE = "wrong_venue"
    PRICE = "price_out_of_range"
    EPOCH = "epoch_out_of_range"
    TIMESTAMP = "timestamp_out_of_range"
    SEQ = "seq_out_of_range"
    SIZE = "size_out_of_range"
    MISSING_UPDATE_ID = "missing_update_id"  # a venue that numbers its updates sent one without
    UNDECODABLE = "undecodable"  # not a tick at all (a NATS batch item of the wrong shape)


class BatchProblem(NamedTuple):
    """One per-tick check of ``TickGate.gate_batch``: the refusal and the detail's words."""

    reason: Refusal
    what: str


def carried(
    iid: int, venue: str, signed: int, unsigned: int, venue_of: Sequence[str | None] | None
) -> bool:
    """The per-tick door's fast test (``TickGate.admit``): True when the pipeline
    surely carries the tick. False is not a refusal: ``tick_problem`` judges what fails here.

    ``signed`` is the OR of the fields held in 0 .. 2**63-1 (prices, timestamps, the epoch) and
    ``unsigned`` the OR of the uint64 ones: ``x >> 63`` is 0 iff 0 <= x < 2**63, and an OR is
    out of range iff one of its terms is, so a whole tick costs two shifts (~30 ns per
    comparison on the 2 vCPU box). A negative price (legal,
    rare) fails it and takes the careful path. ``venue_of`` None: no dictionary to hold the
    tick to (a handler without a gate), only the wire's id range."""
    if signed >> 63 or unsigned >> 64:
        return False
    if venue_of is None:
        return 0 <= iid < WIRE_IIDS
    return 0 <= iid < len(venue_of) and venue_of[iid] == venue


# ``carried``'s fields for ``in_range_prefix``: (iid, venue, the signed ones, the unsigned ones)
_CARRIED_FIELDS = (
    Tick.__dict__["iid"],
    Tick.__dict__["venue"],
    tuple(
        Tick.__dict__[name]
        for name in ("bid", "ask", "last", "venue_ts_ns", "decoded_ns", "admitted_ns", "epoch")
    ),
    tuple(Tick.__dict__[name] for name in ("seq", "size")),
)


def tick_problem(tick: Tick, venue_of: Sequence[str | None] | None) -> tuple[Refusal, str] | None:
    """Why the pipeline cannot carry ``tick`` (the reason and a one-line detail naming the field
    and its value), or None when it can. ``venue_of[iid]`` is each instrument's venue (None for
    an iid the dictionary does not have); ``venue_of`` None holds the iid to the wire's id range
    only, and the venue not at all."""
    iid = tick.iid
    if venue_of is None:
        if not 0 <= iid < WIRE_IIDS:
            return Refusal.UNKNOWN_IID, f"iid {iid} is not a wire id (uint16)"
    elif not 0 <= iid < len(venue_of) or not venue_of[iid]:
        return Refusal.UNKNOWN_IID, f"iid {iid} is not in the instrument dictionary"
    elif tick.venue != venue_of[iid]:
        return Refusal.WRONG_VENUE, f"iid {iid} is listed on {venue_of[iid]}, not {tick.venue!r}"
    for name in ("bid", "ask", "last"):
        value = getattr(tick, name)
        if not _I64_MIN <= value <= _I64_MAX:
            return Refusal.PRICE, f"{name} {value} (scaled) is not an int64"
    if not 0 <= tick.epoch <= _I64_MAX:  # the sequencer's held versions are int64 (issue 35)
        return Refusal.EPOCH, f"epoch {tick.epoch} is not in 0 .. 2**63-1"
    for name in ("venue_ts_ns", "decoded_ns", "admitted_ns"):
        value = getattr(tick, name)
        if not 0 <= value <= _I64_MAX:
            return Refusal.TIMESTAMP, f"{name} {value} is not an int64"
    if not 0 <= tick.seq < _U64:
        return Refusal.SEQ, f"seq (update id or venue timestamp) {tick.seq} is not a uint64"
    if not 0 <= tick.size < _U64:
        return Refusal.SIZE, f"size {tick.size} is not a uint64"
    return None


class TickGate:
    """One per node, shared by its doors. ``admit`` filters a batch; ``refuse`` records a tick
    a door refused by itself (a replay line, an undecodable NATS item)."""

    def __init__(
        self,
        universe: Iterable[Instrument],
        now_ns: Callable[[], int],
        *,
        every_s: float = LOG_EVERY_S,
        log: LogFn = log_event,
    ) -> None:
        instruments = list(universe)
        venue_of: list[str | None] = [None] * (max((i.iid for i in instruments), default=-1) + 1)
        for inst in instruments:
            venue_of[inst.iid] = inst.venue
        self.venue_of: tuple[str | None, ...] = tuple(venue_of)
        self.venues = frozenset(i.venue for i in instruments)
        self.rejected: dict[tuple[str, str], int] = {}  # (venue label, reason) -> ticks
        self.batches_refused: dict[str, int] = {str(r): 0 for r in BatchRefusal}
        # the batch path's table: each wire id's venue as a small int (0: not an instrument)
        codes = {v: n + 1 for n, v in enumerate(sorted(self.venues))}
        self._venue_codes = codes
        self._venue_code_of = np.zeros(WIRE_IIDS, dtype=np.uint16)
        for inst in instruments:
            if 0 <= inst.iid < WIRE_IIDS:
                self._venue_code_of[inst.iid] = codes[inst.venue]
        self._batch_throttle = Throttle(_BATCH_LOG_EVERY_NS)
        self._now_ns = now_ns
        self._throttle = Throttle(int(every_s * 1e9))
        self._log = log

    @property
    def venue_code_of(self) -> npt.NDArray[np.uint16]:
        """Each wire id's venue as a small int (0: not an instrument): the batch path's table."""
        return self._venue_code_of

    def venue_code(self, venue: str) -> int:
        """``venue`` as the small int of ``venue_code_of`` (0: not one of ours)."""
        return self._venue_codes.get(venue, 0)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def admit(self, ticks: Sequence[Tick], where: str) -> Sequence[Tick]:
        """``ticks`` minus the ones the pipeline cannot carry (the same object when all pass:
        the common case costs one pass of comparisons, no copy).

        The pass is native where it can be (``in_range_prefix``, the same test in C: this loop
        in Python was ~13% of the host sequencer's CPU at 120k ticks/s); from the first tick
        it does not vouch for, this Python test decides, so the answer is the same either way.
        """
        venue_of = self.venue_of
        start = in_range_prefix(ticks, venue_of, *_CARRIED_FIELDS)
        if start == len(ticks):
            return ticks
        for i in range(start, len(ticks)):
            t = ticks[i]
            if carried(
                t.iid,
                t.venue,
                t.bid | t.ask | t.last | t.venue_ts_ns | t.decoded_ns | t.admitted_ns | t.epoch,
                t.seq | t.size,
                venue_of,
            ):
                continue
            return self._sift(ticks, where)
        return ticks

    def _sift(self, ticks: Sequence[Tick], where: str) -> list[Tick]:
        kept: list[Tick] = []
        for t in ticks:
            problem = tick_problem(t, self.venue_of)
            if problem is None:
                kept.append(t)
            else:
                self.refuse(t.venue, problem[0], where, problem[1])
        return kept

    def refuse_batch(self, reason: BatchRefusal, where: str, detail: str) -> None:
        """Count a buffer refused whole (not a batch of this format); logged at most once a
        second per reason. Nothing else is lost: the next buffer is read as usual."""
        self.batches_refused[str(reason)] = self.batches_refused.get(str(reason), 0) + 1
        held = self._batch_throttle.allow(str(reason), self._now_ns())
        if held is not None:
            self._log(
                "batch_refused",
                level="warning",
                reason=str(reason),
                where=where,
                detail=detail,
                not_logged_since=held,
            )

    def gate_batch(self, batch: TickBatch, where: str) -> TickBatch:
        """``batch`` minus the ticks the pipeline cannot carry, checked in bulk (the same
        object when all pass: a few vectorized comparisons, no copy). Each refused tick is
        counted by venue and reason as ``refuse`` counts it."""
        refused = self.refused_mask(batch, where)
        if refused is None:
            return batch
        keep = np.flatnonzero(~refused)
        return batch_of(
            batch.venue,
            batch.handler,
            min(batch.epoch, _I64_MAX),
            batch.batch_seq,
            {name: getattr(batch, name)[keep] for name, _ in COLUMNS},
        )

    def refused_mask(self, batch: TickBatch, where: str) -> npt.NDArray[np.bool_] | None:
        """Which ticks of ``batch`` the pipeline cannot carry (None: every one passes), each
        counted by venue and reason, the first of each reason logged (throttled)."""
        code = self._venue_codes.get(batch.venue, 0)
        if not batch.count:
            return None
        # the common case in one pass: every instrument this venue's, stamps sane
        if (
            code
            and batch.epoch <= _I64_MAX
            and gate_passes(batch.buffer, batch.count, self._venue_code_of, code)
        ):
            return None
        known = self._venue_code_of[batch.iid]
        problems: list[tuple[np.ndarray, BatchProblem]] = []
        if code == 0 or batch.epoch > _I64_MAX:
            reason = Refusal.WRONG_VENUE if code == 0 else Refusal.EPOCH
            what = f"venue {batch.venue!r} is not one of ours" if code == 0 else "epoch"
            bad = np.ones(batch.count, dtype=np.bool_)
            problems.append((bad, BatchProblem(reason, what)))
        else:
            problems.append((known == 0, BatchProblem(Refusal.UNKNOWN_IID, "iid not listed")))
            problems.append(
                ((known != code) & (known != 0), BatchProblem(Refusal.WRONG_VENUE, "iid venue"))
            )
            problems.append((batch.venue_ts < 0, BatchProblem(Refusal.TIMESTAMP, "venue_ts")))
            problems.append((batch.recv_ts < 0, BatchProblem(Refusal.TIMESTAMP, "recv_ts")))
        refused = np.zeros(batch.count, dtype=np.bool_)
        for bad, problem in problems:
            bad = bad & ~refused
            if not bad.any():
                continue
            refused |= bad
            first = int(np.flatnonzero(bad)[0])
            detail = f"{problem.what}: tick {first}, iid {int(batch.iid[first])}"
            for _ in range(int(bad.sum()) - 1):
                self.count(batch.venue, problem.reason)
            self.refuse(batch.venue, problem.reason, where, detail)
        return refused if refused.any() else None

    def count(self, venue: str, reason: Refusal) -> None:
        """Count one refused tick without a log line (the rest of a refused run)."""
        label = venue if venue in self.venues else UNKNOWN_VENUE
        key = (label, str(reason))
        self.rejected[key] = self.rejected.get(key, 0) + 1

    def refuse(self, venue: str, reason: Refusal, where: str, detail: str) -> None:
        """Count one refused tick; log it unless this reason was logged in the last 10 s."""
        label = venue if venue in self.venues else UNKNOWN_VENUE
        key = (label, str(reason))
        self.rejected[key] = self.rejected.get(key, 0) + 1
        held = self._throttle.allow(str(reason), self._now_ns())
        if held is not None:
            self._log(
                "tick_rejected",
                level="warning",
                venue=label,
                reason=str(reason),
                where=where,
                detail=detail,
                not_logged_since=held,
            )
