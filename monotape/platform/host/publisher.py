"""The sequencer role's core, no I/O: a sequencer's output as frame-ring entries.

Per frame boundary (docs/ring.md): each record of the sequencer's ``Frame`` is encoded once,
twice over: its full record goes into the shared snapshot table (``put_snapshots``, before the
frame is published; the table tags it with the frame's ring entry and keeps the last two per
symbol, so a writer hydrates at the frames it has read, never a frame ahead), its delta record
into the FRAME entry (``{iid: encode_delta_record(base, new)}``, ascending iid: the same bytes
the one-process planner puts in payloads). The entry carries the frame's tick ages too (when
each admitted tick was decoded, and its instrument: ``StageStamps.frame_ticks``), from which
each writer records the ``tick_to_write`` of the ticks it sent. Every boundary is published, an
empty one too: the one-process writer plans every boundary (its rate groups' payloads and its
slow terminals' catch-up run on frames with no change), so a writer process must see each of
them.

Between boundaries, after a bus batch, the applied ticks of symbols some writer's terminal holds
in an order ticket (``Interest.wanted_among``) go out at once as one PRIORITY entry: the latest tick
per symbol of the batch as a full record, ``published_ns`` the batch's admit time (the writers'
``priority`` stage starts there), ``frame_no`` the last published frame's.

A restarted sequencer starts from what the dead one published (``seed``): the table holds every
symbol's last framed full record and its version, and the PRIORITY entries after the last frame
still in the ring hold newer ones order-ticket terminals were shown; nothing at or below those
may be admitted again (no regression, and never one version shown twice with different
prices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from monotape.platform.core.conflation import Frame
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.snapshots import FailureSink
from monotape.platform.core.stamps import FrameTicks
from monotape.platform.model import Tick
from monotape.platform.ring.ages import TickAges
from monotape.platform.ring.layout import Entry, EntryKind, RingFrame
from monotape.platform.ring.protocol import PublishOutcome, Put, RingProducer, SnapshotChunk
from monotape.platform.wire import codec

__all__ = [
    "Encoders",
    "FramePublisher",
    "Interest",
    "NoInterest",
    "SeedResult",
    "ages_of",
    "seed",
]

# (full record of a tick, delta record from a base to a new tick)
Encoders: TypeAlias = tuple[Callable[[Tick], bytes], Callable[[Tick | None, Tick], bytes]]


class Interest(Protocol):
    """Which symbols some writer's terminal holds in an order ticket (``PriorityInterest``)."""

    def wanted_among(self, iids: Iterable[int]) -> AbstractSet[int]:
        """The ones among ``iids`` some terminal holds: one call per bus batch."""
        ...


class NoInterest:
    """No order tickets anywhere (no interest segment): the priority path stays idle."""

    def wanted_among(self, iids: Iterable[int]) -> AbstractSet[int]:
        return frozenset()


class FramePublisher:
    """Frames and priority batches in, ring entries and snapshot puts out.

    ``now_ns`` (monotonic) stamps a frame's ``published_ns`` once its records are encoded and
    put: the ``encode`` stage ends there. ``failures`` counts a symbol that cannot encode
    (stage ``encode``, or ``priority``): it is left out, everything else goes out."""

    def __init__(
        self,
        ring: RingProducer,
        now_ns: Callable[[], int],
        *,
        interest: Interest | None = None,
        failures: FailureSink | None = None,
        encoders: Encoders | None = None,
    ) -> None:
        self.ring = ring
        # (full, delta): the codec's (native when built); bench_ring passes the Python twins
        self._full, self._delta = encoders or (codec.encode_full_record, codec.encode_delta_record)
        # a frame's own encoded records are the native encoders' bytes: used unless a caller
        # (bench_ring) measures other encoders
        self._native_rows = encoders is None
        self.interest: Interest = interest if interest is not None else NoInterest()
        self._now_ns = now_ns
        self._failures = failures
        self.last_frame_no = 0
        self.last_boundary_ns = 0
        self.frames = 0  # FRAME entries published (oversize ones included: a gap went out)
        self.priority_entries = 0
        self.left_out = 0  # records left out of a frame or a priority entry (cannot encode)
        # The venues whose handlers are all down, as ring/venues.py bits: every entry from the
        # next one carries them to the writers, which tell their terminals STALE.
        self.stale_venues = 0

    def publish_frame(
        self, frame: Frame, ticks: FrameTicks | None = None
    ) -> tuple[PublishOutcome, int]:
        """Put each record's full record, then publish the FRAME entry of its delta records
        and the ages of the ``ticks`` it carries. Returns the outcome and the publish time
        (``published_ns``)."""
        ring = self.ring
        full, delta = self._full, self._delta
        records: dict[int, bytes] = {}
        puts: list[Put] = []
        left_out: list[int] = []
        encoded = frame.encoded if self._native_rows else None
        if encoded is not None:
            # the sequencer encoded them from its state arrays (encode_rows): no Tick per
            # record; a symbol it could not encode goes through the encoders below, which say why
            records, puts, refused = encoded
            wanted = set(refused)
            todo = [rec for rec in frame.records if rec.iid in wanted] if refused else []
        else:
            todo = frame.records
        put = puts.append
        for rec in todo:
            new = rec.new
            try:
                chunk = delta(rec.base, new)
                # full() refuses a version that is not two u64 (ValueError, this symbol only),
                # so no item fails the batch's check in put_snapshots below
                put((rec.iid, new.epoch, new.seq, full(new)))
            except ValueError as exc:  # this symbol only: its terminals see a gap next frame
                left_out.append(rec.iid)
                if self._failures is not None:
                    self._failures.record("encode", exc, iid=rec.iid)
                continue
            records[rec.iid] = chunk
        ring.put_snapshots(puts)  # one call for the frame's (native: ring/_table.c)
        published = self._now_ns()
        if left_out:  # its ticks went to no screen: no tick_to_write for them at any writer
            self.left_out += len(left_out)
            ticks = None if ticks is None else ticks.without(left_out)
        ages = None if ticks is None else ages_of(ticks)
        outcome = ring.publish(
            Entry(
                EntryKind.FRAME,
                frame.frame_no,
                frame.boundary_ns,
                published,
                records,
                ages=ages,
                stale_venues=self.stale_venues,
            )
        )
        self.last_frame_no = frame.frame_no
        self.last_boundary_ns = frame.boundary_ns
        self.frames += 1
        return outcome, published

    def wanted(self, iids: npt.NDArray[np.uint16]) -> list[int]:
        """The distinct ids among an admitted batch's that some writer's terminal holds in an
        order ticket, ascending (``interest.py``: with no mark anywhere, a header read)."""
        return sorted(self.interest.wanted_among(_Listed(iids)))

    def set_down_venues(self, mask: int) -> None:
        """The ingest side's call: ``mask`` (``VenueBits.mask`` of the venues whose handlers
        are all down, 0: none) rides on every FRAME entry from the next one (docs/ring.md)."""
        if not 0 <= mask < 1 << 32:
            raise ValueError(f"a stale-venue mask is a u32, not {mask}")
        self.stale_venues = mask

    def publish_priority(self, applied: Sequence[Tick], admitted_ns: int) -> PublishOutcome | None:
        """One PRIORITY entry of the batch's wanted symbols (latest tick each, full records,
        ascending iid); None when no applied tick is wanted (the common case)."""
        # one question per batch, not per tick (interest.py: with no mark anywhere it is a
        # header read, and the ticks are not even walked)
        wanted = self.interest.wanted_among(t.iid for t in applied)
        if not wanted:
            return None
        # applied ticks of one symbol come in rising versions: the last one is the latest
        latest = {t.iid: t for t in applied if t.iid in wanted}
        full = self._full
        priority: dict[int, bytes] = {}
        for iid in sorted(latest):
            try:
                priority[iid] = full(latest[iid])
            except ValueError as exc:  # this tick only; the conflated stream still carries it
                self.left_out += 1
                if self._failures is not None:
                    self._failures.record("priority", exc, iid=iid)
        if not priority:
            return None
        self.priority_entries += 1
        return self.ring.publish(
            Entry(
                EntryKind.PRIORITY,
                self.last_frame_no,
                self.last_boundary_ns,
                admitted_ns,
                priority=priority,
            )
        )


class _Listed:
    """An id array that becomes a list only if iterated (``wanted_among`` does not look at it
    when no order ticket is open anywhere: the common case)."""

    __slots__ = ("_ids",)

    def __init__(self, ids: npt.NDArray[np.uint16]) -> None:
        self._ids = ids

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())


def ages_of(ticks: FrameTicks) -> TickAges:
    """The ring's bytes of a frame's ticks (``ring_feed.ticks_of`` reads them back). u32 tick
    counts: a run is at most a frame's ticks."""
    runs = ticks.runs.astype(np.uint32)
    return TickAges(ticks.decoded.tobytes(), runs.tobytes(), ticks.iids.tobytes())


class SeedResult:
    """What a restart's seed came to: symbols seeded, chunks that did not decode (seeded from
    the table's version alone), and priority records put back into the table."""

    __slots__ = ("seeded", "table_puts", "undecodable")

    def __init__(self, seeded: int = 0, undecodable: int = 0, table_puts: int = 0) -> None:
        self.seeded = seeded
        self.undecodable = undecodable
        self.table_puts = table_puts


def seed(
    sequencer: Sequencer, ring: RingProducer, venue_of: Mapping[int, str] | None = None
) -> SeedResult:
    """Seed the lanes' admit state from the ring a dead sequencer wrote: its snapshot table
    (each symbol's last framed full record) and the PRIORITY entries it published after its
    last frame (they showed order-ticket terminals newer versions). Nothing at or below either
    is admitted again.

    A priority record newer than the table's is put into the table as well: the dead process
    never framed it, and this one will not either (a seed is not a change to publish), so
    without the put a second restart would forget that terminals were shown it. The table's
    version is authoritative (the put wrote it beside the chunk); the chunk gives the prices.

    Only the admit state is seeded, never the conflator: the first record of each symbol after
    a restart has no base (a full record), which every terminal applies whatever it held,
    since every writer snapshots its terminals on the restart anyway (``Gap(RESTARTED)``). A
    seeded state only moves a symbol's version up, never down."""
    venue_of = venue_of or {}
    out = SeedResult()
    table = dict(ring.table())
    newest: dict[int, SnapshotChunk] = {}
    for iid, snap in _shown_since_frame(ring.recent(), out):
        held = newest.get(iid) or table.get(iid)
        if held is None or held.version < snap.version:
            newest[iid] = snap
    for iid, snap in newest.items():
        table[iid] = snap
        ring.put_snapshot(iid, snap.version, snap.chunk)
        out.table_puts += 1
    for iid, snap in table.items():
        epoch, seq = snap.version
        try:
            rec = codec.decode_record(snap.chunk)
        except (codec.CodecError, IndexError, ValueError):
            rec = None
        if rec is None or rec.iid != iid or rec.has_base:
            out.undecodable += 1
            tick = Tick(iid, venue_of.get(iid, ""), epoch, seq, 0, 0, 0, 0, 0)
        else:
            tick = Tick(
                iid, venue_of.get(iid, ""), epoch, seq, 0, rec.bid, rec.ask, rec.last, rec.size
            )
        if sequencer.seed(tick):
            out.seeded += 1
    return out


def _shown_since_frame(
    recent: Iterable[RingFrame], out: SeedResult
) -> list[tuple[int, SnapshotChunk]]:
    """The priority records published after the last frame (``recent`` is newest first; up to
    the first FRAME or GAP entry), as (iid, full record at its own version), oldest first."""
    shown: list[tuple[int, SnapshotChunk]] = []
    for entry in recent:
        if entry.kind is not EntryKind.PRIORITY:
            break
        for iid, chunk in entry.priority.items():
            try:
                rec = codec.decode_record(chunk)
            except (codec.CodecError, IndexError, ValueError):
                out.undecodable += 1  # no version to seed: the table's stands for it
                continue
            shown.append((iid, SnapshotChunk((rec.epoch, rec.seq), bytes(chunk))))
    shown.reverse()
    return shown
