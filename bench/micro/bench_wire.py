"""Bytes per frame on the wire: monotape's binary frame vs the same frame as JSON; encode cost.

Realistic frames: ``VenueSimulator`` (default ``SimulatorConfig``: 2,400 instruments over 6
venues, skewed activity) driven by a ``FakeClock`` advanced in 40 ms steps; each venue's updates
become a tick batch the way a feed handler builds one (``seq`` = the venue's update id, or its
timestamp on venues without ids; epoch 1), go through ``Sequencer.on_batch`` and
``take_frame``. The first second is skipped, so records are deltas against a published base as
at steady state.

Per frame, binary = ``frame_header`` + the ``encode_delta_record`` chunks (the FRAME payload,
without the 2-4 byte WebSocket header, like the JSON side); JSON = ``codec.frame_as_json`` of the
same records (msgspec.json, absolute prices: the smallest honest JSON, so the ratio is
conservative). Reported for whole frames (every changed symbol) and for the per-watchlist
payloads terminals actually receive (Zipf watchlists, 1,000 connections). Target: binary at most
25% of JSON. Encode cost: ``encode_delta_record`` µs per record over the same records, split by
``seq`` kind (venue update id vs ns timestamp).

    .venv/bin/python -m bench.micro.bench_wire [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from bench.common import Row, row

__all__ = ["frames", "run"]

TARGET = 0.25
SKIP_FRAMES = 25  # the first second: mostly first appearances (full records)


def frames(count: int, rate: float | None = None) -> tuple[list[Any], list[Any]]:
    """(universe, frames) after ``SKIP_FRAMES`` of warm-up, from the simulator at ``rate``."""
    import numpy as np

    from monotape.clock import FakeClock
    from monotape.config import SimulatorConfig
    from monotape.platform.core.sequencer import Sequencer
    from monotape.platform.feeds.simulator import VenueSimulator, build_universe
    from monotape.platform.feeds.venue_wire import per_venue
    from monotape.platform.wire.batch import HAS_UPDATE_ID, batch_of

    cfg = SimulatorConfig() if rate is None else SimulatorConfig(rate=rate)
    universe = build_universe(cfg.venues, cfg.instruments, cfg.seed)
    clock = FakeClock()
    sim = VenueSimulator(universe, cfg, clock)
    seq = Sequencer(lanes=4)
    out = []
    for k in range(SKIP_FRAMES + count):
        clock.advance_ms(40)
        now = clock.now_ns()
        for venue, heard in per_venue(sim.step()).items():
            ids = [u.update_id for u in heard]
            ts = [u.venue_ts_ns for u in heard]
            batch = batch_of(
                venue,
                "A",
                1,
                k,
                {
                    "seq": [t if i is None else i for i, t in zip(ids, ts, strict=True)],
                    "update_id": [i or 0 for i in ids],
                    "bid": [u.bid for u in heard],
                    "ask": [u.ask for u in heard],
                    "last": [u.last for u in heard],
                    "size": [u.size for u in heard],
                    "venue_ts": ts,
                    "recv_ts": np.full(len(heard), now),
                    "iid": [u.iid for u in heard],
                    "flags": [0 if i is None else HAS_UPDATE_ID for i in ids],
                },
            )
            seq.on_batch(batch, now)
        frame = seq.take_frame(now - now % 40_000_000)
        if k >= SKIP_FRAMES and frame.records:
            out.append(frame)
    return universe, out


def _binary(frame_no: int, chunks: list[bytes]) -> bytes:
    from monotape.platform.wire import codec

    return codec.frame_header(frame_no, len(chunks)) + b"".join(chunks)


def run(quick: bool = False, *, count: int | None = None) -> list[Row]:
    from monotape.loadgen.watchlists import zipf_watchlists
    from monotape.platform.core.fanout import SubscriptionIndex, plan_payloads
    from monotape.platform.wire import codec

    n_frames = count or (25 if quick else 250)
    universe, fr = frames(n_frames)
    keys = {inst.iid: inst.key for inst in universe}
    decimals = {inst.iid: inst.price_decimals for inst in universe}
    index = SubscriptionIndex()
    iid_of = {inst.key: inst.iid for inst in universe}
    for cid, wl in enumerate(zipf_watchlists([i.key for i in universe], 1000, 1)):
        index.add_connection(cid)
        index.subscribe(cid, [iid_of[k] for k in wl])

    full_bin: list[int] = []
    full_json: list[int] = []
    sig_bin: list[int] = []
    sig_json: list[int] = []
    records = 0
    for f in fr:
        chunks = {r.iid: codec.encode_delta_record(r.base, r.new) for r in f.records}
        records += len(chunks)
        full_bin.append(len(_binary(f.frame_no, list(chunks.values()))))
        full_json.append(
            len(
                codec.frame_as_json(
                    f.frame_no, [(r.base, r.new) for r in f.records], keys, decimals=decimals
                )
            )
        )
        by_iid = {r.iid: r for r in f.records}
        for sig in plan_payloads(chunks, index):
            members = [i for i in index.members(sig) if i in by_iid]
            members.sort()
            sig_bin.append(len(_binary(f.frame_no, [chunks[i] for i in members])))
            sig_json.append(
                len(
                    codec.frame_as_json(
                        f.frame_no,
                        [(by_iid[i].base, by_iid[i].new) for i in members],
                        keys,
                        decimals=decimals,
                    )
                )
            )

    # Encode cost per record, by seq kind, best of 5 passes over the same records.
    recs = [r for f in fr for r in f.records if r.base is not None]
    by_kind = {
        "update-id seq": [r for r in recs if not r.base.seq >> 56],
        "timestamp seq": [r for r in recs if r.base.seq >> 56],
    }
    encode = codec.encode_delta_record
    kinds = {k: [(r.base, r.new) for r in rs] for k, rs in [("all", recs), *by_kind.items()] if rs}
    enc_us: dict[str, float] = dict.fromkeys(kinds, float("inf"))
    for k in range(4 if quick else 8):  # interleaved passes, the first a warm-up; best of the rest
        for kind, pairs in kinds.items():
            t0 = time.perf_counter_ns()
            for b, nw in pairs:
                encode(b, nw)
            if k:
                enc_us[kind] = min(enc_us[kind], (time.perf_counter_ns() - t0) / 1e3 / len(pairs))

    fb, fj = statistics.median(full_bin), statistics.median(full_json)
    sb, sj = statistics.median(sig_bin), statistics.median(sig_json)
    full_ratios = [b / j for b, j in zip(full_bin, full_json, strict=True)]
    sig_ratios = [b / j for b, j in zip(sig_bin, sig_json, strict=True)]
    where = (
        f"{len(fr)} simulator frames (20k ticks/s default, 40 ms), "
        f"{records / max(1, len(fr)):.0f} changed symbols/frame"
    )
    ok = "met" if statistics.median(full_ratios) <= TARGET else "NOT met"
    out = [
        row(
            "wire bytes per frame (whole frame)",
            "json (frame_as_json)",
            fj,
            "bytes",
            lo=min(full_json),
            hi=max(full_json),
            ratio=1.0,
            peer="json",
            note=where,
        ),
        row(
            "wire bytes per frame (whole frame)",
            "binary",
            fb,
            "bytes",
            lo=min(full_bin),
            hi=max(full_bin),
            ratio=statistics.median(full_ratios),
            peer="json",
            note=f"target <= {TARGET:.0%} of JSON: {ok}",
        ),
        row(
            "wire bytes per payload (per watchlist)",
            "json (frame_as_json)",
            sj,
            "bytes",
            lo=min(sig_json),
            hi=max(sig_json),
            ratio=1.0,
            peer="json",
            note=f"{len(sig_bin)} payloads: 1,000 Zipf watchlists",
        ),
        row(
            "wire bytes per payload (per watchlist)",
            "binary",
            sb,
            "bytes",
            lo=min(sig_bin),
            hi=max(sig_bin),
            ratio=statistics.median(sig_ratios),
            peer="json",
            note="frame header dominates small payloads",
        ),
    ]
    base = enc_us.get("all")
    for kind, us in enc_us.items():
        n = len(recs) if kind == "all" else len(by_kind[kind])
        out.append(
            row(
                "encode_delta_record",
                kind,
                us,
                "µs/record",
                ratio=us / base if base else None,
                peer="all",
                note=f"{n:,} delta records, best of passes",
            )
        )
    return out


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv[1:]):
        print(
            f"{r.benchmark:40} {r.variant:22} {r.value:10.2f} {r.unit:10} "
            f"x{(r.ratio or 0):.3f}  {r.note}"
        )
