"""What every client command shares: where the node is, and which token to show it.

The client commands (``tape``, ``symbols``, ``load storm``, ``load churn``, ``load replay``) find
a node the same way: ``--url`` if given, else the endpoints the node running on the same data
directory recorded (``role/endpoints.py``), else the configured ports on loopback. They take
a token the same way: ``--token``, else ``MONOTAPE_TOKEN``, else one minted from the dev key of
that same data directory. A data directory without a dev key mints nothing (a new key would be
one no node knows, and every upgrade would fail with 401): the command says which directory it
looked in and how to point at the node's. Tokens are credentials: they travel in an
``Authorization`` header where possible and are never printed (``redact`` strips them from URLs).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NamedTuple
from urllib.parse import urlsplit

from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

from monotape.config import Config
from monotape.log import redact
from monotape.platform.role.endpoints import Endpoints, connect_host, read_endpoints

__all__ = [
    "ClientError",
    "Credential",
    "admin_url",
    "check_data_dir",
    "client_token",
    "connect_failure",
    "dev_key_path",
    "explain_refusal",
    "redact",
    "running_node",
    "terminal_url",
]

TOKEN_ENV: Final = "MONOTAPE_TOKEN"
ADMIN_TOKEN_ENV: Final = "MONOTAPE_ADMIN_TOKEN"
_DEV_PRIVATE: Final = "dev-es256.pem"  # auth.keys.DEV_PRIVATE


class ClientError(Exception):
    """A mistake a client command reports as one line (exit 2); ``str()`` says what to do."""


def _where(cfg: Config) -> str:
    return str(Path(cfg.data_dir).resolve())


def running_node(cfg: Config) -> Endpoints | None:
    return read_endpoints(cfg.data_dir)


def terminal_url(url: str | None, cfg: Config) -> str:
    """``--url``, else the running node's, else the configured port on loopback."""
    if not url:
        found = running_node(cfg)
        if found is not None:
            return found.ws
        host = connect_host(cfg.server.host)
        return f"ws://{host}:{cfg.server.ws_port}/"
    scheme = urlsplit(url).scheme
    if scheme not in ("ws", "wss"):
        raise ClientError(
            f"--url {redact(url)}: not a WebSocket URL; terminals connect to ws://HOST:PORT/ "
            "(the 'terminals' line that monotape run prints)"
        )
    return url


def admin_url(url: str | None, cfg: Config) -> str:
    """``--admin-url``, else the running node's, else the configured admin port on loopback."""
    if url:
        if urlsplit(url).scheme not in ("http", "https"):
            raise ClientError(f"--admin-url {redact(url)}: must be http://HOST:PORT")
        return url.rstrip("/")
    found = running_node(cfg)
    if found is not None:
        return found.admin.rstrip("/")
    return f"http://{connect_host(cfg.server.host)}:{cfg.server.admin_port}"


def check_data_dir(path: str) -> None:
    """The data dir must exist or be creatable, and be writable: epochs, keys and histogram
    logs all go there, so find out now rather than from a traceback halfway through start."""
    where = Path(path)
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".write-test."):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ClientError(
            f"cannot write the data dir {where.resolve()}: {why}; pick one you can write with "
            "--data-dir DIR or MONOTAPE_DATA_DIR"
        ) from None


def dev_key_path(cfg: Config) -> Path:
    return Path(cfg.data_dir) / "keys" / _DEV_PRIVATE


class Credential(NamedTuple):
    """The token a client command presents, and where it came from."""

    token: str | None  # None: auth is off, or the node verifies keys this side cannot mint with
    minted: bool  # from the data dir's dev key: a 401 then means "not the node's data dir"


def client_token(
    flag: str | None,
    cfg: Config,
    env: Mapping[str, str] | None = None,
    *,
    sub: str,
    admin: bool = False,
    ttl_s: float = 8 * 3600,
) -> Credential:
    """The token to present: ``--token``, ``MONOTAPE_TOKEN`` (``MONOTAPE_ADMIN_TOKEN`` for the
    admin API), else minted from the data dir's dev key. No token when auth is off or the node
    verifies other keys (nothing here could mint a token it accepts)."""
    env = os.environ if env is None else env
    given = flag or env.get(ADMIN_TOKEN_ENV if admin else TOKEN_ENV)
    if given:
        return Credential(given.strip(), minted=False)
    if not cfg.auth.enabled or cfg.auth.public_key_file or cfg.auth.jwks_file:
        return Credential(None, minted=False)
    key = dev_key_path(cfg)
    if not key.exists():
        raise ClientError(
            f"no dev key in {_where(cfg)} (no monotape run has used this data dir), so no "
            "token can be minted here: run this command with the node's data dir "
            "(--data-dir DIR or MONOTAPE_DATA_DIR; monotape run prints it), "
            f"or pass --token / {ADMIN_TOKEN_ENV if admin else TOKEN_ENV}"
        )
    from monotape.platform.auth import mint_token

    token = mint_token(
        key, sub=sub, ttl_s=ttl_s, admin=admin, aud=cfg.auth.audience, iss=cfg.auth.issuer
    )
    return Credential(token, minted=True)


def explain_refusal(
    status: int, body: str, retry_after: str | None, cfg: Config, minted: bool
) -> str:
    """One line for an HTTP refusal of an upgrade or an admin call: the server's reason, and
    what to do about it."""
    reason = body.strip().splitlines()[0][:200] if body.strip() else ""
    said = f"HTTP {status}" + (f": {reason}" if reason else "")
    if status == 401:
        if minted:
            return (
                f"the node refused the token ({said}); it was minted from the dev key in "
                f"{_where(cfg)}, which is not the key this node verifies: run this with the "
                "node's data dir (--data-dir DIR or MONOTAPE_DATA_DIR; monotape run prints it), "
                f"or pass --token / {TOKEN_ENV}"
            )
        return f"the node refused the token ({said}): mint a new one with monotape token"
    if status == 403:
        return f"the node refused this token ({said}): it lacks the right (e.g. --admin)"
    if status == 429:
        wait = f"in {retry_after} s" if retry_after else "later"
        return (
            f"the node refuses this address for now ({said}): too many failed upgrades came "
            f"from it; fix the token, then retry {wait}"
        )
    if status == 503:
        wait = f"retry in {retry_after} s" if retry_after else "retry later"
        return (
            f"the node is not taking terminals now ({said}): {wait}; a drained node takes "
            "them again after POST /admin/resume or a restart"
        )
    return f"the node refused the connection ({said})"


def connect_failure(url: str, exc: BaseException, cfg: Config, minted: bool) -> ClientError:
    """The one line for an upgrade that failed: a refusal with the node's reason and what to
    do (``explain_refusal``), or nothing listening. ``url`` is shown without its query."""
    if isinstance(exc, InvalidStatus):
        r = exc.response
        body = r.body.decode(errors="replace") if r.body else ""
        return ClientError(
            explain_refusal(r.status_code, body, r.headers.get("Retry-After"), cfg, minted)
        )
    if isinstance(exc, InvalidURI):
        return ClientError(f"--url {redact(url)}: not a valid WebSocket URL")
    if isinstance(exc, InvalidHandshake):
        return ClientError(f"{redact(url)} did not answer as a monotape node: {exc}")
    # The errno's own words: asyncio's loop says "Connect call failed (addr)", uvloop's says
    # "Connection refused"; the person needs the latter either way.
    errno = getattr(exc, "errno", None)
    why = (os.strerror(errno) if errno else None) or type(exc).__name__
    return ClientError(
        f"cannot connect to {redact(url)}: {why}; is monotape run running there? "
        "(its banner prints the terminals URL; pass --url or the node's --data-dir)"
    )
