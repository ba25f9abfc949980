"""Reconnecting terminals against the real `monotape run`: a staggered drain (the server is being
taken out of rotation: every retry is a 503 with Retry-After) and a restart on the same port and
data directory (versions continue: the epochs are on disk)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from monotape.platform.sdk.client import Quote, TerminalClient
from tests.conftest import RunningServer, ServerFactory, mint, start_server, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def drain_status(server: RunningServer, admin: str) -> dict[str, Any]:
    body: dict[str, dict[str, Any]] = json.loads(server.http("/admin/connections?limit=0", admin))
    return body["drain"]


class Glass:
    """Every quote one terminal rendered, and the times of its state changes."""

    def __init__(self) -> None:
        self.quotes: list[Quote] = []
        self.states: list[tuple[str, float]] = []

    def on_render(self, q: Quote) -> None:
        self.quotes.append(q)

    def on_state(self, state: str) -> None:
        self.states.append((state, time.monotonic()))

    def backwards(self) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
        """Renders at or below the version already on the glass for the key (must be none)."""
        shown: dict[str, tuple[int, int]] = {}
        bad = []
        for q in self.quotes:
            held = shown.get(q.key)
            if held is not None and q.version <= held:
                bad.append((q.key, held, q.version))
            shown[q.key] = q.version
        return bad

    def first_retry_after(self, t: float) -> float | None:
        """When the terminal first tried again after its connection ended at ``t``."""
        for state, at in self.states:
            if state == "connecting" and at > t:
                return at
        return None

    def closed_at(self) -> float | None:
        seen_connected = False
        for state, at in self.states:
            if state == "connected":
                seen_connected = True
            elif seen_connected and state == "backoff":
                return at
        return None


async def test_drain_staggers_terminals_that_back_off_politely(
    server_factory: ServerFactory,
) -> None:
    n = 40
    server = server_factory.start("--rate", "4000")
    admin = mint(server.data_dir, admin=True)
    glasses = [Glass() for _ in range(n)]
    clients = [
        TerminalClient(
            server.url,
            reconnect=True,
            backoff_base_s=0.25,
            backoff_cap_s=4.0,
            rng=random.Random(i),
            on_render=glasses[i].on_render,
            on_state=glasses[i].on_state,
        )
        for i in range(n)
    ]
    try:
        hellos = await asyncio.gather(*(c.connect() for c in clients))
        keys = [i.key for i in hellos[0].instruments]
        for i, c in enumerate(clients):
            await c.subscribe(keys[(i * 7) % 400 : (i * 7) % 400 + 20])
        await until(lambda: all(c.view for c in clients), "every terminal rendering", 20)

        started = server.post("/admin/drain", admin)
        assert started["total"] == n
        expected = float(started["expected_s"])
        t0 = time.monotonic()
        status = started
        while not status.get("drained"):
            assert time.monotonic() - t0 < expected + 15, f"drain stuck: {status}"
            await asyncio.sleep(0.1)
            status = drain_status(server, admin)
        observed = float(status["elapsed_s"])  # within 0.1 s of completion (poll interval)
        logged: float | None = None
        deadline = time.monotonic() + 5
        while logged is None and time.monotonic() < deadline:  # logged after its last sleep
            for line in list(server.output):
                if '"drain_complete"' in line:
                    logged = float(json.loads(line)["seconds"])
            await asyncio.sleep(0.1)
        assert logged is not None, "no drain_complete log line"
        assert abs(observed - expected) <= max(1.0, 0.15 * expected), (observed, expected)
        # N / (2% per 250 ms): ceil(N / batch) - 1 steps of 250 ms, plus the driver's last sleep
        assert abs(logged - expected) <= max(1.0, 0.15 * expected), (logged, expected)
        assert status["closed"] == n

        # Every terminal keeps retrying (the server refuses upgrades once drained): wait for
        # two refusals each so the backoff has grown.
        await until(
            lambda: all(c.stats.refused_503 >= 2 for c in clients), "two 503s per terminal", 40
        )
        closes = [g.closed_at() for g in glasses]
        assert all(t is not None for t in closes)
        first_retries = []
        for g, t in zip(glasses, closes, strict=True):
            assert t is not None
            r = g.first_retry_after(t)
            assert r is not None
            first_retries.append(r)
        spread = max(first_retries) - min(first_retries)
        # Within one drain step (same close time) the hints alone must spread the comeback.
        delays = sorted(r - t for r, t in zip(first_retries, closes, strict=True) if t)
        for c in clients:
            s = c.stats
            assert s.closes >= 1 and s.closes_with_hint >= 1, "a close without a reconnect hint"
            assert s.last_close_code == 1001
            assert s.refused_503 >= 2 and s.regressions == 0
            assert not c.connected
            after_close = [a for a, _, why in s.backoff_history]
            assert after_close[0] == 0 and after_close == list(range(len(after_close))), (
                "the backoff attempt did not grow across refusals"
            )
        # The hints the server gave were honoured, and each waited its whole backoff.
        for c, r, t in zip(clients, first_retries, closes, strict=True):
            assert t is not None and c.stats.last_close_hint_ms is not None
            waited = c.stats.backoff_history[0][1]
            assert waited * 1000 >= c.stats.last_close_hint_ms - 1e-6  # float ms -> s -> ms
            assert r - t >= waited - 0.05, "a terminal came back before its wait was over"
            assert c.stats.backoff_history[-1][0] >= 2  # the jitter ceiling grew: 0.5 s, 1 s..
        print(
            f"\ndrain: {n} terminals, logged {logged:.2f} s (status {observed:.2f} s) vs "
            f"expected {expected:.2f} s; first-retry spread {spread:.2f} s; retry delay after "
            f"close min {delays[0]:.2f} / median {delays[len(delays) // 2]:.2f} / max "
            f"{delays[-1]:.2f} s; 503s per terminal "
            f"{min(c.stats.refused_503 for c in clients)}-"
            f"{max(c.stats.refused_503 for c in clients)}"
        )
        assert spread >= 1.0, f"reconnects not staggered: spread {spread:.2f} s"
        assert delays[-1] - delays[0] >= 1.0, "every terminal waited the same time"
        assert sum(len(g.backwards()) for g in glasses) == 0
    finally:
        await asyncio.gather(*(c.close() for c in clients))
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_terminals_reconnect_across_a_restart_and_never_go_backwards(
    tmp_path: Path,
) -> None:
    n = 10
    port = free_port()
    data_dir = tmp_path / "data"
    args = ("--rate", "4000", "--ws-port", str(port))
    first: RunningServer | None = await asyncio.to_thread(start_server, data_dir, *args)
    second: RunningServer | None = None
    assert first is not None
    glasses = [Glass() for _ in range(n)]
    clients = [
        TerminalClient(
            first.url,
            reconnect=True,
            backoff_base_s=0.25,
            backoff_cap_s=2.0,
            rng=random.Random(100 + i),
            on_render=glasses[i].on_render,
            on_state=glasses[i].on_state,
        )
        for i in range(n)
    ]
    try:
        hellos = await asyncio.gather(*(c.connect() for c in clients))
        keys = [i.key for i in hellos[0].instruments]
        for i, c in enumerate(clients):
            mine = keys[i * 20 : i * 20 + 20]
            await c.subscribe(mine)
            await c.set_priority(mine[:2])
        await until(lambda: all(len(c.view) >= 10 for c in clients), "terminals rendering", 20)
        before_epoch = max(q.epoch for g in glasses for q in g.quotes)
        rendered_before = [len(g.quotes) for g in glasses]

        # SIGTERM: the server drains its terminals (staggered, with hints) and stops.
        t_stop = time.monotonic()
        # One signal: stop() sends it (a second one, e.g. stop()'s default SIGINT after our
        # own SIGTERM, is the "stop at once" press, and landing in the node's last teardown
        # it is a KeyboardInterrupt, exit 130).
        assert await first.astop(sig=signal.SIGTERM) == 0
        stop_s = time.monotonic() - t_stop
        assert all(c.stats.closes_with_hint >= 1 for c in clients), "a close without a hint"
        assert not any(c.connected for c in clients)

        second = await asyncio.to_thread(start_server, data_dir, *args)
        t_up = time.monotonic()
        assert second.ws_port == port
        await until(
            lambda: all(c.connected and c.stats.reconnects >= 1 for c in clients),
            "every terminal reconnected",
            30,
        )
        back_s = time.monotonic() - t_up
        admin = mint(data_dir, admin=True)
        rows = json.loads(second.http("/admin/connections", admin))["connections"]
        assert len(rows) == n
        assert sorted((r["subscriptions"], r["priority"]) for r in rows) == [(20, 2)] * n, (
            "subscriptions or priority were not restored"
        )
        await until(
            lambda: all(
                any(q.epoch > before_epoch for q in g.quotes[rendered_before[i] :])
                for i, g in enumerate(glasses)
            ),
            "every terminal rendering the new server's epoch",
            20,
        )
        for c, g in zip(clients, glasses, strict=True):
            assert c.stats.regressions == 0
            assert c.stats.reconnects >= 1
            assert g.backwards() == [], "a version went backwards across the restart"
        print(
            f"\nrestart: SIGTERM drain+stop {stop_s:.2f} s; all {n} terminals back "
            f"{back_s:.2f} s after the new server listened; connect_seconds max "
            f"{max(c.stats.connect_seconds or 0 for c in clients):.3f} s; "
            f"connect errors {sum(c.stats.connect_errors for c in clients)}, "
            f"503s {sum(c.stats.refused_503 for c in clients)}"
        )
    finally:
        await asyncio.gather(*(c.close() for c in clients))
        for s in (first, second):
            if s is not None:
                await asyncio.to_thread(s.stop)
