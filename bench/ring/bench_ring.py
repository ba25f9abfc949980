"""The /dev/shm frame ring's cost per frame: the producer's publish, and each reader's read.

A realistic frame: 1,000 changed records of ~19 bytes (the wire codec's delta records with venue
update ids and small price steps), no priority records. The ring is the default 64 MiB segment
with two readers attached in this process (so the producer rings two doorbells, as with two
writer processes). Per run: 2,000 frames published in bursts of 100, each burst then read by
both readers; one reader only polls (copy out of the slot, re-check, index views: what the ring
costs a writer), the other also materializes ``iid -> record`` (``Records.as_dict``: the
planner's ``chunks``). CPU time of this one process, median of 5 runs (min and max shown).
The capacity model (docs/benchmarks.md) takes the per-reader figure as "shm ring cost per frame
per reader".

Also the sequencer's whole frame publish (``FramePublisher.publish_frame``: encode each changed
symbol's delta and full record, put the full ones in the snapshot table, publish the FRAME) for
2,400 changed symbols: all in Python (the fallback), with the native record encoders, and with
the native table puts as well.

And the frame's tick ages (docs/ring.md) for a 120k ticks/s frame (4,800 ticks of 2,400
symbols in 60 bus batches, stamped and admitted whole as tick batches): the sequencer's
``StageStamps.frame_ticks`` plus the bytes the publisher makes of them, and a writer's
``written_frame`` from the ages (2,100 terminals' writes, half of the frame's instruments sent:
the per-tick path) against the one-process node's ``written`` of the same ticks and writes,
which records the same values.

    .venv/bin/python -m bench.ring.bench_ring [--quick]
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from typing import TYPE_CHECKING

from bench.common import Row, median_min_max, print_rows, row

if TYPE_CHECKING:
    from monotape.platform.host.publisher import Encoders

__all__ = ["frame_records", "run"]

RECORDS = 1_000
BURST = 100


def frame_records(count: int, seed: int) -> dict[int, bytes]:
    """``count`` delta records as the encoder builds them, keyed by ascending iid."""
    from monotape.platform.model import Tick
    from monotape.platform.wire import codec

    rng = random.Random(seed)
    out = {}
    for iid in range(count):
        p = rng.randrange(10_000, 5_000_000)
        s = rng.randrange(1, 1 << 40)
        d = rng.randrange(-500, 500)
        base = Tick(iid, "XNAS", 3, s, 0, p, p + 100, p + 50, 100)
        new = Tick(iid, "XNAS", 3, s + rng.randrange(1, 50), 0, p + d, p + d + 100, p + d + 40, 7)
        out[iid] = codec.encode_delta_record(base, new)
    return out


def _one_run(frames: int, records: dict[int, bytes]) -> tuple[float, float, float]:
    """µs per frame: publish, poll, poll + as_dict."""
    from monotape.platform.ring import Entry, EntryKind, RingFrame, ShmReader, ShmRing

    ring = ShmRing.create(tag="bench" + uuid.uuid4().hex[:12])
    polls, dicts = ShmReader.attach(ring.name, 0), ShmReader.attach(ring.name, 1)
    publish_ns = poll_ns = dict_ns = 0
    clock = time.process_time_ns
    try:
        for start in range(0, frames, BURST):
            entries = [
                Entry(EntryKind.FRAME, k, k * 40_000_000, k * 40_000_000 + 1, records)
                for k in range(start, start + BURST)
            ]
            t0 = clock()
            for e in entries:
                ring.publish(e)
            t1 = clock()
            polls.drain_bell()
            for _ in range(BURST):
                got = polls.poll()
            t2 = clock()
            dicts.drain_bell()
            for _ in range(BURST):
                got = dicts.poll()
                assert isinstance(got, RingFrame)
                chunks = got.records.as_dict()
            t3 = clock()
            assert isinstance(got, RingFrame) and chunks == records
            publish_ns += t1 - t0
            poll_ns += t2 - t1
            dict_ns += t3 - t2
    finally:
        polls.close()
        dicts.close()
        ring.close()
    return publish_ns / frames / 1e3, poll_ns / frames / 1e3, dict_ns / frames / 1e3


SEQUENCER_RECORDS = 2_400  # every instrument of the simulator changed: a 120k ticks/s frame


def _publish_frames(frames: int, encoders: Encoders, native_puts: bool) -> float:
    """µs of CPU per ``FramePublisher.publish_frame`` of SEQUENCER_RECORDS changed symbols on a
    real ShmRing (full records into the snapshot table, delta records into the FRAME entry);
    ``native_puts`` False puts them with the table's pure-Python twin."""
    from monotape.platform.core.conflation import Frame, FrameRecord
    from monotape.platform.host.publisher import FramePublisher
    from monotape.platform.model import Tick
    from monotape.platform.ring import ShmRing, table

    rng = random.Random(2)
    pairs = []
    for iid in range(SEQUENCER_RECORDS):
        p, s = rng.randrange(10_000, 5_000_000), rng.randrange(1, 1 << 40)
        base = Tick(iid, "XNAS", 3, s, 0, p, p + 100, p + 50, 100)
        pairs.append((base, s, p))
    ring = ShmRing.create(tag="bench" + uuid.uuid4().hex[:12])
    chosen = table.put_many
    if not native_puts:  # the module attribute ShmRing.put_snapshots calls, for this run only
        table.put_many = table.python_put_many
    try:
        pub = FramePublisher(ring, time.monotonic_ns, encoders=encoders)
        spent = 0
        for k in range(frames):
            records = []
            for i, (base, s, p) in enumerate(pairs):
                d = rng.randrange(-500, 500)
                new = Tick(i, "XNAS", 3, s + k + 1, 0, p + d, p + d + 100, p + d + 40, 7)
                records.append(FrameRecord(i, base, new))
            frame = Frame(k + 1, (k + 1) * 40_000_000, records)
            t0 = time.process_time_ns()
            pub.publish_frame(frame)
            spent += time.process_time_ns() - t0
    finally:
        table.put_many = chosen
        ring.close()
    return spent / frames / 1e3


def _publish_rows(quick: bool) -> list[Row]:
    """The sequencer's frame publish, all in Python (the fallback without a compiler), with the
    native record encoders, and with the native table puts too (interleaved runs): the part
    of a 40 ms frame the sequencer's loop spends encoding and putting."""
    from monotape.platform.ring import table
    from monotape.platform.wire import records

    native = records.native_module()
    frames, runs = (20, 3) if quick else (100, 5)
    python = (records.python_encode_full_record, records.python_encode_delta_record)
    variants: list[tuple[str, Encoders, bool, str]] = [
        ("python encoders", python, False, "the pure-Python twins"),
    ]
    if native is not None:
        encoders = (native.encode_full_record, native.encode_delta_record)
        variants.append(
            ("native encoders", encoders, False, "wire/_records.c; the table's Python puts")
        )
        if table.NATIVE:
            variants.append(
                ("native encoders + puts", encoders, True, "wire/_records.c and ring/_table.c")
            )
    spent: dict[str, list[float]] = {name: [] for name, *_ in variants}
    for _ in range(runs):
        for name, enc, native_puts, _note in variants:
            spent[name].append(_publish_frames(frames, enc, native_puts))
    note = f"{SEQUENCER_RECORDS:,} changed symbols per frame, {frames} frames x {runs} runs, CPU"
    peer = median_min_max(spent["python encoders"])[0]
    rows = []
    for name, _enc, _native_puts, what in variants:
        med, lo, hi = median_min_max(spent[name])
        rows.append(
            row("sequencer frame publish", name, med, "µs/frame", lo=lo, hi=hi,
                ratio=med / peer, peer="python encoders", note=f"{what}; {note}")
        )  # fmt: skip
    return rows


AGED_TICKS, AGED_BATCHES, WRITES = 4_800, 60, 2_100


def _ages_once(rng: random.Random) -> tuple[float, float, float]:
    """µs of CPU for one frame: the sequencer's ages, a writer's written_frame from them, and
    the one-process node's written for the same ticks and writes (its peer)."""
    import numpy as np

    from monotape.histograms import Recorders
    from monotape.platform.core.sequencer import Sequencer
    from monotape.platform.core.stamps import StageStamps
    from monotape.platform.host.publisher import ages_of
    from monotape.platform.host.ring_feed import ticks_of
    from monotape.platform.model import Tick
    from monotape.platform.wire.batch import batch_from_ticks

    per = AGED_TICKS // AGED_BATCHES
    sequencer, node = StageStamps(Recorders(start_ms=0)), StageStamps(Recorders(start_ms=0))
    lanes = Sequencer(lanes=4)
    for b in range(AGED_BATCHES):
        at = 1_000_000 + b * 600_000
        bus = [  # rising seqs: every tick of the bus batch is applied
            Tick(rng.randrange(SEQUENCER_RECORDS), "XNAS", 1, b * per + k, at, 1, 2, 1, 1, "A", at)
            for k in range(per)
        ]
        (batch,) = batch_from_ticks(bus, batch_seq=b)
        admission = lanes.on_batch(batch, at + 9)
        assert admission.count == per
        for stamps in (sequencer, node):  # as the sequencer role and the node's pipeline do
            stamps.decoded_batch(batch)
            stamps.admitted_batch(admission)
    t0 = time.process_time_ns()
    ticks = sequencer.frame_ticks()
    assert ticks is not None
    ages = ages_of(ticks)
    aged = time.process_time_ns() - t0
    latencies = np.arange(WRITES, dtype=np.int64) * 1_000
    symbols = np.unique(ticks.iids).astype(np.int64)
    sent = symbols[::2]  # half of the frame's instruments went out: the per-tick path
    writer = StageStamps(Recorders(start_ms=0))
    t0 = time.process_time_ns()
    writer.written_frame(latencies, WRITES, 50_000_000, sent, len(symbols), ticks_of(ages))
    host = time.process_time_ns() - t0
    node.framed(40_000_000, 50_000_000, 0, symbols=len(symbols))
    t0 = time.process_time_ns()
    node.written(latencies, sent, WRITES)
    one_process = time.process_time_ns() - t0
    return aged / 1e3, host / 1e3, one_process / 1e3


def _ages_rows(quick: bool) -> list[Row]:
    rng = random.Random(3)
    runs = [_ages_once(rng) for _ in range(20 if quick else 200)]
    note = (
        f"{AGED_TICKS:,} ticks of {SEQUENCER_RECORDS:,} symbols in {AGED_BATCHES} batches "
        f"(a 120k ticks/s frame), half of its instruments sent, {WRITES:,} writes, "
        f"{len(runs)} frames, CPU"
    )
    (s_med, s_lo, s_hi), (w_med, w_lo, w_hi), (n_med, n_lo, n_hi) = (
        median_min_max([r[i] for r in runs]) for i in range(3)
    )
    return [
        row("tick ages", "sequencer: frame_ticks + bytes", s_med, "µs/frame", lo=s_lo, hi=s_hi,
            note=f"~10 KB on the ring a frame; {note}"),
        row("tick ages", "writer: write + tick_to_write from the ages", w_med, "µs/frame",
            lo=w_lo, hi=w_hi, ratio=w_med / n_med, peer="one process: written",
            note=f"StageStamps.written_frame; {note}"),
        row("tick ages", "one process: written (reads the ticks)", n_med, "µs/frame", lo=n_lo,
            hi=n_hi, ratio=1.0, peer="one process: written", note=f"the same values; {note}"),
    ]  # fmt: skip


def run(quick: bool = False) -> list[Row]:
    frames, runs = (400, 3) if quick else (2_000, 5)
    records = frame_records(RECORDS, seed=1)
    size = sum(map(len, records.values()))
    results = [_one_run(frames, records) for _ in range(runs)]
    note = (
        f"{RECORDS:,} records, {size / RECORDS:.1f} B/record ({size / 1024:.1f} KiB + "
        f"{8 * RECORDS / 1024:.1f} KiB index), {frames:,} frames x {runs} runs, CPU time"
    )
    rows = []
    for i, (variant, what) in enumerate(
        (
            ("publish (2 readers' doorbells)", "producer"),
            ("poll: copy, re-check, index views", "per reader"),
            ("poll + as_dict (iid -> record)", "per reader"),
        )
    ):
        med, lo, hi = median_min_max([r[i] for r in results])
        rows.append(
            row("shm frame ring", variant, med, "µs/frame", lo=lo, hi=hi, note=f"{what}; {note}")
        )
    return rows + _publish_rows(quick) + _ages_rows(quick)


def main(argv: list[str]) -> None:
    print_rows(run("--quick" in argv))


if __name__ == "__main__":
    main(sys.argv[1:])
