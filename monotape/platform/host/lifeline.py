"""What ties a role process to its host: it dies with the host and stops cleanly when told.

- ``die_with_host()``: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` through ctypes where the platform
  has it (Linux): the kernel signals the role the moment its parent dies, kill -9 included.
  The death signal follows the parent *thread*, and a parent that died before the call is
  missed, so ``watch_host`` backs it up by polling ``os.getppid()`` once a second: a role whose
  parent is no longer ``host_pid`` stops by itself (issue 12: no orphans).
- ``prctl_function()``: libc's ``prctl`` resolved once, shared with the host's fork-to-exec
  hook (processes.lifeline), which must resolve it before the fork.
- ``stop_on_signals``: SIGTERM and SIGINT set one event the role's ``main`` waits on; the role
  then stops within its deadline and logs one ``role_stopped`` line.

A role's ``main`` is ``run_role(spec, name, serve)``, one way for every role: the death signal
armed first, the process name on every log line, the host's config, a role whose host already
died leaves at once, and ``run_loop(serve(cfg))`` (uvloop, as the node): a coroutine that
starts its loops, awaits the stop event (set by a signal or by ``watch_host``), and tears its
pieces down in order. A failure escaping it is one ``role_failed`` line and exit 1 (the host
restarts it with backoff and counts the exit). The launcher gives every role its liveness beat
(``beats.Beat``: from the role's event loop, held during garbage collections) without any
wiring of its own, and a warm standby (``spec.standby``) waits here, imported, for the spec its
takeover runs with (``await_takeover``: docs/processes.md, Warm start).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import IO, Any, TypeVar

import msgspec

from monotape.config import Config
from monotape.log import configure, log_event, set_process
from monotape.loops import run_loop
from monotape.platform.host.beats import Beat, BeatTable
from monotape.platform.host.spec import RoleSpec, load_config

__all__ = [
    "HOST_CHECK_S",
    "PR_SET_PDEATHSIG",
    "ROLE_STOP_S",
    "await_takeover",
    "beating",
    "die_with_host",
    "host_gone",
    "prctl_function",
    "run_role",
    "stand_by",
    "stop_on_signals",
    "watch_host",
]

HOST_CHECK_S = 1.0  # how often a role checks its parent is still the host
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# A role stops within this of SIGTERM (a writer: of its drain's end, or of a second SIGTERM);
# the host budgets every stage's stop with it before it SIGKILLs.
ROLE_STOP_S = 2.0

T = TypeVar("T")


def prctl_function() -> Callable[..., int] | None:
    """libc's ``prctl``, or None where there is none (not Linux, no libc found)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(name, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def die_with_host(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel for ``sig`` when the parent dies; False where prctl is not available."""
    prctl = prctl_function()
    return prctl is not None and int(prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0


def host_gone(host_pid: int) -> bool:
    """The role's parent is no longer the host (re-parented: the host died). A role started
    without a host (``host_pid`` 0: a test, a shell) is never orphaned."""
    return host_pid > 0 and os.getppid() != host_pid


async def watch_host(host_pid: int, stop: asyncio.Event, every_s: float = HOST_CHECK_S) -> None:
    """Set ``stop`` once the host is gone (checked every ``every_s``)."""
    while not stop.is_set():
        if host_gone(host_pid):
            stop.set()
            return
        await asyncio.sleep(every_s)


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (on the running loop); a second one changes nothing: the
    role is already stopping within ``ROLE_STOP_S``, and the host SIGKILLs it past that. (A
    writer installs its own handlers: there a second one cuts its drain short.)"""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


def await_takeover(spec: RoleSpec, stream: IO[str] | None = None) -> bool:
    """A standby's wait (its imports done): one JSON line on stdin is the spec to run with,
    copied into ``spec`` in place (the role's ``main`` holds that object). False when the
    host closed the pipe first (it stops, or it replaced this standby): then exit quietly."""
    with contextlib.suppress(ImportError):  # the takeover's loop: imported now, not then
        import uvloop  # noqa: F401
    if spec.beats:  # one beat in its own slot: the host reads it as "warm"
        table = BeatTable.attach(spec.beats)
        Beat(table, spec.beat_slot).beat()
        table.close()
    line = (stream or sys.stdin).readline()
    if not line.strip():
        return False
    try:
        given = RoleSpec.decode(line)
    except msgspec.DecodeError:
        return False
    for name in RoleSpec.__struct_fields__:
        setattr(spec, name, getattr(given, name))
    return True


async def beating(spec: RoleSpec, main: Coroutine[Any, Any, T]) -> T:
    """Run the role's coroutine with its beat going (none without a beats segment)."""
    if not spec.beats:
        return await main
    table = BeatTable.attach(spec.beats)
    beat = Beat(table, spec.beat_slot)
    beat.install_gc()
    task = asyncio.ensure_future(beat.run())
    try:
        return await main
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        beat.uninstall_gc()
        table.close()


def stand_by(spec: RoleSpec, warm: Callable[[Config], object] | None = None) -> bool:
    """A standby's life before its takeover: what does not depend on the ring done now (the
    role's ``warm``, a collection and ``gc.freeze`` of the imports' heap when the config
    freezes: the takeover's own freeze then walks only what it built), then the wait."""
    cfg = load_config(spec)  # the host run's config.json: the same at the takeover
    if warm is not None:
        warm(cfg)
    if cfg.server.gc_freeze:
        gc.collect()
        gc.freeze()
    return await_takeover(spec)


def run_role(
    spec: RoleSpec,
    name: str,
    serve: Callable[[Config], Coroutine[Any, Any, int]],
    warm: Callable[[Config], object] | None = None,
) -> int:
    """A role process from start to exit code; ``name``: its process name when the spec has
    none (a role started by hand or by a test); ``warm``: what a standby of this role builds
    before its takeover (``stand_by``)."""
    die_with_host()
    if spec.standby and not stand_by(spec, warm):
        return 0
    set_process(spec.name or name)
    cfg = load_config(spec)
    configure(cfg.log_level)
    if host_gone(spec.host_pid):
        log_event("host_gone", level="warning", host_pid=spec.host_pid)
        return 1  # the host died before the parent-death signal was armed
    try:
        return run_loop(beating(spec, serve(cfg)))  # uvloop, as the one-process node
    except Exception as exc:
        log_event("role_failed", level="error", role=spec.role, error=repr(exc))
        return 1
