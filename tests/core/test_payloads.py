"""frame_payloads: the native planner and its pure-Python twin give the same payloads, in the
same order, and raise the same exceptions (core/payloads.py); every payload is the RFC 6455
frame of a FRAME a client decodes to its signature's changed records in ascending iid.
``make native-sanitize`` runs this module against an AddressSanitizer +
UndefinedBehaviorSanitizer build named by PAYLOADS_SANITIZED_BUILD (a test-tool hook, not a
setting of the node)."""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monotape.platform.core import payloads
from monotape.platform.core.fanout import SubscriptionIndex, plan_payloads
from monotape.platform.core.payloads import FramePayloads, python_frame_payloads
from monotape.platform.model import Tick
from monotape.platform.wire import codec
from tests.sanitized import load_sanitized

SANITIZED_BUILD = os.environ.get("PAYLOADS_SANITIZED_BUILD", "")
HASH_MODULUS = 2**61 - 1  # CPython: hash(n) == hash(n + HASH_MODULUS) for a positive int n


def _native() -> FramePayloads | None:
    if SANITIZED_BUILD:
        module = load_sanitized("sanitized._payloads", SANITIZED_BUILD)
        module.bind(python_frame_payloads)
        fn: FramePayloads = module.frame_payloads
        return fn
    return payloads.frame_payloads if payloads.NATIVE else None


NATIVE = _native()
IMPLS: dict[str, FramePayloads] = {"python": python_frame_payloads}
if NATIVE is not None:
    IMPLS["native"] = NATIVE


def test_the_native_planner_is_built() -> None:
    if NATIVE is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("monotape.platform.core._payloads was not built")
        pytest.skip("monotape.platform.core._payloads not built (no C compiler at install)")
    assert payloads.frame_payloads is not python_frame_payloads


def ws_payload(frame: bytes) -> bytes:
    """The message inside one unmasked RFC 6455 binary frame, its length checked."""
    assert frame[0] == 0x82
    n = frame[1]
    if n == 126:
        n, head = int.from_bytes(frame[2:4], "big"), 4
        assert n >= 126
    elif n == 127:
        n, head = int.from_bytes(frame[2:10], "big"), 10
        assert n >= 0x10000
    else:
        head = 2
    assert len(frame) == head + n
    return frame[head:]


# chunk sizes across the 7-, 16- and 64-bit frame lengths; signatures as the index makes them
# (64-bit), small ones, and pairs that share a hash
SIGS = st.one_of(
    st.integers(0, 2**64 - 1),
    st.integers(0, 40),
    st.integers(1, 30).map(lambda n: n + HASH_MODULUS),
    st.integers(-(2**63), -1),
    st.sampled_from([-1, -2]),  # hash(-1) == hash(-2)
)
CHUNKS = st.dictionaries(
    st.integers(0, 65_535),
    st.one_of(st.binary(max_size=40), st.binary(min_size=100, max_size=3_000)),
    max_size=60,
)


@st.composite
def frames(draw: Any) -> tuple[int, dict[int, bytes], dict[int, Any]]:
    chunks = draw(CHUNKS)
    sigs = draw(st.lists(SIGS, min_size=1, max_size=200, unique=True))
    iids = sorted(chunks) + draw(st.lists(st.integers(0, 65_535), max_size=5))  # some unchanged
    groups_of: dict[int, Any] = {}
    for iid in iids:
        held = draw(st.sets(st.sampled_from(sigs), max_size=12))
        groups_of[iid] = frozenset(held) if draw(st.booleans()) else held  # empty sets too
    frame_no = draw(st.one_of(st.integers(0, 2**20), st.integers(0, 2**64 - 1)))
    return frame_no, chunks, groups_of


def reference(frame_no: int, chunks: dict[int, bytes], groups_of: dict[int, Any]) -> Any:
    """What the planner did before it had a function of its own: plan_payloads' lists, then a
    header, a join and a frame per signature."""
    index = SubscriptionIndex()
    index._sigs_of_iid = groups_of  # the same walk, the index's own function
    return {
        sig: codec.ws_binary_frame(codec.frame_header(frame_no, len(c)) + b"".join(c))
        for sig, c in plan_payloads(chunks, index).items()
    }


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=300)
@given(frame=frames())
def test_the_same_payloads_in_the_same_order(
    impl: str, frame: tuple[int, dict[int, bytes], dict[int, Any]]
) -> None:
    frame_no, chunks, groups_of = frame
    got = IMPLS[impl](frame_no, chunks, groups_of)
    want = reference(frame_no, chunks, groups_of)
    assert list(got.items()) == list(want.items())
    for sig, payload in got.items():
        body = ws_payload(payload)
        held = [iid for iid in sorted(chunks) if sig in groups_of.get(iid, ())]
        # written out here, not with the codec the twin uses: the kind, the frame number and the
        # record count as uvarints (docs/wire.md), then the records
        head = bytes([codec.Kind.FRAME]) + uvarint(frame_no) + uvarint(len(held))
        assert body == head + b"".join(chunks[iid] for iid in held)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def test_a_client_decodes_each_signature_s_records_in_ascending_iid() -> None:
    ticks = {
        iid: Tick(iid, "XNAS", 1, 100 + iid, 1, 10 * iid, 10 * iid + 1, 10 * iid, 5)
        for iid in (9, 2, 40, 7)
    }
    chunks = {iid: codec.encode_full_record(t) for iid, t in ticks.items()}
    groups_of: dict[int, set[int] | frozenset[int]] = {
        2: {0xA},
        7: {0xA, 0xB},
        9: {0xB},
        40: frozenset({0xA}),
    }
    for impl in IMPLS.values():
        got = impl(77, chunks, groups_of)
        assert list(got) == [0xA, 0xB]  # as the ascending walk first meets them
        for sig, iids in ((0xA, [2, 7, 40]), (0xB, [7, 9])):
            message = codec.decode_message(ws_payload(got[sig]))
            assert isinstance(message, codec.Frame)
            assert message.frame_no == 77
            assert [r.iid for r in message.records] == iids


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("length", [125, 126, 127, 0xFFFF, 0x10000, 0x10001, 300_000])
def test_each_frame_length_form_at_its_edges(impl: str, length: int) -> None:
    """RFC 6455's 7-, 16- and 64-bit lengths, either side of 126 and 65,536 message bytes (a
    FRAME header of 3 bytes here: kind, frame 1, one record)."""
    chunks = {4: b"r" * (length - 3)}
    got = IMPLS[impl](1, chunks, {4: {8}})
    assert got == python_frame_payloads(1, chunks, {4: {8}})
    assert len(ws_payload(got[8])) == length


def test_a_signature_met_late_after_many_others_keeps_its_place() -> None:
    """Past the first table sizes (64 slots) the groups are rehashed: order and bytes hold."""
    chunks = {iid: bytes([iid % 256]) * (iid % 7 + 1) for iid in range(400)}
    groups_of = {iid: {iid // 2, 10_000 + iid % 3, (iid * 7919) % 500} for iid in range(400)}
    want = python_frame_payloads(5, chunks, groups_of)
    for impl in IMPLS.values():
        assert list(impl(5, chunks, groups_of).items()) == list(want.items())


ODD: list[tuple[str, int, Any, Any]] = [
    ("a bytearray chunk", 1, {1: bytearray(b"ab")}, {1: {3}}),
    ("a memoryview chunk", 1, {1: memoryview(b"ab")}, {1: {3}}),
    ("a bytes subclass chunk", 1, {1: type("B", (bytes,), {})(b"ab")}, {1: {3}}),
    ("a str signature", 1, {1: b"ab"}, {1: {"s"}}),
    ("a tuple of signatures", 1, {1: b"ab", 2: b"c"}, {1: (3, 4), 2: {4}}),
    ("a list of signatures", 1, {1: b"ab"}, {1: [3, 3]}),
    ("None for signatures", 1, {1: b"ab", 2: b"c"}, {1: None, 2: {4}}),
    ("a bool frame number", True, {1: b"ab"}, {1: {3}}),
    ("a str iid", 1, {"x": b"ab"}, {"x": {3}}),
    ("chunks as a list", 1, [b"a"], {0: {3}}),
    ("a negative frame number, nothing to frame", -1, {1: b"a"}, {2: {3}}),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("frame_no", "chunks", "groups_of"), [o[1:] for o in ODD], ids=[o[0] for o in ODD]
)
def test_what_the_native_one_does_not_cover_gives_the_twin_s_answer(
    impl: str, frame_no: int, chunks: Any, groups_of: Any
) -> None:
    assert IMPLS[impl](frame_no, chunks, groups_of) == python_frame_payloads(
        frame_no, chunks, groups_of
    )


def _mutating_cases() -> list[tuple[str, Any]]:
    """Inputs whose keys run Python code when compared: each builds fresh dicts, because the
    code mutates them. The native planner must not touch them (a borrowed set freed under it
    was a crash), so it hands them to the twin untouched: the same answer, once."""

    def freeing_key() -> tuple[Any, Any]:
        # shares int 1's hash; compared with it, it empties groups_of (frees the set of iid 1)
        armed = [False]  # armed once the dicts are built (building them compares too)
        groups_of: dict[Any, Any] = {1: {5, 6}}

        class Freeing:
            def __hash__(self) -> int:
                return 1

            def __eq__(self, other: object) -> bool:
                if armed[0]:
                    armed[0] = False
                    groups_of.clear()
                return False

            def __lt__(self, other: object) -> bool:
                return False

            def __gt__(self, other: object) -> bool:
                return True

        chunks = {Freeing(): b"b", 1: b"a"}
        armed[0] = True
        return chunks, groups_of

    def popping_key() -> tuple[Any, Any]:
        # a groups_of key sharing int 2's hash, popping chunks[2] when compared
        chunks = {1: b"a", 2: b"b"}
        armed = [False]

        class Popping:
            def __hash__(self) -> int:
                return 2

            def __eq__(self, other: object) -> bool:
                if armed[0]:
                    armed[0] = False
                    chunks.pop(2, None)
                return False

        groups_of = {Popping(): {9}, 1: {7}, 2: {7}}
        armed[0] = True
        return chunks, groups_of

    return [("a key that frees a set", freeing_key), ("a key that pops a chunk", popping_key)]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "case", [c[1] for c in _mutating_cases()], ids=[c[0] for c in _mutating_cases()]
)
def test_keys_that_run_python_code_get_the_twin_s_answer_once(impl: str, case: Any) -> None:
    def outcome(fn: FramePayloads) -> Any:
        chunks, groups_of = case()
        try:
            return fn(1, chunks, groups_of)
        except Exception as exc:
            return type(exc)

    assert outcome(IMPLS[impl]) == outcome(python_frame_payloads)


@pytest.mark.parametrize("impl", IMPLS)
def test_comparisons_run_as_often_as_in_the_twin(impl: str) -> None:
    calls: list[int] = []

    class Counted:
        def __lt__(self, other: object) -> bool:
            calls.append(1)
            return False

        def __gt__(self, other: object) -> bool:
            calls.append(1)
            return True

    def run(fn: FramePayloads) -> tuple[dict[int, bytes], int]:
        calls.clear()
        got = fn(1, {1: b"a", Counted(): b"b", 3: b"c"}, {1: {7}, 3: {7}})  # type: ignore[dict-item]
        return got, len(calls)

    assert run(IMPLS[impl]) == run(python_frame_payloads)


@pytest.mark.parametrize("impl", IMPLS)
def test_an_odd_item_at_a_later_iid_after_a_partial_plan(impl: str) -> None:
    """The native pass has placed chunks when it meets what it does not cover: the twin's
    answer all the same."""
    chunks: dict[Any, Any] = {i: bytes([i]) for i in range(1, 50)}
    groups_of: dict[Any, Any] = {i: {i % 5, 100} for i in range(1, 50)}
    for late in ({"sig"}, {True}, [3], None):
        odd = dict(groups_of)
        odd[40] = late
        assert IMPLS[impl](3, chunks, odd) == python_frame_payloads(3, chunks, odd)
    odd_chunks = dict(chunks)
    odd_chunks[45] = bytearray(b"x")
    assert IMPLS[impl](3, odd_chunks, groups_of) == python_frame_payloads(3, odd_chunks, groups_of)
    mixed = {True: b"t", 2: b"b"}  # a bool key: sorted and looked up as 1, by the twin
    assert IMPLS[impl](3, mixed, {1: {4}, 2: {4}}) == python_frame_payloads(
        3, mixed, {1: {4}, 2: {4}}
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_keywords_are_refused_by_both(impl: str) -> None:
    with pytest.raises(TypeError):
        IMPLS[impl](1, {1: b"a"}, groups_of={1: {3}})  # type: ignore[call-arg]


@pytest.mark.parametrize("impl", IMPLS)
def test_many_records_in_one_payload(impl: str) -> None:
    """Record counts past one uvarint byte (128, 16,384), frame numbers past 14 bits."""
    for count, frame_no in ((127, 2**14), (128, 2**21 + 1), (16_384, 2**63)):
        chunks = {i: b"r" for i in range(count)}
        groups_of = {i: {1} for i in range(count)}
        got = IMPLS[impl](frame_no, chunks, groups_of)
        assert got == python_frame_payloads(frame_no, chunks, groups_of)


BAD: list[tuple[str, Any, Any, Any, type[BaseException]]] = [
    ("a negative frame number", -1, {1: b"a"}, {1: {3}}, ValueError),
    ("a frame number past uint64", 2**64, {1: b"a"}, {1: {3}}, ValueError),
    ("a float frame number", 1.5, {1: b"a"}, {1: {3}}, TypeError),
    ("an int chunk", 1, {1: 5}, {1: {3}}, TypeError),
    ("iids that do not sort", 1, {1: b"a", "x": b"b"}, {1: {3}, "x": {3}}, TypeError),
    ("an int for signatures", 1, {1: b"a"}, {1: 5}, TypeError),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("frame_no", "chunks", "groups_of", "error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_raises_the_same_exception(
    impl: str, frame_no: Any, chunks: Any, groups_of: Any, error: type[BaseException]
) -> None:
    with pytest.raises(error):
        python_frame_payloads(frame_no, chunks, groups_of)
    with pytest.raises(error):
        IMPLS[impl](frame_no, chunks, groups_of)


def test_the_index_plans_with_it() -> None:
    index = SubscriptionIndex()
    for conn, subs in enumerate(([1, 2], [2, 3], [1, 2])):
        index.add_connection(conn)
        index.subscribe(conn, subs)
    chunks = {1: b"one", 2: b"two", 3: b"three"}
    got = index.frame_payloads(9, chunks)
    assert list(got.items()) == list(index.frame_payloads(9, chunks, python_frame_payloads).items())
    assert set(got) == {index.signature(0), index.signature(1)}


@pytest.mark.parametrize("impl", IMPLS)
def test_a_collection_that_edits_the_input_mid_call_gets_a_consistent_answer(impl: str) -> None:
    """On 3.11 the first object the native pass allocates (the list of keys) can start a
    collection, and a gc callback (or a finalizer) can then edit the dicts it was handed. The
    answer must be the twin's for the input as it was before the edit or after it: never a
    chunk read as bytes that is no longer bytes (an over-read that ASan names, and garbage in a
    payload without it)."""
    chunks: dict[int, Any] = {1: b"a", 2: b"bb"}
    groups_of = {1: {7}, 2: {7, 8}}
    before = python_frame_payloads(1, dict(chunks), groups_of)
    edited = dict(chunks)
    edited[1] = [0] * 10_000
    with pytest.raises(TypeError):
        python_frame_payloads(1, edited, groups_of)

    armed = [False]

    def edit(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and armed[0]:
            armed[0] = False
            chunks[1] = edited[1]

    class Pad:  # an object with no free list: each one moves gen 0's count by one
        pass

    # Everything made here is kept to the end: a list freed between attempts would go back to
    # the list free list, and the pass's list of keys would come from there, allocating nothing
    # (so starting no collection).
    keep: list[object] = []
    saw: set[str] = set()
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.callbacks.append(edit)
    try:
        gc.enable()
        gc.set_threshold(1)  # a collection at every other tracked allocation
        for _ in range(6):
            chunks[1] = b"a"
            keep.append([[] for _ in range(100)])  # empties the list free list
            keep.append(Pad())  # the other parity of gen 0's count on the next attempt
            armed[0] = True
            try:
                got = IMPLS[impl](1, chunks, groups_of)
            except TypeError:
                keep.append("edited")
            else:
                keep.append(got)
            armed[0] = False
            saw.add(repr(keep[-1]) if keep[-1] != "edited" else "edited")
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(edit)
        if not enabled:
            gc.disable()
    assert saw <= {repr(before), "edited"}
    assert "edited" in saw  # a collection did run inside the call, before the plan was made
