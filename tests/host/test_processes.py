"""What the host runs and how (platform/host/processes.py), and the flags that choose it: the
plan of roles, the sweep of dead hosts' run dirs, the reserved WebSocket port, and
``monotape run --writers N`` / ``--single-process`` / ``host.writers``."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from monotape.cli import main
from monotape.config import ConfigError, auto_placement, load_config
from monotape.platform.feeds.sources import handler_plans
from monotape.platform.host.handler import find_plans, role_name
from monotape.platform.host.processes import (
    RUN_PREFIX,
    plan_roles,
    reserve_port,
    role_command,
    sweep_run_dirs,
)
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.supervisor import START_ORDER


def test_the_plan_is_a_sequencer_n_writers_two_feed_processes_and_the_venue() -> None:
    cfg = load_config(overrides={"host.writers": 3})
    specs = plan_roles(cfg)
    names = [s.name for s in specs]
    assert names[:4] == ["sequencer", "writer-0", "writer-1", "writer-2"]
    assert names[-1] == "venue"
    handlers = [s for s in specs if s.role == "handler"]
    assert [(s.name, s.venue, s.handler) for s in handlers] == [
        ("handler-A", "", "A"),
        ("handler-B", "", "B"),
    ]
    # every handler of the config runs in exactly one process, and a venue's twins never in
    # the same one
    runs = {p.key: s.name for s in handlers for p in find_plans(cfg, s.venue, s.handler)}
    assert sorted(runs) == sorted(p.key for p in handler_plans(cfg))
    assert len(runs) == 12  # the simulator's 6 venues, A and B each
    for plan in handler_plans(cfg):
        twin = "B" if plan.name == "A" else "A"
        assert runs[plan.key] != runs[f"{plan.venue}-{twin}"]
    assert [role_name(s) for s in handlers] == ["handler-A", "handler-B"]
    assert role_name(RoleSpec(role="handler", run_dir="", venue="XNAS", handler="B")) == (
        "handler-XNAS-B"
    )
    assert [s.index for s in specs if s.role == "writer"] == [0, 1, 2]
    # in start order, every name once
    assert [START_ORDER.index(s.role) for s in specs] == sorted(
        START_ORDER.index(s.role) for s in specs
    )
    assert len(set(names)) == len(names)
    # what the role entry point receives decodes back to the same spec
    cmd = role_command(specs[1])
    assert cmd[1:4] == ["-m", "monotape.platform.host", "writer"]
    assert RoleSpec.decode(cmd[4]) == specs[1]


def test_a_replay_plans_no_handler_processes(tmp_path: Path) -> None:
    replay = tmp_path / "t.ndjson"
    replay.write_text("")
    specs = plan_roles(load_config(overrides={"host.writers": 1, "feeds.replay": str(replay)}))
    assert [s.role for s in specs] == ["sequencer", "writer", "venue"]


def test_the_sweep_removes_run_dirs_of_dead_hosts_only(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"{RUN_PREFIX}{dead.pid}").mkdir()
    (tmp_path / f"{RUN_PREFIX}{dead.pid}" / "config.json").write_text("{}")
    (tmp_path / f"{RUN_PREFIX}{os.getpid()}").mkdir()  # alive: this process
    (tmp_path / f"{RUN_PREFIX}nonsense").mkdir()
    (tmp_path / "monotape-other").mkdir()
    assert sweep_run_dirs(tmp_path) == [f"{RUN_PREFIX}{dead.pid}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{RUN_PREFIX}{os.getpid()}", f"{RUN_PREFIX}nonsense", "monotape-other"]
    )


def test_the_reserved_port_is_shared_with_writers_and_refused_to_anyone_else() -> None:
    lock = reserve_port("127.0.0.1", 0)
    port = lock.getsockname()[1]
    try:
        writer = socket.socket()
        writer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        writer.bind(("127.0.0.1", port))  # a writer binds beside it
        writer.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = writer.accept()  # the connection went to the listening writer
            conn.close()
        writer.close()
        other = socket.socket()
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # no SO_REUSEPORT: refused
        other.close()
    finally:
        lock.close()
    plain = socket.socket()
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    try:
        with pytest.raises(OSError):  # a port held by something else fails the host's start
            reserve_port("127.0.0.1", plain.getsockname()[1])
    finally:
        plain.close()


def host_writers(capsys: pytest.CaptureFixture[str], *flags: str) -> int:
    """The writer count ``monotape run --print-config FLAGS`` configures: the number printed,
    or, for ``"auto"`` (printed as configured, so a saved config fits any machine), the number
    its stderr line says it resolves to here."""
    assert main(["run", "--print-config", *flags]) == 0
    out, err = capsys.readouterr()
    writers = json.loads(out)["host"]["writers"]
    if writers == "auto":
        said = re.search(r'host\.writers = "auto" resolves to (\d+) here', err)
        assert said is not None, err
        return int(said.group(1))
    assert isinstance(writers, int)
    assert "resolves" not in err  # a number is shown as it is, with nothing to resolve
    return writers


def test_writers_flags_and_knob(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MONOTAPE_HOST__WRITERS", raising=False)
    # the placement faster here: the node below 3 cores, else a writer per core
    auto = auto_placement(len(os.sched_getaffinity(0)))
    assert host_writers(capsys) == auto
    assert host_writers(capsys, "--writers", "auto") == auto
    assert host_writers(capsys, "--writers", "2") == 2
    assert host_writers(capsys, "--single-process") == 0
    monkeypatch.setenv("MONOTAPE_HOST__WRITERS", "4")
    assert host_writers(capsys) == 4
    assert host_writers(capsys, "--single-process") == 0  # a flag beats the environment
    with pytest.raises(SystemExit):
        main(["run", "--writers", "2", "--single-process"])
    with pytest.raises(SystemExit):
        main(["run", "--writers", "17"])
    with pytest.raises(ConfigError, match=r"host\.writers"):
        load_config(overrides={"host.writers": 99})


def test_a_port_another_host_serves_is_refused_even_with_so_reuseport() -> None:
    """A second host on the same --ws-port must not join the first one's SO_REUSEPORT group
    (the kernel would split terminals between the two hosts): its start fails instead."""
    other = socket.socket()
    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("127.0.0.1", 0))
    other.listen()  # the first host's writer
    port = other.getsockname()[1]
    try:
        with pytest.raises(OSError):
            reserve_port("127.0.0.1", port)
    finally:
        other.close()
    lock = reserve_port("127.0.0.1", port)  # free again: taken
    lock.close()
