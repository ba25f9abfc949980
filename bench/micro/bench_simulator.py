"""Venue simulator throughput: updates generated per second of CPU (median of 3 runs).

Drives the simulator with a fake clock (no sleeps) in 40 ms steps, the pump's cadence under the
frame clock, at the seed's spike rate (190k/s) so every step is a realistic batch. Returns one
row; the target is >= 300k updates/s on one core (headroom over the 190k/s spikes).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Final

from bench.common import Row, print_rows, row
from monotape.clock import FakeClock
from monotape.config import SimulatorConfig
from monotape.platform.feeds.simulator import VenueSimulator, build_universe

__all__ = ["run", "run_once"]

TARGET: Final = 300_000  # updates/s on one core: headroom over the 190k/s spikes
SPIKE_RATE: Final = 190_000.0


def run_once(updates: int, rate: float, step_ms: float) -> float:
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), SimulatorConfig(rate=rate), clock)
    produced = 0
    start = time.process_time()
    while produced < updates:
        clock.advance_ms(step_ms)
        produced += len(sim.step())
    return produced / (time.process_time() - start)


def run(quick: bool = False, *, runs: int = 3) -> list[Row]:
    """One row: updates/s of CPU, the median of ``runs`` (min-max across them)."""
    updates = 100_000 if quick else 1_000_000
    step_ms = 40.0
    rates = [run_once(updates, SPIKE_RATE, step_ms) for _ in range(1 if quick else runs)]
    med = statistics.median(rates)
    return [
        row(
            "simulator: updates per CPU second",
            f"VenueSimulator at {SPIKE_RATE:,.0f}/s, {step_ms:g} ms steps",
            med,
            "updates/s",
            lo=min(rates),
            hi=max(rates),
            note=(
                f"target >= {TARGET:,} ({'met' if med >= TARGET else 'NOT met'}); "
                f"{updates:,} updates per run, {len(rates)} run(s), fake clock (no sleeps)"
            ),
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print_rows(run(args.quick))


if __name__ == "__main__":
    main()
