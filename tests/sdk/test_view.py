"""The terminal's screen fed messages directly, with a fake clock: the guard, the chain, gaps and
their resyncs, lines put back on a re-subscribe, dictionaries renumbered across nodes."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.model import Instrument, Tick, Version
from monotape.platform.sdk.view import (
    RESYNC_RETRY_NS,
    ChainLink,
    Drop,
    DropReason,
    Source,
    TerminalView,
)
from monotape.platform.wire import codec

KEYS = [f"XNAS:S{i}" for i in range(60)]
INSTRUMENTS = [Instrument(i, k, "XNAS", k[5:], 2, 1) for i, k in enumerate(KEYS)]


def hello(instruments: list[Instrument] = INSTRUMENTS) -> codec.Hello:
    return codec.Hello(2, "t", 40, 256, 8, instruments)


def screen(held: list[str] = KEYS) -> tuple[TerminalView, FakeClock]:
    clock = FakeClock()
    view = TerminalView(clock)
    view.receive(hello())
    view.hold(held)
    return view, clock


def full(iid: int, seq: int, bid: int = 100, epoch: int = 1) -> codec.Record:
    return codec.Record(iid, epoch, seq, False, 0, 0, bid, bid + 1, bid, 10)


def delta(iid: int, base_seq: int, seq: int, d: int = 1) -> codec.Record:
    return codec.Record(iid, 1, seq, True, 1, base_seq, d, d, d, 10)


def test_a_burst_of_gaps_is_one_resync_and_what_never_came_is_asked_again() -> None:
    view, clock = screen()
    view.receive(codec.Snapshot(1, [full(i, 5) for i in range(60)]))
    # 50 deltas on a base nobody holds (seq 4, not 5): 50 gaps, never applied
    step = view.receive(codec.Frame(2, [delta(i, 4, 6) for i in range(50)]))
    assert step.resync and step.rendered == []
    assert {d.reason for d in step.dropped} == {DropReason.GAP}
    assert view.stats.gaps == 50 and view.stats.regressions == 0
    assert view.take_resyncs() == KEYS[:50]  # one request's worth, not 50 (the limit is 20/s)
    assert view.take_resyncs() == []  # asked: not due again yet
    # another delta for a gapped symbol waits for its snapshot: no second gap
    step = view.receive(codec.Frame(3, [delta(0, 6, 7)]))
    assert [d.reason for d in step.dropped] == [DropReason.AWAITING_SNAPSHOT]
    assert view.stats.gaps == 50
    # the snapshot for ten of them arrives; the others' request was lost
    view.receive(codec.Snapshot(3, [full(i, 7) for i in range(10)]))
    assert view.quotes[KEYS[0]].seq == 7 and view.chain(KEYS[0]) == ChainLink(
        1, 7, 100, 101, 100, 10
    )
    clock.advance(RESYNC_RETRY_NS)
    assert view.receive(codec.Heartbeat(3, 0)).resync
    assert view.take_resyncs() == []  # exactly the retry period: not yet
    clock.advance(1)
    assert view.take_resyncs() == KEYS[10:50]  # asked again, only for the missing ones
    assert view.resyncing == KEYS[10:50]


def test_a_heartbeat_with_no_gap_asks_nothing() -> None:
    view, _ = screen()
    assert not view.receive(codec.Heartbeat(1, 0)).resync
    assert view.stats.heartbeats == 1


def test_resubscribing_puts_the_line_back_quietly() -> None:
    view, _ = screen()
    view.receive(codec.Snapshot(1, [full(0, 5)]))
    assert KEYS[0] in view.quotes
    view.release([KEYS[0]])  # what unsubscribe does
    assert KEYS[0] not in view.quotes
    step = view.receive(codec.Frame(2, [delta(0, 5, 6)]))  # in flight when it was unsubscribed
    assert step.rendered == [] and step.dropped[0].reason is DropReason.OFF_WATCHLIST
    assert KEYS[0] not in view.quotes
    view.hold([KEYS[0]])  # subscribe again: the snapshot is what the screen last showed
    step = view.receive(codec.Snapshot(3, [full(0, 6, bid=101)]))
    assert step.rendered == []  # not rendered twice...
    assert step.dropped == [Drop(KEYS[0], (1, 6), Source.SNAPSHOT, DropReason.DUPLICATE)]
    assert view.quotes[KEYS[0]].seq == 6  # ...but back on the watchlist


def test_priority_and_the_conflated_copy_render_once() -> None:
    view, _ = screen()
    view.receive(codec.Snapshot(1, [full(0, 5)]))
    step = view.receive(codec.PriorityUpdate(full(0, 6, bid=103)))
    assert [(q.version, q.source) for q in step.rendered] == [((1, 6), Source.PRIORITY)]
    step = view.receive(codec.Frame(2, [delta(0, 5, 6, d=3)]))  # the frame carries it too
    assert step.rendered == [] and step.dropped[0].reason is DropReason.DUPLICATE
    assert view.chain(KEYS[0]) == ChainLink(1, 6, 103, 104, 103, 10)  # the chain moved on
    step = view.receive(codec.Frame(3, [delta(0, 6, 7)]))
    assert [q.bid for q in step.rendered] == [104]
    assert view.stats.duplicates == 1 and view.stats.regressions == 0
    assert view.stats.drops == {DropReason.DUPLICATE: 1}


def test_a_record_behind_its_own_chain_is_a_regression_never_rendered() -> None:
    view, _ = screen()
    view.receive(codec.Snapshot(1, [full(0, 5)]))
    view.receive(codec.Frame(2, [delta(0, 5, 6)]))
    step = view.receive(codec.Frame(3, [full(0, 4)]))  # a server bug: older than the chain
    assert step.rendered == [] and step.dropped[0].reason is DropReason.BEHIND_CHAIN
    assert view.stats.regressions == 1
    assert view.quotes[KEYS[0]].seq == 6


def test_the_glass_holds_across_connections_and_renumbered_dictionaries() -> None:
    view, _ = screen()
    view.receive(codec.Snapshot(1, [full(0, 9), full(1, 9)]))
    view.new_connection()
    assert view.chain(KEYS[0]) is None  # the chain starts afresh
    # the next node numbers the symbols the other way round, and lags: its snapshot is older
    renumbered = [Instrument(59 - i.iid, i.key, i.venue, i.symbol, 2, 1) for i in INSTRUMENTS]
    view.receive(hello(renumbered))
    assert view.ids[KEYS[0]] == 59 and view.shown(KEYS[0]) == (1, 9)
    step = view.receive(codec.Snapshot(1, [full(59, 8), full(58, 10)]))
    assert [(q.key, q.seq) for q in step.rendered] == [(KEYS[1], 10)]
    assert [(d.key, d.reason) for d in step.dropped] == [(KEYS[0], DropReason.STALE)]
    # its frames chain from its own snapshot: (1, 9) is still the glass, (1, 10) renders
    assert view.receive(codec.Frame(2, [delta(59, 8, 9)])).rendered == []
    assert [q.seq for q in view.receive(codec.Frame(3, [delta(59, 9, 10)])).rendered] == [10]
    assert view.stats.gaps == 0 and view.stats.regressions == 0


# -- the property: a server that is right, a network that loses, nodes that lag ----------------

N = 4
frames = st.tuples(st.just("frame"), st.integers(1, 2**N - 1), st.booleans())  # who ticks; lost
op = st.one_of(
    frames,
    frames,  # twice as likely as the others
    st.tuples(st.just("priority"), st.integers(0, N - 1), st.just(False)),
    st.tuples(st.just("resync"), st.just(0), st.just(False)),
    st.tuples(st.just("reconnect"), st.integers(0, 3), st.just(False)),  # the next node lags
    st.tuples(st.just("release"), st.integers(0, N - 1), st.just(False)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=120), st.integers(0, 2**32))
def test_the_glass_never_goes_backwards_and_always_shows_the_true_price(
    ops: list[tuple[str, int, bool]], seed: int
) -> None:
    rng = random.Random(seed)
    insts = INSTRUMENTS[:N]
    keys = [i.key for i in insts]
    truth: list[list[Tick]] = [[Tick(i, "XNAS", 1, 1, 0, 1000, 1001, 1000, 1)] for i in range(N)]
    sent: dict[int, Tick] = {}  # this connection: the version the last record named, per symbol
    lag = 0
    view = TerminalView(FakeClock())
    view.receive(hello(insts))
    view.hold(keys)

    def record(t: Tick) -> codec.Record:
        return codec.Record(t.iid, t.epoch, t.seq, False, 0, 0, t.bid, t.ask, t.last, t.size)

    def snapshot(iids: list[int]) -> codec.Snapshot:
        ticks = [truth[i][max(0, len(truth[i]) - 1 - lag)] for i in iids]
        sent.update({t.iid: t for t in ticks})
        return codec.Snapshot(1, [record(t) for t in ticks])

    shown: dict[str, list[Version]] = defaultdict(list)

    def feed(msg: codec.ServerMessage) -> None:
        for q in view.receive(msg).rendered:
            shown[q.key].append(q.version)
            t = next(t for t in truth[q.iid] if (t.epoch, t.seq) == q.version)
            assert (q.bid, q.ask, q.last) == (t.bid, t.ask, t.last), "a delta on the wrong base"
        for key in keys:  # what the chain holds is the truth at its version, rendered or not
            link = view.chain(key)
            if link is not None:
                t = next(t for t in truth[view.ids[key]] if (t.epoch, t.seq) == link.version)
                assert (link.bid, link.ask, link.last) == (t.bid, t.ask, t.last), "a wrong base"

    feed(snapshot(list(range(N))))
    for kind, arg, lost in ops:
        if kind == "frame":
            for i in (i for i in range(N) if arg >> i & 1):
                t = truth[i][-1]
                move = rng.randint(-5, 5) or 1
                truth[i].append(Tick(i, "XNAS", 1, t.seq + 1, 0, t.bid + move, t.ask - move, 0, 1))
            records = []
            for i, t in sent.items():
                new = truth[i][-1]
                if (new.epoch, new.seq) > (t.epoch, t.seq):
                    records.append(codec.encode_delta_record(t, new))
                    sent[i] = new
            if not lost and records:  # through the codec: the int64 deltas a node sends
                feed(codec.decode_message(codec.encode_frame(2, records)))
        elif kind == "priority":
            feed(codec.PriorityUpdate(record(truth[arg][-1])))
        elif kind == "resync":
            due = view.take_resyncs()
            if due:
                feed(snapshot([view.ids[k] for k in due]))
        elif kind == "reconnect":
            lag = arg
            view.new_connection()
            sent.clear()
            feed(snapshot([view.ids[k] for k in view.watchlist]))
        elif kind == "release":
            view.release([keys[arg]])
    for key, versions in shown.items():
        assert versions == sorted(set(versions)), f"{key} went backwards: {versions}"
    for key, quote in view.quotes.items():
        assert view.shown(key) == quote.version


def test_every_quote_names_the_frame_it_came_in() -> None:
    """A max_hz terminal checks its frames by number: each quote carries its message's frame_no
    (a priority update carries none)."""
    view, _ = screen(KEYS[:2])
    step = view.receive(codec.Snapshot(40, [full(0, 5), full(1, 5)]))
    assert [q.frame_no for q in step.rendered] == [40, 40]
    step = view.receive(codec.Frame(45, [delta(0, 5, 6), delta(1, 5, 6)]))
    assert [(q.key, q.frame_no, q.source) for q in step.rendered] == [
        (KEYS[0], 45, Source.FRAME),
        (KEYS[1], 45, Source.FRAME),
    ]
    step = view.receive(codec.PriorityUpdate(full(0, 7)))
    assert [(q.frame_no, q.source) for q in step.rendered] == [(None, Source.PRIORITY)]
    assert view.quotes[KEYS[1]].frame_no == 45
