"""The glass report's pure part, fed by a real view: cumulative counts since the connection
opened, sent only when a count moved past what the node accepted, with the last offender."""

from __future__ import annotations

import itertools

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from monotape.clock import FakeClock
from monotape.platform.model import Instrument
from monotape.platform.sdk.glass import REPORT_EVERY_S, GlassReport
from monotape.platform.sdk.view import Offence, TerminalView, ViewStats
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Report, decode_request, encode_request

KEYS = [f"XNAS:S{i}" for i in range(4)]
INSTRUMENTS = [Instrument(i, k, "XNAS", k[5:], 2, 1) for i, k in enumerate(KEYS)]


def screen() -> TerminalView:
    view = TerminalView(FakeClock())
    view.receive(codec.Hello(2, "t", 40, 256, 8, INSTRUMENTS))
    view.hold(KEYS)
    view.receive(codec.Snapshot(1, [full(i, 5) for i in range(4)]))
    return view


def full(iid: int, seq: int) -> codec.Record:
    return codec.Record(iid, 1, seq, False, 0, 0, 100, 101, 100, 10)


def delta(iid: int, base_seq: int, seq: int) -> codec.Record:
    return codec.Record(iid, 1, seq, True, 1, base_seq, 1, 1, 1, 10)


def regress(view: TerminalView, iid: int, seq: int) -> None:
    """A priority update at or below the previous one: a regression the guard drops."""
    view.receive(codec.PriorityUpdate(full(iid, seq + 1)))
    view.receive(codec.PriorityUpdate(full(iid, seq)))


def due(glass: GlassReport, view: TerminalView, req: itertools.count[int]) -> Report | None:
    return glass.due(view.stats, view.last_regression, view.last_gap, req.__next__)


def test_the_view_names_its_last_regression_and_gap() -> None:
    view = screen()
    regress(view, 1, 20)
    assert view.stats.regressions == 1
    assert view.last_regression == Offence("XNAS:S1", (1, 21), (1, 20))
    view.receive(codec.Frame(2, [delta(2, 4, 6)]))  # the chain holds (1, 5), not (1, 4)
    assert view.stats.gaps == 1
    assert view.last_gap == Offence("XNAS:S2", (1, 5), (1, 6))
    view.receive(codec.Frame(3, [delta(3, 9, 10)]))
    assert view.last_gap == Offence("XNAS:S3", (1, 5), (1, 10))
    # a delta for a symbol the chain never held: held is (0, 0)
    fresh = TerminalView(FakeClock())
    fresh.receive(codec.Hello(2, "t", 40, 256, 8, INSTRUMENTS))
    fresh.hold(KEYS)
    fresh.receive(codec.Frame(1, [delta(0, 4, 6)]))
    assert fresh.last_gap == Offence("XNAS:S0", (0, 0), (1, 6))


def test_a_healthy_terminal_reports_nothing() -> None:
    view = screen()
    glass = GlassReport(view.stats)
    req = itertools.count(1)
    for n in range(2, 50):
        view.receive(codec.Frame(n, [delta(0, n + 3, n + 4)]))
    assert view.stats.regressions == view.stats.gaps == 0
    assert due(glass, view, req) is None
    assert REPORT_EVERY_S == 10.0


def test_counts_are_cumulative_for_the_connection_and_sent_when_they_move() -> None:
    view = screen()
    regress(view, 0, 10)  # before this connection: not this report's
    glass = GlassReport(view.stats)  # the connection opens
    req = itertools.count(7)
    regress(view, 1, 20)
    report = due(glass, view, req)
    assert report == Report(req=7, regressions=1, gaps=0, last=("XNAS:S1", 1, 21, 1, 20))
    assert due(glass, view, req) is not None  # not accepted yet (RATE_LIMITED): again
    glass.accepted(report)
    assert due(glass, view, req) is None  # nothing moved since the node took it
    view.receive(codec.Frame(2, [delta(2, 4, 6)]))
    second = due(glass, view, req)
    assert second is not None
    # cumulative: the regression is still counted; the last regression is still named (it is
    # what pages), the gap only shows in the count
    assert (second.regressions, second.gaps, second.last) == (1, 1, ("XNAS:S1", 1, 21, 1, 20))
    glass.accepted(second)
    assert due(glass, view, req) is None


def test_gaps_alone_name_the_last_gap() -> None:
    view = screen()
    glass = GlassReport(view.stats)
    view.receive(codec.Frame(2, [delta(2, 4, 6)]))
    report = due(glass, view, itertools.count(1))
    assert report is not None
    assert (report.regressions, report.gaps, report.last) == (0, 1, ("XNAS:S2", 1, 5, 1, 6))


def test_a_node_that_knows_no_report_is_asked_no_more() -> None:
    view = screen()
    glass = GlassReport(view.stats)
    regress(view, 1, 20)
    glass.unsupported()
    assert due(glass, view, itertools.count(1)) is None


def test_the_report_on_the_wire_is_one_map_of_exact_fields() -> None:
    with_last = Report(req=3, regressions=2, gaps=1, last=("XNAS:S1", 1, 21, 1, 20))
    assert msgspec.msgpack.decode(encode_request(with_last)) == {
        "type": "report",
        "req": 3,
        "regressions": 2,
        "gaps": 1,
        "last": ["XNAS:S1", 1, 21, 1, 20],
    }
    bare = Report(req=4, regressions=0, gaps=5)
    assert msgspec.msgpack.decode(encode_request(bare)) == {
        "type": "report",
        "req": 4,
        "regressions": 0,
        "gaps": 5,
    }
    assert decode_request(encode_request(with_last)) == with_last  # the node reads it back


@given(
    before=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
    steps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.booleans()), max_size=30),
)
def test_reports_never_go_backwards_and_track_the_connection(
    before: tuple[int, int], steps: list[tuple[int, int, bool]]
) -> None:
    """Whatever the order of offences and of the node's acceptances: every report carries the
    counts since the connection opened, never less than the last one accepted, and a report is
    due exactly when the counts differ from the last one accepted."""
    stats = ViewStats(regressions=before[0], gaps=before[1])
    glass = GlassReport(stats)
    req = itertools.count(1)
    accepted = (0, 0)
    for regressions, gaps, take in steps:
        stats.regressions += regressions
        stats.gaps += gaps
        report = glass.due(stats, None, None, req.__next__)
        now = (stats.regressions - before[0], stats.gaps - before[1])
        assert (report is None) == (now == accepted)
        if report is not None:
            assert (report.regressions, report.gaps) == now
            assert report.regressions >= accepted[0] and report.gaps >= accepted[1]
            if take:
                glass.accepted(report)
                accepted = now
