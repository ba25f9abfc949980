"""The terminal's screen, Sans-I/O: server messages in, rendered quotes and due resyncs out.

This is the part of the terminal SDK that decides what reaches the glass; it owns no socket,
no task and no clock of its own (the clock is injected), so it is fed messages and asked for
results (STYLE habit 1). ``client.py`` is its asyncio driver. The JavaScript SDK is a port of
this module: it is meant to read on its own.

It runs the sequencer's own guard (``monotape.platform.core.admit``) in front of the glass: a
record at or below the version on screen is never rendered (design: "The same guard runs in
every terminal SDK"). The conflated stream is a base-chained delta stream; priority updates are
absolute records. The view keeps both:

- the *chain*: per symbol, the ``ChainLink`` of the last conflated record, the base the next
  delta must name. A delta naming another base is a *gap*: it is not applied, and the symbol's
  snapshot is asked for again (``take_resyncs``; docs/wire.md). The chain starts afresh with
  each connection (``new_connection``): a connection's frames chain from its own snapshots.
- the *glass*: what is on screen. Any record (frame, snapshot or priority) whose version is
  above the shown version is rendered; others are dropped with a named ``DropReason``. The glass
  is held *across* connections, so a snapshot older than the screen is never rendered.

``stats.regressions`` counts records a naive client would have rendered backwards: a conflated
record below its own chain, or a priority update at or below the previous one. It must stay 0.
``last_regression`` and ``last_gap`` keep the latest of each (key, the version held, the version
that came): the glass report (``glass.py``) sends them to the node, which cannot see these
drops itself.

Every ``Quote`` names the ``frame_no`` of the FRAME or SNAPSHOT it came in (None for a priority
update, which carries none): a ``max_hz`` terminal can check it got only its k-th boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import msgspec

from monotape.clock import Clock, SystemClock
from monotape.platform.core.admit import APPLIED, DUPLICATE, VersionGuard
from monotape.platform.model import Instrument, Version
from monotape.platform.sdk.staleness import Staleness
from monotape.platform.wire import codec

__all__ = [
    "RESYNC_RETRY_NS",
    "ChainLink",
    "Drop",
    "DropReason",
    "Offence",
    "Quote",
    "Source",
    "Step",
    "TerminalView",
    "ViewStats",
]

# A gapped symbol's snapshot not here this long after it was asked for is asked for again: a
# refused or lost request never freezes a symbol. Retries ride the server's heartbeat (1 s).
RESYNC_RETRY_NS: Final = 2_000_000_000


class Source(StrEnum):
    """Which path a record came by."""

    SNAPSHOT = "snapshot"
    FRAME = "frame"  # the 40 ms conflated stream
    PRIORITY = "priority"  # an order-ticket symbol's own update, ahead of the frame grid


class Quote(msgspec.Struct, frozen=True, gc=False):
    """One rendered line of a watchlist. Prices are scaled ints; ``price()`` gives decimals.
    ``frame_no``: the FRAME's or SNAPSHOT's number it came in; None for a priority update."""

    key: str
    iid: int
    epoch: int
    seq: int
    bid: int
    ask: int
    last: int
    size: int
    source: Source
    decimals: int
    frame_no: int | None = None

    @property
    def version(self) -> Version:
        return (self.epoch, self.seq)

    def price(self, scaled: int) -> float:
        return scaled / float(10**self.decimals)


class ChainLink(msgspec.Struct, frozen=True, gc=False):
    """What the view holds for a symbol on this connection's conflated chain: the version the
    next delta must name as its base, and the absolute prices it adds its deltas to."""

    epoch: int
    seq: int
    bid: int
    ask: int
    last: int
    size: int

    @property
    def version(self) -> Version:
        return (self.epoch, self.seq)


class DropReason(StrEnum):
    """Why a record did not reach the glass."""

    GAP = "gap"  # a delta on a base not held: the symbol's snapshot is asked for
    AWAITING_SNAPSHOT = "awaiting_snapshot"  # another delta for a symbol already gapped
    BEHIND_CHAIN = "behind_chain"  # a conflated record at or below its own chain
    DUPLICATE = "duplicate"  # the glass shows this version already (e.g. by the priority path)
    STALE = "stale"  # older than the glass: the guard discards it
    OFF_WATCHLIST = "off_watchlist"  # in flight when its symbol was unsubscribed


class Drop(msgspec.Struct, frozen=True, gc=False):
    """One record the view did not render, and why."""

    key: str
    version: Version
    source: Source
    reason: DropReason


class Offence(msgspec.Struct, frozen=True, gc=False):
    """A record the glass had to drop that the node should never have sent: a regression (at or
    below the version held: ``held`` is that version) or a gap (a delta on a base not held:
    ``held`` is the chain's version, (0, 0) when the chain held nothing). ``got``: its version."""

    key: str
    held: Version
    got: Version


class Step(msgspec.Struct):
    """What one message did: the quotes rendered (in render order), the records dropped, and
    whether the driver should now ask ``take_resyncs()`` for snapshots to request."""

    rendered: list[Quote] = msgspec.field(default_factory=list)
    dropped: list[Drop] = msgspec.field(default_factory=list)
    resync: bool = False


@dataclass
class ViewStats:
    """The view's counters (docs/sdk.md, "Stats": rendering and ordering)."""

    frames: int = 0
    snapshots: int = 0
    priority: int = 0
    heartbeats: int = 0
    records: int = 0
    rendered: int = 0
    duplicates: int = 0  # already on screen (e.g. via the priority path)
    stale: int = 0  # older than the screen: discarded by the guard
    gaps: int = 0
    regressions: int = 0  # must stay 0
    last_frame_no: int = 0
    drops: dict[DropReason, int] = field(default_factory=dict)


def _carry(old: VersionGuard, old_ids: dict[str, int], new_ids: dict[str, int]) -> VersionGuard:
    """``old``'s held versions renumbered from one dictionary's ids to another's, by key."""
    new = VersionGuard()
    for key, old_iid in old_ids.items():
        held = old.held(old_iid)
        new_iid = new_ids.get(key)
        if held is not None and new_iid is not None:
            new.check(new_iid, held)
    return new


class TerminalView:
    """The screen of one terminal: its dictionary, watchlist, chain and glass.

    Feed it every decoded server message with ``receive``; it answers with a ``Step``. The
    watchlist (``hold``/``release``) is what the terminal subscribed: a record for a symbol off
    the watchlist is never rendered.
    """

    def __init__(self, clock: Clock | None = None, stats: ViewStats | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.stats = ViewStats() if stats is None else stats
        self.hello: codec.Hello | None = None
        self.instruments: dict[int, Instrument] = {}  # iid -> Instrument, from the latest hello
        self.ids: dict[str, int] = {}  # key -> iid
        self.quotes: dict[str, Quote] = {}  # the glass: what is on screen now, by key
        # What the terminal holds (dict: an ordered set, in subscription order).
        self.watchlist: dict[str, None] = {}
        self._chain: dict[int, ChainLink] = {}
        self._shown = VersionGuard()  # the glass's versions: kept across connections
        self._prio_last = VersionGuard()  # the last priority update's version per symbol
        # gapped iid -> monotonic ns its snapshot was asked for (None: not asked yet)
        self._resyncing: dict[int, int | None] = {}
        # the latest of each, for the glass report (glass.py)
        self.last_regression: Offence | None = None
        self.last_gap: Offence | None = None
        self.staleness = Staleness(self.clock)  # which symbols are stale (sdk/staleness.py)

    # -- the watchlist --------------------------------------------------------------------------
    def hold(self, keys: list[str]) -> list[str]:
        """Put ``keys`` on the watchlist; returns the ones that were not on it."""
        new = [k for k in dict.fromkeys(keys) if k not in self.watchlist]
        for k in keys:
            self.watchlist[k] = None
        return new

    def release(self, keys: list[str]) -> None:
        """Take ``keys`` off the watchlist and off the glass."""
        for k in keys:
            self.watchlist.pop(k, None)
            self.quotes.pop(k, None)

    # -- connections ----------------------------------------------------------------------------
    def new_connection(self) -> None:
        """A new connection: its frames chain from its own snapshots, and gaps of the old one
        are moot (its re-subscribe brings every snapshot). The glass is deliberately kept:
        versions on screen never go backwards."""
        self._chain.clear()
        self._resyncing.clear()

    def adopt(self, hello: codec.Hello) -> None:
        """Take the hello's dictionary. Another node may number symbols differently: what is
        on the glass is carried over by key, so the guard still holds across the reconnect.
        (The driver refuses a hello of a protocol it does not speak before it gets here.)"""
        old_ids = self.ids
        self.staleness.on_message(hello)  # a new writer's staleness starts from its own word
        self.hello = hello
        self.instruments = {i.iid: i for i in hello.instruments}
        self.ids = {i.key: i.iid for i in hello.instruments}
        if old_ids and old_ids != self.ids:
            self._shown = _carry(self._shown, old_ids, self.ids)
            self._prio_last = _carry(self._prio_last, old_ids, self.ids)

    # -- messages -------------------------------------------------------------------------------
    def receive(self, msg: codec.ServerMessage) -> Step:
        """Apply one server message to the screen. Requests' answers (ACK, REFUSED, ERROR) and
        CLOSE are the driver's: they change nothing here."""
        step = Step()
        self.staleness.on_message(msg)
        if isinstance(msg, codec.Frame):
            self.stats.frames += 1
            self.stats.last_frame_no = msg.frame_no
            for rec in msg.records:
                self._on_chain_record(rec, Source.FRAME, msg.frame_no, step)
        elif isinstance(msg, codec.PriorityUpdate):
            self.stats.priority += 1
            rec = msg.record
            version = (rec.epoch, rec.seq)
            before = self._prio_last.held(rec.iid)
            if self._prio_last.check(rec.iid, version) is not APPLIED:
                self._regression(rec.iid, before, version)
            self._render(
                rec.iid, version, rec.bid, rec.ask, rec.last, rec.size, Source.PRIORITY, None, step
            )
        elif isinstance(msg, codec.Snapshot):
            self.stats.snapshots += 1
            for rec in msg.records:
                self._resyncing.pop(rec.iid, None)
                self._on_chain_record(rec, Source.SNAPSHOT, msg.frame_no, step)
        elif isinstance(msg, codec.Heartbeat):
            self.stats.heartbeats += 1
            # about once a second: time to ask again for snapshots that never came
            step.resync = bool(self._resyncing)
        elif isinstance(msg, codec.Hello):
            self.adopt(msg)
        return step

    def take_resyncs(self) -> list[str]:
        """The keys whose snapshot is due to be asked for now: gapped and not asked yet, or
        asked more than ``RESYNC_RETRY_NS`` ago. They are marked as asked now."""
        now = self.clock.now_ns()
        due = [
            iid
            for iid, asked in self._resyncing.items()
            if asked is None or now - asked > RESYNC_RETRY_NS
        ]
        for iid in due:
            self._resyncing[iid] = now
        return [self.instruments[i].key for i in due if i in self.instruments]

    @property
    def resyncing(self) -> list[str]:
        """Keys gapped and waiting for their snapshot."""
        return [self._key(i) for i in self._resyncing]

    def stale(self, key: str) -> bool:
        """Whether ``key``'s price on screen is stale now; ``staleness.since_ms`` says since."""
        return self.staleness.is_stale(key)

    def chain(self, key: str) -> ChainLink | None:
        """What the chain holds for ``key`` on this connection (None: nothing, or gapped)."""
        iid = self.ids.get(key)
        return None if iid is None else self._chain.get(iid)

    def shown(self, key: str) -> Version | None:
        """The version the glass holds for ``key`` (kept even when its line is not shown)."""
        iid = self.ids.get(key)
        return None if iid is None else self._shown.held(iid)

    # -- the rules ------------------------------------------------------------------------------
    def _key(self, iid: int) -> str:
        inst = self.instruments.get(iid)
        return inst.key if inst is not None else str(iid)

    def _drop(
        self, step: Step, iid: int, version: Version, source: Source, why: DropReason
    ) -> None:
        drops = self.stats.drops
        drops[why] = drops.get(why, 0) + 1
        step.dropped.append(Drop(self._key(iid), version, source, why))

    def _regression(self, iid: int, held: Version | None, got: Version) -> None:
        self.stats.regressions += 1
        self.last_regression = Offence(self._key(iid), held or (0, 0), got)

    def _on_chain_record(
        self, rec: codec.Record, source: Source, frame_no: int, step: Step
    ) -> None:
        self.stats.records += 1
        iid = rec.iid
        version = (rec.epoch, rec.seq)
        held = self._chain.get(iid)
        if rec.has_base and (held is None or held.version != (rec.base_epoch, rec.base_seq)):
            if held is not None and version <= held.version:
                self._regression(iid, held.version, version)  # stale data on the chain: a bug
                self._drop(step, iid, version, source, DropReason.BEHIND_CHAIN)
            elif iid in self._resyncing:
                self._drop(step, iid, version, source, DropReason.AWAITING_SNAPSHOT)
            else:
                self._gap(iid, None if held is None else held.version, version, source, step)
            return
        # int64 wrap-around arithmetic, as docs/wire.md specifies for every client.
        base = (held.bid, held.ask, held.last) if held is not None else None
        bid, ask, last = codec.apply_record(base, rec)
        if held is not None and version < held.version:
            self._regression(iid, held.version, version)
        if held is not None and version <= held.version and source is Source.FRAME:
            self._drop(step, iid, version, source, DropReason.BEHIND_CHAIN)
            return
        self._chain[iid] = ChainLink(rec.epoch, rec.seq, bid, ask, last, rec.size)
        self._render(iid, version, bid, ask, last, rec.size, source, frame_no, step)

    def _gap(
        self, iid: int, held: Version | None, version: Version, source: Source, step: Step
    ) -> None:
        """A delta on a base we do not hold: never apply it; its snapshot is to be asked for.
        Gaps are gathered until the driver calls ``take_resyncs`` (once per loop turn: a burst
        of gaps must be one Subscribe, not one each, under the server's request rate limit)."""
        self.stats.gaps += 1
        self.last_gap = Offence(self._key(iid), held or (0, 0), version)
        self._resyncing[iid] = None
        self._chain.pop(iid, None)
        self._drop(step, iid, version, source, DropReason.GAP)
        step.resync = True

    def _render(
        self,
        iid: int,
        version: Version,
        bid: int,
        ask: int,
        last: int,
        size: int,
        source: Source,
        frame_no: int | None,
        step: Step,
    ) -> None:
        verdict = self._shown.check(iid, version)
        inst = self.instruments.get(iid)
        key = inst.key if inst is not None else str(iid)
        decimals = inst.price_decimals if inst is not None else 0
        if verdict is not APPLIED:
            if verdict is DUPLICATE:
                self.stats.duplicates += 1
                if key in self.watchlist and key not in self.quotes:
                    # re-subscribed to what the screen last showed: put the line back, quietly
                    self.quotes[key] = Quote(
                        key, iid, *version, bid, ask, last, size, source, decimals, frame_no
                    )
                self._drop(step, iid, version, source, DropReason.DUPLICATE)
            else:
                self.stats.stale += 1
                self._drop(step, iid, version, source, DropReason.STALE)
            return
        if key not in self.watchlist:
            self._drop(step, iid, version, source, DropReason.OFF_WATCHLIST)
            return
        quote = Quote(key, iid, *version, bid, ask, last, size, source, decimals, frame_no)
        self.quotes[key] = quote
        self.stats.rendered += 1
        step.rendered.append(quote)
