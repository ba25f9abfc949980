"""``monotape run`` in the foreground: the banner, the signals, the drain in words; with
``--writers N`` the same for the multi-process host (``run_host``: its processes stop in reverse
start order on the first Ctrl-C, and are killed on the second).

The banner names what listens and prints commands that work as printed from any directory (the
client commands find this node through its data dir, so the hints carry its absolute
``--data-dir``, and name the command by a path the shell finds). The first Ctrl-C (or SIGTERM)
stops the node the way ``POST /admin/drain`` would, saying how many terminals it moves and how
long that takes, with a progress line a second; a second one closes the rest at once; a third
leaves without cleanup (a signal within ``PRESS_WINDOW_S`` of the one before is that press
again).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from msgspec.structs import replace

from monotape.commands.clientside import ClientError
from monotape.config import HOST_FROM_CORES, Config, auto_placement, available_cores
from monotape.log import log_event
from monotape.platform.server.sendmany import describe

if TYPE_CHECKING:
    from monotape.platform.host.host import Host
    from monotape.platform.node.node import Node

__all__ = [
    "NODE_ONLY",
    "PRESS_WINDOW_S",
    "Presses",
    "banner",
    "cli_word",
    "host_banner",
    "node_only_reason",
    "process_model",
    "run_host",
    "run_node",
]


def _say(text: str) -> None:
    """One line on stdout. A console that is gone (a closed pipe: the launcher died, `| head`
    ended) must never stop the stop: the line is dropped, the signal's work goes on (a
    BrokenPipeError here left a SIGTERMed node running, seen after a bench was killed)."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def banner(node: Node, cfg: Config, fallback: str | None = None) -> str:
    """What is listening, and commands that work as printed: the client commands find this
    node through its data dir, so the hints name the data dir whenever it is not the default.
    ``fallback``: why "auto" writers gave this one process (``node_only_reason``), said on the
    processes line instead of the hint that the default is a process per core."""
    host = cfg.server.host
    source = f"replay {cfg.feeds.replay}" if node.replay else f"{len(node.handlers)} feed handlers"
    keys = [i.key for i in node.universe]
    example = "XNAS:AAPL" if "XNAS:AAPL" in keys else (keys[0] if keys else "VENUE:SYMBOL")
    processes = (
        f"one: {fallback} (docs/processes.md)"
        if fallback
        else "one (as asked; --writers N runs the host, docs/processes.md)"
    )
    dd, cli = _client_words(cfg)
    return (
        f"monotape is running: {len(node.universe)} instruments, {source}\n"
        f"  terminals  ws://{host}:{node.ws_port}/      (try: {cli} tape{dd} {example})\n"
        f"  metrics    http://{host}:{node.admin_port}/metrics\n"
        f"  health     http://{host}:{node.admin_port}/healthz\n"
        f"  admin      http://{host}:{node.admin_port}/admin/  "
        f"(Authorization: Bearer $({cli} token{dd} --sub you --admin))\n"
        f"  dashboards http://{host}:{node.admin_port}/dashboards  (sign in with an admin token)\n"
        f"  watchlist  http://{host}:{node.admin_port}/watchlist  ({_watchlist_sign_in(cfg)})\n"
        f"  symbols    {cli} symbols{dd} [PATTERN]\n"
        f"  data dir   {Path(cfg.data_dir).resolve()}\n"
        f"  writer     {describe(cfg.server.native_writer)} (server.native_writer)\n"
        f"  processes  {processes}\n"
        "Ctrl-C stops it (drains terminals first; Ctrl-C again closes them at once)."
    )


def cli_word(which: Callable[[str], str | None] = shutil.which) -> str:
    """How this installation's ``monotape`` is started from any directory, as the banner prints
    it: the bare name when the shell finds this very script on its PATH, else the script's
    absolute path (``make run`` runs the venv's, and a new user's shell has no activated venv:
    a bare ``monotape`` would be "command not found" there), else ``python -m monotape``."""
    script = Path(sys.executable).parent / "monotape"  # the venv's bin, symlinks not followed
    found = which("monotape")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "monotape"
    if script.exists():
        return shlex.quote(str(script.absolute()))
    return f"{shlex.quote(sys.executable)} -m monotape"


def _client_words(cfg: Config) -> tuple[str, str]:
    """What the banners' client commands start with: `` --data-dir <absolute>`` and the
    command (``cli_word``). The data dir always, even the default ``./.monotape``: the
    command is printed by a path that works from any directory, and from another directory
    the default would be that directory's, whose key the node does not know (a token minted
    there is "bad signature", and ``monotape token`` would even make a stray key there)."""
    return f" --data-dir {shlex.quote(str(Path(cfg.data_dir).resolve()))}", cli_word()


def _writers(host: Host) -> str:
    n = sum(1 for s in host.specs.values() if s.role == "writer")
    return "1 writer serves" if n == 1 else f"{n} writers share"


def host_banner(host: Host, cfg: Config, ready: bool) -> str:
    """The multi-process host's banner: what listens, and which processes run it."""
    h = cfg.server.host
    dd, cli = _client_words(cfg)
    roles: dict[str, list[str]] = {}
    for s in host.table.slots.values():
        roles.setdefault(s.role, []).append(f"{s.name}={s.pid}" if s.pid else s.name)
    tree = "\n".join(f"    {role:<10} {' '.join(names)}" for role, names in roles.items())
    warning = (
        ""
        if ready
        else f"  NOT READY  some processes are not up after {cfg.host.start_timeout_s:g} s: "
        "see /healthz and the log\n"
    )
    return (
        f"monotape is running: {len(host.specs)} processes under host pid {host.pid} "
        f"({_writers(host)} the WebSocket port)\n"
        f"{warning}"
        f"  terminals  ws://{h}:{host.ws_port}/      (try: {cli} tape{dd} XNAS:AAPL)\n"
        f"  metrics    http://{h}:{host.admin_port}/metrics   (every process: label process)\n"
        f"  health     http://{h}:{host.admin_port}/healthz   (503 while a process is down)\n"
        f"  admin      http://{h}:{host.admin_port}/admin/  "
        f"(Authorization: Bearer $({cli} token{dd} --sub you --admin))\n"
        f"  processes  http://{h}:{host.admin_port}/admin/processes  (the same token)\n"
        f"  dashboards http://{h}:{host.admin_port}/dashboards  (sign in with an admin token)\n"
        f"  watchlist  http://{h}:{host.admin_port}/watchlist  ({_watchlist_sign_in(cfg)})\n"
        f"  symbols    {cli} symbols{dd}   (keys a terminal can subscribe to)\n"
        f"  data dir   {Path(cfg.data_dir).resolve()}\n"
        f"  run dir    {host.run_dir}\n"
        f"  writer     {describe(cfg.server.native_writer)} (server.native_writer, every writer)\n"
        "  logs       here on stderr, every process's, each line naming its process\n"
        f"  processes  (pid)\n{tree}\n"
        "Ctrl-C stops it (processes in reverse start order; Ctrl-C again kills them at once)."
    )


def _watchlist_sign_in(cfg: Config) -> str:
    """How the watchlist page signs in on this node (admin/watchlist.py)."""
    from monotape.platform.admin.watchlist import dev_sign_in_on

    if not cfg.auth.enabled:
        return "no sign-in: auth is off"
    if dev_sign_in_on(cfg.auth):
        return "dev sign-in: any name"
    return "paste a terminal token"


async def _watch_drain(node: Node) -> None:
    """Human lines while a stop drains the terminals: how many left, how long to go."""
    server = node.server
    while True:
        await asyncio.sleep(1.0)
        status = server.drain_status()
        if status.get("total"):
            left = max(0.0, status["expected_s"] - status["elapsed_s"])
            _say(
                f"draining: {status['closed']} of {status['total']} terminals closed, "
                f"{status['connections']} still connected, about {left:.0f} s to go"
            )


# A signal this soon after the last press counted is that press again, not the next rung. GNU
# timeout (or any wrapper that forwards a signal to a group the tty already signalled) turns one
# Ctrl-C into two SIGINTs ~1 ms apart, and the second killed every process without a drain;
# nobody presses Ctrl-C twice within 100 ms on purpose.
PRESS_WINDOW_S: Final = 0.1


class Presses:
    """Which press of the stop ladder a signal is, from when it came (monotonic seconds): one
    within ``window_s`` of the last press counted is that press again (None), any other is the
    next press (1, 2, 3, ...)."""

    def __init__(self, window_s: float = PRESS_WINDOW_S) -> None:
        self.window_s = window_s
        self.count = 0
        self._last_s = 0.0

    def press(self, now_s: float) -> int | None:
        if self.count and now_s - self._last_s < self.window_s:
            return None
        self.count += 1
        self._last_s = now_s
        return self.count


def _stop_ladder(
    first: Callable[[signal.Signals], None],
    hurry_words: str,
    hurry: Callable[[], None],
    now: Callable[[], float] = time.monotonic,
) -> None:
    """Ctrl-C (or SIGTERM) once: ``first``, the ordered stop, which says what it stops; twice:
    ``hurry``, at once, said in ``hurry_words``; three times: leave without cleanup. A signal
    within ``PRESS_WINDOW_S`` of the press before it is that press (``Presses``)."""
    loop = asyncio.get_running_loop()
    presses = Presses()

    def on_signal(sig: signal.Signals) -> None:
        press = presses.press(now())
        if press is None:
            log_event("stop_signal_repeated", level="debug", signal=sig.name)
        elif press == 1:
            first(sig)
        elif press == 2:
            _say(hurry_words)
            hurry()
        else:
            _say("stopped without cleanup")
            os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)


async def run_host(cfg: Config, duration: float | None, host: Host | None = None) -> int:
    """``monotape run --writers N``: the host in the foreground (``host`` given: a test's)."""
    from monotape.platform.feeds.replay import ReplayError
    from monotape.platform.host.host import Host
    from monotape.platform.role.datadir_lock import DataDirInUse
    from monotape.platform.role.endpoints import ListenError

    host = host if host is not None else Host(cfg)
    try:
        await host.start()
    except (ListenError, DataDirInUse) as exc:
        raise ClientError(str(exc)) from None
    except ReplayError as exc:  # the host reads the replay's dictionary before any role starts
        raise ClientError(f"--replay: {exc}") from None

    def first(sig: signal.Signals) -> None:
        _say(
            f"stopping ({sig.name}): venue, feed handlers, writers, then the sequencer, "
            f"within {cfg.host.stop_timeout_s:g} s; press Ctrl-C again to kill them now"
        )
        host.request_stop()

    _stop_ladder(first, "stopping now: killing every process", host.hurry)
    try:
        ready = await host.wait_ready(cfg.host.start_timeout_s)
        if not host.table.stopping:
            _say(host_banner(host, cfg, ready))
        if duration:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(host.wait(), duration)
        else:
            await host.wait()
    finally:
        await host.stop()
    _say("monotape stopped")
    return 0


# Settings only the one-process node honours so far (the host's roles do not restart a feed
# handler on a timer, nor serve the fault-injection route): (flag, is it on).
NODE_ONLY: Final[tuple[tuple[str, Callable[[Config], bool]], ...]] = (
    ("--restart-every", lambda c: c.feeds.restart_every_s > 0),
    ("--enable-fault-injection", lambda c: c.server.fault_injection),
)


def node_only_reason(cfg: Config) -> str | None:
    """Why "auto" writers resolve to the one-process node here, in words (None: they do not)."""
    node_only = [flag for flag, on in NODE_ONLY if on(cfg)]
    if cfg.host.writers != "auto":
        return None
    if node_only:
        return (
            f"{' and '.join(node_only)} needs the one-process node: the multi-process host "
            f"does not support {'them' if len(node_only) > 1 else 'it'} yet"
        )
    cores = available_cores()
    if auto_placement(cores) == 0:
        return (
            f'"auto" on {cores} core{"" if cores == 1 else "s"}: the one-process node, faster '
            f"than the host below {HOST_FROM_CORES} cores (--writers N runs the host)"
        )
    return None


def process_model(cfg: Config) -> Config:
    """``cfg`` with ``host.writers`` a number: "auto" is the placement faster on this machine
    (``config.auto_placement``), or 0 (the one-process node, said in one log line) when a
    setting only that node honours is on; an
    explicit ``--writers N`` with such a setting is refused rather than half obeyed."""
    writers = cfg.host.writers
    node_only = [flag for flag, on in NODE_ONLY if on(cfg)]
    if writers == "auto":
        writers = 0 if node_only else cfg.host.writer_count
        if node_only:
            log_event(
                "one_process_node",
                level="warning",
                reason="the multi-process host does not support these yet",
                settings=node_only,
            )
    elif writers > 0 and node_only:
        raise ClientError(
            f"{' and '.join(node_only)} needs the one-process node: add "
            f"--single-process, or drop {' and '.join(node_only)} (docs/processes.md)"
        )
    return replace(cfg, host=replace(cfg.host, writers=writers))


async def run_node(cfg: Config, duration: float | None) -> int:
    fallback = node_only_reason(cfg)  # before resolving: a resolved config has a number
    cfg = process_model(cfg)
    if cfg.host.writer_count > 0:
        return await run_host(cfg, duration)
    from monotape.platform.feeds.replay import ReplayError
    from monotape.platform.node.node import Node
    from monotape.platform.role.datadir_lock import DataDirInUse
    from monotape.platform.role.endpoints import ListenError

    try:
        node = Node(cfg)
    except ReplayError as exc:
        raise ClientError(f"--replay: {exc}") from None
    try:
        await node.start()
    except (ListenError, DataDirInUse) as exc:
        raise ClientError(str(exc)) from None
    _say(banner(node, cfg, fallback))

    def first(sig: signal.Signals) -> None:
        n = len(node.server.connections)
        if cfg.server.drain_on_stop and n:
            srv = cfg.server
            expected = max(0, -(-n // max(1, round(n * srv.drain_fraction))) - 1)
            _say(
                f"stopping ({sig.name}): draining {n} terminals, {srv.drain_fraction:.0%} "
                f"every {srv.drain_interval_s:g} s (about {expected * srv.drain_interval_s:.0f}"
                " s) so they do not all reconnect at once; press Ctrl-C again to close "
                "them now"
            )
        else:
            _say(f"stopping ({sig.name})")
        node.request_stop()

    _stop_ladder(first, "stopping now: closing every terminal at once", node.hurry)
    try:
        if duration:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(node.wait(), duration)
        else:
            await node.wait()
    finally:
        watcher = asyncio.create_task(_watch_drain(node))
        try:
            await node.stop()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    _say("monotape stopped" + (": a stage failed (see the log)" if node.failed else ""))
    return 1 if node.failed else 0
