"""Bundles of tick batches (wire/bundle.py): the vectors read as they say; any batches round-trip
in order through messages of a given size; a cut at any byte refuses the bundle whole; a batch
whose header miscounts its ticks is refused alone and never misread as its neighbours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.wire.batch import (
    COLUMNS,
    HEADER,
    BatchError,
    TickBatch,
    batch_of,
    read_batch,
)
from monotape.platform.wire.bundle import bundles, is_bundle, pack, read_bundle

CASES = json.loads((Path(__file__).parent.parent / "vectors" / "batches.json").read_text())
BY_NAME = {c["name"]: bytes.fromhex(c["hex"]) for c in CASES["cases"]}


def _outcome(part: TickBatch | BatchError) -> str | bytes:
    return str(part.reason) if isinstance(part, BatchError) else part.buffer


@pytest.mark.parametrize("case", CASES["bundles"], ids=lambda c: c["name"])
def test_bundle_vectors(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["hex"])
    assert is_bundle(data)
    if case["refused"] is not None:
        with pytest.raises(BatchError) as refused:
            read_bundle(data)
        assert str(refused.value.reason) == case["refused"]
        return
    got = [_outcome(p) for p in read_bundle(data)]
    assert got == [BY_NAME.get(name, name) for name in case["batches"]]


def _batch(n: int, seq0: int, venue: str = "XNAS") -> TickBatch:
    cols = {name: np.arange(seq0, seq0 + n) for name, _ in COLUMNS}
    cols["iid"] = np.arange(n) % 7
    cols["flags"] = np.zeros(n, dtype=np.int64)
    return batch_of(venue, "A", 1, seq0, cols)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=12),
    max_bytes=st.integers(HEADER.size + 67 * 30, 6_000),
)
def test_any_batches_round_trip_in_order_within_the_message_size(
    sizes: list[int], max_bytes: int
) -> None:
    batches = [_batch(n, 100 * k) for k, n in enumerate(sizes)]
    back: list[bytes] = []
    for message, ticks in bundles(batches, max_bytes):
        assert len(message) <= max_bytes
        parts = read_bundle(message) if is_bundle(message) else [read_batch(message)]
        assert all(isinstance(p, TickBatch) for p in parts)
        assert ticks == sum(p.count for p in parts if isinstance(p, TickBatch))
        back += [p.buffer for p in parts if isinstance(p, TickBatch)]
    assert back == [b.buffer for b in batches]


def test_batches_go_in_one_message_when_they_fit() -> None:
    batches = [_batch(20, 100 * k, v) for k, v in enumerate(["XNAS", "XNYS", "ARCX"])]
    messages = list(bundles(batches, 60_000))
    assert len(messages) == 1 and messages[0][1] == 60
    (one,) = list(bundles(batches[:1], 60_000))
    assert one == (batches[0].buffer, 20)  # a single batch goes bare, never as a bundle of one
    with pytest.raises(ValueError, match="larger than a message"):
        list(bundles([_batch(30, 0)], 100))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 8), min_size=2, max_size=5), data=st.data())
def test_a_bundle_cut_at_any_byte_is_refused_whole(sizes: list[int], data: st.DataObject) -> None:
    message = pack([_batch(n, 10 * k) for k, n in enumerate(sizes)])
    cut = data.draw(st.integers(0, len(message) - 1))
    with pytest.raises(BatchError):
        read_bundle(message[:cut])


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 8), min_size=2, max_size=6),
    data=st.data(),
)
def test_a_miscounted_batch_is_refused_alone(sizes: list[int], data: st.DataObject) -> None:
    batches = [_batch(n, 10 * k) for k, n in enumerate(sizes)]
    bad = data.draw(st.integers(0, len(batches) - 1))
    wrong = data.draw(st.integers(0, 40).filter(lambda c: c != sizes[bad]))
    raw = bytearray(batches[bad].buffer)
    raw[8:12] = wrong.to_bytes(4, "little")  # the header's count
    tampered = TickBatch(bytes(raw), "XNAS", "A", 1, 0, sizes[bad])
    parts = read_bundle(pack([*batches[:bad], tampered, *batches[bad + 1 :]]))
    assert [_outcome(p) for p in parts] == [
        "length_mismatch" if k == bad else b.buffer for k, b in enumerate(batches)
    ]


def test_pack_wants_two_batches_at_least() -> None:
    with pytest.raises(ValueError, match="holds 2"):
        pack([_batch(1, 0)])
