"""Venue simulator throughput: updates generated per second of CPU (median of 3 runs).

Drives the simulator with a fake clock (no sleeps) in 40 ms steps, the pump's cadence under the
frame clock, at the seed's spike rate (190k/s) so every step is a realistic batch. Prints the
figure; the target is >= 300k updates/s on one core (headroom over the 190k/s spikes).
"""

from __future__ import annotations

import argparse
import statistics
import time

from monotape.clock import FakeClock
from monotape.config import SimulatorConfig
from monotape.platform.feeds.simulator import VenueSimulator, build_universe


def run_once(updates: int, rate: float, step_ms: float) -> float:
    clock = FakeClock()
    sim = VenueSimulator(build_universe(), SimulatorConfig(rate=rate), clock)
    produced = 0
    start = time.process_time()
    while produced < updates:
        clock.advance_ms(step_ms)
        produced += len(sim.step())
    return produced / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=190_000.0)
    parser.add_argument("--step-ms", type=float, default=40.0)
    args = parser.parse_args()
    runs = [run_once(args.updates, args.rate, args.step_ms) for _ in range(3)]
    print(
        f"simulator: {statistics.median(runs):,.0f} updates/s (median of 3; "
        f"runs {', '.join(f'{r:,.0f}' for r in runs)}; rate {args.rate:,.0f}/s, "
        f"step {args.step_ms} ms)"
    )


if __name__ == "__main__":
    main()
