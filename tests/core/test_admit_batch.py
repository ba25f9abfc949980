"""admit_run: the native pass and its pure-Python twin give the per-tick rule's verdicts, counts
and held versions for any batch (core/admit_batch.py). ``make native-sanitize`` runs this module
against an AddressSanitizer + UndefinedBehaviorSanitizer build named by ADMIT_SANITIZED_BUILD."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.core import admit_batch
from monotape.platform.core.admit import DUPLICATE, REGRESSION, admit
from monotape.platform.core.admit_batch import AdmitRun, VersionTable, python_admit_run
from monotape.platform.wire.batch import COLUMNS, batch_of
from tests.sanitized import load_sanitized

SANITIZED_BUILD = os.environ.get("ADMIT_SANITIZED_BUILD", "")


def _native() -> AdmitRun | None:
    if SANITIZED_BUILD:
        fn: AdmitRun = load_sanitized("sanitized._admit", SANITIZED_BUILD).admit_run
        return fn
    return admit_batch.admit_run if admit_batch.NATIVE else None


NATIVE = _native()
IMPLS: dict[str, AdmitRun] = {"python": python_admit_run}
if NATIVE is not None:
    IMPLS["native"] = NATIVE
SPACE = 8


def reference(
    runs: list[tuple[int, list[tuple[int, int]]]], held: dict[int, tuple[int, int]]
) -> list[list[int]]:
    """The per-tick rule, one tick after the other; then the superseded marks."""
    out = []
    for epoch, ticks in runs:
        verdicts = []
        for iid, seq in ticks:
            v = admit(held.get(iid), (epoch, seq))
            if v is DUPLICATE:
                verdicts.append(2)
            elif v is REGRESSION:
                verdicts.append(3)
            else:
                held[iid] = (epoch, seq)
                verdicts.append(0)
        seen: set[int] = set()
        for i in range(len(ticks) - 1, -1, -1):
            if verdicts[i] == 0:
                if ticks[i][0] in seen:
                    verdicts[i] = 1
                seen.add(ticks[i][0])
        out.append(verdicts)
    return out


runs_strategy = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.lists(st.tuples(st.integers(0, SPACE - 1), st.integers(0, 6)), max_size=20),
    ),
    max_size=6,
)


@pytest.mark.parametrize("impl", sorted(IMPLS))
@given(runs=runs_strategy, big=st.booleans())
def test_verdicts_counts_and_held_versions_are_the_per_tick_rule(
    impl: str, runs: list[tuple[int, list[tuple[int, int]]]], big: bool
) -> None:
    table = VersionTable(SPACE, run=IMPLS[impl])
    held: dict[int, tuple[int, int]] = {}
    expected = reference(runs, held)
    shift = 2**63 if big else 0  # seqs past int64 compare as the uint64s they are
    for (epoch, ticks), want in zip(runs, expected, strict=True):
        seq = np.array([s + shift for _, s in ticks], dtype=np.uint64)
        iid = np.array([i for i, _ in ticks], dtype=np.uint16)
        verdict, applied, dup, reg = table.admit(epoch, seq, iid)
        assert verdict.tolist() == want
        assert (applied, dup, reg) == (
            sum(v <= 1 for v in want), want.count(2), want.count(3),
        )  # fmt: skip
    for k in range(SPACE):
        got = table.held(k)
        exp = held.get(k)
        assert got == (None if exp is None else (exp[0], exp[1] + shift))
    assert not table._seen.any()  # the scratch is left clean


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_an_iid_outside_the_table_changes_nothing(impl: str) -> None:
    run = IMPLS[impl]
    he = np.full(4, -1, dtype=np.int64)
    hs = np.zeros(4, dtype=np.uint64)
    verdict = np.zeros(2, dtype=np.uint8)
    seen = np.zeros(4, dtype=np.uint8)
    seq = np.array([1, 2], dtype=np.uint64)
    with pytest.raises(IndexError):
        run(1, seq, np.array([1, 9], dtype=np.uint16), he, hs, verdict, seen)
    assert (he == -1).all() and not hs.any()


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_mismatched_columns_and_epochs_are_refused(impl: str) -> None:
    run = IMPLS[impl]
    he, hs = np.full(4, -1, dtype=np.int64), np.zeros(4, dtype=np.uint64)
    seen = np.zeros(4, dtype=np.uint8)
    one = np.zeros(1, dtype=np.uint16)
    with pytest.raises(ValueError):
        run(1, np.zeros(2, dtype=np.uint64), one, he, hs, np.zeros(1, np.uint8), seen)
    with pytest.raises(OverflowError):
        run(2**63, np.zeros(1, dtype=np.uint64), one, he, hs, np.zeros(1, np.uint8), seen)
    with pytest.raises(TypeError):  # a held table must be writable
        ro = np.zeros(4, dtype=np.uint64)
        ro.setflags(write=False)
        run(1, np.zeros(1, dtype=np.uint64), one, he, ro, np.zeros(1, np.uint8), seen)


def test_the_native_pass_is_built_here() -> None:
    if os.environ.get("CI", "").lower() == "true":
        assert NATIVE is not None, "the native admit pass did not build (setup.py)"


INTO: dict[str, admit_batch.AdmitInto] = {"python": admit_batch.python_admit_into}
if NATIVE is not None:
    INTO["native"] = (
        load_sanitized("sanitized._admit", SANITIZED_BUILD).admit_into
        if SANITIZED_BUILD
        else admit_batch.admit_into
    )


def _over_a_buffer(fn: admit_batch.AdmitBatch) -> admit_batch.AdmitInto:
    """``admit_batch`` (the same rule over a tick batch's own buffer) as an ``admit_into``: the
    columns packed into a batch first, so every admit_into test holds it to the same rows."""

    def into(
        epoch: int, venue: int, handler: int, now: int, cols: tuple[Any, ...], state: Any
    ) -> tuple[int, int, int]:
        if len(cols) != 9:
            raise TypeError("9 columns")
        names = ("seq", "iid", "bid", "ask", "last", "size", "venue_ts", "recv_ts")
        columns = dict(zip(names, cols[:8], strict=True))
        n = len(cols[1])
        columns |= {"update_id": np.zeros(n, np.uint64), "flags": np.zeros(n, np.uint8)}
        batch = batch_of("XNAS", "A", 0, 0, columns)
        return fn(epoch, venue, handler, now, batch.buffer, n, cols[8], state)

    return into


INTO["batch-python"] = _over_a_buffer(admit_batch.python_admit_batch)
if NATIVE is not None:
    INTO["batch-native"] = _over_a_buffer(
        load_sanitized("sanitized._admit", SANITIZED_BUILD).admit_batch
        if SANITIZED_BUILD
        else admit_batch.admit_batch
    )


def test_admit_batch_refuses_a_buffer_its_count_disagrees_with() -> None:
    cols = {name: np.ones(2, dtype) for name, dtype in COLUMNS}
    batch = batch_of("XNAS", "A", 0, 0, cols)
    fns = [admit_batch.python_admit_batch] + ([admit_batch.admit_batch] if NATIVE else [])
    for fn in fns:
        for buffer, n, verdict in ((batch.buffer[:-1], 2, 2), (batch.buffer, 3, 2),
                                   (batch.buffer, 2, 1)):  # fmt: skip
            state = _state(4)
            with pytest.raises(ValueError):
                fn(1, 0, 0, 5, buffer, n, np.empty(verdict, np.uint8), state)
            assert (state[0] == -1).all()


def _state(space: int) -> tuple[np.ndarray, ...]:
    i64 = [np.zeros(space, dtype=np.int64) for _ in range(7)]
    return (
        np.full(space, -1, dtype=np.int64), np.zeros(space, dtype=np.uint64), i64[0], i64[1],
        i64[2], np.zeros(space, dtype=np.uint64), i64[3], i64[4], i64[5],
        np.zeros(space, dtype=np.uint16), np.zeros(space, dtype=np.uint16),
        np.zeros(space, dtype=np.uint8),
    )  # fmt: skip


@pytest.mark.parametrize("impl", sorted(INTO))
@given(runs=runs_strategy)
def test_admit_into_writes_the_latest_applied_tick_of_each_instrument(
    impl: str, runs: list[tuple[int, list[tuple[int, int]]]]
) -> None:
    state = _state(SPACE)
    held: dict[int, tuple[int, int]] = {}
    expected = reference(runs, dict(held))
    rows: dict[int, tuple[int, ...]] = {}
    for r, ((epoch, ticks), want) in enumerate(zip(runs, expected, strict=True)):
        n = len(ticks)
        seq = np.array([s for _, s in ticks], dtype=np.uint64)
        iid = np.array([i for i, _ in ticks], dtype=np.uint16)
        prices = np.arange(n, dtype=np.int64) + 100 * r
        verdict = np.empty(n, dtype=np.uint8)
        cols = (seq, iid, prices, prices + 1, prices + 2, seq, prices + 3, prices + 4, verdict)
        got = INTO[impl](epoch, 3, 4, 77 + r, cols, state)
        assert [0 if v == 1 else v for v in want] == verdict.tolist()
        assert got == (sum(v <= 1 for v in want), want.count(2), want.count(3))
        for i, v in enumerate(want):
            if v <= 1:
                p = int(prices[i])
                rows[ticks[i][0]] = (epoch, ticks[i][1], p, p + 1, p + 2, ticks[i][1], p + 3,
                                     p + 4, 77 + r, 3, 4, 1)  # fmt: skip
    for k in range(SPACE):
        row = tuple(int(a[k]) for a in state)
        assert row == rows.get(k, (-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))


@pytest.mark.parametrize("impl", sorted(INTO))
def test_admit_into_writes_nothing_for_a_batch_with_an_unknown_iid(impl: str) -> None:
    state = _state(4)
    one = np.ones(2, dtype=np.int64)
    cols = (np.ones(2, np.uint64), np.array([1, 9], np.uint16), one, one, one,
            np.ones(2, np.uint64), one, one, np.empty(2, np.uint8))  # fmt: skip
    with pytest.raises(IndexError):
        INTO[impl](1, 0, 0, 5, cols, state)
    assert (state[0] == -1).all() and not state[11].any()
    with pytest.raises(TypeError):
        INTO[impl](1, 0, 0, 5, cols[:3], state)
