"""design's property, end to end without sockets: for any interleaving of duplicates, drift,
handler restarts and a terminal that stalls (ring overflow -> gap -> snapshot), the versions a
terminal renders for a symbol strictly increase, no older venue update is ever shown, and once
the terminal has caught up its screen is exactly what the sequencer published.

Real pieces throughout: both feed handlers of each venue (epoch fences on a shared store), the
sequencer lanes and 40 ms conflation, the codec (records encoded once, framed as the server
frames them), the bounded per-connection ring, and the terminal SDK's message handling.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.core.outbox import Outbox
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import FeedHandler, make_handler_pair
from monotape.platform.feeds.simulator import VenueUpdate
from monotape.platform.model import Instrument
from monotape.platform.sdk.client import Quote, TerminalClient
from monotape.platform.wire import codec

MS = 1_000_000
FRAME_NS = 40 * MS
VENUES = {"XNAS": True, "XNYS": False}  # venue -> has its own update ids
UNIVERSE = [
    Instrument(i, f"{v}:S{i}", v, f"S{i}", 2, 1) for i, v in enumerate(["XNAS"] * 3 + ["XNYS"] * 3)
]

step = st.one_of(
    st.tuples(st.just("tick"), st.integers(0, len(UNIVERSE) - 1), st.integers(-3, 3)),
    st.tuples(st.just("wait"), st.integers(1, 130), st.just(0)),
    st.tuples(st.just("restart"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("stall"), st.booleans(), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, min_size=20, max_size=300), st.integers(0, 2**16))
def test_a_terminal_never_renders_an_older_price(
    steps: list[tuple[str, int, int]], seed: int
) -> None:
    clock = FakeClock()
    rng = random.Random(seed)
    store = MemoryEpochStore()
    handlers: list[FeedHandler] = []
    for venue, has_ids in VENUES.items():
        handlers.extend(
            make_handler_pair(
                venue, store, clock, 6.0, 9.0, rng, update_ids=has_ids, fence_ns=250 * MS
            )
        )
    for h in handlers:
        h.start()
    sequencer = Sequencer(2, FRAME_NS)
    rendered: dict[str, list[Quote]] = defaultdict(list)
    terminal = TerminalClient("ws://127.0.0.1:1/", on_render=lambda q: rendered[q.key].append(q))
    terminal._on_message(codec.Hello(1, "t", 40, 256, 8, UNIVERSE))
    terminal.screen.hold([inst.key for inst in UNIVERSE])
    ring = Outbox(2)  # small, so a stall overflows it within a few frames
    stalled = False
    update_id = itertools.count(1000)
    price = {i.iid: 10_000 for i in UNIVERSE}
    next_boundary = (clock.now_ns() // FRAME_NS + 1) * FRAME_NS
    last_frame_no = 0

    def snapshot() -> bytes:
        ticks = [t for t in (sequencer.published(i.iid) for i in UNIVERSE) if t is not None]
        chunks = [codec.encode_full_record(t) for t in ticks]
        return codec.snapshot_header(last_frame_no, len(chunks)) + b"".join(chunks)

    def to_terminal(payload: bytes) -> None:
        terminal._on_message(codec.decode_message(payload))

    def deliver(payload: bytes) -> None:
        if stalled or len(ring) or ring.gap:
            ring.push(payload)
        else:
            to_terminal(payload)

    def flush() -> None:
        if stalled:
            return
        if ring.gap:
            ring.resolve_gap(snapshot())
        while (item := ring.pop()) is not None:
            to_terminal(item)

    def advance(ms: int) -> None:
        nonlocal next_boundary, last_frame_no
        for _ in range(ms):
            clock.advance(MS)
            for h in handlers:
                ticks = h.drain_due()
                if ticks:
                    sequencer.on_ticks(ticks, clock.now_ns())
            if clock.now_ns() >= next_boundary:
                frame = sequencer.take_frame(next_boundary)
                last_frame_no = frame.frame_no
                next_boundary += FRAME_NS
                chunks = [codec.encode_delta_record(r.base, r.new) for r in frame.records]
                if chunks:
                    deliver(codec.frame_header(frame.frame_no, len(chunks)) + b"".join(chunks))
                flush()

    deliver(snapshot())  # subscribe: hydrate from what was published (nothing yet)
    for kind, a, b in steps:
        if kind == "tick":
            inst = UNIVERSE[a]
            price[a] += b * 5
            update = VenueUpdate(
                a, inst.venue, next(update_id) if VENUES[inst.venue] else None,
                clock.wall_ns() + a, price[a] - 5, price[a] + 5, price[a], 100,
            )  # fmt: skip
            for h in handlers:
                if h.venue == inst.venue:
                    h.on_venue([update])
            advance(1)  # venue timestamps strictly increase per symbol
        elif kind == "wait":
            advance(a)
        elif kind == "restart":
            handlers[a].stop()
            advance(3)
            handlers[a].start()
        else:
            stalled = bool(a)
            flush()
    stalled = False
    advance(600)  # past every lag and fence: the last updates reach the screen

    assert terminal.stats.regressions == 0
    assert terminal.stats.gaps == 0  # the ring never delivered a delta on a stale base
    assert terminal.stats.stale == 0  # nothing older than the screen was ever sent
    for key, quotes in rendered.items():
        versions = [q.version for q in quotes]
        assert all(x < y for x, y in itertools.pairwise(versions)), key
        seqs = [q.seq for q in quotes]  # ids and timestamps never restart: older update = lower
        assert all(x < y for x, y in itertools.pairwise(seqs)), key
    for inst in UNIVERSE:
        published = sequencer.published(inst.iid)
        if published is None:
            continue
        shown = terminal.view[inst.key]
        assert (shown.epoch, shown.seq) == (published.epoch, published.seq), inst.key
        assert (shown.bid, shown.ask, shown.last) == (published.bid, published.ask, published.last)
