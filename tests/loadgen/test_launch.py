"""The launcher: /metrics parsed by Prometheus' own parser and summed across processes, a stop
with a deadline, and (e2e) one real node with free ports, its own data dir and working tokens."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest

from monotape import metric_names as m
from monotape.loadgen.launch import RunningNode, launch, parse_samples, sum_samples

# Two processes' worth of one counter (what the node's aggregated exposition looks like), a
# histogram, and a gauge with no labels.
METRICS = """\
# HELP monotape_ticks_admitted_total Ticks admitted.
# TYPE monotape_ticks_admitted_total counter
monotape_ticks_admitted_total{venue="XNAS",pid="1"} 10.0
monotape_ticks_admitted_total{venue="XNAS",pid="2"} 5.0
monotape_ticks_admitted_total{venue="XLON",pid="1"} 7.0
# HELP monotape_connections Open connections.
# TYPE monotape_connections gauge
monotape_connections 3.0
# HELP monotape_stage_duration_seconds Stage durations.
# TYPE monotape_stage_duration_seconds histogram
monotape_stage_duration_seconds_bucket{stage="write",le="0.001"} 4.0
monotape_stage_duration_seconds_bucket{stage="write",le="+Inf"} 6.0
monotape_stage_duration_seconds_count{stage="write"} 6.0
monotape_stage_duration_seconds_sum{stage="write"} 0.01
"""


def test_samples_are_keyed_by_name_and_sorted_labels() -> None:
    s = parse_samples(METRICS)
    assert s[(m.TICKS_ADMITTED, (("pid", "2"), ("venue", "XNAS")))] == 5.0
    assert s[(m.CONNECTIONS, ())] == 3.0
    # The parser names histogram series by their suffix, as Prometheus does.
    assert s[("monotape_stage_duration_seconds_count", (("stage", "write"),))] == 6.0


def test_sums_over_processes_and_label_values_filtered_by_labels() -> None:
    s = parse_samples(METRICS)
    assert sum_samples(s, m.TICKS_ADMITTED) == 22.0
    assert sum_samples(s, m.TICKS_ADMITTED, venue="XNAS") == 15.0
    assert sum_samples(s, m.TICKS_ADMITTED, venue="XPAR") == 0.0
    assert sum_samples(s, "no_such_metric") == 0.0


def test_a_malformed_body_is_refused_not_guessed() -> None:
    with pytest.raises(ValueError):
        parse_samples("monotape_connections not_a_number\n")


def _child(code: str, tmp_path: Path) -> RunningNode:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"  # its signal handler is in place
    return RunningNode(proc, 1, 1, tmp_path)


def test_stop_kills_a_node_that_overstays_its_deadline(tmp_path: Path) -> None:
    node = _child(
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(120)",
        tmp_path,
    )
    assert node.stop(timeout=0.5) is None  # killed: the caller sees it did not stop by itself
    assert node.proc.returncode == -9  # SIGKILL
    assert node.stop(timeout=0.5) == -9  # idempotent: the exit it already had


def test_stop_returns_the_exit_code_of_a_node_that_stops_on_sigint(tmp_path: Path) -> None:
    node = _child(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(0))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n",
        tmp_path,
    )
    assert node.stop(timeout=30) == 0


@pytest.mark.e2e
def test_a_real_node_free_ports_own_data_dir_tokens_and_metrics() -> None:
    # The launcher's own contract (free ports, its data dir, tokens): the one-process node
    # starts in a second where the default host's processes take several on busy cores.
    node = launch(
        None,
        "--single-process",
        "--rate",
        "1000",
        env={"MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "0"},
    )
    data_dir = node.data_dir
    try:
        assert node.ws_port > 0 and node.admin_port > 0
        assert (data_dir / "keys").is_dir()  # the node's own dev keys, in its own data dir
        assert node.token and node.admin_token and node.token not in node.bare_url
        # The admin token is accepted; the terminal token is not an admin's.
        assert isinstance(json.loads(node.http("/admin/feeds", node.admin_token)), dict)
        with pytest.raises(urllib.error.HTTPError) as refused:
            node.http("/admin/feeds", node.token)
        assert refused.value.code == 403
        samples = node.metrics()
        assert any(name == m.CONNECTIONS for name, _ in samples)
        assert m.CONNECTIONS in node.metric_families()
        assert node.metric_sum(m.CONNECTIONS) == 0
    finally:
        code = node.stop()
    assert code == 0, "".join(node.tail)
    assert not data_dir.exists()  # the temporary data dir goes with the node
    assert any("terminals" in line and "ws://127.0.0.1:" in line for line in node.output)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its new parent) is gone for our purpose
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


@pytest.mark.e2e
def test_a_node_stops_when_its_launcher_is_killed(tmp_path: Path) -> None:
    """A bench or test killed mid-run (kill -9, no finally) must not leave its node running:
    the launched ``monotape run`` gets SIGTERM from the kernel when the launcher dies."""
    script = (
        "import sys, time\n"
        "from monotape.loadgen.launch import launch\n"
        "node = launch(sys.argv[1], '--single-process', '--rate', '1000')\n"
        "print(node.proc.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline()
        assert line.strip().isdigit(), line
        node_pid = int(line)
        assert _alive(node_pid)
        launcher.kill()
        launcher.wait(10)
        deadline = time.monotonic() + 60  # SIGTERM: the node drains, then exits
        while _alive(node_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(node_pid), "the node outlived its launcher"
    finally:
        launcher.kill()
        with contextlib.suppress(ProcessLookupError, UnboundLocalError):
            if _alive(node_pid):
                os.kill(node_pid, signal.SIGKILL)
