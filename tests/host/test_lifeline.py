"""What ties a role to its host (host/lifeline.py): the death signal, the parent check, stop on
SIGTERM. The whole of it against a real dying host: tests/e2e/test_sequencer_role.py."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from monotape.platform.host.lifeline import (
    die_with_host,
    host_gone,
    stop_on_signals,
    watch_host,
)


def test_a_role_knows_when_its_parent_is_no_longer_the_host() -> None:
    assert not host_gone(0)  # no host (a test, a shell): never orphaned
    assert not host_gone(os.getppid())
    assert host_gone(os.getppid() + 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_death_signal_is_set_on_linux() -> None:
    assert die_with_host(signal.SIGTERM)
    assert die_with_host(0)  # and taken back: this test process has no host


async def test_watch_host_stops_the_role_once_the_host_is_gone() -> None:
    stop = asyncio.Event()
    await asyncio.wait_for(watch_host(os.getppid() + 1, stop, every_s=0.01), 10)
    assert stop.is_set()
    calm = asyncio.Event()
    watcher = asyncio.ensure_future(watch_host(os.getppid(), calm, every_s=0.01))
    await asyncio.sleep(0.05)
    assert not calm.is_set() and not watcher.done()
    calm.set()
    await asyncio.wait_for(watcher, 10)


async def test_sigterm_sets_the_stop_event() -> None:
    stop = asyncio.Event()
    stop_on_signals(stop)
    loop = asyncio.get_running_loop()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 10)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def test_every_role_ties_itself_to_the_host_the_same_way() -> None:
    """One lifeline for every role (issue 12): each role's ``main`` is lifeline.run_role (which
    arms the death signal), and no role keeps its own prctl copy."""
    import ast
    from pathlib import Path

    from monotape.platform.host import lifeline

    host_dir = Path(lifeline.__file__).parent
    for role in ("venue", "handler", "sequencer", "writer"):
        source = (host_dir / f"{role}.py").read_text()
        tree = ast.parse(source)
        main = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "main")
        called = {
            c.func.id
            for c in ast.walk(main)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
        }
        assert "run_role" in called, role
        assert "prctl" not in source.lower(), role


_RUN_ROLE = """
import os, sys
from monotape.config import Config
from monotape.platform.host.lifeline import run_role
from monotape.platform.host.spec import RoleSpec, write_config

run_dir = sys.argv[1]
from pathlib import Path
write_config(Config(data_dir=os.path.join(run_dir, "data")), Path(run_dir))
served = []

async def serve(cfg):
    served.append(cfg.data_dir)
    return 7

async def broken(cfg):
    raise RuntimeError("boom")

mine = RoleSpec(role="venue", name="venue", run_dir=run_dir, host_pid=os.getppid())
orphan = RoleSpec(role="venue", run_dir=run_dir, host_pid=os.getppid() + 1)
print(run_role(mine, "venue", serve), len(served))
print(run_role(orphan, "venue", serve), len(served))
print(run_role(mine, "venue", broken))
"""


def test_run_role_leaves_at_once_when_the_host_is_gone_and_contains_a_failure(
    tmp_path: Path,
) -> None:
    """In a child (run_role arms the death signal and sets the process's log name): it serves
    with the host's config, refuses to start once the host is gone, turns a failure into one
    ``role_failed`` line and exit 1."""
    got = subprocess.run(
        [sys.executable, "-c", _RUN_ROLE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert got.stdout.split("\n")[:3] == ["7 1", "1 1", "1"]
    assert '"process": "venue"' in got.stderr and "role_failed" in got.stderr
    assert "host_gone" in got.stderr


_STANDBY = """
import asyncio, os, sys
from pathlib import Path
from monotape.config import Config
from monotape.platform.host.lifeline import run_role
from monotape.platform.host.spec import RoleSpec, write_config

run_dir, beats = sys.argv[1], sys.argv[2]
write_config(Config(data_dir=os.path.join(run_dir, "data")), Path(run_dir))
spec = RoleSpec(role="sequencer", run_dir=run_dir, beats=beats, beat_slot=3, standby=True)
warmed = []

async def serve(cfg):
    await asyncio.sleep(0.3)  # beats meanwhile, in the slot the takeover named
    print("served", spec.name, spec.restarts, spec.beat_slot, spec.standby, warmed, flush=True)
    return 5

sys.exit(run_role(spec, "sequencer", serve, warm=lambda cfg: warmed.append(cfg.data_dir)))
"""


def _standby(tmp_path: Path, beats: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _STANDBY, str(tmp_path), beats],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_standby_warms_beats_once_and_runs_with_the_spec_its_takeover_gives(
    tmp_path: Path,
) -> None:
    """The sequencer's warm standby (issue 40): imported, warmed and waiting; one beat in
    its own slot says so; the takeover's spec (one JSON line on stdin) is the one it runs
    with, beating in that spec's slot; a closed stdin instead is a quiet exit."""
    import os
    import time
    import uuid

    from monotape.platform.host.beats import BeatTable
    from monotape.platform.host.spec import RoleSpec

    table = BeatTable.create(f"monotape-{os.getpid()}-beats{uuid.uuid4().hex[:8]}", 8)
    try:
        child = _standby(tmp_path, table.name)
        deadline = time.monotonic() + 60
        while table.read(3).pid != child.pid:  # warm
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.02)
        assert table.read(5).pid == 0
        given = RoleSpec(
            role="sequencer",
            name="sequencer",
            run_dir=str(tmp_path),
            beats=table.name,
            beat_slot=5,
            restarts=4,
        )
        out, err = child.communicate(given.encode() + "\n", timeout=60)
        assert child.returncode == 5, err
        assert out.split() == ["served", "sequencer", "4", "5", "False", f"['{tmp_path}/data']"]
        assert table.read(5).pid == child.pid  # its beat, from its loop, in the new slot
        idle = _standby(tmp_path, table.name)
        out, err = idle.communicate("", timeout=60)  # the host let it go
        assert idle.returncode == 0 and out == "", err
    finally:
        table.close()
        table.unlink()
