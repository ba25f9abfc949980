"""Distinct payloads per frame for 4,200 terminals with Zipf-shared watchlists.

design (Fan-out): connections with the same subscription signature share one payload per frame;
4,200 connections collapse to about 260 distinct subscription sets. This measures what a frame
actually needs under the design peak: 120,000 ticks/s, i.e. 4,800 ticks per 40 ms frame, spread
over 2,400 instruments with skewed activity (Zipf s=0.8 over symbols, the hot ones scattered
over the universe). Each frame's changed symbols go through ``plan_payloads``; the figure is the
median over frames of the number of payloads built (and, beside it, the writes they serve).

A second row times what the writer does with them: ``SubscriptionIndex.frame_payloads``, every
signature's framed FRAME built in one call, native (``core/_payloads.c``) against its pure-Python
twin (``python_frame_payloads``, the peer) on the same frames, the two alternated frame by frame.

    .venv/bin/python -m bench.fanout.bench_payloads [--quick]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from itertools import accumulate

from bench.common import Row, print_rows, row
from monotape.loadgen.watchlists import describe_distribution, zipf_watchlists
from monotape.platform.core import payloads as planning
from monotape.platform.core.fanout import SubscriptionIndex, plan_payloads

__all__ = ["run"]

SYMBOLS = 2_400
VENUES = ("XNAS", "XNYS", "XLON", "XPAR", "XETR", "XTKS")
CONNECTIONS = 4_200  # design: observed peak
TICKS_PER_S = 120_000  # design: peak ingest
FRAME_S = 0.040
SEED = 1


def universe() -> list[str]:
    per_venue = SYMBOLS // len(VENUES)
    return [f"{v}:S{i:04d}" for v in VENUES for i in range(per_venue)]


def run(quick: bool = False) -> list[Row]:
    frames = 25 if quick else 250  # 1 s / 10 s of simulated load
    keys = universe()
    iid_of = {k: i for i, k in enumerate(keys)}
    index = SubscriptionIndex()
    for conn, watchlist in enumerate(zipf_watchlists(keys, CONNECTIONS, SEED)):
        index.add_connection(conn)
        index.subscribe(conn, [iid_of[k] for k in watchlist])

    rng = random.Random(SEED)
    hot = list(range(SYMBOLS))
    rng.shuffle(hot)  # activity rank is unrelated to sector: hot names are everywhere
    cum = list(accumulate(1.0 / (r**0.8) for r in range(1, SYMBOLS + 1)))
    per_frame = round(TICKS_PER_S * FRAME_S)
    chunk = b"\x00" * 12  # size is irrelevant to the count; roughly one delta record

    payloads: list[int] = []
    writes: list[int] = []
    dirty_counts: list[int] = []
    plan_us: list[float] = []
    built_us: dict[str, list[float]] = {"python": [], "native": []}
    impls = {"python": planning.python_frame_payloads, "native": planning.frame_payloads}
    for frame_no in range(frames):
        dirty = set(rng.choices(hot, cum_weights=cum, k=per_frame))
        chunks = dict.fromkeys(dirty, chunk)
        t0 = time.perf_counter_ns()
        plan = plan_payloads(chunks, index)
        plan_us.append((time.perf_counter_ns() - t0) / 1_000)
        order = ("python", "native") if frame_no % 2 else ("native", "python")
        for name in order if planning.NATIVE else ("python",):
            t0 = time.perf_counter_ns()
            index.frame_payloads(frame_no, chunks, impls[name])
            built_us[name].append((time.perf_counter_ns() - t0) / 1_000)
        payloads.append(len(plan))
        writes.append(sum(len(index.connections(sig)) for sig in plan))
        dirty_counts.append(len(dirty))
    conns = index.connection_count
    median = float(statistics.median(payloads))
    return [
        row(
            "payloads per frame",
            f"{conns:,} connections, {index.signatures()} distinct sets",
            median,
            "payloads",
            lo=min(payloads),
            hi=max(payloads),
            ratio=median / conns if conns else None,
            peer="connections",
            note=(
                f"{statistics.median(dirty_counts):,.0f} changed symbols/frame "
                f"({per_frame:,} ticks/frame), {statistics.median(writes):,.0f} writes/frame, "
                f"plan_payloads {statistics.median(plan_us):,.0f} µs; {frames} frames; "
                f"watchlists: {describe_distribution()}, seed {SEED}, {SYMBOLS:,} symbols over "
                f"{len(VENUES)} venues; activity Zipf s=0.8 over symbols at {TICKS_PER_S:,} "
                "ticks/s"
            ),
        ),
        *_built_rows(built_us, conns, index.signatures(), frames),
    ]


def _built_rows(
    built_us: dict[str, list[float]], conns: int, signatures: int, frames: int
) -> list[Row]:
    """µs per frame to build every signature's payload, the twin as the peer."""
    peer = statistics.median(built_us["python"])
    rows = []
    for name, label in (("python", "python twin (peer)"), ("native", "native (_payloads.c)")):
        values = built_us[name]
        if not values:  # not built: no native row to show
            continue
        median = statistics.median(values)
        rows.append(
            row(
                "building a frame's payloads",
                label,
                median,
                "µs/frame",
                lo=min(values),
                hi=max(values),
                ratio=median / peer,
                peer="python twin",
                note=f"{conns:,} connections, {signatures} signatures, {frames} frames, "
                "alternated frame by frame",
            )
        )
    return rows


if __name__ == "__main__":
    print_rows(run(quick="--quick" in sys.argv[1:]))
