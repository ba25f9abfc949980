"""The venue process and every handler process (``python -m monotape.platform.host venue|handler
SPEC``) on a small simulator, with the sequencer's end of the IPC bus in this test: both twins of
a venue deliver the same versions; kill -9 of one twin freezes no symbol; the restarted twin
comes back with a higher epoch; every process stops on SIGTERM and leaves no socket behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from monotape import metric_names as m
from monotape.config import Config
from monotape.platform.bus.ipc import IpcTickBus, bus_path
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.feeds.sources import handler_plans
from monotape.platform.host.spec import RoleSpec, write_config
from monotape.platform.host.telemetry import port_file
from monotape.platform.model import Tick
from monotape.platform.wire.batch import TickBatch
from tests.conftest import node_config, until

pytestmark = [pytest.mark.e2e]

STOP_S = 5.0  # the roles promise 2 s; a busy machine gets more before the test calls it a hang


class Roles:
    """The processes this test started: stopped (and reaped) whatever happens."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, spec: RoleSpec) -> subprocess.Popen[bytes]:
        # This test is their host: should it die, they exit by themselves (no orphans).
        spec = msgspec.structs.replace(spec, host_pid=os.getpid())
        log = (self.run_dir / f"{spec.name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "monotape.platform.host", spec.role, spec.encode()],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        self.procs[spec.name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.run_dir / f"{name}.log").read_text()

    def stop_all(self) -> dict[str, int | None]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[name] = None
        return codes


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mt-e2e-", dir="/tmp"))  # socket paths <= 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _cfg(run_dir: Path) -> Config:
    return node_config(
        run_dir / "data",
        {"simulator.venues": 2, "simulator.instruments": 40, "simulator.rate": 2_000.0},
    )


def _scrape(run_dir: Path, name: str) -> str:
    port = int(port_file(run_dir, name).read_text())
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


class Tape:
    """What the sequencer's end received, per (venue, handler), and what the sequencer's admit
    rule would apply: per symbol, only a version above the one held. The venue's own order is
    the price order a terminal must see, so an applied update older (by venue timestamp) than
    the one applied before it is a price moving back on screen: ``went_back``."""

    def __init__(self) -> None:
        self.by_handler: dict[tuple[str, str], list[Tick]] = defaultdict(list)
        self.held: dict[int, tuple[int, int, int]] = {}  # iid -> (epoch, seq, venue_ts_ns)
        self.went_back: list[tuple[Tick, tuple[int, int, int]]] = []

    def __call__(self, batch: TickBatch) -> None:
        for t in batch.ticks():
            self.by_handler[(t.venue, t.handler)].append(t)
            held = self.held.get(t.iid)
            if held is None or (t.epoch, t.seq) > held[:2]:
                if held is not None and t.venue_ts_ns < held[2]:
                    self.went_back.append((t, held))
                self.held[t.iid] = (t.epoch, t.seq, t.venue_ts_ns)

    def count(self, venue: str, handler: str) -> int:
        return len(self.by_handler[(venue, handler)])

    def clear(self) -> None:
        self.by_handler.clear()


async def test_venue_and_handler_processes(run_dir: Path) -> None:
    cfg = _cfg(run_dir)
    write_config(cfg, run_dir)
    plans = handler_plans(cfg)
    venues = sorted({p.venue for p in plans})
    tape = Tape()
    bus = IpcTickBus(bus_path(run_dir), time.monotonic_ns)
    bus.subscribe(tape)
    bus.listen()
    roles = Roles(run_dir)

    def handler_spec(venue: str, name: str, restarts: int = 0) -> RoleSpec:
        return RoleSpec(
            role="handler", name=f"handler-{venue}-{name}", run_dir=str(run_dir),
            venue=venue, handler=name, restarts=restarts,
        )  # fmt: skip

    try:
        # The A twins and the venue first; the B twins join a live feed (as a slow starter
        # does on a busy host): they must not outrank what their live twin already delivered.
        for p in plans:
            if p.name == "A":
                roles.start(handler_spec(p.venue, p.name))
        roles.start(RoleSpec(role="venue", name="venue", run_dir=str(run_dir)))
        await until(
            lambda: all(tape.count(v, "A") > 200 for v in venues), "the A twins", timeout_s=60
        )
        for p in plans:
            if p.name == "B":
                roles.start(handler_spec(p.venue, p.name))
        await until(
            lambda: all(tape.count(p.venue, p.name) > 200 for p in plans),
            "ticks from every handler of every venue",
            timeout_s=60,
        )
        # Twins: the same venue update carries the same version (and prices) from both, from
        # the first update on (the twin that started second bumped behind the fence).
        for venue in venues:
            a = {
                (t.iid, t.venue_ts_ns): (t.epoch, t.seq, t.bid)
                for t in tape.by_handler[(venue, "A")]
            }
            b = {
                (t.iid, t.venue_ts_ns): (t.epoch, t.seq, t.bid)
                for t in tape.by_handler[(venue, "B")]
            }
            both = a.keys() & b.keys()
            assert len(both) > 100, venue
            assert all(a[k] == b[k] for k in both), venue
        # The epoch B bumped to at its start, from its own log line: its first ticks may still
        # carry the one before (behind the fence), so the ticks seen so far do not say it.
        first_start = _started(roles.log("handler-XNAS-B"), restarts=0)
        assert first_start is not None

        # kill -9 one twin: the other keeps every symbol of the venue moving.
        victim = roles.procs["handler-XNAS-B"]
        victim.send_signal(signal.SIGKILL)
        victim.wait(STOP_S)
        ticking = {t.iid for t in tape.by_handler[("XNAS", "A")]}
        tape.clear()
        await until(
            lambda: {t.iid for t in tape.by_handler[("XNAS", "A")]} >= ticking,
            "every XNAS symbol ticks again after its B handler died",
            timeout_s=60,
        )
        survivors = tape.by_handler[("XNAS", "A")]
        newest: dict[int, tuple[int, int]] = {}
        for t in survivors:  # the survivor's own versions keep rising per symbol
            assert (t.epoch, t.seq) > newest.get(t.iid, (-1, -1)), t
            newest[t.iid] = (t.epoch, t.seq)
        await until(
            lambda: "receiver_down" in _venue_drops(run_dir), "the venue counts B's missed updates"
        )

        # Restarted (restarts=1, as the host does): a new epoch, behind the 250 ms fence, that
        # the live twin adopts too.
        roles.start(handler_spec("XNAS", "B", restarts=1))
        await until(
            lambda: _started(roles.log("handler-XNAS-B"), restarts=1) is not None,
            "the restarted twin logs its start",
            timeout_s=60,
        )
        restart = _started(roles.log("handler-XNAS-B"), restarts=1)
        assert restart is not None and restart["epoch"] > first_start["epoch"]
        assert restart["at_once"] is False  # its twin is live: behind the fence
        await until(
            lambda: any(t.epoch == restart["epoch"] for t in tape.by_handler[("XNAS", "B")]),
            "the restarted twin stamps its new epoch",
            timeout_s=60,
        )
        await until(
            lambda: any(t.epoch == restart["epoch"] for t in tape.by_handler[("XNAS", "A")]),
            "the live twin adopts it",
        )
        assert not tape.went_back[:5]  # admitted in arrival order, no price ever moved back
    finally:
        codes = roles.stop_all()
        bus.close()
    assert all(code == 0 for code in codes.values()), codes
    for name in roles.procs:
        assert "role_stopped" in roles.log(name), name
    assert not list(run_dir.glob("*.sock"))  # every end removed its socket


def _started(log: str, restarts: int) -> dict[str, Any] | None:
    """The ``handler_started`` event of the handler's start with this ``restarts``, if logged."""
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line that is not an event (none expected; not this test's concern)
        if event.get("event") == "handler_started" and event.get("restarts") == restarts:
            assert event["process"].startswith("handler-"), event
            return cast(dict[str, Any], event)
    return None


def _venue_drops(run_dir: Path) -> str:
    lines = [
        line
        for line in _scrape(run_dir, "venue").splitlines()
        if line.startswith(m.IPC_DROPPED_ITEMS) and 'link="feed-XNAS-B"' in line
    ]
    return "\n".join(lines)


def _wait_for_port(run_dir: Path, name: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not port_file(run_dir, name).exists():
        assert proc.poll() is None, f"{name} exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{name} never served its metrics"
        time.sleep(0.05)


def test_venue_stops_on_sigterm_within_its_deadline(run_dir: Path) -> None:
    cfg = _cfg(run_dir)
    write_config(cfg, run_dir)
    roles = Roles(run_dir)
    proc = roles.start(RoleSpec(role="venue", name="venue", run_dir=str(run_dir)))
    _wait_for_port(run_dir, "venue", proc)
    started = time.monotonic()
    codes = roles.stop_all()
    assert codes == {"venue": 0}
    assert time.monotonic() - started < STOP_S
    assert "role_stopped" in roles.log("venue")


_HOST = """
import os, subprocess, sys, time
import msgspec
from monotape.platform.host.spec import RoleSpec
spec = msgspec.structs.replace(RoleSpec.decode(sys.argv[1]), host_pid=os.getpid())
role = subprocess.Popen(
    [sys.executable, "-m", "monotape.platform.host", spec.role, spec.encode()],
    stderr=open(sys.argv[2], "ab"),
)
print(role.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_handler_exits_when_its_host_is_killed(run_dir: Path) -> None:
    """kill -9 of the host process: its handler does not outlive it."""
    cfg = _cfg(run_dir)
    write_config(cfg, run_dir)
    spec = RoleSpec(
        role="handler", name="handler-XNAS-A", run_dir=str(run_dir), venue="XNAS", handler="A"
    )
    log = run_dir / "handler.log"
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, spec.encode(), str(log)], stdout=subprocess.PIPE
    )
    assert host.stdout is not None
    pid = int(host.stdout.readline())
    try:
        deadline = time.monotonic() + 60
        while "handler_started" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and _alive(pid), "the handler never started"
            time.sleep(0.05)
        host.kill()
        host.wait()
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, "the handler outlived its host"
            time.sleep(0.05)
        assert "role_stopped" in log.read_text()
    finally:
        host.kill()
        host.wait()
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


async def test_handlers_publish_on_nats(run_dir: Path, nats_url: str) -> None:
    """``bus = "nats"``: the handler processes publish on NATS (the existing publisher); a
    sequencer's NatsTickBus receives both twins' ticks with the same versions."""
    cfg = node_config(
        run_dir / "data",
        {
            "simulator.venues": 1, "simulator.instruments": 20, "simulator.rate": 1_000.0,
            "bus": "nats", "nats.servers": nats_url,
        },
    )  # fmt: skip
    write_config(cfg, run_dir)
    tape = Tape()
    sub = NatsTickBus()
    sub.subscribe(tape)
    await sub.connect([nats_url])
    await sub.flush()
    roles = Roles(run_dir)
    try:
        for p in handler_plans(cfg):
            roles.start(
                RoleSpec(
                    role="handler", name=f"handler-{p.key}", run_dir=str(run_dir),
                    venue=p.venue, handler=p.name,
                )
            )  # fmt: skip
        roles.start(RoleSpec(role="venue", name="venue", run_dir=str(run_dir)))
        await until(
            lambda: tape.count("XNAS", "A") > 300 and tape.count("XNAS", "B") > 300,
            "both twins' ticks on NATS",
            timeout_s=60,
        )
        a = {(t.iid, t.venue_ts_ns): (t.epoch, t.seq) for t in tape.by_handler[("XNAS", "A")]}
        b = {(t.iid, t.venue_ts_ns): (t.epoch, t.seq) for t in tape.by_handler[("XNAS", "B")]}
        late = [k for k in a.keys() & b.keys() if k[1] > max(k[1] for k in a) - 10**9]
        assert late and all(a[k] == b[k] for k in late)  # the last second: same versions
    finally:
        codes = roles.stop_all()
        await sub.close()
    assert all(code == 0 for code in codes.values()), codes
