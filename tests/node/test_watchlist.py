"""The watchlist page's routes (admin/watchlist.py), called as ASGI with no node and no socket:
the page and its scripts need no token; the dev sign-in mints a terminal token (never admin) on
the embedded default key only, and refuses what it should, by name."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import jwt
import pytest
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from monotape.config import load_config
from monotape.platform.admin.watchlist import (
    DEV_TOKEN_TTL_S,
    WATCHLIST_ENDPOINTS,
    WatchlistSite,
    watchlist_handlers,
    watchlist_mounts,
    watchlist_site,
)
from monotape.platform.auth import build_verifier

NOW = 1_800_000_000.0


def app_of(site: WatchlistSite) -> Starlette:
    handlers = watchlist_handlers(site)
    routes: list[BaseRoute] = [
        Route(path, handlers[path], methods=[method]) for method, path, _, _ in WATCHLIST_ENDPOINTS
    ]
    return Starlette(routes=[*routes, *watchlist_mounts()])


async def call(
    app: Starlette, method: str, path: str, body: bytes = b"", content_type: str = ""
) -> tuple[int, dict[str, str], bytes]:
    headers = [(b"host", b"admin.test")]
    if content_type:
        headers.append((b"content-type", content_type.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("admin.test", 80),
    }
    sent: list[dict[str, Any]] = []
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:  # a file response listens for a disconnect while it sends: none comes
            await asyncio.Event().wait()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, out


def site_for(tmp_path: Path, **settings: object) -> WatchlistSite:
    cfg = load_config(overrides={"data_dir": str(tmp_path), **settings})
    site = watchlist_site(cfg, lambda: 8765)
    return WatchlistSite(site.ws_port, site.auth, site.sign_in, wall_s=lambda: NOW)


async def post_name(app: Starlette, name: object) -> tuple[int, dict[str, Any]]:
    status, _, body = await call(
        app, "POST", "/watchlist/token", json.dumps({"name": name}).encode(), "application/json"
    )
    return status, json.loads(body)


async def test_the_page_its_scripts_and_the_sdk_are_served_without_a_token(tmp_path: Path) -> None:
    app = app_of(site_for(tmp_path))
    status, headers, html = await call(app, "GET", "/watchlist")
    assert status == 200 and b"/watchlist/static/page.js" in html
    assert headers["cache-control"] == "no-store"
    for path in (
        "/watchlist/static/page.js",
        "/watchlist/static/board.js",
        "/watchlist/sdk/index.js",
    ):
        status, headers, _ = await call(app, "GET", path)
        assert status == 200, path
        assert "javascript" in headers["content-type"], path  # a module script needs JS MIME
    status, _, body = await call(app, "GET", "/watchlist/config")
    assert json.loads(body) == {
        "ws_port": 8765,
        "auth": True,
        "dev_sign_in": True,
        "token_ttl_s": DEV_TOKEN_TTL_S,
    }


async def test_dev_sign_in_mints_a_15_minute_terminal_token_the_node_accepts(
    tmp_path: Path,
) -> None:
    app = app_of(site_for(tmp_path))
    status, body = await post_name(app, "alice.b@desk-7")
    assert status == 200
    token = body["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "alice.b@desk-7"
    assert claims["adm"] is False
    assert claims["exp"] - claims["iat"] == DEV_TOKEN_TTL_S
    assert body["expires_at"] == int(NOW) + DEV_TOKEN_TTL_S
    # signed by the key the node verifies with (the verifier's clock is the real one: re-mint now)
    fresh = site_for(tmp_path)
    real = WatchlistSite(fresh.ws_port, fresh.auth, fresh.sign_in)
    _, live = await post_name(app_of(real), "alice")
    verifier = build_verifier(load_config(overrides={"data_dir": str(tmp_path)}).auth, tmp_path)
    try:
        assert (await verifier.verify(live["token"])).sub == "alice"
    finally:
        verifier.close()


@pytest.mark.parametrize("name", ["", " alice", "a b", "-x", "x" * 65, "ä", 7, None])
async def test_dev_sign_in_refuses_a_bad_name_naming_it(tmp_path: Path, name: object) -> None:
    status, body = await post_name(app_of(site_for(tmp_path)), name)
    assert status == 400, body
    assert body["parameter"] == "name"
    assert "token" not in body


async def test_dev_sign_in_wants_json_and_a_small_body(tmp_path: Path) -> None:
    app = app_of(site_for(tmp_path))
    status, _, _ = await call(app, "POST", "/watchlist/token", b"name=alice", "text/plain")
    assert status == 415  # a cross-site form cannot post application/json without a preflight
    big = json.dumps({"name": "a" * 2000}).encode()
    status, _, _ = await call(app, "POST", "/watchlist/token", big, "application/json")
    assert status == 413
    status, _, _ = await call(app, "POST", "/watchlist/token", b"{", "application/json")
    assert status == 400
    extra = json.dumps({"name": "alice", "adm": True}).encode()
    status, _, _ = await call(app, "POST", "/watchlist/token", extra, "application/json")
    assert status == 400  # no other field, least of all a claim


@pytest.mark.parametrize(
    ("settings", "auth"),
    [
        ({"auth.dev_sign_in": False}, True),
        ({"auth.public_key_file": "/etc/desk/sso.pem"}, True),  # a deployment's own key
        ({"auth.jwks_file": "/etc/desk/jwks.json"}, True),
        ({"auth.enabled": False}, False),
    ],
)
async def test_dev_sign_in_is_off_unless_the_embedded_default_key_signs(
    tmp_path: Path, settings: dict[str, object], auth: bool
) -> None:
    app = app_of(site_for(tmp_path, **settings))
    status, body = await post_name(app, "alice")
    assert status == 403
    assert "token" not in body
    _, _, cfg = await call(app, "GET", "/watchlist/config")
    assert json.loads(cfg)["dev_sign_in"] is False
    assert json.loads(cfg)["auth"] is auth
