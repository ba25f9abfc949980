"""Leaving a WebSocket abruptly, as a crashed terminal or a yanked cable does (load tools)."""

from __future__ import annotations

import contextlib
import socket
import struct
from asyncio import Transport
from typing import Final

__all__ = ["reset"]

_LINGER_RST: Final = struct.pack("ii", 1, 0)  # l_onoff=1, l_linger=0: close() sends RST


def reset(transport: Transport) -> None:
    """Leave with an RST: SO_LINGER (1, 0), then close without the WebSocket or TCP handshake."""
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    transport.abort()
