"""One key grammar everywhere a key is born: the simulator's universe, fixtures, wire vectors.

A key the node can stream must be one a terminal can subscribe (issue: replay keys such as
`xnas:aapl` that no subscribe could name). ``model.key_problem`` is the grammar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Instrument, key_problem
from monotape.platform.wire import message_vectors
from monotape.platform.wire.requests import Subscribe, decode_request, encode_request, judge

TESTS = Path(__file__).parents[1]


def check_keys(universe: list[Instrument]) -> None:
    for ins in universe:
        assert key_problem(ins.key) is None, (ins.key, key_problem(ins.key))
        assert ins.key == f"{ins.venue}:{ins.symbol}"
    assert len({i.key for i in universe}) == len(universe)


def test_the_default_universe_obeys_the_grammar_and_every_key_subscribes() -> None:
    universe = build_universe()
    check_keys(universe)
    ids = {i.key: i.iid for i in universe}
    for start in range(0, len(universe), 256):  # every key, through the real request path
        keys = [i.key for i in universe[start : start + 256]]
        request = decode_request(encode_request(Subscribe(req=1, keys=keys)))
        assert isinstance(request, Subscribe)
        ruling = judge(
            request, ids, frozenset(), frozenset(), max_subscriptions=256, max_priority=8
        )
        assert ruling.refused == [] and len(ruling.iids) == len(keys)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 999), st.integers(1, 3000), st.integers(0, 2**32 - 1))
def test_any_universe_obeys_the_grammar(venues: int, instruments: int, seed: int) -> None:
    check_keys(build_universe(venues=venues, instruments=instruments, seed=seed))


def _keys_in(value: Any) -> list[str]:
    """Every ``key`` field, and every ``venue``+``symbol`` pair, anywhere in a JSON value."""
    out: list[str] = []
    if isinstance(value, dict):
        if isinstance(value.get("key"), str):
            out.append(value["key"])
        if isinstance(value.get("venue"), str) and isinstance(value.get("symbol"), str):
            out.append(f"{value['venue']}:{value['symbol']}")
        for v in value.values():
            out.extend(_keys_in(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(_keys_in(v))
    return out


@pytest.mark.parametrize("path", sorted((TESTS / "replays").glob("*.ndjson")), ids=str)
def test_replay_fixtures_obey_the_grammar(path: Path) -> None:
    keys = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            keys.extend(_keys_in(json.loads(line)))
    assert keys, f"{path} names no keys"
    assert [k for k in keys if key_problem(k) is not None] == []


def test_wire_vector_dictionary_obeys_the_grammar() -> None:
    check_keys(message_vectors.INSTRUMENTS)
