"""bench_storm's own accounting: the load workers' CPU beside the server's figures (the rows say
when a storm on this box measures its clients). Shapes only, never timings."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from bench.e2e import bench_storm
from monotape.platform.role.process_metrics import main_thread_schedstat


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_harness_cpu_counts_children_once_joined() -> None:
    """What ``run_load``'s workers spent reaches the harness's figure when they are joined."""
    before = bench_storm._harness_cpu_s()
    child = multiprocessing.get_context("spawn").Process(target=_burn, args=(0.3,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert bench_storm._harness_cpu_s() - before >= 0.25


@pytest.mark.slow
def test_quick_storm_reports_its_load_cpu() -> None:
    """A real ``monotape run`` and a 300-terminal storm: terminals connect, and the outcome and
    its rows carry the load workers' CPU."""
    log: list[str] = []
    o = bench_storm.storm(bench_storm.QUICK, "smoke", {}, log.append)
    assert o.report.connected > 0, log
    assert o.load_cpu > 0, log
    assert "load CPU" in log[-1]
    notes = " ".join(r.note for r in bench_storm._steady_rows([o], bench_storm.QUICK))
    assert "load workers + harness CPU" in notes
    if main_thread_schedstat().exists():  # the node's own wait for a core, over the replay
        assert set(o.waits) == {"node"} and o.waits["node"] >= 0
        assert "waited longest for a core (s/s) node" in notes
        assert "waiting for a core (s/s) node" in log[-1]
