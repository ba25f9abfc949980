"""The terminal socket as the server's drivers see it, for tests that need no real one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

__all__ = ["fake_ws"]


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
