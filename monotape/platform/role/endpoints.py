"""Where a running node listens, recorded in its data directory for the clients beside it.

``monotape run`` writes ``<data-dir>/endpoints.json`` once it listens (atomically: a client never
reads half a file) and removes it when it stops. Every client command pointed at the same data
directory (``--data-dir``, ``MONOTAPE_DATA_DIR`` or the default ``./.monotape``) reads it for its
default URLs, so ``--ws-port 0`` or a port moved by configuration needs no extra flag on the
client side. A file left by a node that died (its pid is gone) is ignored.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Final

import msgspec

__all__ = [
    "ENDPOINTS_FILE",
    "Endpoints",
    "ListenError",
    "connect_host",
    "endpoints_for",
    "read_endpoints",
    "remove_endpoints",
    "write_endpoints",
]

ENDPOINTS_FILE: Final = "endpoints.json"


class Endpoints(msgspec.Struct, frozen=True, kw_only=True):
    ws: str  # ws://127.0.0.1:8765/ (a wildcard listen address is recorded as loopback)
    admin: str  # http://127.0.0.1:8081/
    pid: int
    data_dir: str  # absolute
    started_ms: int


class ListenError(RuntimeError):
    """A port could not be bound; ``str()`` is one line naming it and what to do."""

    def __init__(self, what: str, flag: str, host: str, port: int, cause: OSError) -> None:
        why = cause.strerror or str(cause)
        hint = (
            f"stop whatever holds it or pick another with {flag} PORT (0 picks a free one)"
            if port
            else "check the listen address (--host)"
        )
        super().__init__(f"cannot listen for {what} on {host}:{port}: {why}; {hint}")
        self.port = port


def connect_host(host: str) -> str:
    """The address a client on this host dials for a node listening on ``host``."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def endpoints_for(
    host: str, ws_port: int, admin_port: int, data_dir: Path, started_ms: int
) -> Endpoints:
    h = _url_host(connect_host(host))
    return Endpoints(
        ws=f"ws://{h}:{ws_port}/",
        admin=f"http://{h}:{admin_port}/",
        pid=os.getpid(),
        data_dir=str(data_dir.resolve()),
        started_ms=started_ms,
    )


def write_endpoints(data_dir: Path, endpoints: Endpoints) -> Path:
    path = data_dir / ENDPOINTS_FILE
    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=".endpoints.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.format(msgspec.json.encode(endpoints)) + b"\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def read_endpoints(data_dir: str | Path) -> Endpoints | None:
    """The endpoints of the node running on ``data_dir``; None if none runs there."""
    try:
        raw = (Path(data_dir) / ENDPOINTS_FILE).read_bytes()
        found = msgspec.json.decode(raw, type=Endpoints)
    except (OSError, msgspec.DecodeError):
        return None
    return found if _alive(found.pid) else None


def remove_endpoints(data_dir: Path, pid: int) -> None:
    """Remove the file if it is still this process's (a newer node may have replaced it)."""
    path = data_dir / ENDPOINTS_FILE
    with contextlib.suppress(OSError, msgspec.DecodeError):
        if msgspec.json.decode(path.read_bytes(), type=Endpoints).pid == pid:
            path.unlink()
