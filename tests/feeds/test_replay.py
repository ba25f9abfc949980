"""Replay adapter: strict parsing, the dictionary, pacing, and the adversarial file's outcome."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monotape.clock import FakeClock
from monotape.platform.core.admit import APPLIED, VersionGuard
from monotape.platform.feeds.replay import (
    ReplayAdapter,
    ReplayError,
    expected_outcome,
    load_replay,
)

ADVERSARIAL = Path(__file__).parents[1] / "replays" / "adversarial.ndjson"
MS = 1_000_000
TS = 1_764_460_800_000_000_000


def line(**over: Any) -> str:
    base: dict[str, Any] = {
        "t_ms": 0,
        "venue": "XNAS",
        "symbol": "AAPL",
        "update_id": 1,
        "venue_ts_ns": TS,
        "epoch": 1,
        "handler": "A",
        "bid": "189.51",
        "ask": "189.53",
        "last": "189.52",
        "size": 300,
    }
    base.update(over)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "t.ndjson"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_adversarial_file_outcome() -> None:
    universe, lines = load_replay(ADVERSARIAL)
    assert [i.key for i in universe] == ["XNAS:AAPL", "XNAS:MSFT", "XNYS:IBM", "XNYS:KO"]
    assert len(lines) == 46
    # Hand-computed in the file's header comment, symbol by symbol:
    #   XNAS:AAPL 7 applied, 6 duplicates, 5 regressions; XNAS:MSFT 3, 4, 0
    #   XNYS:IBM  7 applied, 4 duplicates, 3 regressions; XNYS:KO   3, 3, 1
    assert expected_outcome(lines) == {"XNAS": (10, 10, 5), "XNYS": (10, 7, 4)}


def test_adversarial_file_never_moves_a_price_backwards() -> None:
    _, lines = load_replay(ADVERSARIAL)
    guard = VersionGuard()
    newest: dict[int, int] = {}
    for ln in lines:
        t = ln.tick
        if guard.check(t.iid, (t.epoch, t.seq)) == APPLIED:
            assert t.venue_ts_ns > newest.get(t.iid, 0), f"line {ln.lineno} went back"
            newest[t.iid] = t.venue_ts_ns


def test_ticks_are_normalized() -> None:
    universe, lines = load_replay(ADVERSARIAL)
    first = lines[0].tick
    assert (first.iid, first.venue, first.epoch, first.seq) == (0, "XNAS", 1, 1001)
    assert (first.bid, first.ask, first.last, first.handler) == (18951, 18953, 18952, "A")
    ibm = next(ln.tick for ln in lines if ln.tick.iid == 2)
    assert ibm.seq == ibm.venue_ts_ns  # no update ids: seq is the venue timestamp
    msft = next(ln.tick for ln in lines if ln.tick.iid == 1)
    assert universe[1].price_decimals == 4 and universe[1].tick_size == 50
    assert msft.bid == 4_152_150


def test_dictionary_is_inferred_without_a_header(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# comment",
        "",
        line(symbol="AAPL"),
        line(symbol="EURUSD", update_id=1, bid="1.0845", ask="1.08455", last="1.0845"),
        line(t_ms=1, symbol="AAPL", update_id=2, bid="189.5"),
    )
    universe, lines = load_replay(path)
    assert [(i.key, i.price_decimals, i.tick_size) for i in universe] == [
        ("XNAS:AAPL", 2, 1),
        ("XNAS:EURUSD", 5, 1),
    ]
    assert lines[2].tick.bid == 18950
    assert lines[2].lineno == 5


def test_optional_fields_default(tmp_path: Path) -> None:
    path = write(tmp_path, line(epoch=..., handler=..., update_id=...))
    _, (only,) = load_replay(path)
    assert (only.tick.epoch, only.tick.seq, only.tick.handler) == (0, TS, "")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (line(size="300"), "size"),
        (line(bid=189.51), "bid"),
        (line(bid="1e3"), "bid"),
        (line(t_ms=-1), "t_ms"),
        (line(colour="red"), "colour"),
        (line(venue=...), "venue"),
        (line(bid="189.515"), "bid"),  # more decimals than the declared 2
        (line(ask="189.535"), "ask"),
        (line(symbol="MSFT"), "symbol"),  # not declared
        (line(update_id=None), "update_id"),  # XNAS mixes ids and null
        (line(handler="handler-A"), "handler"),  # a batch's header holds 8 bytes
        (line(handler="Ä"), "handler"),  # ASCII only
    ],
)
def test_errors_name_line_and_field(tmp_path: Path, bad: str, field: str) -> None:
    header = json.dumps({"instruments": [{"key": "XNAS:AAPL", "decimals": 2, "tick_size": "0.01"}]})
    path = write(tmp_path, header, "# ok so far", line(update_id=2), bad)
    with pytest.raises(ReplayError, match=rf"line 4: .*{field}") as info:
        load_replay(path)
    assert str(path) in str(info.value)


def test_time_going_back_names_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, line(t_ms=1), line(t_ms=0.5, update_id=2))
    with pytest.raises(ReplayError, match="line 2: field `t_ms`: goes back"):
        load_replay(path)


def test_not_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, line(), "{oops")
    with pytest.raises(ReplayError, match="line 2"):
        load_replay(path)


def test_header_errors_name_the_field(tmp_path: Path) -> None:
    bad_tick = {"instruments": [{"key": "XNAS:AAPL", "decimals": 2, "tick_size": "0.001"}]}
    with pytest.raises(ReplayError, match=r"line 1: field `instruments\[0\]\.tick_size`"):
        load_replay(write(tmp_path, json.dumps(bad_tick), line()))
    bad_key = {"instruments": [{"key": "AAPL", "decimals": 2, "tick_size": "0.01"}]}
    with pytest.raises(ReplayError, match=r"line 1: .*key"):
        load_replay(write(tmp_path, json.dumps(bad_key), line()))
    off_grid = {"instruments": [{"key": "XNAS:AAPL", "decimals": 2, "tick_size": "0.05"}]}
    with pytest.raises(ReplayError, match=r"line 2: field `bid`: off the XNAS:AAPL tick grid"):
        load_replay(write(tmp_path, json.dumps(off_grid), line()))


def test_pacing_with_fake_clock(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        line(t_ms=0, update_id=1),
        line(t_ms=10, update_id=2),
        line(t_ms=10, update_id=3),
        line(t_ms=25.5, update_id=4),
    )
    clock = FakeClock()
    adapter = ReplayAdapter(path, clock, speed=2.0, start_delay_ns=100 * MS)
    assert [i.key for i in adapter.universe] == ["XNAS:AAPL"]
    clock.advance_ms(99)
    assert adapter.step() == []
    clock.advance_ms(1)
    (first,) = adapter.step()
    assert first.seq == 1 and first.decoded_ns == clock.now_ns()
    clock.advance_ms(4.9)
    assert adapter.step() == []
    clock.advance_ms(0.1)  # 10 ms of file time at speed 2 = 5 ms
    assert [t.seq for t in adapter.step()] == [2, 3]
    assert not adapter.done
    clock.advance_ms(7.75)
    assert [t.seq for t in adapter.step()] == [4]
    assert adapter.done and adapter.step() == []


def test_adapter_rejects_bad_speed() -> None:
    with pytest.raises(ValueError, match="speed"):
        ReplayAdapter(ADVERSARIAL, FakeClock(), speed=0)
