"""The host's admin merges (host/admin_merge.py): the node's answers of every writer, added up
as an SRE reads a host, with a per-writer breakdown and the processes that did not answer."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monotape.platform.host.admin_merge import (
    merge_connections,
    merge_drain,
    merge_feeds,
    merge_gc,
    merge_gc_collect,
    merge_glass,
    merge_invariants,
    merge_symbol,
)


def drain_status(total: int, closed: int, done: bool, elapsed: float) -> dict[str, Any]:
    return {
        "draining": not done,
        "drained": done,
        "total": total,
        "closed": closed,
        "remaining": total - closed,
        "per_step": 1,
        "interval_s": 0.25,
        "elapsed_s": elapsed,
        "expected_s": 1.0,
        "connections": total - closed,
    }


def connections_body(n: int, disconnects: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "count": n,
        "signatures": 2,
        "disconnects": disconnects or {},
        "drain": {"draining": False, "connections": n},
        "connections": [{"id": i, "peer": "127.0.0.1:1"} for i in range(n)],
    }


def test_connections_are_totalled_and_each_row_names_its_writer() -> None:
    got = merge_connections(
        {
            "writer-0": connections_body(3, {"client_close": 2}),
            "writer-1": connections_body(2, {"client_close": 1, "slow": 1}),
        },
        limit=4,
        missing=["writer-2"],
    )
    assert got["count"] == 5 and got["signatures"] == 4
    assert got["disconnects"] == {"client_close": 3, "slow": 1}
    assert [(r["writer"], r["id"]) for r in got["connections"]] == [
        ("writer-0", 0),
        ("writer-0", 1),
        ("writer-0", 2),
        ("writer-1", 0),
    ]
    assert got["writers"]["writer-1"]["count"] == 2
    assert got["drain"] == {"draining": False, "connections": 5}
    assert got["missing"] == ["writer-2"]


@given(
    st.lists(st.integers(min_value=0, max_value=30), min_size=0, max_size=5),
    st.integers(min_value=0, max_value=100),
)
def test_connections_rows_are_the_first_limit_over_every_writer(
    sizes: list[int], limit: int
) -> None:
    bodies = {f"writer-{i}": connections_body(n) for i, n in enumerate(sizes)}
    got = merge_connections(bodies, limit)
    assert len(got["connections"]) == min(limit, sum(sizes))
    assert got["count"] == sum(sizes)
    assert got["missing"] == []


def test_a_drain_is_done_when_every_writer_is_and_counts_add_up() -> None:
    got = merge_drain(
        {
            "writer-0": drain_status(10, 10, True, 2.5),
            "writer-1": drain_status(6, 3, False, 1.0),
        }
    )
    assert (got["draining"], got["drained"]) == (True, False)
    assert (got["total"], got["closed"], got["remaining"]) == (16, 13, 3)
    assert got["elapsed_s"] == 2.5
    assert got["connections"] == 3
    assert set(got["writers"]) == {"writer-0", "writer-1"}


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.booleans()), max_size=6))
def test_drain_totals_are_the_sums(rows: list[tuple[int, int, bool]]) -> None:
    bodies = {
        f"writer-{i}": drain_status(a + b, a, done, 0.5) for i, (a, b, done) in enumerate(rows)
    }
    got = merge_drain(bodies)
    if not rows:
        assert got == {"draining": False, "connections": 0, "writers": {}, "missing": []}
        return
    assert got["total"] == sum(a + b for a, b, _ in rows)
    assert got["remaining"] == sum(b for _, b, _ in rows)
    assert got["drained"] == all(done for _, _, done in rows)


def test_no_drain_anywhere_is_the_nodes_short_answer() -> None:
    got = merge_drain(
        {"writer-0": {"draining": False, "connections": 4}, "writer-1": {"draining": False}}
    )
    assert got["draining"] is False and got["connections"] == 4
    assert "drained" not in got and "total" not in got


def result(name: str, ok: bool) -> dict[str, Any]:
    return {"name": name, "ok": ok, "expected": 0, "actual": 0 if ok else 1, "offending": []}


def test_a_violation_in_one_writer_shows_named_by_it() -> None:
    got = merge_invariants(
        {
            "writer-0": {
                "ok": True,
                "interval_s": 30.0,
                "runs": 4,
                "trips": {},
                "results": [result("no_dangling_entries", True)],
            },
            "writer-1": {
                "ok": False,
                "interval_s": 30.0,
                "runs": 5,
                "trips": {"no_dangling_entries": 1},
                "results": [result("no_dangling_entries", False)],
            },
        }
    )
    assert got["ok"] is False
    assert got["runs"] == 9 and got["trips"] == {"no_dangling_entries": 1}
    assert [(v["writer"], v["name"]) for v in got["violations"]] == [
        ("writer-1", "no_dangling_entries")
    ]
    assert got["writers"]["writer-0"]["ok"] is True


def test_invariants_without_any_writer_are_not_ok() -> None:
    got = merge_invariants({}, missing=["writer-0", "writer-1"])
    assert got["ok"] is False and got["missing"] == ["writer-0", "writer-1"]


def test_glass_totals_and_the_last_offender_over_every_writer() -> None:
    def body(n: int, wall_s: float | None) -> dict[str, Any]:
        last = None if wall_s is None else {"conn_id": n, "key": "XNAS:AAPL", "wall_s": wall_s}
        return {"regressions": n, "gaps": 1, "regressing_terminals": 1, "reports": n, "last": last}

    got = merge_glass({"writer-0": body(2, 100.0), "writer-1": body(3, 250.0)})
    assert (got["regressions"], got["gaps"], got["reports"]) == (5, 2, 5)
    assert got["last"]["writer"] == "writer-1" and got["last"]["conn_id"] == 3
    assert merge_glass({"writer-0": body(0, None)})["last"] is None


def test_feeds_one_row_per_handler_process() -> None:
    def body(up: bool) -> dict[str, Any]:
        return {"handlers": [{"venue": "XNAS", "handler": "A", "up": up}], "source": "simulator"}

    got = merge_feeds(
        {"handler-XNAS-A": body(True), "handler-XNAS-B": body(False)},
        "simulator",
        ["handler-XNYS-A"],
    )
    assert [r["process"] for r in got["handlers"]] == ["handler-XNAS-A", "handler-XNAS-B"]
    assert got["up"] == 1 and got["missing"] == ["handler-XNYS-A"]


def test_gc_per_process_and_summed() -> None:
    def body(n: int, max_ms: float) -> dict[str, Any]:
        gen = {"collections": n, "pause_total_s": n / 1000, "pause_max_ms": max_ms}
        return {"gc": {"generations": {"2": gen}}, "loop_lag": {}}

    got = merge_gc({"writer-0": body(2, 5.0), "sequencer": body(3, 9.0)})
    total = got["total"]["generations"]["2"]
    assert total["collections"] == 5 and total["pause_max_ms"] == 9.0
    assert set(got["processes"]) == {"writer-0", "sequencer"}
    collected = merge_gc_collect({"writer-0": {"collected": 7, "pauses": []}}, ["sequencer"])
    assert collected["collected"] == 7 and collected["missing"] == ["sequencer"]


def test_symbol_prices_from_the_sequencer_subscribers_from_every_writer() -> None:
    prices = {"current": {"bid": 1}, "published": {"bid": 1}}
    writers = {"writer-0": {"subscriber_signatures": 2}, "writer-1": {"subscriber_signatures": 1}}
    got = merge_symbol("XNAS:AAPL", 7, 4, prices, writers)
    assert got["current"] == {"bid": 1} and got["price_scale"] == 10_000
    assert got["subscriber_signatures"] == 3 and got["writers"]["writer-1"] == 1
    gone = merge_symbol("XNAS:AAPL", 7, 4, None, writers, ["sequencer"])
    assert gone["current"] is None and gone["missing"] == ["sequencer"]
