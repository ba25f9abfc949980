"""The host process of ``monotape run --writers N``: starts every role, restarts the ones that
crash, serves one admin API for all of them, and stops them in order.

Start (docs/processes.md): sweep what dead hosts left (ring segments in /dev/shm, run dirs), make
this run's dir (0700), reserve the WebSocket port (a bound, not listening SO_REUSEPORT socket:
``--ws-port 0`` becomes one port every writer binds, and nothing else can take it while a writer
restarts), write ``config.json``, create the frame ring and the priority-interest segments, then
start the roles stage by stage (``supervisor.START_ORDER``): each as
``python -m monotape.platform.host ROLE SPEC_JSON`` in its own session (a Ctrl-C at the terminal
reaches the host only, which stops the roles in order), with ``PR_SET_PDEATHSIG`` set before exec
so a role dies with the host even if the host is killed with SIGKILL (the role checks too).

Liveness (docs/processes.md): every role beats into the host's beats segment (host/beats.py)
from its event loop; every ``BEAT_CHECK_S`` the host reads the beats, and a role silent past its
limit is SIGKILLed, counted and logged as ``hung`` (once), and started again like any exit.

Warm start: with ``host.sequencer_standby`` the host keeps a second sequencer process imported
and idle (``lifeline.await_takeover``); when the sequencer exits (or is killed as hung) after it
had been ready, the host waits for the old process's exit (so it can never write to the ring
again), then hands the standby its spec on its stdin: it attaches to the ring and seeds from the
snapshot table at once, skipping the interpreter's start, the imports and the restart backoff.
A new standby is started once the promoted one is ready.

Stop: SIGTERM to each stage in ``STOP_ORDER`` (the writers first: they drain their terminals
with reconnect hints while the prices still move), waiting for it until ``host.stop_timeout_s``
less what the stages after it are owed (``ROLE_STOP_S`` each); ``ROLE_STOP_S`` before that, a
second SIGTERM to what is left of it (a writer still draining cuts its drain short and stops
within ``ROLE_STOP_S``), then SIGKILL what is still left; one log line per stage. ``hurry()`` (a
second Ctrl-C) SIGKILLs every role at once. Then the segments are unlinked and the run dir removed.

The decisions (what to start, backoff, reasons, order) are the process table's
(supervisor.py); this module only moves processes, files and signals.

Size: one driver for one process tree: start, supervision and the ordered stop share the live
processes, their watchers and the segments, and split apart each would need the others' state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from msgspec.structs import replace
from starlette.applications import Starlette

from monotape.config import Config
from monotape.log import log_event
from monotape.platform.admin.server import AdminServer
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.feeds.sources import universe_of
from monotape.platform.host.admin import Observer, build_host_admin_app
from monotape.platform.host.aggregate import read_port
from monotape.platform.host.beats import BeatTable, Hung, Liveness, cpu_wait_ns, disk_wait
from monotape.platform.host.interest import PriorityInterest
from monotape.platform.host.lifeline import ROLE_STOP_S
from monotape.platform.host.processes import (
    RUN_PREFIX,
    Command,
    lifeline,
    plan_roles,
    reserve_port,
    role_command,
    sweep_run_dirs,
)
from monotape.platform.host.spec import RoleSpec, write_config
from monotape.platform.host.supervisor import Backoff, ProcessTable, SlotState
from monotape.platform.host.telemetry import port_file, write_secret
from monotape.platform.ring import RingConfig, ShmRing, sweep_leftovers
from monotape.platform.ring.segment import SHM_DIR, segment_name
from monotape.platform.role.datadir_lock import DataDirLock, lock_data_dir
from monotape.platform.role.endpoints import (
    Endpoints,
    ListenError,
    endpoints_for,
    remove_endpoints,
    write_endpoints,
)

__all__ = ["Host"]

HOST = "host"
_TICK_S = 0.1  # how often the supervise loop looks for due starts and new port files
BEAT_CHECK_S = 0.05  # how often the host reads the beats: a hang is seen within limit + 50 ms
SEQUENCER = "sequencer"


class Host:
    def __init__(
        self,
        cfg: Config,
        *,
        specs: list[RoleSpec] | None = None,
        command: Command = role_command,
    ) -> None:
        if cfg.host.writer_count < 1 and specs is None:
            raise ValueError("the host runs writer processes: host.writers must be >= 1")
        self.cfg = cfg
        self.pid = os.getpid()
        self.command = command
        self.specs = {s.name: s for s in (specs if specs is not None else plan_roles(cfg))}
        self.table = ProcessTable(
            [(s.name, s.role) for s in self.specs.values()],
            Backoff(cap_s=cfg.host.restart_cap_s),
            random.random,
            start_wait_ns=int(cfg.host.start_timeout_s * 1e9),
        )
        base = Path(cfg.host.run_base or tempfile.gettempdir())
        self.run_base = base
        self.run_dir = base / f"{RUN_PREFIX}{self.pid}"
        self.data_dir = Path(cfg.data_dir)
        self.observer = Observer(self.table, self.run_dir, cfg.host.scrape_timeout_s)
        self.verifier: TokenVerifier | None = None
        self.ring: ShmRing | None = None
        self.interest: PriorityInterest | None = None
        self.ws_port = 0
        self.admin_port = 0
        self.endpoints: Endpoints | None = None
        self._port_lock: socket.socket | None = None
        self._dir_lock: DataDirLock | None = None  # the roles never take it: they are ours
        self._admin: AdminServer | None = None
        self._admin_app: Starlette | None = None
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None
        self._preexec = lifeline(self.pid)
        self.beats: BeatTable | None = None
        # one beat slot per process, in plan order, and one more for the sequencer's standby
        self._beat_slot = {name: i for i, name in enumerate(self.specs)}
        self._standby_slot = len(self.specs)
        self._standby: asyncio.subprocess.Process | None = None
        self._standby_not_before_ns = 0
        h = cfg.host
        limits_ms = {
            "sequencer": h.sequencer_beat_limit_ms,
            "writer": h.writer_beat_limit_ms,
            "handler": h.handler_beat_limit_ms,
            "venue": h.venue_beat_limit_ms,
        }
        self.liveness = Liveness(
            {s.name: limits_ms.get(s.role, 0) * 1_000_000 for s in self.specs.values()},
            held_limit_ns=h.beat_held_limit_ms * 1_000_000,
            start_limit_ns=int(h.start_timeout_s * 1e9),
        )

    # -- start ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Everything up to the roles' first start; ``wait_ready`` waits for them. A start that
        fails (a port in use, a bad key file) leaves nothing behind."""
        try:
            await self._start()
        except BaseException:
            await self._release()
            raise

    async def _start(self) -> None:
        srv = self.cfg.server
        self._dir_lock = lock_data_dir(self.data_dir)  # one `monotape run` per data dir
        swept = sweep_leftovers(SHM_DIR) + sweep_run_dirs(self.run_base)
        if swept:
            log_event("swept_leftovers", process=HOST, removed=swept)
        if self.run_dir.exists():  # a dead process with our pid left it (pid reuse)
            shutil.rmtree(self.run_dir)
        self.run_dir.mkdir(mode=0o700)
        write_secret(self.run_dir)  # before any role starts: each reads it once (telemetry.py)
        self.data_dir.mkdir(parents=True, exist_ok=True)  # epochs, keys, hdr: every role's
        try:
            self._port_lock = reserve_port(srv.host, srv.ws_port)
        except OSError as exc:
            raise ListenError("terminals", "--ws-port", srv.host, srv.ws_port, exc) from exc
        self.ws_port = int(self._port_lock.getsockname()[1])
        if self.cfg.auth.enabled:
            # Here, once: the dev key pair is made before any writer could race to make it.
            self.verifier = build_verifier(self.cfg.auth, self.cfg.data_dir)
        # The roles read this, never the environment: --ws-port 0 arrives as the reserved port.
        write_config(replace(self.cfg, server=replace(srv, ws_port=self.ws_port)), self.run_dir)
        ring_config = RingConfig(total_bytes=self.cfg.host.ring_mib * 1024 * 1024)
        self.ring = ShmRing.create(ring_config, node_pid=self.pid, tag="ring")
        writers = max(1, sum(1 for s in self.specs.values() if s.role == "writer"))
        self.interest = PriorityInterest.create(segment_name(self.pid, "interest"), writers)
        self.beats = BeatTable.create(segment_name(self.pid, "beats"), len(self.specs) + 1)
        app = build_host_admin_app(
            self.observer, self.verifier, self.about, self.data_dir / "hdr", universe_of(self.cfg)
        )
        self._admin_app = app
        self._admin = AdminServer(app)
        try:
            self.admin_port = await self._admin.start(srv.host, srv.admin_port)
        except OSError as exc:
            raise ListenError(
                "the admin API", "--admin-port", srv.host, srv.admin_port, exc
            ) from exc
        log_event(
            "host_starting",
            process=HOST,
            run_dir=str(self.run_dir),
            ring=self.ring.name,
            processes=list(self.specs),
        )
        self._loop_task = asyncio.create_task(self._supervise(), name="host.supervise")
        self._beat_task = asyncio.create_task(self._watch_beats(), name="host.beats")

    async def wait_ready(self, timeout_s: float) -> bool:
        """Until every role runs and published its metrics port (False at the timeout or a
        stop). Then the endpoints go to the data dir for the client commands, ready or not:
        the host runs, and /healthz says what is missing."""
        deadline = time.monotonic() + timeout_s
        ready = True
        while not self.table.all_ready():
            if self._stop.is_set():
                return False
            if time.monotonic() > deadline:
                ready = False
                break
            await asyncio.sleep(_TICK_S)
        started_ms = time.time_ns() // 1_000_000
        srv = self.cfg.server
        self.endpoints = endpoints_for(
            srv.host, self.ws_port, self.admin_port, self.data_dir, started_ms
        )
        try:
            write_endpoints(self.data_dir, self.endpoints)
        except OSError as exc:
            log_event("endpoints_not_written", level="warning", process=HOST, error=repr(exc))
        log_event(
            "listening",
            process=HOST,
            ws=self.endpoints.ws,
            admin=self.endpoints.admin,
            processes=len(self.specs),
            ready=ready,
        )
        return ready

    def about(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "ws_port": self.ws_port,
            "admin_port": self.admin_port,
            "writers": sum(1 for s in self.specs.values() if s.role == "writer"),
            "run_dir": str(self.run_dir),
            "ring": self.ring.name if self.ring else None,
            "interest": self.interest.name if self.interest else None,
            "standby": self._standby.pid if self._standby is not None else None,
            "stopping": self.table.stopping,
        }

    # -- supervision ---------------------------------------------------------------------------
    async def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                for name in self.table.due(time.monotonic_ns()):
                    if self._stop.is_set():
                        break
                    await self._spawn(name)
                for s in self.table.running():
                    if not s.ready and read_port(self.run_dir, s.name) is not None:
                        self.table.mark_ready(s.name)
                        log_event("role_ready", process=HOST, role=s.name, pid=s.pid)
                        if s.role == "writer":
                            self._keep_drained(s.name)
                await self._keep_standby()
            except Exception as exc:  # the loop that restarts roles must not die of one
                log_event("supervise_failed", level="error", process=HOST, error=repr(exc))
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), _TICK_S)

    def _keep_drained(self, name: str) -> None:
        """A writer (re)started while the host is drained (POST /admin/drain, no resume yet):
        tell it to drain too, or it would take terminals while /readyz says "drained"."""
        app = self._admin_app
        if app is None or not app.state.host_drain.on_writer_ready(name):
            return

        async def drain() -> None:
            got = await app.state.asker.ask([name], "action", "drain")
            log_event("writer_drained_on_start", process=HOST, role=name,
                      missing=got.missing)  # fmt: skip

        task = asyncio.create_task(drain(), name=f"host.drain.{name}")
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    def _spec(self, name: str) -> RoleSpec:
        return replace(
            self.specs[name],
            run_dir=str(self.run_dir),
            ring=self.ring.name if self.ring else "",
            interest=self.interest.name if self.interest else "",
            host_pid=self.pid,
            restarts=self.table.slots[name].starts,
            beats=self.beats.name if self.beats else "",
            beat_slot=self._beat_slot.get(name, 0),
        )

    async def _spawn(self, name: str) -> None:
        port_file(self.run_dir, name).unlink(missing_ok=True)  # ready means: written by this run
        if name == SEQUENCER and self._promote():
            return
        spec = self._spec(name)
        if self.beats is not None:
            self.beats.reset(self._beat_slot[name])
        now = time.monotonic_ns()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command(spec),
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C at the terminal is the host's to handle
                preexec_fn=self._preexec,
            )
        except OSError as exc:
            self.table.started(name, 0, now, time.time_ns() // 1_000_000)
            ex = self.table.exited(name, 127, now)
            log_event("role_spawn_failed", level="error", process=HOST, role=name,
                      error=repr(exc), restart_in_s=ex.restart_in_s)  # fmt: skip
            return
        self._started(name, proc, now)

    def _started(
        self, name: str, proc: asyncio.subprocess.Process, now: int, **fields: Any
    ) -> None:
        slot = self.table.started(name, proc.pid, now, time.time_ns() // 1_000_000)
        self._procs[name] = proc
        log_event("role_started", process=HOST, role=name, pid=proc.pid, restarts=slot.restarts,
                  **fields)  # fmt: skip
        self._track(self._watch(name, proc), f"host.watch.{name}")

    def _track(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    # -- the sequencer's warm standby ----------------------------------------------------------
    def _standby_warm(self) -> bool:
        """The standby runs and finished its imports (it beats once in its slot then)."""
        proc = self._standby
        if proc is None or proc.returncode is not None or self.beats is None:
            return False
        return self.beats.read(self._standby_slot).pid == proc.pid

    def _promote(self) -> bool:
        """Hand the warm standby the sequencer's spec (module docstring); False when there is
        none warm (a cold start then)."""
        proc = self._standby
        if proc is None or proc.stdin is None or not self._standby_warm() or self.beats is None:
            return False
        self._standby = None
        self.beats.reset(self._beat_slot[SEQUENCER])
        spec = self._spec(SEQUENCER)
        try:
            proc.stdin.write((spec.encode() + "\n").encode())
            proc.stdin.close()
        except (OSError, RuntimeError) as exc:  # it died just now: start cold
            log_event("standby_lost", level="warning", process=HOST, error=repr(exc))
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return False
        self._started(SEQUENCER, proc, time.monotonic_ns(), standby=True)
        return True

    async def _keep_standby(self) -> None:
        """Start a standby once the sequencer is ready and none is there (never while
        stopping, and not sooner than ``restart_cap_s`` after a standby that died idle)."""
        seq = self.table.slots.get(SEQUENCER)
        if (
            not self.cfg.host.sequencer_standby
            or self._standby is not None
            or self.table.stopping
            or seq is None
            or not (seq.state is SlotState.RUNNING and seq.ready)
            or time.monotonic_ns() < self._standby_not_before_ns
            or self.beats is None
        ):
            return
        spec = replace(
            self._spec(SEQUENCER), standby=True, beat_slot=self._standby_slot, restarts=0
        )
        self.beats.reset(self._standby_slot)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command(spec),
                stdin=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=self._preexec,
            )
        except OSError as exc:
            self._standby_pause()
            log_event("standby_spawn_failed", level="error", process=HOST, error=repr(exc))
            return
        self._standby = proc
        log_event("standby_started", process=HOST, role=SEQUENCER, pid=proc.pid)
        self._track(self._watch_standby(proc), "host.watch.standby")

    async def _watch_standby(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self._standby is not proc:
            return  # promoted (its exit is the sequencer's now) or let go at the stop
        self._standby = None
        if not self.table.stopping:
            self._standby_pause()
            log_event("standby_exited", level="warning", process=HOST, pid=proc.pid, code=code)

    def _standby_pause(self) -> None:
        """A standby that could not start or died idle: the next one waits the backoff's cap
        (a broken install must not fork a Python every 100 ms)."""
        self._standby_not_before_ns = time.monotonic_ns() + int(self.cfg.host.restart_cap_s * 1e9)

    async def _stop_standby(self) -> None:
        proc, self._standby = self._standby, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # EOF: it leaves without a word (await_takeover)
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), ROLE_STOP_S)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    # -- liveness ------------------------------------------------------------------------------
    async def _watch_beats(self) -> None:
        every_ns = int(BEAT_CHECK_S * 1e9)
        while not self._stop.is_set():
            await asyncio.sleep(BEAT_CHECK_S)
            beats = self.beats
            if beats is None or self.table.stopping:
                continue
            try:
                running = {
                    s.name: (s.pid, s.started_ns, beats.read(self._beat_slot[s.name]))
                    for s in self.table.running()
                    if s.state is SlotState.RUNNING and s.name in self._beat_slot
                }
                now = time.monotonic_ns()
                for hung in self.liveness.check(now, every_ns, running, disk_wait, cpu_wait_ns):
                    self._kill_hung(hung)
                for name, worst in self.liveness.worst_ns.items():
                    self.table.slots[name].beat_silence_max_s = worst / 1e9
            except Exception as exc:  # the loop that replaces hung roles must not die of one
                log_event("beats_failed", level="error", process=HOST, error=repr(exc))

    def _kill_hung(self, hung: Hung) -> None:
        """SIGKILL a role whose beat stopped: its exit is counted as ``hung`` and it is started
        again as any exit is (the sequencer: its standby, once the old process is gone)."""
        proc = self._procs.get(hung.name)
        if proc is None or proc.pid != hung.pid or not self.table.mark_hung(hung.name):
            return
        log_event(
            "role_hung",
            level="error",
            process=HOST,
            role=hung.name,
            pid=hung.pid,
            silent_s=round(hung.silent_s, 3),
            limit_s=hung.limit_s,
            held=hung.held,
            beat_seen=hung.started,
            action="SIGKILL",
        )
        with contextlib.suppress(ProcessLookupError):
            proc.kill()

    async def _watch(self, name: str, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        was_ready = self.table.slots[name].ready
        ex = self.table.exited(name, code, time.monotonic_ns())
        if self._procs.get(name) is proc:
            del self._procs[name]
        port_file(self.run_dir, name).unlink(missing_ok=True)
        spec = self.specs[name]
        if (
            spec.role == "writer"
            and self.interest is not None
            and spec.index < self.interest.writers
        ):
            # its terminals are gone: their order tickets no longer ask for priority updates
            self.interest.clear_row(spec.index)
        if ex.restart_in_s is None:
            log_event("role_exited", process=HOST, role=name, pid=proc.pid, reason=ex.reason)
        else:
            # Every crash is a line: a role in a crash loop is loud, at most once per cap_s.
            log_event(
                "role_restarting",
                level="error",
                process=HOST,
                role=name,
                pid=proc.pid,
                reason=ex.reason,
                uptime_s=round(ex.uptime_s, 3),
                restart_in_s=round(ex.restart_in_s, 3),
                crashes_in_a_row=ex.failures,
            )
            # A sequencer that had been ready: its standby takes over now, the backoff is for
            # one that dies starting (a crash loop then waits its steps, standby or not).
            if name == SEQUENCER and was_ready and self._standby_warm():
                port_file(self.run_dir, name).unlink(missing_ok=True)
                self._promote()
        self._changed.set()

    # -- stop ----------------------------------------------------------------------------------
    async def wait(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()

    def hurry(self) -> None:
        """A second Ctrl-C: every role still running gets SIGKILL now."""
        self._hurry.set()
        self._stop.set()
        self.table.stopping = True  # these exits are the stop's, not crashes to restart
        standby = [self._standby] if self._standby is not None else []
        for proc in [*self._procs.values(), *standby]:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def _signal(self, name: str, sig: signal.Signals) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    async def _wait_exited(self, names: list[str], deadline: float) -> list[str]:
        """Until every one of ``names`` exited, the deadline (monotonic s) or a hurry; the
        names still running."""
        while True:
            left = [n for n in names if n in self._procs]
            if not left or self._hurry.is_set() or time.monotonic() >= deadline:
                return left
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        if self._loop_task is not None:
            await self._loop_task  # first: no start can slip in after the stages are known
        stages = self.table.stop()
        if self._beat_task is not None:
            self._beat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat_task
        await self._stop_standby()  # idle: nothing to drain
        t0 = time.monotonic()
        deadline = t0 + self.cfg.host.stop_timeout_s
        reserve = min(ROLE_STOP_S, self.cfg.host.stop_timeout_s / max(1, len(stages)))
        if self.endpoints is not None:
            remove_endpoints(self.data_dir, self.endpoints.pid)  # no client dials a leaving host
        for i, (role, names) in enumerate(stages):
            started = time.monotonic()
            for name in names:
                self.table.stopping_now(name)
                self._signal(name, signal.SIGKILL if self._hurry.is_set() else signal.SIGTERM)
            # A stage may use the whole deadline but what the stages after it are owed (a role
            # stops within ROLE_STOP_S): one that overstays never takes the sequencer's time.
            later = len(stages) - 1 - i
            kill_at = deadline - reserve * later
            # A busy writer's drain (a share of its terminals per step) can outlast the budget:
            # told twice, it skips the rest of it and stops within ROLE_STOP_S, not SIGKILLed.
            left = await self._wait_exited(names, kill_at - ROLE_STOP_S)
            told_twice: list[str] = []
            if left and not self._hurry.is_set():  # (after a hurry: SIGKILLed already)
                told_twice = left
                for name in told_twice:
                    self._signal(name, signal.SIGTERM)
                left = await self._wait_exited(told_twice, kill_at)
            for name in left:
                self._signal(name, signal.SIGKILL)
            if left:
                await self._wait_exited(left, time.monotonic() + 5.0)
            log_event(
                "stage_stopped",
                process=HOST,
                stage=role,
                processes=names,
                told_twice=told_twice,
                killed=left,
                seconds=round(time.monotonic() - started, 3),
            )
        for task in list(self._watchers):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._release()
        log_event("host_stopped", process=HOST, seconds=round(time.monotonic() - t0, 3))

    async def _release(self) -> None:
        if self._admin_app is not None:
            await self._admin_app.state.host_views.stop()  # its sampler ends with the host
        if self._admin is not None:
            await self._admin.stop()
        if self.ring is not None:
            self.ring.close(unlink=True)
        if self.interest is not None:
            self.interest.close()
            self.interest.unlink()
        if self.beats is not None:
            self.beats.close()
            self.beats.unlink()
        if self._port_lock is not None:
            self._port_lock.close()
        if self.verifier is not None:
            self.verifier.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._dir_lock is not None:
            self._dir_lock.release()
