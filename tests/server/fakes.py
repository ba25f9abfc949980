"""The terminal socket as the server's drivers see it, for tests that need no real one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from monotape.platform.server.control import TerminalProtocol

__all__ = ["fake_ws", "native_ws"]


def fake_ws(
    transport: asyncio.Transport, remote: tuple[str, int] | None = ("127.0.0.1", 1)
) -> ServerConnection:
    """A websockets connection reduced to what ``Connection`` and the writer read: its
    transport, its protocol's state (OPEN) and its peer. A cast, not a subclass: a real
    ``ServerConnection`` needs a real protocol and event loop, and nothing here reaches them."""
    return cast(
        ServerConnection,
        SimpleNamespace(
            transport=transport,
            protocol=SimpleNamespace(state=State.OPEN),
            remote_address=remote,
        ),
    )


def native_ws(
    transport: asyncio.Transport,
    track: Callable[[Any], None],
    remote: tuple[str, int] | None = ("127.0.0.1", 1),
) -> ServerConnection:
    """``fake_ws`` with what the native writer's table needs to keep a terminal's entry: a
    protocol that reports its state changes (a ``TerminalProtocol``, OPEN) and a
    ``track_queued`` (``track``: the fake transport's, which tells the mirror when its
    buffer starts and stops holding bytes, as asyncio's flow control does)."""
    return cast(
        ServerConnection,
        SimpleNamespace(
            transport=transport,
            protocol=TerminalProtocol(state=State.OPEN),
            remote_address=remote,
            track_queued=track,
        ),
    )
