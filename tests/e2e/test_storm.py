"""Survive the open: a correlated reconnect storm against the real server, and its Poisson twin.

Sized for CI on 2 cores. The admission bucket is set below what this harness can push through
loopback on 2 cores (measured: 550-700 upgrades/s reach the server while it also runs the
simulator, the clients and the fan-out), so the storm does overflow it and the 503s are certain,
not a coin toss on the machine's speed. At the 600/s + 800 burst of the issue the same storm saw
0 to ~400 503s from run to run on the shared 2-core box: the server kept up with what arrived.
"""

from __future__ import annotations

import sys

import pytest

from monotape.loadgen import (
    LoadConfig,
    LoadReport,
    SizeWeight,
    compare,
    poisson_like,
    run_load,
    storm_trace,
)
from tests.conftest import ServerFactory

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The storm's whole defence: the bucket and shedding while the loop runs late (100 ms, the
# default; test nodes otherwise start without it, see conftest.NO_LAG_SHEDDING).
DEFENDED = {
    "MONOTAPE_SERVER__ADMISSION_RATE_PER_S": "300",
    "MONOTAPE_SERVER__ADMISSION_BURST": "400",
    "MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "100",
}
# Correlated vs Poisson compares what the bucket alone does with the same mean rate (~95/s):
# a bucket the storm overruns even when a busy machine slows the load client's burst, and the
# Poisson arrivals stay under; lag shedding (which a busy machine trips for either) stays off.
NARROW = {"MONOTAPE_SERVER__ADMISSION_RATE_PER_S": "150", "MONOTAPE_SERVER__ADMISSION_BURST": "150"}
TINY = [SizeWeight(3, 1.0)]  # tiny watchlists: the storm is about connections, not fan-out


def _cfg(admin_port: int) -> LoadConfig:
    return LoadConfig(
        processes=2,
        admin_url=f"http://127.0.0.1:{admin_port}",
        backoff_base_s=0.5,
        backoff_cap_s=8.0,
        drain_s=10.0,
    )


def _show(report: LoadReport) -> None:
    sys.stderr.write("\n" + report.format_table() + "\n")


def test_open_storm_is_absorbed(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "2000", env=DEFENDED)
    trace = storm_trace(
        terminals=2_000,  # all inside one second
        duration_s=24,
        open_at_s=3,
        open_spread_s=1,
        releases=(),
        baseline_per_s=1.0,
        cardinality=TINY,
        seed=7,
    )
    report = run_load(server.url, trace, _cfg(server.admin_port), progress=None)
    _show(report)
    assert "token" not in report.url
    assert report.errors == 0, report.error_samples
    # every terminal connected (but a baseline one whose scheduled end came during its
    # backoff: it is "abandoned", as a user who gave up), and every one due at the end is live
    assert report.scheduled == trace.total_connects
    assert report.connected + report.abandoned == report.scheduled
    assert report.abandoned <= 5
    assert report.all_connected_at_end, (report.up_at_end, report.due_at_end)
    # ... inside the trace: every due terminal was receiving before it ended (how soon is the
    # benchmark's business, bench_storm; a busy machine stretches it)
    assert report.recovered_at_s is not None and report.recovery_s is not None
    assert report.connect_ms.max < trace.duration_s * 1000
    # 503s happened and the backoff absorbed them: retries shrink wave after wave
    assert report.rejected_503 > 0
    assert report.retries >= report.rejected_503
    waves = report.attempt_waves
    assert len(waves) >= 2 and waves[1] < waves[0]
    # frames flow to (nearly) everyone within the run: 3 cold symbols can stay quiet a while
    assert report.first_frames >= 0.98 * report.scheduled
    assert report.peak_concurrent >= 2_000
    # the server's event loop stayed responsive through the storm
    assert report.loop_lag_samples > 0
    # (a sanity bound, not a speed claim: a loop blocked by the storm stalls for the whole of
    # it; a busy machine alone adds hundreds of ms)
    assert report.loop_lag_max_s is not None and report.loop_lag_max_s < 5.0
    # one token for every terminal: after the first verification, the cache answers
    assert report.auth_cache_hit_rate is not None and report.auth_cache_hit_rate > 0.9
    # and the server agrees: everything it turned away was counted
    rejected = server.metric_sum("monotape_admission_rejected_total")
    assert rejected >= report.rejected_503


def test_correlated_vs_poisson_same_mean(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "2000", env=NARROW)
    storm = storm_trace(
        terminals=1_500,
        duration_s=16,
        open_at_s=2,
        releases=(),
        baseline_per_s=1.0,
        cardinality=TINY,
        seed=11,
    )
    flat = poisson_like(storm, seed=11)
    assert flat.total_connects == storm.total_connects
    cfg = _cfg(server.admin_port)
    a = run_load(server.url, storm, cfg, progress=None)
    b = run_load(server.url, flat, cfg, progress=None)
    sys.stderr.write("\n" + compare(a, b) + "\n")
    assert a.errors == 0 and b.errors == 0, (a.error_samples, b.error_samples)
    assert a.connected + a.abandoned == b.connected + b.abandoned == storm.total_connects
    # the Poisson arrivals are all up at the end; the storm overran a deliberately narrow
    # bucket and may still have a few terminals in backoff (the test above is the one about
    # absorbing a storm)
    assert b.all_connected_at_end
    # the same mean rate; only the correlation differs, and it is what hurts
    assert a.mean_connects_per_s == b.mean_connects_per_s
    assert a.rejected_503 > b.rejected_503
    assert a.connect_ms.p99 > b.connect_ms.p99
    # no assertion on peak_concurrent: both reach ~all 1,500, and the storm's few terminals
    # still in backoff (or abandoned) can leave its peak one or two below Poisson's
