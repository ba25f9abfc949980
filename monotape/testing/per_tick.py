"""The per-tick reference model of the sequencer: the rule applied one ``Tick`` object at a time.

This was the sequencer's hot loop until ticks travelled as columns (issue 35). It stays as the
model the batch path (``core/sequencer.py``) is held to: the property tests feed both the same
interleavings of both twins' streams and require the same admitted ticks, the same counts and
byte-identical frames; ``bench_ingest`` runs it as the peer of the batch path.

Lanes: ``lane = iid % lanes``, each lane the one writer of its symbols' current ticks; a tick
whose version ``(epoch, seq)`` is at or below the symbol's current one is never applied (an
exact repeat a *duplicate*, anything older a *regression*). No I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter

from monotape.platform.core.conflation import FRAME_NS, Conflator, Frame, FrameRecord
from monotape.platform.core.sequencer import VenueCounters
from monotape.platform.model import Tick

__all__ = ["Lane", "PerTickSequencer"]

_by_iid = attrgetter("iid")


class Lane:
    """The single writer for the symbols with ``iid % lanes == index``."""

    __slots__ = ("conflator", "counters", "index", "states")

    def __init__(self, index: int, frame_ns: int = FRAME_NS) -> None:
        self.index = index
        self.states: dict[int, Tick] = {}  # iid -> current (last applied) tick
        self.conflator = Conflator(frame_ns)
        self.counters: dict[str, VenueCounters] = {}  # venue -> counts, owned by this lane

    def counter(self, venue: str) -> VenueCounters:
        c = self.counters.get(venue)
        if c is None:
            c = self.counters[venue] = VenueCounters()
        return c

    def admit(self, tick: Tick, now_ns: int) -> bool:
        """Apply ``tick`` if its version is above the symbol's current one; count the outcome.

        Same rule as ``core.admit.admit``; on apply, stamps ``admitted_ns`` (the end
        of the ``sequence`` stage), stores the tick and offers it to the conflator.
        """
        iid = tick.iid
        cur = self.states.get(iid)
        c = self.counter(tick.venue)
        if cur is not None:
            held = (cur.epoch, cur.seq)
            incoming = (tick.epoch, tick.seq)
            if incoming <= held:
                if incoming == held:
                    c.duplicates += 1
                else:
                    c.regressions += 1
                return False
        tick.admitted_ns = now_ns
        self.states[iid] = tick
        self.conflator.offer(tick)
        c.admitted += 1
        return True


class PerTickSequencer:
    """All lanes of one process; ``on_ticks`` routes each tick to the lane that owns its symbol."""

    __slots__ = ("_counters", "_n", "_pending", "_states", "frame_ns", "lanes")

    def __init__(self, lanes: int = 4, frame_ns: int = FRAME_NS) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        self.frame_ns = frame_ns
        self.lanes: tuple[Lane, ...] = tuple(Lane(i, frame_ns) for i in range(lanes))
        self._n = lanes
        # Per-lane dicts bound once, so the hot loop indexes a list instead of chasing attributes.
        self._states = [lane.states for lane in self.lanes]
        self._pending = [lane.conflator._pending for lane in self.lanes]
        self._counters = [lane.counters for lane in self.lanes]

    def lane_of(self, iid: int) -> Lane:
        return self.lanes[iid % self._n]

    def on_ticks(self, ticks: Sequence[Tick], now_ns: int) -> list[Tick]:
        """Admit each tick in order; return the applied ones (the priority path sends them now).

        The hot loop: ``Lane.admit`` inlined (version compare on ints, no tuples), locals bound.
        """
        applied: list[Tick] = []
        append = applied.append
        n = self._n
        states_of = self._states
        pending_of = self._pending
        counters_of = self._counters
        for t in ticks:
            iid = t.iid
            k = iid % n
            states = states_of[k]
            cur = states.get(iid)
            if cur is not None:
                te = t.epoch
                ce = cur.epoch
                if te == ce:
                    ts = t.seq
                    cs = cur.seq
                    if ts <= cs:
                        c = counters_of[k].get(t.venue) or self.lanes[k].counter(t.venue)
                        if ts == cs:
                            c.duplicates += 1
                        else:
                            c.regressions += 1
                        continue
                elif te < ce:
                    c = counters_of[k].get(t.venue) or self.lanes[k].counter(t.venue)
                    c.regressions += 1
                    continue
            t.admitted_ns = now_ns
            states[iid] = t
            pending_of[k][iid] = t
            c = counters_of[k].get(t.venue) or self.lanes[k].counter(t.venue)
            c.admitted += 1
            append(t)
        return applied

    def take_frame(self, boundary_ns: int) -> Frame:
        """Close every lane's frame at ``boundary_ns`` and merge them (records by ascending iid)."""
        records: list[FrameRecord] = []
        for lane in self.lanes:
            records.extend(lane.conflator.take_frame(boundary_ns).records)
        if self._n > 1:
            records.sort(key=_by_iid)
        return Frame(boundary_ns // self.frame_ns, boundary_ns, records)

    def current(self, iid: int) -> Tick | None:
        """The last applied tick for ``iid`` (may be newer than any frame has shown)."""
        return self._states[iid % self._n].get(iid)

    def published(self, iid: int) -> Tick | None:
        """What the last frame showed for ``iid``: its next record's base; what snapshots show."""
        return self.lanes[iid % self._n].conflator.published(iid)

    @property
    def dirty_count(self) -> int:
        return sum(lane.conflator.dirty_count for lane in self.lanes)

    def symbols(self) -> Iterable[int]:
        """Every iid that has a current tick."""
        for states in self._states:
            yield from list(states)

    def counters(self) -> dict[str, VenueCounters]:
        """Per-venue counts summed over lanes (a fresh snapshot; safe to read off-thread)."""
        out: dict[str, VenueCounters] = {}
        for lane_counters in self._counters:
            # dict() copies in one C step; list(d.items()) makes a tuple per item, and on
            # 3.11 one can start a collection whose gc callback lets the loop's thread in
            for venue, c in dict(lane_counters).items():
                o = out.get(venue)
                if o is None:
                    o = out[venue] = VenueCounters()
                o.admitted += c.admitted
                o.duplicates += c.duplicates
                o.regressions += c.regressions
        return out

    @property
    def totals(self) -> VenueCounters:
        """Every venue's counts summed (the batch path's ``*_total`` come from the same)."""
        c = self.counters().values()
        return VenueCounters(
            sum(v.admitted for v in c), sum(v.duplicates for v in c), sum(v.regressions for v in c)
        )

    @property
    def admitted_total(self) -> int:
        return self.totals.admitted

    @property
    def duplicates_total(self) -> int:
        return self.totals.duplicates

    @property
    def regressions_total(self) -> int:
        return self.totals.regressions
