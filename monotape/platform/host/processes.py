"""What the host runs and how it starts one: the plan of role processes, the command line of
one, what the child does between fork and exec (its lifeline to the host), the WebSocket port
the host reserves for its writers, and the sweep of run dirs that dead hosts left behind.

``lifeline``: ``PR_SET_PDEATHSIG`` (SIGTERM) set in the child before exec survives the exec, so
a role dies with the host even when the host is killed with SIGKILL, whatever the role does
itself (each role also sets it and checks its parent: lifeline.py). The death signal follows
the thread that forked, which is the host's event loop thread (asyncio spawns from it).

``reserve_port``: a bound, never listening, SO_REUSEPORT socket. ``--ws-port 0`` becomes one
concrete port that every writer binds (SO_REUSEPORT, same user), and while a writer restarts
nothing else can take the port; a socket that does not listen is never handed a connection
(the kernel picks among the listening members of the group).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from monotape.config import Config
from monotape.platform.feeds.sources import handler_plans
from monotape.platform.host.lifeline import PR_SET_PDEATHSIG, prctl_function
from monotape.platform.host.spec import RoleSpec
from monotape.platform.ring.segment import pid_alive

__all__ = [
    "RUN_PREFIX",
    "Command",
    "lifeline",
    "plan_roles",
    "reserve_port",
    "role_command",
    "sweep_run_dirs",
]

RUN_PREFIX = "monotape-run-"

Command = Callable[[RoleSpec], list[str]]


def role_command(spec: RoleSpec) -> list[str]:
    return [sys.executable, "-m", "monotape.platform.host", spec.role, spec.encode()]


def plan_roles(cfg: Config) -> list[RoleSpec]:
    """Every process of the host, in start order, with the fields the host fills in later
    (run_dir, ring, interest, host_pid, restarts) left empty."""
    n = cfg.host.writer_count
    specs = [RoleSpec(role="sequencer", name="sequencer", run_dir="", writers=n)]
    specs += [
        RoleSpec(role="writer", index=i, name=f"writer-{i}", run_dir="", writers=n)
        for i in range(n)
    ]
    # Two feed processes: every venue's A handler in one, every venue's B handler in the
    # other (host/handler.py says why), built as the one-process node builds its handlers
    # (feeds/sources.py); none for a replay, whose ticks go from the venue process to the bus.
    sides = sorted({plan.name for plan in handler_plans(cfg)})
    specs += [
        RoleSpec(
            role="handler",
            index=i,
            name=f"handler-{side}",
            run_dir="",
            writers=n,
            handler=side,  # "A"/"B"; venue empty: every venue's (the {venue,handler} labels)
        )
        for i, side in enumerate(sides)
    ]
    specs.append(RoleSpec(role="venue", name="venue", run_dir="", writers=n))
    return specs


def sweep_run_dirs(base: Path) -> list[str]:
    """Remove run dirs of hosts whose pid is dead (a host killed with SIGKILL never removed
    its own); only this user's, only ``monotape-run-<pid>``."""
    removed = []
    for path in base.glob(f"{RUN_PREFIX}*"):
        pid = path.name.removeprefix(RUN_PREFIX)
        try:
            mine = path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid()
        except OSError:
            continue
        if pid.isdigit() and mine and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def lifeline(host_pid: int) -> Callable[[], None]:
    """Runs in the child between fork and exec: SIGTERM when the host dies (the setting
    survives exec), and exit now if it already has (then we were re-parented)."""
    prctl = prctl_function()  # resolved before the fork: nothing to look up in the child

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != host_pid:
            os._exit(1)

    return preexec


def reserve_port(host: str, port: int) -> socket.socket:
    """The host's hold on the terminals' port (module docstring). A port some process already
    listens on is refused (OSError EADDRINUSE) even when that process shares it by
    SO_REUSEPORT as this user: a second host's writers would join the first one's group, and
    the kernel would split terminals between two hosts without a word."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if port:
        _refuse_taken(family, host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _refuse_taken(family: socket.AddressFamily, host: str, port: int) -> None:
    """Bind (SO_REUSEADDR only: TIME_WAIT leftovers of our own last run are no obstacle) and
    let go: EADDRINUSE means a listener holds the port, whatever options it set."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
