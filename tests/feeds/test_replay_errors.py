"""Replay files that are wrong: one line naming the file, the line and the field (issue 10, A7),
and well-formed lines whose ticks the wire cannot carry: refused one by one (A1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monotape.clock import FakeClock
from monotape.platform.feeds.replay import (
    MAX_T_MS,
    Refused,
    ReplayAdapter,
    ReplayError,
    load_replay,
)
from monotape.platform.feeds.validate import Refusal

TS = 1_764_460_800_000_000_000
HEADER = json.dumps(
    {
        "instruments": [
            {"key": "XNAS:AAPL", "decimals": 4, "tick_size": "0.0001"},
            {"key": "XNAS:BRK.B", "decimals": 2, "tick_size": "0.01"},
        ]
    }
)


def tick(**over: Any) -> str:
    base: dict[str, Any] = {
        "t_ms": 0, "venue": "XNAS", "symbol": "AAPL", "update_id": 1, "venue_ts_ns": TS,
        "epoch": 1, "handler": "A", "bid": "189.51", "ask": "189.53", "last": "189.52",
        "size": 300,
    }  # fmt: skip
    base.update(over)
    return json.dumps({k: v for k, v in base.items() if v is not ...}, ensure_ascii=False)


def write_bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bad.ndjson"
    path.write_bytes(data)
    return path


def refused_by(path: Path) -> ReplayError:
    with pytest.raises(ReplayError) as info:
        load_replay(path)
    message = str(info.value)
    assert "\n" not in message, "a replay error is one line"
    assert str(path) in message
    return info.value


def test_t_ms_1e303_is_one_line_naming_the_field(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, f"{tick()}\n{tick(t_ms=1e303, update_id=2)}\n".encode())
    message = str(refused_by(path))
    assert "line 2: field `t_ms`" in message


def test_t_ms_out_of_json_range(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, tick(t_ms=1).replace('"t_ms": 1', '"t_ms": 1e400').encode())
    assert "line 1: field `t_ms`" in str(refused_by(path))


def test_a_far_future_t_ms_is_refused_not_sat_through(tmp_path: Path) -> None:
    # Absolute ms since 1970 where an offset was meant: it would wait 55 years.
    far = 1_764_460_800_000
    path = write_bytes(tmp_path, f"{tick()}\n{tick(t_ms=far, update_id=2)}\n".encode())
    message = str(refused_by(path))
    assert "line 2: field `t_ms`" in message and "from the start of the replay" in message
    # The last t_ms a file may have is accepted.
    ok = write_bytes(tmp_path, f"{tick()}\n{tick(t_ms=MAX_T_MS, update_id=2)}\n".encode())
    assert len(load_replay(ok)[1]) == 2


def test_a_long_pause_is_reported_by_the_adapter(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, f"{tick()}\n{tick(t_ms=90_000, update_id=2)}\n".encode())
    adapter = ReplayAdapter(path, FakeClock())
    assert adapter.long_gaps == [(2, 90_000.0)]


def test_invalid_utf8_names_the_line_not_a_byte_offset(tmp_path: Path) -> None:
    good = tick().encode()
    bad = tick(update_id=3, handler="AB").encode().replace(b'"AB"', b'"A\xffB"')
    path = write_bytes(tmp_path, b"\n".join([good, b"# a comment", bad, good]) + b"\n")
    message = str(refused_by(path))
    assert "line 3: invalid UTF-8 at column" in message


def test_a_raw_line_separator_inside_a_string_is_valid_ndjson(tmp_path: Path) -> None:
    # U+2028 and U+2029 are legal unescaped in JSON strings; only LF ends an NDJSON line.
    # The handler field is printable ASCII (a batch's header), so the separator is refused as
    # that field's value on its own line 2: the line was read whole, not cut at U+2028.
    path = write_bytes(
        tmp_path,
        "\n".join(
            [tick(handler="A"), tick(update_id=2, handler="C\u2029D"), tick(update_id=3)]
        ).encode("utf-8"),
    )
    with pytest.raises(ReplayError, match="line 2: field `handler`"):
        load_replay(path)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"", "no tick lines"),
        (b"\n\n# only comments\n", "no tick lines"),
        (HEADER.encode() + b"\n", "only an instrument header"),
    ],
)
def test_an_empty_file_is_refused_with_a_clear_line(tmp_path: Path, data: bytes, what: str) -> None:
    message = str(refused_by(write_bytes(tmp_path, data)))
    assert "nothing to replay" in message and what in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    message = str(refused_by(tmp_path / "nope.ndjson"))
    assert "cannot read" in message


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"venue": "xnas"}, "venue"),  # lower case: the subscribe grammar refuses it
        ({"venue": "EBS/LDN"}, "venue"),
        ({"venue": "A:B"}, "venue"),
        ({"symbol": "EUR USD"}, "symbol"),
        ({"symbol": "X" * 41}, "symbol"),
    ],
)
def test_keys_outside_the_grammar_are_refused_at_load(
    tmp_path: Path, over: dict[str, str], field: str
) -> None:
    path = write_bytes(tmp_path, f"{tick()}\n{tick(update_id=2, **over)}\n".encode())
    message = str(refused_by(path))
    assert f"line 2: field `{field}`" in message and "cannot be subscribed" in message


def test_declared_keys_outside_the_grammar_are_refused(tmp_path: Path) -> None:
    header = {"instruments": [{"key": "EBS/LDN:EURUSD", "decimals": 5, "tick_size": "0.00001"}]}
    path = write_bytes(tmp_path, f"{json.dumps(header)}\n{tick()}\n".encode())
    message = str(refused_by(path))
    assert "line 1: field `instruments[0].key`" in message and "cannot be subscribed" in message


def test_type_errors_name_the_field(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, f"{tick()}\n{tick(size='300', update_id=2)}\n".encode())
    assert "line 2: field `size`: Expected `int`, got `str`" in str(refused_by(path))


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"bid": "999999999999999.0000"}, Refusal.PRICE),  # valid decimal, overflows int64 x 1e4
        ({"last": "-999999999999999.0000"}, Refusal.PRICE),
        ({"update_id": 2**64}, Refusal.SEQ),
        ({"update_id": -2}, Refusal.SEQ),
        ({"epoch": 2**64}, Refusal.EPOCH),
        ({"epoch": -1}, Refusal.EPOCH),
        ({"size": 2**64}, Refusal.SIZE),
        ({"size": -1}, Refusal.SIZE),
        ({"venue_ts_ns": 2**64 + 5}, Refusal.TIMESTAMP),
        ({"venue_ts_ns": 0}, Refusal.TIMESTAMP),
    ],
)
def test_poison_lines_are_refused_one_by_one(
    tmp_path: Path, over: dict[str, Any], reason: Refusal
) -> None:
    body = [HEADER, tick(), tick(**{"t_ms": 1, "update_id": 2, **over}), tick(t_ms=2, update_id=3)]
    path = write_bytes(tmp_path, ("\n".join(body) + "\n").encode())
    refused: list[Refused] = []
    _, lines = load_replay(path, refused=refused)
    assert [line.lineno for line in lines] == [2, 4]  # the rest of the file replays
    assert [(r.lineno, r.venue, r.reason) for r in refused] == [(3, "XNAS", reason)]


def test_a_negative_price_is_a_price(tmp_path: Path) -> None:
    body = [HEADER, tick(bid="-0.0100", ask="0.0100", last="-0.0050")]
    _, (only,) = load_replay(write_bytes(tmp_path, ("\n".join(body) + "\n").encode()))
    assert (only.tick.bid, only.tick.last) == (-100, -50)


def test_a_file_of_nothing_but_poison_is_refused_whole(tmp_path: Path) -> None:
    body = [HEADER, tick(size=-1), tick(t_ms=1, update_id=2, size=-1)]
    message = str(refused_by(write_bytes(tmp_path, ("\n".join(body) + "\n").encode())))
    assert "every tick was refused" in message and "line 2" in message


def test_the_adapter_keeps_what_it_refused(tmp_path: Path) -> None:
    body = [HEADER, tick(), tick(t_ms=1, update_id=2, epoch=2**64)]
    adapter = ReplayAdapter(write_bytes(tmp_path, ("\n".join(body) + "\n").encode()), FakeClock())
    assert [(r.lineno, r.reason) for r in adapter.refused] == [(3, Refusal.EPOCH)]
