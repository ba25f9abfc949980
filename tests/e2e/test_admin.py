"""The admin API and the upgrade's auth against the real server."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.error
from typing import Any

import jwt
import pytest
import websockets

from monotape import metric_names as m
from monotape.histograms import STAGES
from monotape.platform.auth import ensure_dev_keys, mint_token
from monotape.platform.sdk.client import TerminalClient
from monotape.platform.wire import codec
from tests.conftest import RunningServer, ServerFactory, mint

pytestmark = [pytest.mark.e2e]


def status(
    server: RunningServer, path: str, token: str | None = None
) -> tuple[int, dict[str, Any]]:
    try:
        return 200, json.loads(server.http(path, token))
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


async def test_admin_endpoints_need_an_admin_token(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "4000")
    admin = mint(server.data_dir, admin=True)
    trader = mint(server.data_dir)
    for path in ("/admin/connections", "/admin/feeds", "/admin/invariants", "/admin/latency"):
        assert status(server, path)[0] == 401, path
        assert status(server, path, "not-a-jwt")[0] == 401, path
        assert status(server, path, trader)[0] == 403, path
    assert status(server, "/healthz")[0] == 200
    assert status(server, "/readyz")[0] == 200

    code, body = status(server, "/admin/latency?stage=warp", admin)
    assert code == 400 and body["parameter"] == "stage"
    code, body = status(server, "/admin/latency?stage=write&window=soon", admin)
    assert code == 400 and body["parameter"] == "window"
    code, body = status(server, "/admin/connections?limit=-1", admin)
    assert code == 400 and body["parameter"] == "limit"
    code, body = status(server, "/admin/symbols/NOPE:NOTHING", admin)
    assert code == 404

    client = TerminalClient(server.url)
    hello = await client.connect()
    key = hello.instruments[0].key
    await client.subscribe([key])
    for _ in range(100):  # until the symbol has ticked (it renders then)
        if key in client.view:
            break
        await asyncio.sleep(0.1)
    code, body = status(server, "/admin/connections", admin)
    assert code == 200 and body["count"] == 1
    assert body["connections"][0]["subscriptions"] == 1
    code, body = status(server, f"/admin/symbols/{key}", admin)
    assert code == 200 and body["current"]["version"]
    code, body = status(server, "/admin/feeds", admin)
    assert code == 200 and len(body["handlers"]) == 12
    code, body = status(server, "/admin/invariants", admin)
    assert code == 200 and {r["name"] for r in body["results"]} == {
        "subscription_cardinality",
        "no_dangling_entries",
        "native_entries",
    }
    assert all(r["ok"] and r["actual"] == 0 for r in body["results"]), body["results"]
    for stage in STAGES:
        code, body = status(server, f"/admin/latency?stage={stage}&window=1m", admin)
        assert code == 200 and body["stage"] == stage
    code, body = status(server, "/openapi.json")
    assert code == 200 and "/admin/latency" in body["paths"]
    await client.close()


async def test_upgrade_refuses_bad_tokens_and_closes_at_expiry(
    server_factory: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A 2 KiB token limit, so an oversized token still fits the HTTP request line (8 KiB).
    server = server_factory.start("--rate", "2000", env={"MONOTAPE_AUTH__MAX_TOKEN_BYTES": "2048"})
    key = ensure_dev_keys(server.data_dir).private_pem_path
    other = tmp_path_factory.mktemp("otherkey")
    wrong_key = ensure_dev_keys(other).private_pem_path  # a different, valid ES256 key
    now = time.time()
    claims = {"sub": "eve", "aud": "monotape", "iss": "monotape-dev", "exp": int(now) + 600}
    for token, reason in (
        ("", "missing token"),
        ("garbage", "malformed token"),
        (mint(server.data_dir, ttl_s=-60), "expired"),
        (jwt.encode({**claims, "nbf": int(now) + 300}, key.read_bytes(), "ES256"), "not yet valid"),
        (mint_token(key, sub="x", ttl_s=600, aud="someone-else"), "wrong audience"),
        (mint_token(key, sub="x", ttl_s=600, iss="someone-else"), "wrong issuer"),
        (mint_token(wrong_key, sub="x", ttl_s=600), "bad signature"),
        (jwt.encode(claims, "", algorithm="none"), "algorithm not allowed"),  # "": no key
        ("x" * 4000, "token too large"),
    ):
        # Every refusal is an HTTP 401 with its reason, before any WebSocket exists.
        url = server.bare_url + (f"?token={token}" if token else "")
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(url, max_size=2**23)
        assert refused.value.response.status_code == 401, reason
        assert reason in refused.value.response.body.decode(), reason
        assert token[:20] not in refused.value.response.body.decode() or not token

    # A session outlives its token by nothing: closed with a reason and a reconnect hint.
    short = mint(server.data_dir, ttl_s=2)
    client = TerminalClient(f"{server.bare_url}?token={short}")
    await client.connect()
    for _ in range(100):
        if not client.connected:
            break
        await asyncio.sleep(0.1)
    assert not client.connected, "the session outlived its token"
    assert client.close_message is not None and "expired" in client.close_message.reason
    assert client.close_message.code == codec.CloseCode.POLICY_VIOLATION
    await client.close()
    metrics = server.metrics()
    assert metrics[(m.DISCONNECTS, (("reason", "auth_expired"),))] == 1
    reasons = {dict(k[1])["reason"] for k in metrics if k[0] == m.AUTH_REFUSED}
    assert {"missing token", "malformed token", "expired"} <= reasons


async def test_the_admin_index_symbols_and_parameters(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "4000")
    admin = mint(server.data_dir, admin=True)

    # The admin URL the banner prints answers: an index of the API (before: 404).
    code, body = status(server, "/admin/")
    assert code == 401 and "monotape token" in body["hint"]
    code, body = status(server, "/admin/", admin)
    assert code == 200
    routes = {(r["method"], r["path"]): r for r in body["routes"]}
    assert ("GET", "/admin/symbols") in routes and ("POST", "/admin/resume") in routes
    latency = routes[("GET", "/admin/latency")]
    assert {p["name"] for p in latency["parameters"]} == {"stage", "window"}

    # /openapi.json declares the parameters too.
    code, body = status(server, "/openapi.json")
    params = body["paths"]["/admin/latency"]["get"]["parameters"]
    assert {(p["name"], p["in"], p["required"]) for p in params} == {
        ("stage", "query", True),
        ("window", "query", False),
    }
    assert body["paths"]["/admin/symbols/{key}"]["get"]["parameters"][0]["in"] == "path"

    # A window of 309+ digits overflows a float: a 400 naming the parameter, never a 500.
    for path in ("/admin/latency?stage=write&window=", "/admin/latency/timeline?window="):
        code, body = status(server, path + "9" * 320, admin)
        assert code == 400 and body["parameter"] == "window", body
        assert len(body["error"]) < 200  # the value is not echoed back whole
    code, body = status(server, "/admin/connections?limit=" + "9" * 5000, admin)
    assert code == 400 and body["parameter"] == "limit"

    # /admin/symbols: keys by pattern, prices with their scale.
    code, body = status(server, "/admin/symbols?pattern=xnas:aa*", admin)
    assert code == 200 and body["count"] == len(body["symbols"]) >= 1
    for row in body["symbols"]:
        assert row["key"].startswith("XNAS:AA")
        assert row["price_scale"] == 10 ** row["price_decimals"]
    for _ in range(100):  # until some symbol has ticked
        _, body = status(server, "/admin/symbols?limit=500", admin)
        ticked = [r for r in body["symbols"] if r["current"]]
        if ticked:
            break
        await asyncio.sleep(0.1)
    assert body["count"] == 2400 and len(body["symbols"]) == 500
    row = ticked[0]
    cur = row["current"]
    assert cur["price"]["last"] == pytest.approx(cur["last"] / row["price_scale"])
    code, body = status(server, f"/admin/symbols/{row['key']}", admin)
    assert code == 200 and body["price_scale"] == row["price_scale"]


async def test_a_finished_drain_holds_until_resume(server_factory: ServerFactory) -> None:
    # No load shedding: the only 503 this test may see is the drain's, even on a busy machine.
    server = server_factory.start("--rate", "2000")
    admin = mint(server.data_dir, admin=True)
    client = TerminalClient(server.url)
    await client.connect()
    drained = server.post("/admin/drain", admin)
    assert drained["draining"] is True
    for _ in range(200):
        code, body = status(server, "/readyz")
        if body["status"] == "drained":
            break
        await asyncio.sleep(0.05)
    # Out of rotation until an operator resumes it: readyz 503, upgrades 503 + Retry-After.
    assert (code, body["status"]) == (503, "drained")
    for _ in range(200):
        if not client.connected:
            break
        await asyncio.sleep(0.05)
    assert not client.connected
    assert client.close_message is not None and client.close_message.reason == "drain"
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(server.url, max_size=2**23)
    assert refused.value.response.status_code == 503
    assert refused.value.response.body.startswith(b"draining")
    assert refused.value.response.headers.get("Retry-After")
    resumed = server.post("/admin/resume", admin)
    assert resumed["resumed"] is True and resumed["draining"] is False
    assert status(server, "/readyz")[0] == 200
    again = TerminalClient(server.url)
    await again.connect()
    assert again.connected
    await again.close()
    await client.close()
    assert server.post("/admin/resume", admin)["resumed"] is False  # nothing to resume


def test_two_authorization_headers_on_the_admin_api_are_refused(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start("--rate", "1000")
    admin = mint(server.data_dir, admin=True)
    conn = http.client.HTTPConnection("127.0.0.1", server.admin_port, timeout=10)
    try:
        conn.putrequest("GET", "/admin/feeds")
        conn.putheader("Authorization", f"Bearer {admin}")
        conn.putheader("Authorization", f"Bearer {admin}")
        conn.endheaders()
        response = conn.getresponse()
        body = json.loads(response.read())
    finally:
        conn.close()
    assert response.status == 401
    assert body["error"] == "unauthorized: duplicate Authorization"
