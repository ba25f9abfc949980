"""Invariant check time: what one 30 s pass costs the event loop, at 1k and 6k connections.

The index is built the way the server builds it: ``build_universe()`` (2,400 instruments), one
Zipf watchlist of exactly 20 symbols per connection (``zipf_watchlists``, seed 1, sizes 20..20),
and a live registry dict beside it (``FanoutServer.connections``). Each variant times one
invariant's ``check()`` (and ``monitor.run_once()`` for both) with ``time.perf_counter_ns``,
median of ``runs`` runs (>= 3) with min and max. The target is <= 2 ms per pass at 6,000
connections (design: 6,000 provisioned); ``ratio`` is the value over that target.

    .venv/bin/python -m bench.micro.bench_invariants [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from bench.common import Row, median_min_max, row
from monotape.invariants import (
    Invariant,
    InvariantMonitor,
    NoDanglingEntries,
    SubscriptionCardinality,
)
from monotape.loadgen.watchlists import zipf_watchlists
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.feeds.simulator import build_universe

__all__ = ["run"]

SUBSCRIPTIONS = 20
TARGET_MS = 2.0
SEED = 1


def build(connections: int) -> tuple[SubscriptionIndex, dict[int, object]]:
    universe = build_universe()
    iid_of = {inst.key: inst.iid for inst in universe}
    index = SubscriptionIndex()
    live: dict[int, object] = {}
    lists = zipf_watchlists(
        list(iid_of), connections, SEED, size_range=(SUBSCRIPTIONS, SUBSCRIPTIONS)
    )
    for conn, keys in enumerate(lists, start=1):
        live[conn] = object()
        index.add_connection(conn)
        index.subscribe(conn, [iid_of[k] for k in keys])
    return index, live


def _time_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def run(quick: bool = False) -> list[Row]:
    runs = 5 if quick else 21
    rows: list[Row] = []
    for connections in (1_000, 6_000):
        index, live = build(connections)
        checks: list[Invariant] = [
            SubscriptionCardinality(index),
            NoDanglingEntries(index, live.keys),
        ]
        monitor = InvariantMonitor(checks)
        assert all(r.ok for r in monitor.run_once())  # warm-up, and a sound index
        variants: list[tuple[str, Callable[[], object]]] = [
            *((c.name, c.check) for c in checks),
            ("both (monitor.run_once)", monitor.run_once),
        ]
        for name, fn in variants:
            med, lo, hi = median_min_max(_time_ms(fn, runs))
            rows.append(
                row(
                    "invariant check",
                    f"{name} @ {connections:,} conns x {SUBSCRIPTIONS}",
                    round(med, 4),
                    "ms",
                    lo=round(lo, 4),
                    hi=round(hi, 4),
                    ratio=round(med / TARGET_MS, 3),
                    note=(
                        f"median of {runs}; target <= {TARGET_MS} ms per pass at 6k; "
                        f"{index.signatures()} signatures"
                    ),
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for r in run(args.quick):
        print(json.dumps(r))


if __name__ == "__main__":
    main()
