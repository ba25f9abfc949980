"""The admin app built against a fake AdminView: auth (401/403), probes and /admin JSON, with no
node started, no socket and no event loop of a server (the app is called as ASGI directly)."""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from monotape.clock import FakeClock
from monotape.config import AuthConfig
from monotape.dashboards.panels import sampled_names
from monotape.dashboards.sampler import SampleRing
from monotape.histograms.gc import GcMonitor
from monotape.invariants import InvariantMonitor, NoDanglingEntries, SubscriptionCardinality
from monotape.platform.admin import app as admin_module
from monotape.platform.admin.app import build_admin_app
from monotape.platform.admin.view import AdminView
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.glass import GlassLedger, GlassOffender
from monotape.platform.core.outbox import Outbox
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.model import Instrument, Tick
from tests.conftest import mint

NODE_DIR = Path(admin_module.__file__).parent


# -- the fake node ---------------------------------------------------------------------------------
@dataclass
class FakeEpoch:
    epoch: int
    fence_ts_ns: int


@dataclass
class FakeFeed:
    venue: str
    name: str
    up: bool = True
    lag_ns: int = 7_000_000
    delivered: int = 120
    dropped: int = 0
    backwards: int = 0
    records: list[FakeEpoch] = field(default_factory=lambda: [FakeEpoch(3, 1_000)])


@dataclass
class FakeConnection:
    conn_id: int
    peer: str = "127.0.0.1:40000"
    opened_ns: int = 0
    outbox: Outbox = field(default_factory=lambda: Outbox(64))
    frames_sent: int = 25
    bytes_sent: int = 4_000


@dataclass
class FakeStats:
    disconnects: Counter[str] = field(default_factory=Counter)


@dataclass
class FakeDrain:
    done: bool = False


@dataclass
class FakeServer:
    universe: list[Instrument]
    connections: dict[int, FakeConnection] = field(default_factory=dict)
    index: SubscriptionIndex = field(default_factory=SubscriptionIndex)
    stats: FakeStats = field(default_factory=FakeStats)
    drain: FakeDrain | None = None
    drains_started: int = 0
    glass: GlassLedger = field(default_factory=GlassLedger)

    def drain_status(self) -> dict[str, Any]:
        return {"draining": self.drain is not None}

    def start_drain(self) -> bool:
        self.drains_started += 1
        if self.drain is not None:
            return False
        self.drain = FakeDrain()
        return True

    def resume(self) -> bool:
        resumed = self.drain is not None
        self.drain = None
        return resumed

    def iid_of(self, key: str) -> int | None:
        return next((i.iid for i in self.universe if i.key == key), None)


@dataclass
class FakeQuotes:
    ticks: dict[int, Tick] = field(default_factory=dict)

    def current(self, iid: int) -> Tick | None:
        return self.ticks.get(iid)

    def published(self, iid: int) -> Tick | None:
        return None


class FakeLoopLag:
    def snapshot(self) -> dict[str, Any]:
        return {"last_ms": 0.1}


@dataclass
class FakeNode:
    verifier: TokenVerifier | None
    hdr_dir: Path
    universe: list[Instrument] = field(default_factory=lambda: build_universe(2, 3, 7))
    ready: bool = True
    source: str = "simulator"
    fault_injection: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    clock: FakeClock = field(default_factory=lambda: FakeClock(start_ns=5_000_000_000))
    handlers: list[FakeFeed] = field(
        default_factory=lambda: [FakeFeed("XA", "XA-a"), FakeFeed("XA", "XA-b", up=False)]
    )
    sequencer: FakeQuotes = field(default_factory=FakeQuotes)
    gc_monitor: GcMonitor = field(default_factory=GcMonitor)
    loop_lag: FakeLoopLag = field(default_factory=FakeLoopLag)
    dashboard_ring: SampleRing = field(default_factory=lambda: SampleRing(sampled_names()))
    server: FakeServer = field(init=False)
    invariants: InvariantMonitor = field(init=False)

    def __post_init__(self) -> None:
        self.server = FakeServer(self.universe)
        self.invariants = InvariantMonitor(
            [
                SubscriptionCardinality(self.server.index, clock=self.clock),
                NoDanglingEntries(
                    self.server.index, lambda: self.server.connections, clock=self.clock
                ),
            ],
            clock=self.clock,
        )


# -- calling the app ---------------------------------------------------------------------------
@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def call(app: Starlette, method: str, path: str, token: str | None = None) -> Answer:
    """One request through the ASGI app, in this event loop (no server, no socket)."""
    raw_path, _, query = path.partition("?")
    headers = [(b"host", b"admin.test")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("admin.test", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    hdrs = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return Answer(start["status"], hdrs, body)


@pytest.fixture
def verifier(tmp_path: Path) -> Iterator[TokenVerifier]:
    v = build_verifier(AuthConfig(), tmp_path)  # creates the dev key pair in tmp_path
    yield v
    v.close()


@pytest.fixture
def node(tmp_path: Path, verifier: TokenVerifier) -> FakeNode:
    return FakeNode(verifier=verifier, hdr_dir=tmp_path / "hdr")


def app_of(view: AdminView) -> Starlette:
    return build_admin_app(view)


# -- the tests ---------------------------------------------------------------------------------
async def test_probes_need_no_token(node: FakeNode) -> None:
    app = app_of(node)
    health = await call(app, "GET", "/healthz")
    assert (health.status, health.json()) == (200, {"status": "ok"})
    ready = await call(app, "GET", "/readyz")
    assert ready.status == 200
    assert ready.json() == {
        "status": "ready",
        "connections": 0,
        "feed_handlers_up": 1,
        "feed_handlers": 2,
        "instruments": len(node.universe),
    }
    metrics = await call(app, "GET", "/metrics")
    assert metrics.status == 200 and metrics.headers["content-type"].startswith("text/plain")


async def test_readyz_is_503_while_starting_and_while_draining(node: FakeNode) -> None:
    app = app_of(node)
    node.ready = False
    starting = await call(app, "GET", "/readyz")
    assert (starting.status, starting.json()["status"]) == (503, "starting")
    node.ready = True
    node.server.drain = FakeDrain(done=False)
    assert (await call(app, "GET", "/readyz")).json()["status"] == "draining"
    node.server.drain = FakeDrain(done=True)
    drained = await call(app, "GET", "/readyz")
    assert (drained.status, drained.json()["status"]) == (503, "drained")


@pytest.mark.parametrize("token", [None, "not-a-jwt"])
async def test_admin_without_a_valid_token_is_401(node: FakeNode, token: str | None) -> None:
    answer = await call(app_of(node), "GET", "/admin/feeds", token)
    assert answer.status == 401
    assert answer.json()["error"].startswith("unauthorized:")
    assert answer.headers["www-authenticate"].startswith("Bearer")


async def test_a_token_without_the_admin_claim_is_403(node: FakeNode, tmp_path: Path) -> None:
    answer = await call(app_of(node), "GET", "/admin/feeds", mint(tmp_path, admin=False))
    assert answer.status == 403
    assert "admin claim" in answer.json()["error"]


async def test_without_auth_the_admin_api_fails_closed(node: FakeNode, tmp_path: Path) -> None:
    node.verifier = None
    answer = await call(app_of(node), "GET", "/admin/feeds", mint(tmp_path, admin=True))
    assert answer.status == 403
    assert "auth.enabled" in answer.json()["error"]
    assert (await call(app_of(node), "GET", "/healthz")).status == 200


async def test_admin_feeds_answers_from_the_view(node: FakeNode, tmp_path: Path) -> None:
    answer = await call(app_of(node), "GET", "/admin/feeds", mint(tmp_path, admin=True))
    assert answer.status == 200
    assert answer.json() == {
        "handlers": [
            {
                "venue": "XA",
                "handler": "XA-a",
                "up": True,
                "lag_ms": 7.0,
                "delivered": 120,
                "dropped": 0,
                "backwards": 0,
                "epochs": [[3, 1_000]],
            },
            {
                "venue": "XA",
                "handler": "XA-b",
                "up": False,
                "lag_ms": 7.0,
                "delivered": 120,
                "dropped": 0,
                "backwards": 0,
                "epochs": [[3, 1_000]],
            },
        ],
        "source": "simulator",
    }


async def test_admin_symbol_and_connections_json(node: FakeNode, tmp_path: Path) -> None:
    token = mint(tmp_path, admin=True)
    inst = node.universe[0]
    node.sequencer.ticks[inst.iid] = Tick(
        iid=inst.iid, venue=inst.venue, epoch=2, seq=9, venue_ts_ns=0,
        bid=10_050, ask=10_070, last=10_060, size=5, handler="a",
    )  # fmt: skip
    answer = await call(app_of(node), "GET", f"/admin/symbols/{inst.key}", token)
    assert answer.status == 200
    body = answer.json()
    scale = 10**inst.price_decimals
    assert body["iid"] == inst.iid and body["published"] is None
    assert body["current"]["version"] == [2, 9]
    assert body["current"]["price"]["bid"] == 10_050 / scale
    unknown = await call(app_of(node), "GET", "/admin/symbols/NOPE:NOPE", token)
    assert (unknown.status, unknown.json()["parameter"]) == (404, "key")

    node.server.connections[1] = FakeConnection(1, opened_ns=1_000_000_000)
    node.server.index.add_connection(1)
    node.server.index.subscribe(1, [inst.iid, node.universe[1].iid])
    node.server.stats.disconnects["rst"] = 2
    conns = (await call(app_of(node), "GET", "/admin/connections?limit=5", token)).json()
    assert conns["count"] == 1 and conns["disconnects"] == {"rst": 2}
    [row] = conns["connections"]
    assert row["id"] == 1 and row["subscriptions"] == 2 and row["age_s"] == 4.0
    assert row["queued_frames"] == 0 and row["gap"] is False


async def test_a_bad_parameter_is_400_naming_it(node: FakeNode, tmp_path: Path) -> None:
    token = mint(tmp_path, admin=True)
    answer = await call(app_of(node), "GET", "/admin/connections?limit=many", token)
    assert (answer.status, answer.json()["parameter"]) == (400, "limit")
    window = await call(app_of(node), "GET", "/admin/latency?stage=write&window=forever", token)
    assert (window.status, window.json()["parameter"]) == (400, "window")
    assert "is not a duration like 40s" in window.json()["error"]
    for empty in ("0s", "0ms", "99999d"):  # durations, out of the range: the range is said
        answer = await call(
            app_of(node), "GET", f"/admin/latency?stage=write&window={empty}", token
        )
        assert answer.status == 400 and "between 1 ms and 168 h" in answer.json()["error"], empty


async def test_an_unknown_route_or_method_is_json_like_every_other_answer(
    node: FakeNode, tmp_path: Path
) -> None:
    missing = await call(app_of(node), "GET", "/admin/nope")
    assert missing.status == 404 and missing.headers["content-type"] == "application/json"
    assert missing.json()["error"] == "not found: GET /admin/nope"
    assert "/openapi.json" in missing.json()["hint"]
    wrong = await call(app_of(node), "POST", "/healthz")
    assert (wrong.status, wrong.json()["error"]) == (405, "method not allowed: POST /healthz")
    assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD"}  # from a set: any order


async def test_drain_and_resume_go_to_the_server(node: FakeNode, tmp_path: Path) -> None:
    token = mint(tmp_path, admin=True)
    app = app_of(node)
    assert (await call(app, "POST", "/admin/drain", token)).status == 202
    assert (await call(app, "POST", "/admin/drain", token)).status == 200  # already draining
    assert node.server.drains_started == 2
    resumed = await call(app, "POST", "/admin/resume", token)
    assert resumed.json()["resumed"] is True and node.server.drain is None


async def test_the_invariants_route_reports_the_monitor(node: FakeNode, tmp_path: Path) -> None:
    node.invariants.run_once()
    body = (await call(app_of(node), "GET", "/admin/invariants", mint(tmp_path, admin=True))).json()
    assert body["ok"] is True
    assert {r["name"] for r in body["results"]} == {
        "subscription_cardinality",
        "no_dangling_entries",
    }


def test_the_admin_modules_never_import_the_node() -> None:
    """The admin<->node circle stays gone: no admin module imports node.py, not even under
    TYPE_CHECKING (a type dependency is still a dependency)."""
    for path in sorted(NODE_DIR.glob("admin*.py")):
        tree = ast.parse(path.read_text())
        for stmt in ast.walk(tree):
            if isinstance(stmt, ast.ImportFrom) and stmt.module:
                assert stmt.module != "monotape.platform.node.node", path.name
                names = {a.name for a in stmt.names}
                assert not (stmt.module == "monotape.platform.node" and "node" in names), path.name


async def test_admin_glass_names_the_last_offender(node: FakeNode, tmp_path: Path) -> None:
    glass = node.server.glass
    glass.regressions, glass.gaps, glass.terminals, glass.reports = 3, 1, 1, 2
    glass.last = GlassOffender(7, "desk-7", "XNAS:AAPL", (7, 1001), (7, 998), 3, 1234.5)
    app = app_of(node)
    assert (await call(app, "GET", "/admin/glass")).status == 401
    body = (await call(app, "GET", "/admin/glass", mint(tmp_path, admin=True))).json()
    assert body == {
        "regressions": 3,
        "gaps": 1,
        "regressing_terminals": 1,
        "reports": 2,
        "last": {
            "conn_id": 7,
            "subject": "desk-7",
            "key": "XNAS:AAPL",
            "held": [7, 1001],
            "got": [7, 998],
            "regressions": 3,
            "wall_s": 1234.5,
        },
    }
