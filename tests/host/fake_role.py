"""A test-only role for the host's tests: ``python -m tests.host.fake_role ROLE SPEC_JSON``.

It behaves like a real role towards the host (lifeline.py: dies with the host, stops on SIGTERM
with one ``role_stopped`` line; telemetry.py: its registry on a loopback port, the port in
``run_dir/<name>.port``) and does nothing else. A writer reports ``monotape_connections`` =
``FAKE_TERMINALS`` (default 3) plus its index, so the host's split is visible. Cues, from the
environment: ``FAKE_ROLE_CRASH=<name>`` exits with code 3 a moment after start (every time),
``FAKE_ROLE_STUBBORN=<name>`` ignores SIGTERM (the host must SIGKILL it at its deadline),
``FAKE_ROLE_DRAINING=<name>`` stops only on a second SIGTERM (a writer whose drain outlasts the
host's budget: told twice, it skips the rest of it), ``FAKE_ROLE_HANG=<name>`` blocks its event
loop a moment after start (its beat stops: the host must kill it as hung). It beats as a real
role does (``lifeline.beating``) and, started as a standby, waits for its takeover first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from monotape import metric_names as m
from monotape.log import log_event
from monotape.platform.host.lifeline import (
    await_takeover,
    beating,
    die_with_host,
    stop_on_signals,
    watch_host,
)
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.telemetry import serve_metrics


async def run(spec: RoleSpec) -> int:
    stop = asyncio.Event()
    stubborn = os.environ.get("FAKE_ROLE_STUBBORN") == spec.name
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif os.environ.get("FAKE_ROLE_DRAINING") == spec.name:
        told: list[int] = []

        def on_sigterm() -> None:
            told.append(1)
            log_event("fake_drain" if len(told) == 1 else "fake_drain_cut_short", process=spec.name)
            if len(told) > 1:
                stop.set()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
    else:
        stop_on_signals(stop)
    registry = CollectorRegistry()
    Counter("fake_role_starts", "starts of this role", registry=registry).inc()
    Gauge("fake_role_restarts", "spec.restarts", registry=registry).set(spec.restarts)
    if spec.role == "writer":
        terminals = int(os.environ.get("FAKE_TERMINALS", "3")) + spec.index
        Gauge(m.CONNECTIONS, "terminals", registry=registry).set(terminals)
    serve_metrics(registry, spec.run_dir, spec.name)
    log_event("role_started", process=spec.name, pid=os.getpid(), restarts=spec.restarts)
    watcher = asyncio.create_task(watch_host(spec.host_pid, stop, every_s=0.2))
    if os.environ.get("FAKE_ROLE_HANG") == spec.name:
        await asyncio.sleep(0.5)
        log_event("fake_hang", process=spec.name)
        time.sleep(3600)  # the loop stops turning: no beat, no signal handled
    if os.environ.get("FAKE_ROLE_CRASH") == spec.name:
        await asyncio.sleep(0.3)
        log_event("fake_crash", process=spec.name)
        return 3
    await stop.wait()
    watcher.cancel()
    log_event("role_stopped", process=spec.name)
    return 0


def main(argv: list[str]) -> int:
    die_with_host()
    spec = RoleSpec.decode(argv[1])
    if spec.standby and not await_takeover(spec):
        return 0
    return asyncio.run(beating(spec, run(spec)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
