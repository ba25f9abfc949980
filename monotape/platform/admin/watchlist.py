"""The watchlist page on the admin server (issue 15): a trader's tape in the browser.

``GET /watchlist`` is a static page (no data in it, so it needs no token); its scripts are
served from the package under ``/watchlist/static/`` and the JavaScript terminal SDK it imports
under ``/watchlist/sdk/`` (plain ES modules: no CDN, no build step, it works offline). The page
connects to the terminals' WebSocket port like any terminal, with a terminal token.

Where the token comes from (docs/terminal.md, "A token for the page"):

- the **dev sign-in**, on the embedded default only (auth on, the dev ES256 key under
  ``<data_dir>/keys/``, ``auth.dev_sign_in`` true): ``POST /watchlist/token {"name": ...}``
  answers a 15-minute terminal token for that name, minted from the node's dev key. It never
  grants the admin claim, and the token is never logged. A node configured with its own key
  (``auth.public_key_file`` / ``auth.jwks_file``) cannot mint tokens and answers 403: a real
  deployment's page gets its token from the desk's SSO instead;
- auth off: no token at all.

The page uses the same call as its ``refreshToken`` callback, so a session outlives its
15-minute tokens without reconnecting.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from monotape.config import AuthConfig, Config
from monotape.platform.admin.params import Handler, error_response, json_response
from monotape.platform.auth import ensure_dev_keys, mint_token

__all__ = [
    "DEV_TOKEN_TTL_S",
    "WATCHLIST_ENDPOINTS",
    "DevSignIn",
    "WatchlistSite",
    "dev_sign_in_on",
    "watchlist_handlers",
    "watchlist_mounts",
    "watchlist_site",
]

DEV_TOKEN_TTL_S: Final = 15 * 60  # a session token's life; the page refreshes it in band
# A desk login name: what `monotape token --sub` would take, short enough to read in a log.
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_MAX_BODY: Final = 1024
PAGE_DIR: Final = resources.files("monotape.platform.sdk") / "watchlist"

# (method, path, summary, admin only), in the admin API's ENDPOINTS form.
WATCHLIST_ENDPOINTS: list[tuple[str, str, str, bool]] = [
    ("GET", "/watchlist", "The watchlist page: a trader's tape in the browser.", False),
    (
        "GET",
        "/watchlist/config",
        "What the watchlist page needs before it connects: the terminals' port, auth, sign-in.",
        False,
    ),
    (
        "POST",
        "/watchlist/token",
        'Dev sign-in: {"name"} -> a 15-minute terminal token (embedded default key only).',
        False,
    ),
]


class _SignInBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str


@dataclass(frozen=True, slots=True)
class DevSignIn:
    """Mints terminal tokens from the node's dev key (never admin)."""

    private_key: Path
    audience: str
    issuer: str
    ttl_s: int = DEV_TOKEN_TTL_S

    def mint(self, name: str, now: float) -> str:
        return mint_token(
            self.private_key,
            sub=name,
            ttl_s=self.ttl_s,
            admin=False,
            aud=self.audience,
            iss=self.issuer,
            now=now,
        )


@dataclass(frozen=True, slots=True)
class WatchlistSite:
    """What the page's routes read of the node: its terminals' port (known once listening),
    whether terminals need a token, and the dev sign-in if this node may mint."""

    ws_port: Callable[[], int]
    auth: bool
    sign_in: DevSignIn | None
    wall_s: Callable[[], float] = time.time


def dev_sign_in_on(auth: AuthConfig) -> bool:
    """Auth on, the embedded default (the dev ES256 key: no key of the deployment's own), and
    ``auth.dev_sign_in`` not turned off."""
    embedded = not auth.public_key_file and not auth.jwks_file and auth.algorithm == "ES256"
    return auth.enabled and auth.dev_sign_in and embedded


def watchlist_site(cfg: Config, ws_port: Callable[[], int]) -> WatchlistSite:
    """The site for a node of ``cfg``: the dev sign-in only on the embedded default key."""
    a = cfg.auth
    sign_in = None
    if dev_sign_in_on(a):
        key = ensure_dev_keys(cfg.data_dir).private_pem_path
        sign_in = DevSignIn(key, a.audience, a.issuer)
    return WatchlistSite(ws_port=ws_port, auth=a.enabled, sign_in=sign_in)


def watchlist_handlers(site: WatchlistSite) -> dict[str, Handler]:
    async def page(request: Request) -> Response:
        html = (PAGE_DIR / "index.html").read_bytes()
        return Response(
            html,
            media_type="text/html; charset=utf-8",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    async def config(request: Request) -> Response:
        return json_response(
            {
                "ws_port": site.ws_port(),
                "auth": site.auth,
                "dev_sign_in": site.sign_in is not None,
                "token_ttl_s": site.sign_in.ttl_s if site.sign_in else None,
            }
        )

    async def token(request: Request) -> Response:
        if site.sign_in is None:
            why = "auth is off: connect without a token" if not site.auth else (
                "dev sign-in is off (auth.dev_sign_in, or a key of the deployment's own): "
                "get a terminal token from the desk's sign-on"
            )  # fmt: skip
            return error_response(403, f"forbidden: {why}")
        # application/json only: a cross-site form cannot post it without a CORS preflight
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return error_response(415, 'send application/json: {"name": "..."}')
        raw = await request.body()
        if len(raw) > _MAX_BODY:
            return error_response(413, f"body over {_MAX_BODY} bytes")
        try:
            body = msgspec.json.decode(raw, type=_SignInBody)
        except msgspec.ValidationError as exc:
            return error_response(400, f"invalid body: {exc}", parameter="name")
        except msgspec.DecodeError:
            return error_response(400, "invalid body: not JSON", parameter="name")
        if not _NAME.fullmatch(body.name):
            return error_response(
                400, "name: 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit",
                parameter="name",
            )  # fmt: skip
        now = site.wall_s()
        signer = site.sign_in
        # a PEM read and an ES256 signature (~0.2 ms): off the loop that serves /metrics
        minted = await run_in_threadpool(signer.mint, body.name, now)
        return Response(
            msgspec.json.encode(
                {"token": minted, "sub": body.name, "expires_at": int(now) + signer.ttl_s}
            ),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    return {"/watchlist": page, "/watchlist/config": config, "/watchlist/token": token}


def watchlist_mounts() -> list[Mount]:
    """The page's own scripts, and the SDK it imports, from the installed package."""
    return [
        Mount(
            "/watchlist/static",
            app=StaticFiles(packages=[("monotape.platform.sdk", "watchlist")]),
            name="watchlist-static",
        ),
        Mount(
            "/watchlist/sdk",
            app=StaticFiles(packages=[("monotape.platform.sdk", "js")]),
            name="watchlist-sdk",
        ),
    ]
