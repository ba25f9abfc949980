"""Pipeline throughput with stage recording on vs off, in the same run (issue: ≤ 5% loss).

The in-process pipeline without sockets, driven by a fake clock so both variants see exactly
the same ticks: simulator -> each venue's updates as columns once, heard by both of its feed
handlers (drift included), every handler drained at one time each 1 ms step as the node's pump
does, a tick batch per handler (issue 35) -> ``Sequencer.on_batch`` -> a 40 ms frame with every
changed record encoded once. "on" stamps every tick at decode, sequence, conflate and encode
through ``StageStamps`` (whole batches, from their columns and admissions, into HDR
histograms), and closes each frame as the node does, with ``framed`` (given the frame's record
count) and ``written``: three write latencies and every changed instrument written, so
tick_to_write gets a value per admitted tick; "off" runs the same loop with stamping skipped
(the frame's instrument ids, the fan-out's output, are built in both). Metric: CPU seconds
(process time) per handler-delivered tick, turned into ticks/s; runs interleaved off/on, median
of several, and the median of the per-pair ratios (a pair runs back to back, so a neighbour's
load that comes and goes hits both of it).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import msgspec
import numpy as np

from bench.common import Row, row
from monotape.clock import FakeClock
from monotape.config import SimulatorConfig
from monotape.histograms import Recorders
from monotape.platform.core.sequencer import Sequencer
from monotape.platform.core.stamps import StageStamps
from monotape.platform.feeds.epochs import MemoryEpochStore
from monotape.platform.feeds.handler import make_handler_pair
from monotape.platform.feeds.simulator import VenueSimulator, build_universe, venues_with_update_ids
from monotape.platform.feeds.venue_wire import per_venue, venue_batch
from monotape.platform.wire import codec

__all__ = ["run"]

FRAME_NS = 40_000_000
PUMP_NS = 1_000_000


def _pipeline_cpu(seconds: float, rate: float, stamping: bool) -> tuple[float, int]:
    """CPU seconds spent and ticks delivered by the handlers for ``seconds`` of simulated feed."""
    clock = FakeClock()
    universe = build_universe()
    sim = VenueSimulator(universe, msgspec.structs.replace(SimulatorConfig(), rate=rate), clock)
    epochs = MemoryEpochStore()
    with_ids = venues_with_update_ids(universe)
    rng = random.Random(3)
    by_venue: dict[str, list[Any]] = {}
    for venue in sorted({i.venue for i in universe}):
        pair = make_handler_pair(venue, epochs, clock, 6.0, 9.0, rng, update_ids=venue in with_ids)
        for h in pair:
            h.start()
        by_venue[venue] = list(pair)
    handlers = [h for pair in by_venue.values() for h in pair]
    sequencer = Sequencer(4, FRAME_NS)
    stamps = StageStamps(Recorders(start_ms=clock.wall_ns() // 1_000_000))
    latencies = np.array([1_000_000, 2_000_000, 3_000_000], dtype=np.int64)
    delivered = 0
    next_frame = FRAME_NS * (clock.now_ns() // FRAME_NS + 1)
    end = clock.now_ns() + int(seconds * 1e9)
    started = time.process_time()
    while clock.now_ns() < end:
        clock.advance(PUMP_NS)
        # as the node's pump does (node/pipeline.py): each venue's updates as columns once,
        # heard by both handlers; every handler drained at one time, each batch stamped and
        # admitted whole
        for venue, heard in per_venue(sim.step()).items():
            columns = venue_batch(venue, heard)
            for h in by_venue[venue]:
                h.on_venue(columns)
        now = clock.now_ns()
        for h in handlers:
            for batch in h.drain_batches(now):
                delivered += batch.count
                if stamping:
                    stamps.decoded_batch(batch)
                admission = sequencer.on_batch(batch, now)
                if stamping and admission.count:
                    stamps.admitted_batch(admission)
        if clock.now_ns() >= next_frame:
            frame = sequencer.take_frame(next_frame)
            iids = []
            for rec in frame.records:
                codec.encode_delta_record(rec.base, rec.new)
                iids.append(rec.new.iid)
            written = np.array(iids, dtype=np.int64)  # the fan-out's written_iids
            if stamping:
                offset = clock.wall_ns() - clock.now_ns()
                stamps.framed(next_frame, clock.now_ns(), offset, len(frame.records))
                stamps.written(latencies, written)
            next_frame += FRAME_NS
    if stamping:
        stamps.rotate(clock.wall_ns() // 1_000_000, clock.wall_ns() - clock.now_ns(), final=True)
    return time.process_time() - started, delivered


def run(quick: bool = False, repeats: int | None = None) -> list[Row]:
    seconds, default_repeats = (0.5, 1) if quick else (4.0, 5)
    repeats = repeats or default_repeats
    rate = 120_000.0
    on: list[float] = []
    off: list[float] = []
    for _ in range(repeats):  # interleaved: drift on a shared machine hits both
        for stamping, out in ((False, off), (True, on)):
            cpu, ticks = _pipeline_cpu(seconds, rate, stamping)
            out.append(ticks / cpu)
    m_off, m_on = statistics.median(off), statistics.median(on)
    paired = statistics.median(a / b for a, b in zip(on, off, strict=True))
    loss = 1 - m_on / m_off
    note = f"{seconds:g} s of a {rate:,.0f} ticks/s feed per run, {repeats} run(s), fake clock"
    return [
        row(
            "pipeline throughput, recording on vs off",
            "recording off (peer)",
            m_off,
            "ticks/s of CPU",
            lo=min(off),
            hi=max(off),
            ratio=1.0,
            note=note,
        ),
        row(
            "pipeline throughput, recording on vs off",
            "recording on (5 stages)",
            m_on,
            "ticks/s of CPU",
            lo=min(on),
            hi=max(on),
            ratio=m_on / m_off,
            note=f"loss {loss:.1%} (median of pairs {1 - paired:.1%}; target <= 5%)",
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None, help="off/on pairs (default 5)")
    args = parser.parse_args()
    for r in run(args.quick, args.repeats):
        print(r)
