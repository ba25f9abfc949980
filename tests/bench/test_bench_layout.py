"""The bench layout: rooms, names other issues cite, one typed row and no adapters. Imports
only: nothing here runs a benchmark."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import typing

import pytest

from bench.common import Row, row

bench_main = importlib.import_module("bench.__main__")  # `python -m bench`

# Other issues cite these by name: they stay findable (same module names, in a room).
CITED = ("bench_latency", "bench_fanout", "bench_storm", "bench_recording", "bench_codec")


def test_every_bench_lives_in_a_room_and_cited_names_are_found() -> None:
    found = bench_main.modules()
    for name in CITED:
        assert name in found, name
    rooms = {path.split(".")[1] for path in found.values()}
    assert {"micro", "fanout", "e2e"} <= rooms
    assert found["bench_latency"] == "bench.e2e.bench_latency"
    assert found["bench_storm"] == "bench.e2e.bench_storm"
    assert found["bench_fanout"] == "bench.fanout.bench_fanout"
    assert "bench_simulator" in found  # it has a run() now


def test_every_bench_declares_it_returns_rows() -> None:
    for name, path in bench_main.modules().items():
        if name == "bench_ingest_nats" and importlib.util.find_spec("nats") is None:
            continue
        mod = importlib.import_module(path)
        hints = typing.get_type_hints(mod.run)
        assert hints["return"] == list[Row], (name, hints["return"])


def test_a_row_of_another_shape_is_a_problem_not_adapted(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("bench_fake")
    old_shape = [{"benchmark": "b", "variant": "v", "value": 1.0, "unit": "u"}]
    monkeypatch.setattr(fake, "run", lambda quick: old_shape, raising=False)
    good = types.ModuleType("bench_good")
    monkeypatch.setattr(good, "run", lambda quick: [row("b", "v", 2.0, "u")], raising=False)
    monkeypatch.setitem(sys.modules, "bench_fake", fake)
    monkeypatch.setitem(sys.modules, "bench_good", good)
    monkeypatch.setattr(
        bench_main, "modules", lambda: {"bench_fake": "bench_fake", "bench_good": "bench_good"}
    )
    rows, problems = bench_main.collect(True, log=lambda _m: None)
    assert rows == [row("b", "v", 2.0, "u")]
    assert len(problems) == 1 and "bench_fake" in problems[0] and "Row" in problems[0]


def test_a_skipped_row_renders_with_its_reason() -> None:
    text = bench_main.table([Row("b", "v", None, "u", note="skipped: tool missing")])
    assert "| b | v | - | - | u | - | skipped: tool missing |" in text
