"""sdk/staleness.py and the view's ``stale``: the watchdog, the grid and venues, each cleared
by its own record (docs/wire.md, STALE)."""

from __future__ import annotations

from monotape.clock import FakeClock
from monotape.platform.model import Instrument, Tick
from monotape.platform.sdk.staleness import STALE_AFTER_MS, Staleness
from monotape.platform.sdk.view import TerminalView
from monotape.platform.wire import codec

HELLO = codec.Hello(
    2,
    "t",
    40,
    256,
    8,
    [
        Instrument(0, "XNAS:AAPL", "XNAS", "AAPL", 2, 1),
        Instrument(1, "EBS:EUR/USD", "EBS", "EUR/USD", 5, 1),
    ],
)


def _stale(frame_no: int, grid: int, venues: list[tuple[str, int]]) -> codec.Stale:
    return codec.Stale(frame_no, grid, [codec.StaleVenue(v, s) for v, s in venues])


def test_the_watchdog_marks_everything_after_silence_and_any_message_clears_it() -> None:
    clock = FakeClock()
    s = Staleness(clock)
    assert not s.is_stale("XNAS:AAPL")  # nothing heard yet: nothing shown
    s.on_message(codec.Heartbeat(1, 1))
    heard_wall = clock.wall_ns() // 1_000_000
    clock.advance_ms(STALE_AFTER_MS)
    assert not s.is_stale("XNAS:AAPL")  # exactly the limit: still live
    clock.advance(1)
    assert s.since_ms("XNAS:AAPL") == heard_wall and s.is_stale("EBS:EUR/USD")
    s.heard()  # an ACK is a sign of life too
    assert not s.is_stale("XNAS:AAPL")


def test_a_grid_stall_marks_every_symbol_and_the_next_frame_clears_it() -> None:
    s = Staleness(FakeClock())
    s.on_message(_stale(9, 1_234, []))
    assert s.since_ms("XNAS:AAPL") == 1_234 and s.since_ms("EBS:EUR/USD") == 1_234
    s.on_message(codec.Heartbeat(9, 2_000))  # heartbeats flow while the grid is stalled
    assert s.is_stale("XNAS:AAPL")
    s.on_message(codec.Frame(10, []))
    assert not s.is_stale("XNAS:AAPL")


def test_a_down_venue_marks_its_symbols_only_until_a_stale_without_it() -> None:
    view = TerminalView(FakeClock())
    view.adopt(HELLO)
    view.receive(_stale(9, 0, [("XNAS", 500)]))
    assert view.stale("XNAS:AAPL") and not view.stale("EBS:EUR/USD")
    assert view.staleness.since_ms("XNAS:AAPL") == 500
    tick = Tick(0, "XNAS", 1, 42, 0, 10001, 10002, 10001, 300)
    rec = codec.decode_record(codec.encode_full_record(tick))  # the down venue's last price
    view.hold(["XNAS:AAPL"])
    view.receive(codec.Snapshot(9, [rec]))
    assert view.quotes["XNAS:AAPL"].seq == tick.seq
    assert view.stale("XNAS:AAPL"), "a snapshot of a down venue is not a sign it is back"
    view.receive(codec.Frame(10, []))
    assert view.stale("XNAS:AAPL"), "a FRAME clears the grid, not a venue"
    view.receive(_stale(10, 0, []))
    assert not view.stale("XNAS:AAPL")


def test_a_new_connection_starts_from_its_own_writer_s_word() -> None:
    view = TerminalView(FakeClock())
    view.adopt(HELLO)
    view.receive(_stale(9, 77, [("EBS", 5)]))
    assert view.stale("XNAS:AAPL")
    view.adopt(HELLO)  # reconnected elsewhere: that writer says STALE after HELLO if it must
    assert not view.stale("XNAS:AAPL") and not view.stale("EBS:EUR/USD")
