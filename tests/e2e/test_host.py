"""The multi-process host end to end (issue 12: supervision, no orphans, observed as one).

(a)-(b) run the real host foreground (``run_host``: banner, signals, supervision, admin API,
ordered stop) over test-only roles (tests/host/fake_role.py), so they test the host alone:
kill -9 of a role is restarted and counted by reason; a crash loop is logged every time; the
stop goes stage by stage in reverse start order and SIGKILLs a role that overstays; a second
Ctrl-C kills at once; kill -9 of the host leaves no role process behind, and the next host's
start removes its /dev/shm segments and run dir. ``monotape run --writers 2`` with the real
roles (terminals on both writers, every frame boundary their twins got, no version going back,
the SIGTERM stop) is tests/e2e/test_host_chaos.py, on the one host that module starts. Counts
and orders are asserted, never rates or timings (deadlines are generous: the machine may be
busy).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from monotape import metric_names as m
from monotape.commands.foreground import PRESS_WINDOW_S
from monotape.loadgen.launch import ADMIN_LINE, WS_LINE, scrape, sum_samples
from tests.conftest import ROOT, mint

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHM = Path("/dev/shm")


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs nothing any more)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def leftovers(host_pid: int, run_base: Path) -> list[str]:
    shm = [p.name for p in SHM.glob(f"monotape-{host_pid}-*")]
    return shm + [p.name for p in run_base.glob(f"monotape-run-{host_pid}")]


class FakeHost:
    """``python -m tests.host.fake_host``: the real host over test-only roles."""

    def __init__(
        self, tmp: Path, writers: int = 2, stop_timeout_s: float = 3.0, **env: str
    ) -> None:
        self.data_dir = tmp / "data"
        self.run_base = tmp / "run"
        self.run_base.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "tests.host.fake_host", str(self.data_dir),
               str(self.run_base), str(writers), str(stop_timeout_s)]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **env},
        )
        self.lines: list[str] = []
        self.admin_port = 0
        self.ws_port = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: self.admin_port or self.proc.poll() is not None, "banner", 60)
        assert self.admin_port, "the host did not start:\n" + "".join(self.lines)
        self.token = mint(self.data_dir, admin=True)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if match := WS_LINE.search(line):
                self.ws_port = int(match.group(1))
            if match := ADMIN_LINE.search(line):
                self.admin_port = int(match.group(1))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def processes(self) -> dict[str, Any]:
        return admin_processes(self.admin_url, self.token)

    def rows(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in self.processes()["processes"]}

    def events(self, event: str) -> list[dict[str, Any]]:
        out = []
        for line in list(self.lines):
            if line.startswith("{") and f'"event": "{event}"' in line:
                out.append(json.loads(line))
        return out

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)
        return code


def admin_processes(admin_url: str, token: str) -> dict[str, Any]:
    req = urllib.request.Request(admin_url + "/admin/processes")
    req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body


def http_status(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of a GET, an error status included."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Callable[..., FakeHost]]:
    started: list[FakeHost] = []

    def start(writers: int = 2, stop_timeout_s: float = 3.0, **env: str) -> FakeHost:
        host = FakeHost(tmp_path, writers, stop_timeout_s, **env)
        started.append(host)
        return host

    yield start
    for host in started:
        host.stop(signal.SIGKILL if host.proc.poll() is None else signal.SIGTERM, 30)


# -- (a) supervision ---------------------------------------------------------------------------
def test_a_role_killed_with_sigkill_comes_back_and_its_reason_is_counted(
    hosts: Callable[..., FakeHost],
) -> None:
    host = hosts(writers=2)
    before = host.rows()
    assert all(r["state"] == "running" for r in before.values())
    assert host.processes()["terminals"] == {"writer-0": 3, "writer-1": 4}  # the split
    victim = before["writer-1"]["pid"]
    os.kill(victim, signal.SIGKILL)

    def back() -> bool:
        w = host.rows()["writer-1"]
        return bool(w["state"] == "running" and w["pid"] != victim and w["ready"])

    wait_for(back, "writer-1 restarted")
    after = host.rows()
    assert after["writer-1"]["restarts"] == 1
    assert after["writer-1"]["last_reason"] == "SIGKILL"
    for name in ("sequencer", "writer-0", "handler-A", "venue"):
        assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted too"
    samples = scrape(host.admin_url, timeout_s=10)
    restarts = m.PROCESS_RESTARTS
    assert sum_samples(samples, restarts, role="writer", process="writer-1", reason="SIGKILL") == 1
    assert sum_samples(samples, restarts) == 1
    assert sum_samples(samples, "fake_role_restarts", process="writer-1") == 1  # spec.restarts
    assert sum_samples(samples, m.PROCESS_UP) == 5
    assert [e["reason"] for e in host.events("role_restarting")] == ["SIGKILL"]
    assert http_status(host.admin_url + "/healthz")[0] == 200
    assert http_status(host.admin_url + "/admin/processes")[0] == 401  # no token
    bad = http_status(host.admin_url + "/admin/latency", host.token)
    assert bad[0] == 400 and bad[1]["parameter"] == "stage"

    assert host.stop(signal.SIGTERM) == 0
    stages = [e["stage"] for e in host.events("stage_stopped")]
    assert stages == ["writer", "venue", "handler", "sequencer"]  # the writers drain first
    assert all(gone(r["pid"]) for r in after.values())
    assert leftovers(host.pid, host.run_base) == []


def test_a_role_in_a_crash_loop_is_restarted_each_time_and_logged_each_time(
    hosts: Callable[..., FakeHost],
) -> None:
    host = hosts(writers=1, FAKE_ROLE_CRASH="venue")  # exits 3 a moment after every start
    wait_for(lambda: host.rows()["venue"]["restarts"] >= 3, "three restarts of the venue", 60)
    samples = scrape(host.admin_url, timeout_s=10)
    counted = sum_samples(samples, m.PROCESS_RESTARTS, process="venue", reason="exit_3")
    assert counted >= 3
    logged = [e for e in host.events("role_restarting") if e["role"] == "venue"]
    assert len(logged) >= counted - 1  # every crash a line (the last may still be in flight)
    assert all(e["reason"] == "exit_3" and e["level"] == "error" for e in logged)
    waits = [e["restart_in_s"] for e in logged]
    assert max(waits) <= 1.0  # fake_host's restart cap
    assert host.rows()["writer-0"]["restarts"] == 0  # the others keep running

    def venue_down() -> bool:
        status, body = http_status(host.admin_url + "/healthz")
        return status == 503 and body["down"] == ["venue"]

    wait_for(venue_down, "/healthz 503 naming the venue while it waits to restart", 60)
    assert host.stop() == 0


def test_a_role_whose_event_loop_hangs_is_killed_as_hung_and_started_again(
    hosts: Callable[..., FakeHost],
) -> None:
    """Liveness (issue 40): the fake writer blocks its loop half a second after each start; its
    beat stops, and past its limit (1.5 s) the host SIGKILLs it, says so once per hang and
    counts it as ``hung``, not as the SIGKILL it sent."""
    host = hosts(writers=2, FAKE_ROLE_HANG="writer-1")
    before = host.rows()

    def replaced() -> bool:
        w = host.rows()["writer-1"]
        return bool(w["last_reason"] == "hung" and w["restarts"] >= 1)

    wait_for(replaced, "writer-1 killed as hung and started again")
    after = host.rows()
    samples = scrape(host.admin_url, timeout_s=10)
    hung = sum_samples(samples, m.PROCESS_RESTARTS, process="writer-1", reason="hung")
    assert hung >= 1
    assert sum_samples(samples, m.PROCESS_RESTARTS, process="writer-1", reason="SIGKILL") == 0
    lines = host.events("role_hung")
    assert {e["role"] for e in lines} == {"writer-1"} and len(lines) >= hung
    assert all(e["silent_s"] > e["limit_s"] == 1.5 and e["beat_seen"] for e in lines)
    for name in ("sequencer", "writer-0", "handler-A", "venue"):
        assert after[name]["pid"] == before[name]["pid"], f"{name} was replaced too"
    # the others beat: the worst silence the host saw of them is far below their limits
    silence = sum_samples(samples, m.PROCESS_BEAT_SILENCE_MAX, process="writer-0")
    assert 0 < silence < 1.5
    assert host.stop(signal.SIGTERM) == 0


def test_a_role_that_ignores_sigterm_is_killed_at_the_deadline(
    hosts: Callable[..., FakeHost],
) -> None:
    # 12 s: the writers stop first and every stage after theirs is owed its full ROLE_STOP_S
    # (2 s, the most a stage is reserved), so the writers' share is 6 s, told twice at 4 s.
    host = hosts(writers=2, stop_timeout_s=12.0, FAKE_ROLE_STUBBORN="writer-0")
    pids = {n: r["pid"] for n, r in host.rows().items()}
    assert host.stop(signal.SIGTERM) == 0
    by_stage = {e["stage"]: e for e in host.events("stage_stopped")}
    assert list(by_stage) == ["writer", "venue", "handler", "sequencer"]
    assert by_stage["writer"]["told_twice"] == ["writer-0"]  # ignored that one too
    assert by_stage["writer"]["killed"] == ["writer-0"]
    assert by_stage["sequencer"]["killed"] == []
    assert all(gone(pid) for pid in pids.values())
    assert leftovers(host.pid, host.run_base) == []


def test_a_writer_still_draining_near_the_deadline_is_told_twice_not_killed(
    hosts: Callable[..., FakeHost],
) -> None:
    host = hosts(writers=2, stop_timeout_s=12.0, FAKE_ROLE_DRAINING="writer-0")
    pids = {n: r["pid"] for n, r in host.rows().items()}
    assert host.stop(signal.SIGTERM) == 0
    by_stage = {e["stage"]: e for e in host.events("stage_stopped")}
    assert by_stage["writer"]["told_twice"] == ["writer-0"]
    assert by_stage["writer"]["killed"] == []
    stopped = [e for e in host.events("role_stopped") if e.get("process") == "writer-0"]
    assert host.events("fake_drain_cut_short") and stopped  # a clean exit, not SIGKILL
    assert all(gone(pid) for pid in pids.values())
    assert leftovers(host.pid, host.run_base) == []


def test_a_second_ctrl_c_kills_every_role_at_once(hosts: Callable[..., FakeHost]) -> None:
    # a deadline of 10 minutes: only the second Ctrl-C can end this stop in time
    host = hosts(writers=2, stop_timeout_s=600.0, FAKE_ROLE_STUBBORN="writer-0")
    pids = [r["pid"] for r in host.rows().values()]
    host.proc.send_signal(signal.SIGINT)
    wait_for(lambda: any("stopping (SIGINT)" in line for line in host.lines), "first Ctrl-C")
    first_seen = time.monotonic()

    def writer_1_stopped() -> bool:  # the stop under way (writer-0's stage never ends)
        return any(e.get("process") == "writer-1" for e in host.events("role_stopped"))

    wait_for(writer_1_stopped, "writer-1 stopped")
    # a press of its own: one within PRESS_WINDOW_S of the first is its copy (GNU timeout's)
    time.sleep(max(0.0, first_seen + PRESS_WINDOW_S - time.monotonic()))
    host.proc.send_signal(signal.SIGINT)
    assert host.proc.wait(120) == 0  # a third signal would leave without cleanup: none sent
    host.stop()
    assert any("stopping now: killing every process" in line for line in host.lines)
    assert all(gone(pid) for pid in pids)
    assert leftovers(host.pid, host.run_base) == []


# -- (b) kill -9 of the host -------------------------------------------------------------------
def test_kill_9_of_the_host_leaves_no_role_and_the_next_host_sweeps_its_segments(
    hosts: Callable[..., FakeHost],
) -> None:
    first = hosts(writers=2)
    pids = [r["pid"] for r in first.rows().values()]
    assert len(leftovers(first.pid, first.run_base)) == 4  # ring, interest, beats, run dir
    first.proc.kill()
    first.proc.wait()  # reaped: its pid is dead for the sweep
    # every role dies with its host (PR_SET_PDEATHSIG, and the role's own parent check)
    wait_for(lambda: all(gone(pid) for pid in pids), "the roles of the killed host exit", 30)
    # what the host can no longer remove itself, the next host's start removes
    assert leftovers(first.pid, first.run_base) != []
    second = hosts(writers=1)
    assert leftovers(first.pid, first.run_base) == []
    assert any("swept_leftovers" in line for line in second.lines)
    assert second.stop() == 0
    assert leftovers(second.pid, second.run_base) == []
