"""The admin app on its own listening socket, under uvicorn, started and stopped by the node.

``startup()``/``shutdown()`` rather than ``serve()``: ``serve()`` would take over SIGINT and
SIGTERM, which belong to the node (graceful stop of everything, terminals first).
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.applications import Starlette

__all__ = ["AdminServer"]


class AdminServer:
    def __init__(self, app: Starlette) -> None:
        self._app = app
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0 picks a free port) and serve; returns the port. An address in
        use raises ``OSError`` and leaves nothing bound."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        # log_config=None: uvicorn's records go through the process's one log handler
        # (monotape.log), not through a second format of its own.
        config = uvicorn.Config(
            self._app, log_level="warning", lifespan="off", access_log=False, log_config=None
        )
        server = uvicorn.Server(config)
        config.load()
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        self._server, self._sock = server, sock
        return int(sock.getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None and self._sock is not None:
            self._server.should_exit = True
            await self._server.shutdown(sockets=[self._sock])
            self._sock.close()
        self._server = self._sock = None
