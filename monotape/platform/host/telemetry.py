"""How a role shows itself to the host: its own registry on a loopback port, the port in a
file the host reads (``run_dir/<name>.port``). The host scrapes every role and serves them as
one ``/metrics`` (a ``process`` label on each sample).

The same port answers the host's admin API (host/admin_routes.py) about the role's state:
``GET /state/<name>`` and ``POST /action/<name>`` run a callable the role registered in its
``RoleState`` on the role's own event loop (the state lives there: the server's connection
table, the invariant monitor), and answer its JSON. 127.0.0.1 is every user of the machine,
not this host: /state and /action answer only a request carrying the host's secret in
``SECRET_HEADER`` (403 otherwise, compared in constant time). The host writes the secret into
its run dir (0700; the file 0600: ``write_secret``) before it starts a role; a role reads it at
start (``read_secret``). /metrics stays open (Prometheus' convention; no secret, no peer, no
token subject is in it). Bounded: a query string of at most ``MAX_QUERY_BYTES``, an answer of
at most ``MAX_STATE_BYTES``, a callable given ``STATE_TIMEOUT_S`` on the loop, at most
``MAX_IN_FLIGHT`` questions at once (503 past it).

A question can outlive the host's wait for it: one sent to a stopped role (SIGSTOP, a long
pause) sits in the port's accept queue, and would run when the role resumes, after the host gave
up and perhaps undid it (a drain after the resume that was meant to end it). So the host sends
its deadline in ``DEADLINE_HEADER`` (CLOCK_MONOTONIC ns, one clock for every process of the
machine), and a question read past it is answered 504 without running, checked when it is read
and again on the role's loop just before the callable runs. A malformed deadline is a 400; a
question without one (an operator's curl) has none.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl
from wsgiref.simple_server import WSGIRequestHandler, make_server

import msgspec
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from monotape.log import log_event

__all__ = [
    "DEADLINE_HEADER",
    "MAX_IN_FLIGHT",
    "MAX_QUERY_BYTES",
    "MAX_STATE_BYTES",
    "SECRET_HEADER",
    "STATE_TIMEOUT_S",
    "Provider",
    "RoleState",
    "port_file",
    "read_secret",
    "secret_file",
    "serve_metrics",
    "write_secret",
]

MAX_QUERY_BYTES = 2048
MAX_STATE_BYTES = 8 * 1024 * 1024  # 10,000 connection rows are ~2.5 MB
STATE_TIMEOUT_S = 5.0  # past any host.scrape_timeout_s worth setting: the host gives up first
MAX_IN_FLIGHT = (
    8  # state questions at once: one per route the host serves at a time; more is a flood
)
SECRET_HEADER = "X-Monotape-Role-Secret"
_SECRET_ENVIRON = "HTTP_" + SECRET_HEADER.upper().replace("-", "_")
DEADLINE_HEADER = "X-Monotape-Deadline-Ns"  # time.monotonic_ns() past which the host gave up
_DEADLINE_ENVIRON = "HTTP_" + DEADLINE_HEADER.upper().replace("-", "_")
_DEADLINE_DIGITS = 20  # a uint64's; a longer value is not a deadline

# The query's parameters in, (HTTP status, JSON body) out; run on the role's event loop.
Provider = Callable[[Mapping[str, str]], Awaitable[tuple[int, bytes]]]

_STATUS = {
    200: "200 OK",
    202: "202 Accepted",
    400: "400 Bad Request",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    413: "413 Content Too Large",
    403: "403 Forbidden",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
    504: "504 Gateway Timeout",
}


def port_file(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / f"{name}.port"


def secret_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / "role.secret"


def write_secret(run_dir: str | Path) -> str:
    """A fresh secret in ``run_dir`` (the host's, made 0700), readable by this user only; the
    host calls it before it starts any role."""
    secret = secrets.token_hex(32)
    path = secret_file(run_dir)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret)
    os.chmod(path, 0o600)  # O_CREAT's mode does not apply to a file that was there
    return secret


def read_secret(run_dir: str | Path) -> str:
    """The host's secret, or "" (none written: every /state and /action is refused)."""
    try:
        return secret_file(run_dir).read_text().strip()
    except OSError:
        return ""


class RoleState:
    """The role's answers by name: ``states`` for GET /state/<name>, ``actions`` for
    POST /action/<name>; each runs on ``loop`` (the role's), called from the server's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.states: dict[str, Provider] = {}
        self.actions: dict[str, Provider] = {}

    def answer(
        self, method: str, path: str, query: str, deadline_ns: int | None = None
    ) -> tuple[int, bytes]:
        """The answer to one question; ``deadline_ns`` (time.monotonic_ns()): past it the asker
        has given up, and the callable does not run."""
        kind, _, name = path.strip("/").partition("/")
        table = self.states if kind == "state" else self.actions
        provider = table.get(name)
        if provider is None:
            return 404, _error(f"no {kind} named {name[:40]!r}")
        if method != ("GET" if kind == "state" else "POST"):
            return 405, _error(f"{method[:10]} is not allowed on /{kind}/")
        if len(query) > MAX_QUERY_BYTES:
            return 400, _error(f"query longer than {MAX_QUERY_BYTES} bytes")
        params = dict(parse_qsl(query, keep_blank_values=True))
        if _past(deadline_ns):
            return 504, _gave_up(name)
        call = _call(provider, params, name, deadline_ns)
        try:
            future = asyncio.run_coroutine_threadsafe(call, self.loop)
        except RuntimeError:  # the role's loop closed (it is stopping): an answer, no traceback
            call.close()
            return 503, _error("this role is stopping")
        try:
            status, body = future.result(STATE_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return 504, _error(f"{name} took longer than {STATE_TIMEOUT_S:g} s")
        except Exception as exc:  # the role's bug: an answer, never a dead server thread
            log_event("role_state_failed", level="error", state=name, error=repr(exc))
            return 500, _error(f"{name} failed: {type(exc).__name__}")
        if len(body) > MAX_STATE_BYTES:
            return 413, _error(f"{name} answered more than {MAX_STATE_BYTES} bytes")
        return status, body


async def _call(
    provider: Provider, params: Mapping[str, str], name: str, deadline_ns: int | None
) -> tuple[int, bytes]:
    if _past(deadline_ns):  # the loop itself may have been stopped since the question was read
        return 504, _gave_up(name)
    return await provider(params)


def _past(deadline_ns: int | None) -> bool:
    return deadline_ns is not None and time.monotonic_ns() > deadline_ns


def _gave_up(name: str) -> bytes:
    return _error(f"{name}: read past the asker's deadline, not run (the asker gave up)")


def _deadline(environ: Mapping[str, Any]) -> int | None:
    """The asker's deadline header as an int; None when absent; ValueError when malformed."""
    raw = environ.get(_DEADLINE_ENVIRON)
    if raw is None:
        return None
    text = str(raw).strip()
    if not text.isdigit() or len(text) > _DEADLINE_DIGITS:  # isdigit: no sign, no spaces inside
        raise ValueError(f"{DEADLINE_HEADER} must be time.monotonic_ns() as digits")
    return int(text)


def _error(message: str) -> bytes:
    return msgspec.json.encode({"error": message})


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per scrape would drown the role's log."""


def _app(
    registry: CollectorRegistry, state: RoleState | None, secret: str = ""
) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)
    in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
    expected = secret.encode()

    def answer(environ: dict[str, Any], path: str) -> tuple[int, bytes]:
        assert state is not None
        given = str(environ.get(_SECRET_ENVIRON, "")).encode()
        if not expected or not hmac.compare_digest(given, expected):
            return 403, _error(f"/state and /action need the host's {SECRET_HEADER}")
        try:
            deadline_ns = _deadline(environ)
        except ValueError as exc:
            return 400, _error(str(exc))
        if not in_flight.acquire(blocking=False):
            return 503, _error(f"busy: {MAX_IN_FLIGHT} questions in flight")
        try:
            return state.answer(
                str(environ.get("REQUEST_METHOD", "")),
                path,
                str(environ.get("QUERY_STRING", "")),
                deadline_ns,
            )
        finally:
            in_flight.release()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if state is None or not path.startswith(("/state/", "/action/")):
            exposition: Iterable[bytes] = metrics(environ, start_response)
            return exposition
        status, body = answer(environ, path)
        start_response(
            _STATUS.get(status, f"{status} Status"),
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return app


def serve_metrics(
    registry: CollectorRegistry, run_dir: str | Path, name: str, state: RoleState | None = None
) -> int:
    """Serve ``registry`` (and ``state``'s answers, to a holder of the host's secret in
    ``run_dir``) on 127.0.0.1, a port the kernel picks, in a daemon thread, and publish the
    port."""
    secret = read_secret(run_dir) if state is not None else ""
    app = _app(registry, state, secret)
    httpd = make_server("127.0.0.1", 0, app, ThreadingWSGIServer, _Quiet)
    threading.Thread(target=httpd.serve_forever, name="role-telemetry", daemon=True).start()
    port = int(httpd.server_address[1])
    path = port_file(run_dir, name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)  # atomic: the host never reads half a port
    return port
