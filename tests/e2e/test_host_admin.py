"""The host serves the node's admin routes (issue 12, "observed as one"): one real
``monotape run --writers 2`` for the module, terminals on both writers.

Every route the host lists at /admin/ answers 200 with an admin token and 401 without; the
answers have the node's shape plus a per-writer (per-process) breakdown; the split across
writers is the kernel's real one (each terminal's hello names its writer); a role that does not
answer (stopped, killed) is left out and named in ``missing``, never a 500; a drain closes the
terminals of both writers with reconnect hints. Counts and names are asserted, never timings;
deadlines are generous (both cores may be busy).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from monotape.platform.host.admin_routes import ask_role
from monotape.platform.wire import codec
from monotape.platform.wire.requests import Subscribe, encode_request
from tests.conftest import RunningServer, start_server, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WRITERS = {"writer-0", "writer-1"}
OURS = [  # the JSON routes the host answers from its roles (and its own)
    "/admin/",
    "/admin/connections",
    "/admin/feeds",
    "/admin/invariants",
    "/admin/glass",
    "/admin/gc",
    "/admin/processes",
]


def call(
    node: RunningServer, method: str, path: str, token: str | None = None
) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(node.admin_url + path, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(node: RunningServer, path: str) -> dict[str, Any]:
    code, body = call(node, "GET", path, node.admin_token)
    assert code == 200, (path, code, body)
    return body


def pids(node: RunningServer) -> dict[str, int]:
    return {r["name"]: r["pid"] for r in get(node, "/admin/processes")["processes"]}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("host-admin")
    env = {
        "MONOTAPE_HOST__STOP_TIMEOUT_S": "10",
        "MONOTAPE_HOST__RUN_BASE": str(tmp),
        # a stopped role costs a route this much; generous: missing == [] is asserted with
        # both cores busy
        "MONOTAPE_HOST__SCRAPE_TIMEOUT_S": "10",
        # a writer stopped to be a role that does not answer, not to be replaced as hung
        # (liveness: test_host_liveness.py)
        "MONOTAPE_HOST__WRITER_BEAT_LIMIT_MS": "0",
    }
    running = start_server(tmp / "data", "--writers", "2", "--rate", "4000", env=env)
    yield running
    code = running.stop(timeout=40, sig=signal.SIGTERM)
    assert code == 0, "".join(running.tail)


class Terminals:
    """Terminals connected until both writers hold some, each knowing its writer (hello), read
    all along on a loop of their own (a thread): heartbeats consumed, pings answered, and the
    CLOSE message of each kept."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sockets: list[tuple[str, Any]] = []
        self.closes: dict[str, list[codec.Close]] = {name: [] for name in WRITERS}
        self.readers: list[asyncio.Task[None]] = []
        self.keys: list[str] = []

    def run(self, coro: Any, timeout_s: float = 90) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def open(self, node: RunningServer, at_least: int = 6) -> None:
        for _ in range(60):
            ws = await websockets.connect(node.url, compression=None, max_size=None)
            hello = codec.decode_message(await ws.recv(decode=False))
            assert isinstance(hello, codec.Hello)
            self.keys = [i.key for i in hello.instruments]
            await ws.send(encode_request(Subscribe(req=1, keys=self.keys[:1])))
            self.sockets.append((hello.server_id, ws))
            self.readers.append(asyncio.create_task(self.read(hello.server_id, ws)))
            if len(self.sockets) >= at_least and set(self.split()) == WRITERS:
                return
        raise AssertionError(f"the kernel never spread terminals over both writers: {self.split()}")

    async def read(self, name: str, ws: Any) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                msg = codec.decode_message(await ws.recv(decode=False))
                if isinstance(msg, codec.Close):
                    self.closes[name].append(msg)

    async def all_closed(self) -> None:
        await asyncio.wait(self.readers)

    def split(self) -> Counter[str]:
        return Counter(name for name, _ in self.sockets)

    async def close(self) -> None:
        for _, ws in self.sockets:
            with contextlib.suppress(Exception):
                await ws.close()
        for task in self.readers:
            task.cancel()


@pytest.fixture(scope="module")
def terminals(node: RunningServer) -> Iterator[Terminals]:
    t = Terminals()
    t.run(t.open(node))
    yield t
    t.run(t.close())
    t.loop.call_soon_threadsafe(t.loop.stop)
    t.thread.join(10)


def test_index_and_openapi_come_from_one_list_and_every_admin_route_is_guarded(
    node: RunningServer,
) -> None:
    index = get(node, "/admin/")
    routes = {(r["method"], r["path"]) for r in index["routes"]}
    code, doc = call(node, "GET", "/openapi.json")
    assert code == 200
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert routes == documented
    for path in [*OURS, "/admin/symbols/{key}"]:
        assert ("GET", path) in routes, path
    assert {("POST", "/admin/drain"), ("POST", "/admin/gc/collect")} <= routes
    collect = next(r for r in index["routes"] if r["path"] == "/admin/gc/collect")
    assert [p["name"] for p in collect["parameters"]] == ["process"]
    for method, path in sorted(routes):
        if path.startswith("/admin"):
            concrete = path.replace("{key}", "XNAS:AAPL").replace("{", "x").replace("}", "")
            assert call(node, method, concrete)[0] == 401, path
    for path in OURS:
        assert call(node, "GET", path, node.admin_token)[0] == 200, path


def test_connections_split_across_both_writers(node: RunningServer, terminals: Terminals) -> None:
    split = terminals.split()
    body = get(node, "/admin/connections")
    assert body["missing"] == []
    per_writer = {name: w["count"] for name, w in body["writers"].items()}
    assert set(per_writer) == WRITERS
    for name in WRITERS:
        assert per_writer[name] >= split[name] > 0, (per_writer, split)
    assert body["count"] == sum(per_writer.values())
    assert {r["writer"] for r in body["connections"]} == WRITERS
    assert {"id", "peer", "subscriptions", "queued_frames"} <= set(body["connections"][0])
    assert body["drain"]["draining"] is False
    assert len(get(node, "/admin/connections?limit=2")["connections"]) == 2
    code, bad = call(node, "GET", "/admin/connections?limit=nope", node.admin_token)
    assert (code, bad["parameter"]) == (400, "limit")


def test_one_symbol_prices_from_the_sequencer_subscribers_from_both_writers(
    node: RunningServer, terminals: Terminals
) -> None:
    key = terminals.keys[0]  # every terminal subscribed to it
    last: dict[str, Any] = {}

    def priced() -> bool:
        last.update(get(node, f"/admin/symbols/{key}"))
        return last["current"] is not None and last["subscriber_signatures"] >= 2

    asyncio.run(until(priced, f"{key} priced and subscribed on both writers", 60))
    assert last["key"] == key and last["missing"] == []
    assert set(last["writers"]) == WRITERS and all(last["writers"].values())
    assert {"bid", "ask", "version", "price"} <= set(last["current"])
    code, body = call(node, "GET", "/admin/symbols/XNAS:NOPE", node.admin_token)
    assert (code, body["parameter"]) == (404, "key")


def test_symbols_carry_the_sequencers_current_prices(
    node: RunningServer, terminals: Terminals
) -> None:
    """``monotape symbols`` on a host shows prices, as the README promises (the node's shape)."""
    key = terminals.keys[0]
    last: dict[str, Any] = {}

    def priced() -> bool:
        last.update(get(node, f"/admin/symbols?pattern={key}"))
        return any(r["key"] == key and r["current"] for r in last["symbols"])

    asyncio.run(until(priced, f"{key} priced in /admin/symbols", 60))
    assert set(last) == {"pattern", "count", "symbols"}
    every = get(node, "/admin/symbols?limit=3")
    assert len(every["symbols"]) == 3 and every["count"] >= 3


def test_role_ports_answer_state_only_with_the_hosts_secret(node: RunningServer) -> None:
    """127.0.0.1 is every user of the machine: a role's /state and /action without the host's
    secret are 403 (no drain, no collection, no peers); its /metrics stays open."""
    run_dir = Path(get(node, "/admin/processes")["host"]["run_dir"])
    port = int((run_dir / "writer-0.port").read_text())
    for method, path in (
        ("GET", "/state/glass"),
        ("GET", "/state/connections"),
        ("POST", "/action/drain"),
        ("POST", "/action/resume"),
        ("POST", "/action/gc-collect"),
    ):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        assert refused.value.code == 403, path
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        assert r.status == 200
    assert get(node, "/admin/connections")["drain"]["draining"] is False  # nothing drained


def test_feeds_invariants_glass_and_gc_per_process(node: RunningServer) -> None:
    feeds = get(node, "/admin/feeds")
    handlers = {n for n in pids(node) if n.startswith("handler-")}
    assert {r["process"] for r in feeds["handlers"]} | set(feeds["missing"]) == handlers
    assert {"venue", "handler", "up", "lag_ms", "delivered", "epochs"} <= set(feeds["handlers"][0])
    assert feeds["source"] == "simulator"

    invariants = get(node, "/admin/invariants")
    assert set(invariants["writers"]) == WRITERS and invariants["missing"] == []
    assert invariants["ok"] is True and invariants["violations"] == []
    assert {r["writer"] for r in invariants["results"]} == WRITERS
    assert not any(invariants["trips"].values())

    glass = get(node, "/admin/glass")
    assert set(glass["writers"]) == WRITERS
    assert {"regressions", "gaps", "regressing_terminals", "reports", "last"} <= set(glass)

    gc_body = get(node, "/admin/gc?recent=5")
    assert set(gc_body["processes"]) == WRITERS | {"sequencer"} | handlers
    assert "2" in gc_body["total"]["generations"]
    code, collected = call(node, "POST", "/admin/gc/collect?process=writer-0", node.admin_token)
    assert code == 200 and set(collected["processes"]) == {"writer-0"}
    code, every = call(node, "POST", "/admin/gc/collect", node.admin_token)
    assert code == 200 and set(every["processes"]) == WRITERS | {"sequencer"} | handlers
    code, bad = call(node, "POST", "/admin/gc/collect?process=nope", node.admin_token)
    assert (code, bad["parameter"]) == (400, "process")


def test_a_role_that_does_not_answer_is_named_not_a_500(node: RunningServer) -> None:
    procs = pids(node)
    writer = procs["writer-1"]
    os.kill(writer, signal.SIGSTOP)  # running, but answers nothing: the host's timeout
    try:
        code, body = call(node, "GET", "/admin/connections", node.admin_token)
        assert code == 200 and body["missing"] == ["writer-1"]
        assert set(body["writers"]) == {"writer-0"}
        code, body = call(node, "GET", "/admin/invariants", node.admin_token)
        assert code == 200 and body["missing"] == ["writer-1"]
    finally:
        os.kill(writer, signal.SIGCONT)

    # kill -9 of a feed handler: until it is back, its row is gone and it is named instead
    victim = "handler-A"  # every venue's A handler
    handlers = {n for n in procs if n.startswith("handler-")}
    os.kill(procs[victim], signal.SIGKILL)
    named = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        code, body = call(node, "GET", "/admin/feeds", node.admin_token)
        assert code == 200, body
        rows = {r["process"] for r in body["handlers"]}
        assert rows | set(body["missing"]) == handlers  # every handler: a row or named
        named = named or victim in body["missing"]
        if victim in rows and pids(node)[victim] != procs[victim]:
            break  # restarted and answering again
        time.sleep(0.05)
    else:
        raise AssertionError(f"{victim} never came back")
    assert named, f"{victim} was never reported missing while it was down"


def test_drain_closes_terminals_on_both_writers_with_hints(
    node: RunningServer, terminals: Terminals
) -> None:
    code, body = call(node, "POST", "/admin/drain", node.admin_token)
    assert code == 202, body
    assert body["draining"] is True and set(body["writers"]) == WRITERS and body["missing"] == []
    assert body["total"] >= len(terminals.sockets)
    terminals.run(asyncio.wait_for(terminals.all_closed(), 60))
    got = terminals.closes
    for name in WRITERS:
        assert len(got[name]) == terminals.split()[name], got
        assert all(c.reason == "drain" and c.reconnect_after_ms > 0 for c in got[name])

    def drained() -> bool:
        return bool(get(node, "/admin/connections")["drain"].get("drained"))

    asyncio.run(until(drained, "both writers drained", 60))
    assert call(node, "GET", "/readyz") == (503, {"status": "drained"})  # out of rotation

    # A writer that comes back while the host is drained is told to drain as it becomes ready
    # (asked here as the host asks it: its state port, with the host's secret).
    before = pids(node)["writer-1"]
    os.kill(before, signal.SIGKILL)
    run_dir = Path(get(node, "/admin/processes")["host"]["run_dir"])

    async def restarted_draining() -> bool:
        row = next(r for r in get(node, "/admin/processes")["processes"] if r["name"] == "writer-1")
        if row["pid"] in (None, before) or not row["ready"]:
            return False
        port = int((run_dir / "writer-1.port").read_text())
        secret = (run_dir / "role.secret").read_text().strip()
        status, body = await ask_role(port, "GET", "/state/connections?limit=0", 10, secret)
        return status == 200 and "drained" in body["drain"]  # (the key of a started drain)

    async def wait_restarted_draining(timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s  # generous: both cores may be busy
        while not await restarted_draining():
            assert time.monotonic() < deadline, "writer-1 never came back draining"
            await asyncio.sleep(0.05)

    asyncio.run(wait_restarted_draining())
    assert call(node, "GET", "/readyz")[0] == 503
    code, resumed = call(node, "POST", "/admin/resume", node.admin_token)
    assert code == 200 and resumed["resumed"] is True and resumed["draining"] is False
    assert resumed["missing"] == [] and resumed["unresumed"] == []
    assert call(node, "GET", "/readyz") == (200, {"status": "ready"})
