"""Shared fixtures: the real `monotape run` as a subprocess on loopback, started and stopped."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from monotape.config import Config, load_config
from monotape.loadgen.launch import RunningNode, launch
from monotape.platform.auth import ensure_dev_keys, mint_token
from monotape.testing.nats import nats_url as nats_url  # the module-scoped fixture

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


# The client commands that find a node and show it a token (commands/clientside.py), each in a
# quick form: the unit and the e2e CLI tests run every one of them the same way.
TINY_TRACE = ROOT / "tests" / "traces" / "open_storm_small.json"
CLIENT_COMMANDS = pytest.mark.parametrize(
    "command",
    [
        ("tape", "XNAS:AAPL"),
        ("load", "churn", "--duration-s", "1"),
        ("load", "storm", "--terminals", "4", "--duration", "3", "--open-at", "1"),
        ("load", "replay", str(TINY_TRACE)),
    ],
    ids=["tape", "churn", "storm", "replay"],
)


def mint(data_dir: Path, *, admin: bool = False, ttl_s: float = 3600, sub: str = "tests") -> str:
    """A token signed by the dev key the server generated under its data directory."""
    return mint_token(ensure_dev_keys(data_dir).private_pem_path, sub=sub, ttl_s=ttl_s, admin=admin)


# The running node is the launcher's (monotape/loadgen/launch.py): the tests, the benchmarks and
# the soak start, query, scrape and stop it the same way.
RunningServer = RunningNode


# Shedding upgrades while the event loop runs late is a designed refusal (503 + Retry-After),
# and a busy machine triggers it at any moment: tests start nodes without it unless they are
# about it (they set it back explicitly). CI may share the box; a test must not fail for that.
NO_LAG_SHEDDING = {"MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "0"}

# How long a node may take to say where it listens. A host starts its processes in stages, each
# once the ones before have published their metrics port: on a box far busier than its cores
# (load ~35 on 2) that took over the launcher's default 30 s. Only a node that never starts
# waits this long.
STARTUP_S = 90.0


def start_server(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> RunningServer:
    # Which process model the e2e tests run. The host with a writer process per core (what
    # the default "auto" runs from 3 cores; below, "auto" is the one-process node) runs in
    # tests/e2e/test_host_views.py, one module-scoped host shared by the cheap product-level
    # checks (the banner, `monotape tape`
    # and `monotape symbols` as a person runs them, the views, the watchlist); the host's
    # own behaviour is in tests/e2e/test_host*.py (--writers N) and the soak's in
    # tests/loadgen/test_soak_host.py. The tests that start a node here are about the
    # one-process node (its drain, its faults, its handlers' restarts), or about a client
    # that does not care which model serves it: they pin --single-process unless they chose,
    # since a host per test is 6 processes starting on 2 shared cores (a minute across the
    # suite) for no more coverage.
    chosen = any(a == "--single-process" or a.startswith("--writers") for a in args)
    model = () if chosen else ("--single-process",)
    return launch(
        data_dir, *model, *args, env={**NO_LAG_SHEDDING, **(env or {})}, timeout_s=STARTUP_S
    )


class ServerFactory:
    """What the ``server_factory`` fixture hands a test: ``start(*flags, env=)`` runs one more
    node in its own data dir under the test's tmp_path; the fixture stops them all after."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[RunningServer] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> RunningServer:
        s = start_server(self.tmp_path / f"data{len(self.started)}", *args, env=env)
        self.started.append(s)
        return s


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path)
    yield factory
    for s in factory.started:
        assert s.stop() is not None, "monotape run did not stop on SIGINT within its deadline"


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
